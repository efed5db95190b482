"""perf-db reading, problem keys and the tuning dataset tables."""

from __future__ import annotations

import hashlib
import sqlite3

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tuning_toy import (
    CONFIGS,
    KEY1,
    KEY2_28,
    KEY3_27,
    KEY4,
    KEY5,
    KEY7_13,
    PERF,
    make_perfdb,
)

from kbench.sources.perfdb import (
    config_keys,
    parse_params,
    perfdb_tables,
    read_perfdb,
    resolve_keys,
)
from kbench.sources.problem import PROBLEM_COLUMNS, parse_miopen_keys, to_miopen_key
from kbench.sources.tuning_grammar import SOLVER_PARAMS


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------- reading
def test_read_perfdb_joins_and_leaves_input_untouched(toy_db):
    before, mtime = _sha(toy_db), toy_db.stat().st_mtime_ns
    joined = read_perfdb(toy_db)
    assert _sha(toy_db) == before and toy_db.stat().st_mtime_ns == mtime
    assert len(joined) == len(PERF)
    assert joined["solver"].tolist() == [p[1] for p in PERF]
    # config columns come along with each perf_db row
    row = joined.loc[joined["perfdb_id"] == 3].iloc[0]
    assert (row["direction"], row["in_channels"], row["out_channels"]) == ("B", 128, 64)
    # no stray files next to the input
    assert sorted(p.name for p in toy_db.parent.iterdir()) == sorted(
        [toy_db.name, "gfxtest_1.HIP.fdb.txt.bz2"])


def test_plain_db_is_opened_read_only(tmp_path):
    db = make_perfdb(tmp_path, compress=False)
    before = _sha(db)
    assert len(read_perfdb(db)) == len(PERF)
    assert _sha(db) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [db.name]  # no journal left behind


def test_not_a_perfdb(tmp_path):
    from kbench.core.errors import DataIntegrityError, KbenchInputError

    bad = tmp_path / "x.db"
    con = sqlite3.connect(bad)
    con.execute("create table foo(a)")
    con.commit()
    con.close()
    with pytest.raises(DataIntegrityError, match="perf_db"):
        read_perfdb(bad)
    with pytest.raises(KbenchInputError, match="not found"):
        read_perfdb(tmp_path / "missing.db.bz2")


# --------------------------------------------------------------------------- keys
def test_keys_follow_miopen_serialisation(toy_db):
    res = perfdb_tables(toy_db)
    p = res["problems"].set_index("problem_id")
    assert set(p.index) == {KEY1, KEY2_28, KEY3_27, KEY4, KEY5, KEY7_13}
    assert p.loc[KEY1, "key_source"] == "formula"
    assert p.loc[KEY4, "key_source"] == "formula"  # stride 1 backward: x = y - 2p + d(f-1)
    assert p.loc[KEY2_28, "key_source"] == "find-db"  # only x=28 is in the find-db
    assert p.loc[KEY3_27, "key_source"] == "find-db-ambiguous"  # 27 and 28 both: smallest
    assert p.loc[KEY7_13, "key_source"] == "fallback"  # neither: smallest x
    # true-terms columns: for B the key's leading fields are dy
    assert p.loc[KEY2_28, ["c", "k", "x_h", "y_h", "stride_h"]].tolist() == [64, 128, 28, 14, 2]
    assert p.loc[KEY5, ["groups", "layout", "layout_x", "dtype"]].tolist() == [
        32, "NHWC-NHWC-NHWC", "NHWC", "FP16"]
    assert p["output_size_ok"].all()
    assert res["summary"]["dropped_degenerate_problems"] == 1
    assert res["summary"]["dropped_degenerate_rows"] == 1


def test_key_round_trip_toy(toy_db):
    p = perfdb_tables(toy_db)["problems"]
    assert (to_miopen_key(p) == p["problem_id"]).all()
    again = parse_miopen_keys(p["problem_id"])
    pd.testing.assert_frame_equal(again[PROBLEM_COLUMNS], p[PROBLEM_COLUMNS])


