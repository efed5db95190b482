"""Tests of the ``tunanet`` baseline (baselines/tunanet.py).

Feature values are checked against vectors written out by hand from the
definition of each feature in MIOpen's ``ai_heuristics.cpp`` for a hand-picked
problem, normalised with the statistics read from the metadata file (never
typed in). The support rules are those of MIOpen's ``IsProblemSupported``.
The end-to-end check reproduces MIOpen's own TunaNet unit test
(``test/gtest/tuna_net.cpp``).
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from kbench_baselines.tunanet import MODEL_DIR, TunaNet, TunaNetArch, in_dtype

ROOT = Path(__file__).resolve().parents[2]
RAW = ROOT.parent / "shared" / "data" / "miopen"


def problem(direction="F", dtype="FP32", n=32, c=64, k=128, h=56, w=56, fh=3, fw=3,
            ph=1, pw=1, sh=2, sw=2, dh=1, dw=1, groups=1, layout_x="NCHW", layout_y=None,
            bias=0, spatial_dims=2, pid=None):
    """One row of canonical problem columns (true x/w/y terms, docs/data_model.md)."""
    layout_y = layout_y or layout_x
    yh = (h + 2 * ph - dh * (fh - 1) - 1) // sh + 1
    yw = (w + 2 * pw - dw * (fw - 1) - 1) // sw + 1
    lay_in = layout_x if direction == "F" else layout_y
    lay_out = layout_y if direction == "F" else layout_x
    layout = lay_in if lay_in == lay_out == "NCHW" else f"{lay_in}-{lay_in}-{lay_out}"
    return dict(
        problem_id=pid or f"{direction}-{dtype}-{n}-{c}-{k}-{h}x{w}-{fh}x{fw}-{ph}x{pw}-{sh}x{sw}-{dh}x{dw}"
                          f"-g{groups}-{layout_x}-{layout_y}-b{bias}-{spatial_dims}d",
        direction=direction, dtype=dtype, cast="", layout=layout,
        layout_x=layout_x, layout_w=layout_x, layout_y=layout_y, spatial_dims=spatial_dims,
        n=n, c=c, k=k, groups=groups, x_d=1, x_h=h, x_w=w, y_d=1, y_h=yh, y_w=yw,
        fil_d=1, fil_h=fh, fil_w=fw, pad_d=0, pad_h=ph, pad_w=pw,
        stride_d=1, stride_h=sh, stride_w=sw, dil_d=1, dil_h=dh, dil_w=dw, bias=bias)


def frame(*rows):
    return pd.DataFrame(list(rows))


def meta(arch):
    return json.loads((MODEL_DIR / f"{arch}_metadata.tn.model").read_text())


def normalise(raw, arch, part):
    m = meta(arch)
    st = m["stats"][part]["features"]
    names = m["conv_params_used_as_features"]
    mean = np.array([st["mean"][f] for f in names], np.float32)
    std = np.array([st["std"][f] for f in names], np.float32)
    return (np.asarray(raw, np.float32) - mean) / std


# -------------------------------------------------------------------- shipped files

def test_shipped_files_are_the_recorded_miopen_files():
    sources = json.loads((MODEL_DIR / "SOURCES.json").read_text())
    for name, info in sources["files"].items():
        data = (MODEL_DIR / name).read_bytes()
        if name.endswith(".gz"):
            data = gzip.decompress(data)
        assert hashlib.sha256(data).hexdigest() == info["sha256_uncompressed"], name
        raw = RAW / Path(info["source"]).name
        if raw.exists():
            assert raw.read_bytes() == data, name


# -------------------------------------------------------------------- features

def test_gfx908_features_by_hand():
    # ResNet-style 3x3 stride-2 layer: n=32, x 64x56x56 -> y 128x28x28, pad 1, FP32, NCHW, forward.
    # gfx908 feature order (ai_heuristics.cpp, Gfx908Model::ToFeatures):
    #  C_in, D_in, H_in, W_in, F_d, F_h, F_w, C_out, D_out, H_out, W_out, N,
    #  PadD(fed as 1), pad_h, pad_w, StrideD(fed as 1), stride_h, stride_w, dil_h, dil_w,
    #  Layout, Precision, Direction, GroupSize
    m = meta("gfx908")
    enc = m["encodings"]
    raw = [64, 1, 56, 56, 1, 3, 3, 128, 1, 28, 28, 32,
           1, 1, 1, 1, 2, 2, 1, 1,
           enc["Layout"]["NCHW"], enc["Precision"]["FP32"], enc["Direction"]["F"], 1]
    net = TunaNetArch("gfx908")
    df = frame(problem())
    np.testing.assert_array_equal(net.raw_features(df)[0], np.asarray(raw, np.float32))
    # Normalised with the "overall" statistics, in float32, exactly as MIOpen does.
    np.testing.assert_array_equal(net.features_of(df)[0], normalise(raw, "gfx908", "overall"))
    # e.g. the first feature, spelled out: (64 - mean(InChannels)) / std(InChannels)
    st = m["stats"]["overall"]["features"]
    first = (np.float32(64) - np.float32(st["mean"]["InChannels"])) / np.float32(st["std"]["InChannels"])
    assert net.features_of(df)[0, 0] == first


@pytest.mark.parametrize("arch,part", [("gfx90a", "overall"), ("gfx942", "test")])
def test_gfx90a_gfx942_features_by_hand(arch, part):
    # Same layer, FP16, backward weights. Order (Gfx90aModel::ToFeatures, = metadata list):
    #  C_in, H_in, W_in, C_out, H_out, W_out, fil_h, fil_w, pad_h, pad_w,
    #  stride_h, stride_w, dil_h, dil_w, N, Precision, Direction, GroupSize
    enc = meta(arch)["encodings"]
    raw = [64, 56, 56, 128, 28, 28, 3, 3, 1, 1, 2, 2, 1, 1, 32,
           enc["Precision"]["FP16"], enc["Direction"]["W"], 1]
    net = TunaNetArch(arch)
    df = frame(problem(direction="W", dtype="FP16"))
    np.testing.assert_array_equal(net.raw_features(df)[0], np.asarray(raw, np.float32))
    np.testing.assert_array_equal(net.features_of(df)[0], normalise(raw, arch, part))


def test_backward_keys_get_true_x_y_features():
    """MIOpen swaps in/out for B and W so the features describe x and y.

    A backward-data key lists dy first (its "in" fields are y's); its features
    must equal those of the forward key of the same convolution except for
    the Direction code.
    """
    problem_mod = pytest.importorskip("kbench.sources.problem")
    keys = pd.Series([
        "64-56-56-3x3-128-28-28-32-1x1-2x2-1x1-0-NCHW-FP32-F",   # x: 64x56x56, y: 128x28x28
        "128-28-28-3x3-64-56-56-32-1x1-2x2-1x1-0-NCHW-FP32-B",   # same conv: in = dy, out = dx
        "128-28-28-3x3-64-56-56-32-1x1-2x2-1x1-0-NCHW-FP32-W",   # same conv: in = dy, out = x
    ])
    df = problem_mod.parse_miopen_keys(keys)
    for arch in ("gfx908", "gfx90a", "gfx942"):
        net = TunaNetArch(arch)
        raw = net.raw_features(df)
        d = net.features.index("Direction")
        same = [i for i in range(len(net.features)) if i != d]
        np.testing.assert_array_equal(raw[1, same], raw[0, same])
        np.testing.assert_array_equal(raw[2, same], raw[0, same])
        cin = net.features.index("InChannels" if arch == "gfx908" else "Inp_0")
        assert raw[:, cin].tolist() == [64, 64, 64]
        enc = net.metadata["encodings"]["Direction"]
        assert raw[:, d].tolist() == [enc["F"], enc["B"], enc["W"]]
    # and the hand-built canonical row gives the same features as the parsed key
    net = TunaNetArch("gfx908")
    np.testing.assert_array_equal(net.raw_features(frame(problem(direction="B"))),
                                  net.raw_features(df.iloc[[1]]))


def test_in_dtype_is_the_first_miopen_type():
    s = pd.Series(["FP32", "FP16", "BF16", "INT8", "INT8INT8INT32", "INT8x4INT8x4INT32", "FP16FP16FP32"])
    assert in_dtype(s).tolist() == ["FP32", "FP16", "BF16", "INT8", "INT8", "INT8x4", "FP16"]


# -------------------------------------------------------------------- support

# (description, problem overrides, expected support for gfx908, gfx90a, gfx942)
SUPPORT_CASES = [
    ("plain 2D NCHW FP32", {}, (True, True, True)),
    ("backward data", {"direction": "B"}, (True, True, True)),
    ("FP16", {"dtype": "FP16"}, (True, True, True)),
    ("BF16", {"dtype": "BF16"}, (True, True, True)),
    ("INT8", {"dtype": "INT8"}, (False, False, False)),
    ("mixed INT8 in", {"dtype": "INT8INT8INT32"}, (False, False, False)),
    ("3D", {"spatial_dims": 3}, (False, False, False)),
    ("grouped", {"groups": 2}, (False, True, True)),
    ("non-square filter", {"fh": 3, "fw": 1, "ph": 0, "pw": 0}, (False, True, True)),
    ("unequal padding", {"ph": 1, "pw": 0}, (False, True, True)),
    ("unequal stride", {"sh": 1, "sw": 2}, (False, False, False)),
    ("dilation 2x2", {"dh": 2, "dw": 2}, (False, True, True)),
    ("unequal dilation", {"dh": 1, "dw": 2}, (False, False, False)),
    ("bias", {"bias": 1}, (True, False, False)),
    ("NHWC", {"layout_x": "NHWC"}, (False, False, True)),
    ("F, x NCHW, y NHWC: in = x", {"layout_x": "NCHW", "layout_y": "NHWC"}, (True, True, True)),
    ("B, x NCHW, y NHWC: in = y", {"direction": "B", "layout_x": "NCHW", "layout_y": "NHWC"},
     (False, False, True)),
    ("W, x NHWC, y NCHW: in = y", {"direction": "W", "layout_x": "NHWC", "layout_y": "NCHW"},
     (True, True, True)),
]


@pytest.mark.parametrize("arch_i,arch", list(enumerate(["gfx908", "gfx90a", "gfx942"])))
def test_support_rules(arch_i, arch):
    rows = frame(*[problem(**kw) for _, kw, _ in SUPPORT_CASES])
    got = TunaNet(arch=arch).supports(rows)
    want = [exp[arch_i] for _, _, exp in SUPPORT_CASES]
    bad = [desc for (desc, _, _), g, w in zip(SUPPORT_CASES, got, want) if g != w]
    assert not bad, f"{arch}: wrong support for {bad}"
    assert got.index.equals(rows.index)


# -------------------------------------------------------------------- MIOpen's own unit test

# MIOpen test/gtest/tuna_net.cpp: forward NCHW problems {G, N, C, K, {H, W}, {fil}, {pad},
# {stride}, {dil}} with, as "expected_solver", the position in PredictSolver's ranking of
# the solver with the largest solver id. Solver ids follow registration order in MIOpen's
# src/solver.cpp (append-only): of gfx908's 9 solvers the last registered is
# ConvAsmImplicitGemmGTCDynamicWrwXdlopsNHWC; of gfx90a's 23, ConvCkIgemmFwdV6r1DlopsNchw.
MIOPEN_GTEST = [
    ("gfx908", dict(dtype="FP32", n=5, c=256, k=64, h=267, w=300, fh=1, fw=1, ph=0, pw=0, sh=1, sw=1), 4),
    ("gfx908", dict(dtype="FP16", n=16, c=256, k=512, h=20, w=84, fh=5, fw=5, ph=1, pw=1, sh=1, sw=1), 3),
    ("gfx908", dict(dtype="BF16", n=32, c=1024, k=512, h=15, w=15, fh=1, fw=1, ph=0, pw=0, sh=1, sw=1), 4),
    ("gfx90a", dict(dtype="FP32", n=5, c=3, k=64, h=1301, w=1333, fh=7, fw=7, ph=3, pw=3, sh=2, sw=2), 6),
    ("gfx90a", dict(dtype="FP16", n=24, c=1024, k=2048, h=14, w=14, fh=1, fw=1, ph=0, pw=0, sh=2, sw=2), 4),
    ("gfx90a", dict(dtype="BF16", n=2, c=480, k=192, h=28, w=28, fh=1, fw=1, ph=0, pw=0, sh=1, sw=1), 6),
]
LAST_REGISTERED = {"gfx908": "ConvAsmImplicitGemmGTCDynamicWrwXdlopsNHWC",
                   "gfx90a": "ConvCkIgemmFwdV6r1DlopsNchw"}


@pytest.mark.parametrize("arch,kw,expected", MIOPEN_GTEST)
def test_reproduces_miopen_tunanet_gtest(arch, kw, expected):
    tn = TunaNet(arch=arch)
    ranking = tn.rank_problems(frame(problem(**kw)))["ranking"].iloc[0].split(";")
    assert len(ranking) == len(tn.solvers)  # no dataset: nothing filtered, as PredictSolver
    assert ranking.index(LAST_REGISTERED[arch]) == expected


# -------------------------------------------------------------------- predict / fit

def fake_dataset(name, problems, kernels=None):
    return SimpleNamespace(name=name, problems=problems, kernels=kernels, info={"name": name})


def test_fit_picks_the_model_for_the_device():
    df = frame(problem())
    assert TunaNet().fit(fake_dataset("mi100", df)).arch == "gfx908"
    assert TunaNet().fit(fake_dataset("mi210", df)).arch == "gfx90a"
    assert TunaNet().fit(fake_dataset("mi250x", df)).arch == "gfx90a"
    assert TunaNet().fit(fake_dataset("mi300x", df)).arch == "gfx942"
    assert TunaNet().fit(fake_dataset("gfx90878", df)).arch == "gfx908"
    # a dataset known by another name, whose info names the device
    other = SimpleNamespace(name="x", problems=df, info={"device": "AMD Instinct MI250X (gfx90a, 110 CUs)"})
    assert TunaNet().fit(other).arch == "gfx90a"
    with pytest.raises(ValueError, match="mi100"):
        TunaNet().fit(fake_dataset("mi50", df))


def test_predict_ranks_supported_problems_in_score_order_with_direction_filter():
    rows = frame(problem(pid="f"), problem(direction="B", pid="b"), problem(direction="W", pid="w"),
                 problem(groups=2, pid="grouped"), problem(pid="other"))
    tn0 = TunaNet(arch="gfx908")
    solvers = tn0.solvers
    # kernels table: every gfx908 solver but one, with the directions it runs in
    # (named by the solvers' own naming convention; the winograd one runs everywhere)
    def dirs(s):
        if "Wrw" in s:
            return "W"
        if "Bwd" in s:
            return "B"
        if "Fwd" in s:
            return "F"
        return "B,F,W"
    dropped = "GemmFwd1x1_0_2"
    kernels = pd.DataFrame({"kernel": [s for s in solvers if s != dropped]})
    kernels["directions"] = kernels["kernel"].map(dirs)
    ds = fake_dataset("mi100", rows, kernels)
    tn = TunaNet().fit(ds, [], [])
    pred = tn.predict(ds, ["f", "b", "w", "grouped"])
    assert list(pred.columns) == ["problem_id", "ranking"]
    assert sorted(pred["problem_id"]) == ["b", "f", "w"]  # grouped: unsupported on gfx908; "other" not asked
    scores = tn.scores(rows.set_index("problem_id", drop=False).loc[["f", "b", "w"]])
    for pid, ranking in zip(pred["problem_id"], pred["ranking"]):
        r = ranking.split(";")
        d = pid.upper()
        allowed = [s for s in solvers if s != dropped and d in dirs(s).split(",")]
        assert sorted(r) == sorted(allowed)
        s = scores.loc[pid, r].to_numpy()
        assert np.all(np.diff(s) <= 0), "ranking must follow descending scores"


def test_predict_is_row_order_independent_and_vectorised():
    rows = [problem(n=n, c=c, dtype=dt, direction=d)
            for n in (1, 16) for c in (3, 512) for dt in ("FP32", "FP16") for d in ("F", "B", "W")]
    df = frame(*rows)
    tn = TunaNet(arch="gfx90a")
    a = tn.rank_problems(df).set_index("problem_id")["ranking"]
    b = tn.rank_problems(df.sample(frac=1, random_state=0)).set_index("problem_id")["ranking"]
    c = pd.concat([tn.rank_problems(df.iloc[[i]]) for i in range(len(df))]).set_index("problem_id")["ranking"]
    assert len(a) == len(df)
    pd.testing.assert_series_equal(a.sort_index(), b.sort_index())
    pd.testing.assert_series_equal(a.sort_index(), c.sort_index())


def test_output_offset_and_solver_lists_follow_metadata():
    for arch in ("gfx908", "gfx90a", "gfx942"):
        net = TunaNetArch(arch)
        m = net.metadata
        assert net.offset == m["num_outputs"] - m["num_solvers"]
        assert net.solvers == sorted(m["encodings"]["solver"], key=m["encodings"]["solver"].get)
        assert net.scores(frame(problem())).shape == (1, m["num_solvers"])


def test_save_and_load_roundtrip(tmp_path):
    tn = TunaNet(arch="gfx942")
    tn.save(tmp_path / "tn.json")
    back = TunaNet.load(tmp_path / "tn.json")
    df = frame(problem(), problem(direction="W"))
    pd.testing.assert_frame_equal(tn.rank_problems(df), back.rank_problems(df))


def test_on_the_shipped_mi100_dataset(mi100):
    """End to end on kbench's mi100: supported test problems only, rankings in the vocabulary."""
    test_ids = mi100.split("random")["test"][:3000]
    tn = TunaNet().fit(mi100, [], [])
    assert tn.arch == "gfx908"
    pred = tn.predict(mi100, test_ids)
    sup = tn.supported_ids(mi100, test_ids)
    assert sorted(pred["problem_id"]) == sorted(sup)
    assert 0 < len(sup) < len(test_ids)
    probs = mi100.problems.set_index("problem_id").loc[pred["problem_id"]]
    assert (probs["spatial_dims"] == 2).all() and (probs["groups"] == 1).all()
    dirs = dict(zip(mi100.kernels["kernel"], mi100.kernels["directions"].str.split(",")))
    for d, ranking in zip(probs["direction"], pred["ranking"]):
        ks = ranking.split(";")
        assert len(set(ks)) == len(ks) and set(ks) <= set(tn.solvers)
        assert all(d in dirs[k] for k in ks)