def test_without_find_db_every_strided_backward_key_is_the_smallest_x(toy_db):
    p = perfdb_tables(toy_db, fdb_path=None)["problems"].set_index("problem_id")
    strided_b = p[(p["direction"] == "B") & (p["stride_h"] > 1)]
    assert (strided_b["key_source"] == "fallback").all()
    # smallest x: (y - 1) * s - 2p + d(f - 1) + 1
    exp = (strided_b["y_h"] - 1) * strided_b["stride_h"] - 2 * strided_b["pad_h"] + \
        strided_b["dil_h"] * (strided_b["fil_h"] - 1) + 1
    assert (strided_b["x_h"] == exp).all()


_CFG_COLS = ["layout", "data_type", "direction", "spatial_dim", "in_channels", "in_h", "in_w",
             "in_d", "fil_h", "fil_w", "fil_d", "out_channels", "batchsize", "pad_h", "pad_w",
             "pad_d", "conv_stride_h", "conv_stride_w", "conv_stride_d", "dilation_h",
             "dilation_w", "dilation_d", "bias", "group_count"]


@settings(max_examples=60, deadline=None)
@given(
    direction=st.sampled_from(["F", "B", "W"]),
    dtype=st.sampled_from(["FP32", "FP16", "BF16"]),
    layout=st.sampled_from(["NCHW", "NHWC"]),
    c=st.integers(1, 2048), k=st.integers(1, 2048), n=st.integers(1, 256),
    x=st.integers(1, 300), f=st.integers(1, 7), pad=st.integers(0, 3),
    s=st.integers(1, 4), d=st.integers(1, 2), g=st.sampled_from([1, 2, 32]),
)
@pytest.mark.slow
def test_config_key_round_trip(direction, dtype, layout, c, k, n, x, f, pad, s, d, g):
    """config row -> key -> canonical columns -> key is the identity, and the
    canonical output size follows the convolution rule (forward) or is one of
    the s inputs that give the row's dy (backward)."""
    if direction == "F" and x + 2 * pad - d * (f - 1) - 1 < 0:
        return  # empty output: not a convolution
    if direction != "F" and (x - 1) * s - 2 * pad + d * (f - 1) + 1 < 1:
        return  # no input size gives this dy
    cfg = pd.DataFrame([[layout, dtype, direction, 2, c, x, x + 1, 1, f, f, 1, k, n, pad, pad, 0,
                         s, s, 0, d, d, 0, 0, g]], columns=_CFG_COLS)
    keys = resolve_keys(cfg)
    p = parse_miopen_keys(keys["problem_id"])
    assert to_miopen_key(p).iloc[0] == keys["problem_id"].iloc[0]
    row = p.iloc[0]
    assert row["output_size_ok"]
    if direction == "F":
        assert (row["c"], row["k"], row["x_h"], row["x_w"]) == (c, k, x, x + 1)
    else:  # the row's "in" is dy, "out_channels" is x's channel count
        assert (row["c"], row["k"], row["y_h"], row["y_w"]) == (k, c, x, x + 1)
    assert keys["key_source"].iloc[0] == ("fallback" if direction != "F" and s > 1 else "formula")


def test_config_keys_hand_example():
    cfg = pd.DataFrame([CONFIGS[0][1:]], columns=_CFG_COLS)
    assert config_keys(cfg, [1], [14], [14]).iloc[0] == KEY1


# --------------------------------------------------------------------------- params
def test_parse_params_typed_columns():
    solver = pd.Series(["ConvAsm1x1U", "ConvAsm1x1U", "ConvBinWinogradRxSf2x3", "Other", "ConvMlirIgemmFwd"])
    params = pd.Series(["4,16,4,16,2,1,1,1", "1,2,3", "8", "1,2", "256,128,128,16,4,4"])
    t = parse_params(solver, params)
    assert t.loc[0, list(SOLVER_PARAMS["ConvAsm1x1U"])].tolist() == [4, 16, 4, 16, 2, 1, 1, 1]
    assert t.loc[1].isna().all()  # wrong field count: not typed
    assert t.loc[2, "n_groups"] == 8 and t.loc[2].drop("n_groups").isna().all()
    assert t.loc[3].isna().all()
    assert t.loc[4, list(SOLVER_PARAMS["ConvMlirIgemmFwd"])].tolist() == [256, 128, 128, 16, 4, 4]
    assert all(str(t[c].dtype) == "Int64" for c in t)


def test_targets_table(toy_db):
    res = perfdb_tables(toy_db)
    t = res["targets"]
    assert list(t.columns[:3]) == ["problem_id", "solver", "params"]
    # one row per surviving perf_db row (the degenerate problem's row is gone)
    assert len(t) == len(PERF) - 1
    assert not t.duplicated(["problem_id", "solver"]).any()
    row = t[(t["problem_id"] == KEY1) & (t["solver"] == "ConvAsm1x1U")].iloc[0]
    assert row["params"] == "4,16,4,16,2,1,1,1" and row["k_mult"] == 16
    assert res["summary"]["unparsed_params_rows"] == 1  # the 3-field ConvAsm1x1U string
    n_solvers = res["problems"].set_index("problem_id")["n_solvers"]
    assert n_solvers[KEY1] == 2 and n_solvers[KEY4] == 2 and n_solvers[KEY5] == 1


def test_build_tuning_dataset_tables(toy_db):
    from kbench.sources.tuning_dataset import build_tuning_dataset

    tables = build_tuning_dataset(toy_db, mituna_dir=None)
    assert set(tables) == {"problems", "targets", "splits"}
    s = tables["splits"]
    assert s["problem_id"].tolist() == tables["problems"]["problem_id"].tolist()
    assert set(s["random"]) <= {"train", "valid", "test"}
    # grouped by geometry: one part per geometry_id
    g = tables["problems"][["geometry_id"]].assign(part=s["random"].to_numpy())
    assert (g.groupby("geometry_id")["part"].nunique() == 1).all()


# --------------------------------------------------------------------------- real data
def _sql_counts(path):
    import bz2
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "x.db"
        plain.write_bytes(bz2.decompress(path.read_bytes()))
        con = sqlite3.connect(plain)
        counts = dict(con.execute("select solver, count(*) from perf_db group by solver"))
        degenerate = dict(con.execute(
            "select p.solver, count(*) from perf_db p join config c on p.config = c.id "
            "where c.direction = 'F' and ((c.in_h + 2*c.pad_h - c.dilation_h*(c.fil_h-1) - 1) < 0 "
            "or (c.in_w + 2*c.pad_w - c.dilation_w*(c.fil_w-1) - 1) < 0) group by p.solver"))
        con.close()
    return counts, degenerate


@pytest.mark.parametrize("name", ["gfx906_60", "gfx942130"])
def test_real_counts_match_sql(real_tables, raw_data, name):
    counts, degenerate = _sql_counts(raw_data / "miopen" / f"{name}.db.bz2")
    got = real_tables[name]["targets"]["solver"].value_counts().to_dict()
    expected = {s: n - degenerate.get(s, 0) for s, n in counts.items()}
    assert got == {s: n for s, n in expected.items() if n}
    assert real_tables[name]["summary"]["unparsed_params_rows"] == 0


@pytest.mark.parametrize("name", ["gfx906_60", "gfx942130"])
def test_real_key_round_trip(real_tables, name):
    p = real_tables[name]["problems"]
    assert p["problem_id"].is_unique
    assert (to_miopen_key(p) == p["problem_id"]).all()
    assert p["output_size_ok"].all()


def test_real_ids_match_kernel_selection_set(real_tables, raw_data):
    """MI300X: every problem of the tuning set is a problem of the kernel-selection
    set built from the same device's find-db, with identical canonical columns."""
    from kbench.sources.miopen import convert_finddb

    ks = convert_finddb(raw_data / "miopen" / "gfx942130.HIP.fdb.txt.bz2")[0]["problems"]
    p = real_tables["gfx942130"]["problems"]
    m = p.merge(ks, on="problem_id", suffixes=("", "_ks"))
    assert len(m) == len(p)
    for col in PROBLEM_COLUMNS[1:]:
        assert (m[col].astype(str) == m[f"{col}_ks"].astype(str)).all(), col
