"""Convert the PACT 2022 tile-size timings into the ``v100-tiles`` and ``rtx2080ti-tiles`` datasets.

Source: the artifact of Xu, Yuan, Barton, Li, Sadayappan and Sukumaran-Rajam,
"Effective Performance Modeling and Domain-Specific Compiler Optimization of
CNNs for GPUs", PACT 2022, github.com/HPCRL/AE-PACT at commit
:data:`SOURCE_COMMIT` (no license stated; cite the paper). The raw files live in
``../shared/data/cnnopt`` (see that folder's README).

What the files are (checked by the code below, counted in the report):

* ``lop-v100/``, ``lop-2080/``: one folder per kernel schema. ``RS`` kernel
  (``dir_rs3_half_dataset``, ``dir_rs3odd_dataset``, ``dir_rs1odd_dataset``),
  ``S`` kernel (``dir_s3_half_dataset``), ``RS2`` = the RS kernel's stride-2
  variant (``dir_st2_dataset``). Columns: problem ``K,H,W,C,R`` (``H, W`` are
  the *output* size, filter ``R x R``, batch 1, NCHW, FP32, forward) then the
  tile sizes, then ``Time`` in milliseconds.
* ``Reg.timesForProblem<K>x<H>x<W>_<C>_<R>.csv.gz``: every valid configuration of
  one network layer (the benchmark layers, split ``test``).
* ``train_set_*.csv.gz`` and ``test_set_*.csv.gz``: random problem sizes, each
  with a *sample* of configurations (the paper trained on the first and picked
  its random seed on the second; both are random-size problems, here they are
  the training pool). ``*_test.csv.gz`` are small scratch files the paper's
  driver only mentions in commented-out lines; they are byte-identical between
  the two GPU folders, so they cannot be measurements of both GPUs: excluded.
* Byte-identical copies of a file inside one GPU folder (the RS training file
  sits in three folders) are read once.

Problems. The kernels read an input that is already padded (the templates say
so and run with ``PaddingH=0``), and the cuDNN reference was run the same way
(e.g. ResNet-18's 3x3 layer at 56x56 as a 58x58 input, pad 0). A problem is
therefore keyed as the padding-free convolution that was measured:
``pad = 0``, input ``x = (y-1)*stride + R``; for a "same"-padded network layer
that is the layer's input plus its padding. ``problem_id`` is the MIOpen key of
that convolution (:func:`kbench.problem.to_miopen_key`).

Candidates. A kernel is a schema plus a tile configuration; its id keeps the
source's column names (``RS_TK2_TH7_TW7_BK32_BH4_BW1_CM8``,
``S_TH1_TW7_TK4_WH1_WW4_WK8_BH4_BW1_BK1``) and the runtimes carry typed tile
columns with one meaning for every schema (:data:`TILE_COLUMNS`): outputs per
thread (``tile_*``), threads per warp (``warp_*``), warps per block
(``block_*``), input-channel split (``c_split``). The RS kernels' warp is 32
threads along K (source ``BK = 32``) and their source ``BH, BW`` are warps.

Cleaning (each rule counted in the report, nothing dropped silently):

* Error lines. The RS harness prints ``Error: too many resources requested for
  launch`` and then still prints the failed configuration's row with the time
  of a kernel that never ran: that row is dropped (the report shows these rows
  all sit below their problem's median time). The S and stride-2 harnesses
  print other messages and no row for the failed configuration: nothing is
  dropped there.
* A time below the physical floor ``FLOPs / peak FP32 rate`` of the GPU
  (:data:`kbench.sources.cnnopt_features.GPU_SPECS`) is a launch that did not
  run (it happens in the V100 S-kernel training files without an error line):
  dropped.
* A training problem that is also a benchmark layer (same ``problem_id``) loses
  its training rows: the layer keeps its complete list.
* Repeated measurements of one (problem, kernel) are merged: median time,
  ``n_measurements`` and ``time_spread`` (max / min) kept.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import re
from pathlib import Path

import numpy as np
import pandas as pd

from kbench.dataset_files import REPO_ROOT
from kbench.errors import KbenchInputError, suggest
from kbench.problem import PROBLEM_COLUMNS, geometry_ids, output_size_status, parse_miopen_keys, to_miopen_key
from kbench.sources.cnnopt_features import GPU_SPECS
from kbench.splits import assign_networks_split

#: HPCRL/AE-PACT commit the raw files come from.
SOURCE_COMMIT = "7e118b5e7827ffa1254cc681a2c98f2dac67f92d"
SOURCE_REPO = "github.com/HPCRL/AE-PACT"
CITATION = ("Yufan Xu, Qiwei Yuan, Erik Curtis Barton, Rui Li, P. Sadayappan, Aravind Sukumaran-Rajam. "
            "Effective Performance Modeling and Domain-Specific Compiler Optimization of CNNs for GPUs. "
            "PACT 2022.")

#: Default location of the raw files: ``<project root>/../shared/data/cnnopt``.
DEFAULT_RAW_DIR = REPO_ROOT.parent / "shared" / "data" / "cnnopt"

#: Per-GPU source folders and dataset names.
GPUS = {
    "v100": {"dataset": "v100-tiles", "tiles": "lop-v100", "cudnn": "cuDNN/profile-v100"},
    "rtx2080ti": {"dataset": "rtx2080ti-tiles", "tiles": "lop-2080", "cudnn": "cuDNN/profile-2080"},
}
DATASET_TO_GPU = {v["dataset"]: k for k, v in GPUS.items()}

RS_SOURCE_COLUMNS = ["K", "H", "W", "C", "R", "TK", "TH", "TW", "BK", "BH", "BW", "CMult"]
S_SOURCE_COLUMNS = ["K", "H", "W", "C", "R", "TH", "TW", "TK", "WH", "WW", "WK", "BH", "BW", "BK"]
#: Kernel schema -> source tile columns (after the 5 problem columns) and stride.
SCHEMAS = {
    "RS": {"columns": RS_SOURCE_COLUMNS, "stride": 1},
    "RS2": {"columns": RS_SOURCE_COLUMNS, "stride": 2},
    "S": {"columns": S_SOURCE_COLUMNS, "stride": 1},
}
#: Source folder -> kernel schema. An unknown folder is an error, never skipped.
FOLDER_SCHEMA = {
    "dir_rs3_half_dataset": "RS",
    "dir_rs3odd_dataset": "RS",
    "dir_rs1odd_dataset": "RS",
    "dir_s3_half_dataset": "S",
    "dir_st2_dataset": "RS2",
}
#: Typed tile columns of the runtimes and kernels tables (see module docstring).
TILE_COLUMNS = ["schema", "tile_k", "tile_h", "tile_w", "warp_k", "warp_h", "warp_w",
                "block_k", "block_h", "block_w", "c_split"]
#: The RS harness's error line, printed before the failed configuration's own row.
RS_FAILED_LAUNCH_LINE = "Error: too many resources requested for launch"
#: cuDNN's cudnnConvolutionFwdAlgo_t, in enum order (algo<i> in the profile file names).
CUDNN_FWD_ALGOS = [
    "CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM",
    "CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM",
    "CUDNN_CONVOLUTION_FWD_ALGO_GEMM",
    "CUDNN_CONVOLUTION_FWD_ALGO_DIRECT",
    "CUDNN_CONVOLUTION_FWD_ALGO_FFT",
    "CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING",
    "CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD",
    "CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED",
]
#: The standard reference: algorithms that do the convolution's own arithmetic
#: (the paper excludes FFT and Winograd, which do less).
REFERENCE_STANDARD = "cudnn8.2_best_no_fft_winograd"
REFERENCE_ALL = "cudnn8.2_best_any"
#: Network names of the cuDNN profile prefixes (``cres3`` -> ResNet-18 layer res3).
NETWORKS = {"res": "ResNet-18", "yolo": "YOLO-9000", "defo": "DefoNet"}
#: The standard split (test = the benchmark layers, as in the paper), built by
#: :func:`kbench.splits.assign_networks_split` like the AMD datasets' ``networks`` split.
SPLIT_NAME = "networks"
_NS_PER = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}  # -> ms
_REG_RE = re.compile(r"^Reg\.timesForProblem(\d+)x(\d+)x(\d+)_(\d+)_(\d+)\.csv(\.gz)?$")
_PROFILE_RE = re.compile(r"^c(res|yolo|defo)(\d+)-algo(\d+)\.csv(\.gz)?$")


def resolve_gpu(gpu: str) -> str:
    """``v100`` / ``rtx2080ti`` (dataset names accepted too)."""
    if gpu in GPUS:
        return gpu
    if gpu in DATASET_TO_GPU:
        return DATASET_TO_GPU[gpu]
    names = list(GPUS) + list(DATASET_TO_GPU)
    raise KbenchInputError(f"unknown tile-dataset GPU {gpu!r}; known: {', '.join(names)}.{suggest(gpu, names)}")


def _read_text(path: Path) -> str:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            return fh.read()
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise KbenchInputError(f"{path}: cannot read ({exc}).") from exc


def file_role(name: str) -> str:
    """``layer`` (Reg.timesForProblem...), ``scratch`` (*_test.csv), ``train`` or ``heldout``."""
    if _REG_RE.match(name):
        return "layer"
    stem = re.sub(r"\.csv(\.gz)?$", "", name)
    if stem.endswith("_test"):
        return "scratch"
    if stem.startswith("train_set"):
        return "train"
    if stem.startswith("test_set"):
        return "heldout"
    raise KbenchInputError(f"unexpected file {name!r} in the cnnopt tile folders")


def read_tile_text(text: str, schema: str, source: str = "file") -> tuple[pd.DataFrame, dict]:
    """Parse one tile CSV (header optional, error lines interleaved) into typed rows.

    Returns the rows (``K, H, W, C, R``, the schema's tile columns, ``time_ms``,
    ``line`` 1-based, ``after_error`` = the error line just above or ``""``) and
    counts of what the file held.
    """
    cols = SCHEMAS[schema]["columns"]
    lines = pd.Series(text.splitlines(), dtype=str).str.strip()
    lineno = pd.Series(np.arange(1, len(lines) + 1), index=lines.index)
    nonempty = lines.str.len() > 0
    is_error = lines.str.contains("rror", regex=False)
    first = lines.str.split(",", n=1).str[0].str.strip()
    numeric = first.str.fullmatch(r"\d+")
    is_header = nonempty & ~is_error & ~numeric
    stats = {"lines": int(nonempty.sum()), "error_lines": int(is_error.sum()),
             "header": bool(is_header.any())}
    if is_header.sum() > 1 or (is_header.any() and not is_header[nonempty].iloc[0]):
        raise KbenchInputError(f"{source}: unexpected non-numeric line(s), e.g. line "
                               f"{int(lineno[is_header].iloc[-1])}: {lines[is_header].iloc[-1][:120]!r}")
    if is_header.any():
        hdr = [h.strip().upper() for h in lines[is_header].iloc[0].split(",")]
        if hdr != [c.upper() for c in cols] + ["TIME"]:
            raise KbenchInputError(f"{source}: header {hdr} does not match schema {schema} ({cols + ['Time']})")
    data = nonempty & ~is_error & numeric
    prev = lines.shift(1).fillna("")
    after_error = prev.where(prev.str.contains("rror", regex=False), "")
    fields = lines[data].str.split(",", expand=True)
    if fields.shape[1] != len(cols) + 1:
        raise KbenchInputError(f"{source}: rows have {fields.shape[1]} fields, schema {schema} needs {len(cols) + 1}")
    vals = fields.apply(lambda s: pd.to_numeric(s.str.strip(), errors="coerce"))
    bad = vals.isna().any(axis=1)
    if bad.any():
        ln = int(lineno[data][bad].iloc[0])
        raise KbenchInputError(f"{source}: non-numeric field on line {ln}: {lines[ln - 1][:120]!r}")
    rows = pd.DataFrame({c: vals[j].to_numpy().astype(np.int64) for j, c in enumerate(cols)})
    rows["time_ms"] = vals[len(cols)].to_numpy(dtype=np.float64)
    rows["line"] = lineno[data].to_numpy()
    rows["after_error"] = after_error[data].to_numpy()
    stats["rows"] = int(len(rows))
    return rows, stats


def _tile_typed(rows: pd.DataFrame, schema: str) -> pd.DataFrame:
    """Typed tile columns (one meaning for every schema) and the kernel id."""
    if schema == "S":
        t = {"tile_k": rows.TK, "tile_h": rows.TH, "tile_w": rows.TW,
             "warp_k": rows.WK, "warp_h": rows.WH, "warp_w": rows.WW,
             "block_k": rows.BK, "block_h": rows.BH, "block_w": rows.BW, "c_split": 1}
    else:
        # RS kernels: the warp's 32 threads run along K (source BK = threads along K),
        # the block's warps tile H x W (source BH, BW).
        t = {"tile_k": rows.TK, "tile_h": rows.TH, "tile_w": rows.TW,
             "warp_k": rows.BK, "warp_h": 1, "warp_w": 1,
             "block_k": 1, "block_h": rows.BH, "block_w": rows.BW, "c_split": rows.CMult}
    out = pd.DataFrame({"schema": schema, **t}, index=rows.index)
    for c in TILE_COLUMNS[1:]:
        out[c] = out[c].astype(np.int64)
    cols = SCHEMAS[schema]["columns"][5:]
    names = {"CMult": "CM"}
    kid = pd.Series(schema, index=rows.index, dtype=object)
    for c in cols:
        kid = kid + "_" + names.get(c, c) + rows[c].astype(str)
    out["kernel"] = kid.astype(str)
    return out


def read_tile_folder(tiles_dir: Path) -> tuple[pd.DataFrame, dict]:
    """All rows of one GPU's tile folder with their source file, role and schema."""
    if not tiles_dir.is_dir():
        raise KbenchInputError(f"{tiles_dir}: tile folder not found (raw data expected under {DEFAULT_RAW_DIR}).")
    frames, files, seen = [], [], {}
    for folder in sorted(p for p in tiles_dir.iterdir() if p.is_dir()):
        if folder.name not in FOLDER_SCHEMA:
            raise KbenchInputError(f"{folder}: unknown kernel folder; known: {sorted(FOLDER_SCHEMA)}")
        schema = FOLDER_SCHEMA[folder.name]
        for path in sorted(folder.glob("*.csv*")):
            rel = f"{tiles_dir.name}/{folder.name}/{path.name}"
            role = file_role(path.name)
            text = _read_text(path)
            digest = hashlib.sha256((schema + "\0" + text).encode()).hexdigest()
            info = {"file": rel, "schema": schema, "role": role, "copy_of": seen.get(digest)}
            if info["copy_of"] is None:
                seen[digest] = rel
            rows, stats = read_tile_text(text, schema, source=rel)
            info.update(stats)
            m = _REG_RE.match(path.name)
            if m:
                k, h, w, c, r = (int(g) for g in m.groups()[:5])
                geo = rows[["K", "H", "W", "C", "R"]].drop_duplicates()
                if len(geo) != 1 or tuple(geo.iloc[0]) != (k, h, w, c, r):
                    raise KbenchInputError(f"{rel}: rows do not all describe the layer its name gives")
            files.append(info)
            if role == "scratch" or info["copy_of"] is not None:
                continue
            rows = pd.concat([rows, _tile_typed(rows, schema)], axis=1)
            rows["file"], rows["role"] = rel, role
            rows["stride"] = SCHEMAS[schema]["stride"]
            frames.append(rows)
    keep = ["file", "role", "line", "after_error", "K", "H", "W", "C", "R", "stride",
            "kernel", *TILE_COLUMNS, "time_ms"]
    raw = pd.concat([f[keep] for f in frames], ignore_index=True)
    return raw, {"files": files}


def canonical_problems(geo: pd.DataFrame) -> pd.DataFrame:
    """Canonical problem columns from ``K, H, W, C, R, stride`` (H, W = output size, pad 0)."""
    n = len(geo)
    one = np.ones(n, dtype=np.int64)
    k, c = geo["K"].to_numpy(np.int64), geo["C"].to_numpy(np.int64)
    yh, yw = geo["H"].to_numpy(np.int64), geo["W"].to_numpy(np.int64)
    r, s = geo["R"].to_numpy(np.int64), geo["stride"].to_numpy(np.int64)
    df = pd.DataFrame({
        "direction": "F", "dtype": "FP32", "cast": "", "layout": "NCHW",
        "layout_x": "NCHW", "layout_w": "NCHW", "layout_y": "NCHW",
        "spatial_dims": np.full(n, 2, dtype=np.int8),
        "n": one, "c": c, "k": k, "groups": one,
        "x_d": one, "x_h": (yh - 1) * s + r, "x_w": (yw - 1) * s + r,
        "y_d": one, "y_h": yh, "y_w": yw,
        "fil_d": one, "fil_h": r, "fil_w": r,
        "pad_d": 0 * one, "pad_h": 0 * one, "pad_w": 0 * one,
        "stride_d": one, "stride_h": s, "stride_w": s,
        "dil_d": one, "dil_h": one, "dil_w": one,
        "bias": np.zeros(n, dtype=np.int8),
    }, index=geo.index)
    df.insert(0, "problem_id", to_miopen_key(df).to_numpy())
    df["geometry_id"] = geometry_ids(df)
    df["output_size_status"] = output_size_status(df)
    df["output_size_ok"] = df["output_size_status"] == "ok"
    return df[PROBLEM_COLUMNS]


# --------------------------------------------------------------------------- cuDNN reference


def read_cudnn_profile(text: str, source: str = "profile") -> dict:
    """One Nsight Compute output file: header sizes, algorithm line, total GPU time (ms).

    The time of an algorithm is the sum over its kernel launches (layout
    transforms included) of ``gpu__time_duration.sum``; ``time_ms`` is NaN when
    no kernel was profiled (cuDNN returned an error, e.g. NOT_SUPPORTED).
    """
    lines = text.splitlines()
    out: dict = {"error": next((l.strip() for l in lines if l.startswith("Error")), "")}
    for key, field in (("Input size", "input"), ("Kernel size", "kernel"), ("Output size", "output")):
        m = next((re.findall(r"\d+", l.split(":", 1)[1]) for l in lines if l.startswith(key + ":")), None)
        out[field] = tuple(int(v) for v in m) if m else None
    alg = next((l.split(":", 1)[1].strip() for l in lines if l.startswith("Algorithm:")), "")
    out["algorithm_line"] = alg
    csv_lines = [l for l in lines if l.startswith('"')]
    out["n_launches"] = 0
    out["time_ms"] = float("nan")
    if len(csv_lines) > 1:
        df = pd.read_csv(io.StringIO("\n".join(csv_lines)), thousands=",", dtype={"Metric Value": str})
        df = df[df["Metric Name"] == "gpu__time_duration.sum"]
        unknown = set(df["Metric Unit"]) - set(_NS_PER)
        if unknown:
            raise KbenchInputError(f"{source}: unknown time unit(s) {sorted(unknown)}")
        value = pd.to_numeric(df["Metric Value"].str.replace(",", "", regex=False), errors="raise")
        ms = value * df["Metric Unit"].map(_NS_PER)
        out["n_launches"] = int(df["ID"].nunique())
        out["time_ms"] = float(ms.sum())
    return out


def read_cudnn_folder(folder: Path) -> pd.DataFrame:
    """One row per (layer, algorithm) of a cuDNN profile folder."""
    if not folder.is_dir():
        raise KbenchInputError(f"{folder}: cuDNN profile folder not found.")
    recs = []
    for path in sorted(folder.glob("*.csv*")):
        m = _PROFILE_RE.match(path.name)
        if not m:
            raise KbenchInputError(f"{path}: unexpected file name (expected c<net><i>-algo<j>.csv.gz)")
        net, idx, algo = m.group(1), int(m.group(2)), int(m.group(3))
        if algo >= len(CUDNN_FWD_ALGOS):
            raise KbenchInputError(f"{path}: algorithm index {algo} outside cudnnConvolutionFwdAlgo_t")
        rec = read_cudnn_profile(_read_text(path), source=str(path))
        if rec["algorithm_line"] and rec["algorithm_line"] != CUDNN_FWD_ALGOS[algo]:
            raise KbenchInputError(f"{path}: says {rec['algorithm_line']}, file name says algo{algo}")
        rec.update(layer=f"{net}{idx}", network=NETWORKS[net], algo_index=algo,
                   algorithm=CUDNN_FWD_ALGOS[algo], file=path.name)
        recs.append(rec)
    df = pd.DataFrame(recs)
    # The sizes are printed only when the algorithm ran; take them per layer.
    sizes = df.dropna(subset=["input"]).drop_duplicates("layer").set_index("layer")[["input", "kernel", "output"]]
    missing = sorted(set(df["layer"]) - set(sizes.index))
    if missing:
        raise KbenchInputError(f"{folder}: no profile of layer(s) {missing} prints its sizes")
    return df.drop(columns=["input", "kernel", "output"]).join(sizes, on="layer")


def cudnn_layers(prof: pd.DataFrame) -> pd.DataFrame:
    """The profiled layers' geometry in canonical columns (stride from the sizes, pad 0)."""
    lay = prof.drop_duplicates("layer").reset_index(drop=True)
    inp = np.array(lay["input"].tolist())
    ker = np.array(lay["kernel"].tolist())
    outp = np.array(lay["output"].tolist())
    n, c, xh, xw = inp.T
    k, c2, r, s_ = ker.T
    n2, k2, yh, yw = outp.T
    if not ((c == c2) & (k == k2) & (n == 1) & (n2 == 1) & (r == s_) & (xh == xw) & (yh == yw)).all():
        raise KbenchInputError("cuDNN profiles: inconsistent or non-square layer sizes")
    stride = np.zeros(len(lay), dtype=np.int64)
    for st in (2, 1):  # the stride that gives the printed output size with pad 0
        stride = np.where((xh - r) // st + 1 == yh, st, stride)
    if (stride == 0).any():
        raise KbenchInputError(f"cuDNN profiles: no stride explains layer(s) {lay.loc[stride == 0, 'layer'].tolist()}")
    geo = pd.DataFrame({"K": k, "H": yh, "W": yw, "C": c, "R": r, "stride": stride})
    probs = canonical_problems(geo)
    probs["x_h"], probs["x_w"] = xh, xw  # the input cuDNN was actually given
    lay_key = to_miopen_key(probs)
    out = lay[["layer", "network"]].copy()
    for col in ("K", "H", "C", "R", "stride"):
        out[col] = geo[col].to_numpy()
    out["x_h_cudnn"] = xh
    out["reference_key"] = lay_key.to_numpy()
    return out


def reference_table(prof: pd.DataFrame, layers: pd.DataFrame, problems: pd.DataFrame) -> pd.DataFrame:
    """Best cuDNN time per benchmark layer: without FFT/Winograd (standard) and over all algorithms."""
    ran = prof[prof["time_ms"].notna() & (prof["time_ms"] > 0)]
    gemm = ~ran["algorithm"].str.contains("FFT|WINOGRAD", regex=True)
    rows = []
    for name, sub in ((REFERENCE_STANDARD, ran[gemm]), (REFERENCE_ALL, ran)):
        best = sub.sort_values(["layer", "time_ms", "algo_index"]).drop_duplicates("layer")
        rows.append(best.assign(reference=name))
    ref = pd.concat(rows, ignore_index=True)[["layer", "reference", "time_ms", "algorithm"]]
    ref = ref.merge(layers[["layer", "problem_id", "reference_key"]], on="layer", how="inner")
    ref = ref[ref["problem_id"].isin(problems["problem_id"])]
    return ref[["problem_id", "reference", "time_ms", "algorithm", "layer", "reference_key"]].sort_values(
        ["reference", "problem_id"], ignore_index=True)


# --------------------------------------------------------------------------- assembly


def _median_of_problem(df: pd.DataFrame) -> pd.Series:
    return df.groupby(["file", "K", "H", "W", "C", "R"])["time_ms"].transform("median")


def _drop_failed_launches(raw: pd.DataFrame, report: dict) -> pd.DataFrame:
    """Cleaning step 1: drop the failed launch the RS harness reports after its error line."""
    failed = raw["after_error"] == RS_FAILED_LAUNCH_LINE
    med = _median_of_problem(raw)
    kinds = raw.loc[raw["after_error"] != "", "after_error"].str.replace(r"\s*/\S+", " <path>", regex=True)
    report["rows_after_error_line_by_message"] = {str(k): int(v) for k, v in kinds.value_counts().items()}
    report["failed_launch_rows_dropped"] = int(failed.sum())
    report["failed_launch_rows_below_problem_median"] = int((raw.loc[failed, "time_ms"] < med[failed]).sum())
    others = (raw["after_error"] != "") & ~failed
    report["rows_after_other_errors_kept"] = int(others.sum())
    report["rows_after_other_errors_time_over_problem_median_quartiles"] = [
        float(q) for q in (raw.loc[others, "time_ms"] / med[others]).quantile([0.25, 0.5, 0.75])]
    return raw[~failed]


def _drop_impossible_times(raw: pd.DataFrame, spec, cfg: dict, report: dict) -> pd.DataFrame:
    """Cleaning step 2: drop times below FLOPs / peak FP32 rate (launches that did not run)."""
    flops = 2.0 * raw["K"] * raw["C"] * raw["H"] * raw["W"] * raw["R"] * raw["R"]
    floor_ms = flops / spec.peak_fp32_flops * 1e3
    below = raw["time_ms"] < floor_ms
    report["peak_fp32_flops"] = spec.peak_fp32_flops
    report["below_floor_rows_dropped"] = int(below.sum())
    report["below_floor_rows_by_file"] = {str(k): int(v) for k, v in raw.loc[below, "file"].value_counts().items()}
    report["min_time_over_floor_kept"] = float((raw["time_ms"] / floor_ms)[~below].min())
    nonpos = raw["time_ms"] <= 0
    if nonpos.any():  # cannot happen after the floor; kept as a guard
        raise KbenchInputError(f"{cfg['tiles']}: {int(nonpos.sum())} non-positive times survived cleaning")
    return raw[~below]


def _drop_layer_overlap(raw: pd.DataFrame, report: dict) -> pd.DataFrame:
    """Cleaning step 3: drop training rows of problems that are benchmark layers."""
    layer_ids = set(raw.loc[raw["role"] == "layer", "problem_id"])
    overlap = (raw["role"] != "layer") & raw["problem_id"].isin(layer_ids)
    report["overlap_problems"] = sorted(raw.loc[overlap, "problem_id"].unique().tolist())
    report["overlap_rows_dropped"] = int(overlap.sum())
    if overlap.any():
        ov = raw[overlap].groupby(["problem_id", "kernel"])["time_ms"].median().rename("train")
        la = raw[raw["role"] == "layer"].groupby(["problem_id", "kernel"])["time_ms"].median().rename("layer")
        both = pd.concat([ov, la], axis=1, join="inner")
        report["overlap_shared_configs"] = int(len(both))
        report["overlap_time_ratio_train_over_layer_median"] = (
            float((both["train"] / both["layer"]).median()) if len(both) else None)
    return raw[~overlap]


def _merge_repeats(raw: pd.DataFrame, report: dict) -> pd.DataFrame:
    """Cleaning step 4: one runtime row per (problem, kernel), the median of repeated measurements."""
    key = ["problem_id", "kernel"]
    g = raw.groupby(key, sort=False)
    rt = g[TILE_COLUMNS].first()
    rt["time_ms"] = g["time_ms"].median()
    rt["n_measurements"] = g.size().astype(np.int16)
    rt["time_spread"] = (g["time_ms"].max() / g["time_ms"].min()).astype(np.float64)
    rt = rt.reset_index()
    report["repeated_pairs_merged"] = int((rt["n_measurements"] > 1).sum())
    report["repeated_pairs_max_spread"] = float(rt["time_spread"].max())
    rt["workspace_bytes"] = np.int64(0)
    rt["algorithm"] = rt["schema"]
    rt = rt.sort_values(["problem_id", "time_ms", "kernel"], ignore_index=True)
    rt["rank"] = rt.groupby("problem_id", sort=False).cumcount().astype(np.int32)
    runtimes = rt[["problem_id", "kernel", "time_ms", "workspace_bytes", "algorithm", "rank",
                   *TILE_COLUMNS, "n_measurements", "time_spread"]]
    return runtimes


def _name_benchmark_layers(problems: pd.DataFrame, layers: pd.DataFrame, raw: pd.DataFrame,
                           report: dict) -> pd.DataFrame:
    """Give each layer problem its network and layer names from the cuDNN profiles (matched by geometry;
    ``layers`` gains its ``problem_id``), sort the problems, and count the matches into ``report``."""
    lay_geo = layers[["K", "H", "C", "R", "stride"]].rename(columns=str.lower)
    pk = problems[["problem_id", "k", "y_h", "c", "fil_h", "stride_h"]].set_axis(
        ["problem_id", "k", "h", "c", "r", "stride"], axis=1)
    match = lay_geo.assign(layer=layers["layer"], network=layers["network"]).merge(
        pk, on=["k", "h", "c", "r", "stride"], how="left")
    layers["problem_id"] = match["problem_id"].to_numpy()
    names = match.dropna(subset=["problem_id"]).groupby("problem_id").agg(
        layer=("layer", lambda s: ",".join(s)), network=("network", "first"))
    problems["network"] = names["network"].reindex(problems["problem_id"]).fillna("").to_numpy()
    problems["layer"] = names["layer"].reindex(problems["problem_id"]).fillna("").to_numpy()
    problems = problems.sort_values(["role", "problem_id"], ignore_index=True)
    tile_layers = problems[problems["role"] == "layer"]
    report["benchmark_layers"] = int(len(tile_layers))
    report["benchmark_layers_without_cudnn_profile"] = tile_layers.loc[
        tile_layers["layer"] == "", "problem_id"].tolist()
    miss = layers[~layers["problem_id"].isin(tile_layers["problem_id"])]
    report["profiled_layers"] = int(len(layers))
    report["profiled_layers_missing_tile_data"] = [
        f"{r.network} {r.layer} (K={r.K} C={r.C} {r.R}x{r.R} out {r.H}x{r.H} stride {r.stride})"
        for r in miss.itertuples()]
    rand = problems[problems["role"] == "random"]
    report["random_problems_by_stride"] = {str(k): int(v) for k, v in rand["stride_h"].value_counts().items()}
    report["layers_by_stride"] = {str(k): int(v) for k, v in tile_layers["stride_h"].value_counts().items()}
    stride2 = raw[(raw["stride"] == 2) & (raw["role"] != "layer")].drop_duplicates("problem_id")
    report["random_stride2_problems_by_file_role"] = {str(k): int(v) for k, v in stride2["role"].value_counts().items()}
    return problems


def convert_tiles(gpu: str, raw_dir: str | Path | None = None) -> tuple[dict[str, pd.DataFrame], dict]:
    """Build the tables of one tile dataset and a report of every cleaning step.

    ``raw_dir`` is the ``cnnopt`` folder or the shared data folder holding it
    (default :data:`DEFAULT_RAW_DIR`).
    """
    gpu = resolve_gpu(gpu)
    raw_dir = Path(raw_dir) if raw_dir is not None else DEFAULT_RAW_DIR
    if (raw_dir / "cnnopt").is_dir():  # the shared data folder itself was given
        raw_dir = raw_dir / "cnnopt"
    spec = GPU_SPECS[gpu]
    cfg = GPUS[gpu]
    raw, rep = read_tile_folder(raw_dir / cfg["tiles"])
    report: dict = {"gpu": gpu, "dataset": cfg["dataset"], "source_commit": SOURCE_COMMIT}
    files = pd.DataFrame(rep["files"])
    report["files"] = rep["files"]
    report["files_identical_copies_skipped"] = int(files["copy_of"].notna().sum())
    scratch = files[(files["role"] == "scratch") & files["copy_of"].isna()]
    report["scratch_files_excluded"] = scratch["file"].tolist()
    report["scratch_rows_excluded"] = int(scratch["rows"].sum())
    report["source_rows"] = int(len(raw))

    # geometry -> problem id
    geo = raw[["K", "H", "W", "C", "R", "stride"]].drop_duplicates().reset_index(drop=True)
    probs_all = canonical_problems(geo)
    geo["problem_id"] = probs_all["problem_id"].to_numpy()
    raw = raw.merge(geo, on=["K", "H", "W", "C", "R", "stride"], how="left")
    n_raw = raw.groupby("problem_id").size()

    raw = _drop_failed_launches(raw, report)

    raw = _drop_impossible_times(raw, spec, cfg, report)

    raw = _drop_layer_overlap(raw, report)

    runtimes = _merge_repeats(raw, report)

    # problems
    role = raw.groupby("problem_id")["role"].agg(lambda s: "layer" if (s == "layer").any() else "random")
    problems = probs_all[probs_all["problem_id"].isin(runtimes["problem_id"])].copy()
    problems["n_raw"] = n_raw.reindex(problems["problem_id"]).to_numpy().astype(np.int32)
    problems["n_listed"] = (runtimes.groupby("problem_id").size()
                            .reindex(problems["problem_id"]).to_numpy().astype(np.int32))
    problems["censored"] = False
    problems["role"] = role.reindex(problems["problem_id"]).to_numpy()
    # layers list every valid configuration of their schema(s); random problems a sample
    problems["complete"] = problems["role"] == "layer"
    problems["schemas"] = (runtimes.groupby("problem_id")["schema"].agg(lambda s: ",".join(sorted(s.unique())))
                           .reindex(problems["problem_id"]).to_numpy())

    # benchmark layer names from the cuDNN profiles (same layers, same geometry)
    prof = read_cudnn_folder(raw_dir / cfg["cudnn"])
    layers = cudnn_layers(prof)
    problems = _name_benchmark_layers(problems, layers, raw, report)

    # splits: the project's ``networks`` split with the benchmark layers as the network layers:
    # test = layers, train/valid = random problems by the grouped stable hash of kbench.splits
    splits = pd.DataFrame({
        "problem_id": problems["problem_id"],
        SPLIT_NAME: assign_networks_split(problems, problems[problems["role"] == "layer"]).to_numpy(),
    })

    kernels = kernel_table(runtimes)
    references = reference_table(prof, layers, problems)
    report["references"] = {str(k): int(v) for k, v in references["reference"].value_counts().items()}
    ran = prof["time_ms"].notna() & (prof["time_ms"] > 0)
    report["cudnn_layers_per_algorithm_that_ran"] = {
        a: int(ran[prof["algorithm"] == a].sum()) for a in CUDNN_FWD_ALGOS}
    report["problems"] = int(len(problems))
    report["runtime_entries"] = int(len(runtimes))
    report["kernels"] = int(len(kernels))
    report["kernels_by_schema"] = {str(k): int(v) for k, v in kernels["algorithm"].value_counts().items()}
    report["split_counts"] = {str(k): int(v) for k, v in splits[SPLIT_NAME].value_counts().items()}
    report["output_size_status"] = {str(k): int(v) for k, v in problems["output_size_status"].value_counts().items()}
    tables = {"problems": problems, "runtimes": runtimes, "kernels": kernels,
              "splits": splits, "references": references}
    return tables, report


def kernel_table(runtimes: pd.DataFrame) -> pd.DataFrame:
    """The kernel vocabulary with its typed tile columns."""
    g = runtimes.groupby("kernel")
    table = g[TILE_COLUMNS].first()
    table["family"] = "direct"
    table["algorithm"] = table["schema"]
    table["directions"] = "F"
    table["n_problems"] = g.size()
    table["n_best"] = runtimes[runtimes["rank"] == 0].groupby("kernel").size().reindex(table.index, fill_value=0)
    table = table.reset_index()
    return table[["kernel", "family", "algorithm", "directions", "n_problems", "n_best", *TILE_COLUMNS]]


def build_tiles_dataset(gpu: str, raw_dir: str | Path | None = None) -> dict[str, pd.DataFrame]:
    """The tables of ``v100-tiles`` (``gpu="v100"``) or ``rtx2080ti-tiles`` (``"rtx2080ti"``).

    Keys: ``problems``, ``runtimes``, ``kernels``, ``splits``, ``references``.
    """
    return convert_tiles(gpu, raw_dir)[0]


CENSORING_TEXT = (
    "Benchmark layers (split test) list every valid configuration of the kernel schema(s) measured for "
    "the layer (complete = True). Random-size problems list a sample of configurations (complete = False): "
    "an unlisted configuration was not measured, nothing is known about its speed. No list is cut by "
    "speed (censored = False everywhere).")


def dataset_spec(gpu: str) -> dict:
    """The fields of a tile dataset's :class:`kbench.registry.DatasetSpec` (the registry registers it)."""
    gpu = resolve_gpu(gpu)
    spec = GPU_SPECS[gpu]
    return dict(
        name=GPUS[gpu]["dataset"], device=spec.name, arch={"v100": "sm_70", "rtx2080ti": "sm_75"}[gpu],
        vendor="NVIDIA", library="hand-written CUDA kernels (PACT 2022)", task="tile-selection",
        license="none stated (cite the paper)",
        raw_file=f"cnnopt/{GPUS[gpu]['tiles']}",
        source={"repository": f"https://{SOURCE_REPO}", "commit": SOURCE_COMMIT,
                "folder": f"{GPUS[gpu]['tiles']}/, {GPUS[gpu]['cudnn']}/", "license": "none stated"},
        citation=CITATION, default_split=SPLIT_NAME,
    )


def dataset_info(gpu: str, report: dict, splits: pd.DataFrame) -> dict:
    """Manifest information of a tile dataset, with the keys of :func:`kbench.build.spec_info`."""
    from kbench.dataset_files import DATASET_VERSION, split_sizes

    spec = dataset_spec(gpu)
    cleaning = {k: v for k, v in report.items() if k != "files"}
    return {
        "name": spec["name"], "aliases": [], "version": DATASET_VERSION,
        "device": spec["device"], "arch": spec["arch"], "vendor": spec["vendor"], "library": spec["library"],
        "task": spec["task"], "license": spec["license"], "source": spec["source"], "citation": spec["citation"],
        "censoring": {"rule": "complete-layers-sampled-random", "text": CENSORING_TEXT},
        "default_split": spec["default_split"], "cleaning": cleaning, "splits": split_sizes(splits),
        "references": {REFERENCE_STANDARD: "best cuDNN 8.2 legacy algorithm excluding FFT and Winograd",
                       REFERENCE_ALL: "best cuDNN 8.2 legacy algorithm of all eight"},
        "gpu_spec": GPU_SPECS[resolve_gpu(gpu)].as_dict(),
    }


def write_tiles_dataset(gpu: str, out_dir: str | Path, raw_dir: str | Path | None = None) -> dict:
    """Convert and write one tile dataset with :func:`kbench.dataset_files.write_dataset`; returns the manifest."""
    from kbench.dataset_files import write_dataset

    tables, report = convert_tiles(gpu, raw_dir)
    return write_dataset(out_dir, tables, dataset_info(gpu, report, tables["splits"]))


# --------------------------------------------------------------------------- data card


def _fmt(x: float, digits: int = 4) -> str:
    return f"{x:.{digits}g}"


def _schema_section(pr: pd.DataFrame, split: pd.Series) -> list[str]:
    """Data-card lines: problems per split part by the kernel schemas they list, and how the paper
    compared schemas."""
    part = split.reindex(pr["problem_id"]).to_numpy()
    combos = sorted(pr["schemas"].astype(str).unique(), key=lambda c: (c.count(","), c))
    parts = [q for q in ("train", "valid", "test") if (part == q).any()]
    tab = pd.crosstab(pd.Series(part, name="part"), pd.Series(pr["schemas"].astype(str).to_numpy(), name="s"))
    multi = {q: int(tab.loc[q, [c for c in combos if "," in c]].sum()) if q in tab.index else 0 for q in parts}
    n = {q: int((part == q).sum()) for q in parts}
    return [
        "### Kernel schemas per problem",
        "",
        "| part | " + " | ".join(combos) + " |",
        "|---|" + "---|" * len(combos),
        *[f"| {q} | " + " | ".join(str(int(tab.loc[q, c])) if c in tab.columns else "0" for c in combos) + " |"
          for q in parts],
        "",
        "A problem's candidates are the configurations of every schema it lists, and LoP is measured against",
        "the fastest of them all. The random-size problems were timed one schema at a time. Problems that",
        "list more than one schema: "
        + ", ".join(f"{q} {multi[q]} of {n[q]}" for q in parts) + ".",
        "A model trained on this split has (almost) never seen two schemas timed on one problem, and valid",
        "cannot check how it ranks one schema against another.",
        "The paper's LoP evaluation does not rank the schemas against each other: its artifact trains one",
        "model per schema (`RS3_buildML`, `S3_buildML`, `St2_buildML`) and, on a layer listed with both RS and S,",
        "scores LoP@N on the top N/2 of each schema's ranking against the faster schema's best",
        "(`lop-*/create_hfhf.py`, `ml_hybrid_half_half` and `pure_dv_half_half` in `res_processing.py`; N = 30).",
        "kbench keeps one ranking over all of a layer's configurations; a ranking that gives each schema its",
        "share of the top N, as `hybrid-rf`, `ml-rf` and `analytical` do by default",
        "(`cross_schema=\"interleave\"`), is one way to submit the paper's protocol.",
        "",
    ]


def _layer_rows(lay: pd.DataFrame, best: pd.DataFrame, std: pd.DataFrame) -> list[str]:
    """Data-card table rows of the benchmark layers: best configuration against the cuDNN reference."""
    rows = []
    for p in lay.sort_values(["network", "layer"]).itertuples():
        b = best.loc[p.problem_id]
        r = std.loc[p.problem_id] if p.problem_id in std.index else None
        speed = f"{r.time_ms / b.time_ms:.2f}x" if r is not None else "n/a"
        rows.append(f"| {p.network} | {p.layer} | `{p.problem_id}` | {p.schemas} | {p.n_listed} | "
                    f"{_fmt(b.time_ms)} | `{b.kernel}` | "
                    + (f"{_fmt(r.time_ms)} ({r.algorithm.replace('CUDNN_CONVOLUTION_FWD_ALGO_', '')})"
                       if r is not None else "n/a") + f" | {speed} |")
    return rows


def _data_quality_lines(report: dict, spec) -> list[str]:
    """Data-card sections: missing data, training/test overlap, cleaning."""
    lines: list[str] = []
    miss = report["profiled_layers_missing_tile_data"]
    s2 = report.get("random_stride2_problems_by_file_role", {})
    lines += [
        "## Missing data",
        "",
        f"- cuDNN was profiled on {report['profiled_layers']} layers; {len(miss)} of them have no tile timings "
        f"in the source: {'; '.join(miss) if miss else 'none'}.",
        "- The stride-2 training set (`train_set_c_rskernel_stride2.csv`, named by the paper's driver) is not in",
        f"  the source. The only random-size stride-2 problems are "
        f"{sum(s2.values())} from the held-out file ({', '.join(f'{k}: {v}' for k, v in s2.items()) or 'none'}),",
        f"  so the {report['layers_by_stride'].get('2', 0)} stride-2 layers have almost no training data of",
        "  their schema.",
        "- Excluded scratch files (`*_test.csv`, byte-identical in the V100 and RTX 2080 Ti folders, so not",
        f"  measurements of both GPUs): {len(report['scratch_files_excluded'])} files, "
        f"{report['scratch_rows_excluded']} rows.",
        "",
        "## Training/test overlap",
        "",
        f"{len(report['overlap_problems'])} random-size problem(s) equal a benchmark layer: "
        + (", ".join(f"`{p}`" for p in report["overlap_problems"]) or "none") + ".",
    ]
    if report["overlap_problems"]:
        lines += [
            f"Their {report['overlap_rows_dropped']} training rows were removed (the layer keeps its complete list);",
            f"median time ratio training / layer over the {report.get('overlap_shared_configs', 0)} shared "
            f"configurations: {_fmt(report.get('overlap_time_ratio_train_over_layer_median') or float('nan'))}.",
        ]
    msgs = report["rows_after_error_line_by_message"]
    lines += [
        "",
        "## Cleaning",
        "",
        f"- Source rows read: {report['source_rows']} ({report['files_identical_copies_skipped']} byte-identical",
        "  copies of a file in another folder read once).",
        f"- Rows right after an error line: {', '.join(f'{v} after `{k}`' for k, v in msgs.items()) or 'none'}.",
        f"  The RS harness prints `{RS_FAILED_LAUNCH_LINE}` and then the failed configuration's row:",
        f"  {report['failed_launch_rows_dropped']} such rows dropped "
        f"({report['failed_launch_rows_below_problem_median']} of them below their problem's median time).",
        f"  After the other harnesses' errors the next row is a different, valid configuration: "
        f"{report['rows_after_other_errors_kept']} kept.",
        f"- Times below FLOPs / peak FP32 rate ({_fmt(spec.peak_fp32_flops / 1e12)} TFLOP/s) are launches that",
        f"  did not run: {report['below_floor_rows_dropped']} dropped"
        + (f" ({', '.join(f'{k}: {v}' for k, v in report['below_floor_rows_by_file'].items())})"
           if report["below_floor_rows_by_file"] else "")
        + f"; the fastest kept row runs at {_fmt(1 / report['min_time_over_floor_kept'], 3)} of peak.",
        f"- Repeated measurements of one (problem, kernel): {report['repeated_pairs_merged']} pairs merged",
        f"  (median time; largest max/min spread {_fmt(report['repeated_pairs_max_spread'], 3)}).",
        "",
    ]
    return lines


def _reference_lines(report: dict, diff: pd.DataFrame, n_any_better: int, n_layers: int) -> list[str]:
    """Data-card section: the cuDNN reference times."""
    return [
        "## Reference times (cuDNN 8.2)",
        "",
        "Nsight Compute output of cuDNN's legacy forward algorithms on each layer, same padding-free",
        "geometry; an algorithm's time is the sum of its kernel launches (layout transforms included).",
        f"Reference `{REFERENCE_STANDARD}` (the standard one) takes the best of IMPLICIT_GEMM,",
        "IMPLICIT_PRECOMP_GEMM, GEMM and DIRECT, excluding FFT, FFT_TILING, WINOGRAD and WINOGRAD_NONFUSED",
        "as the paper did (they do less arithmetic than the direct convolution all candidates compute);",
        f"`{REFERENCE_ALL}` takes the best of all eight. Layers (of {report['profiled_layers']}) on which each",
        "algorithm ran: "
        + ", ".join(f"{k.replace('CUDNN_CONVOLUTION_FWD_ALGO_', '')} {v}"
                    for k, v in report["cudnn_layers_per_algorithm_that_ran"].items()) + ".",
        f"On {len(diff)} layer(s) cuDNN was given a larger input than the kernels read"
        + (f" (e.g. {diff.iloc[0]['layer']}: input {int(diff.iloc[0]['x_ref'])} vs {int(diff.iloc[0]['x_h'])})"
           if len(diff) else "")
        + ": same output and arithmetic, the extra rows and columns are never read; `reference_key` keeps",
        "the geometry cuDNN ran.",
        f"Best-any beats the standard reference on {n_any_better}"
        f" of {n_layers} layers.",
        "",
    ]


def _device_lines(spec) -> list[str]:
    """Data-card section: the GPU's published figures."""
    return [
        "## Device",
        "",
        f"{spec.name}: {spec.sm_count} SMs, {spec.max_warps_per_sm} warps/SM, {spec.max_blocks_per_sm} blocks/SM,",
        f"{spec.registers_per_sm} registers/SM, {spec.shared_memory_per_sm_bytes // 1024} KB shared memory/SM,",
        f"{spec.dram_bandwidth_gbs:g} GB/s DRAM, boost clock {spec.boost_clock_mhz:g} MHz. Sources:",
        *[f"- {s}" for s in spec.sources],
        "",
    ]


def _intro_lines(gpu: str, spec) -> list[str]:
    """Data-card title, what the dataset is, and its source (paper, artifact commit, license)."""
    return [
        f"# {GPUS[gpu]['dataset']}",
        "",
        f"Tile-size selection on the {spec.name}: for each convolution problem, every measured tile",
        "configuration of hand-written CUDA direct-convolution kernels and its time. Generated by",
        "`kbench.sources.cnnopt.render_data_card` from the converted tables: do not edit by hand.",
        "",
        "## Source",
        "",
        f"- Paper: {CITATION}",
        f"- Data: the paper's artifact, {SOURCE_REPO}, commit `{SOURCE_COMMIT}` "
        f"(folders `{GPUS[gpu]['tiles']}/` and `{GPUS[gpu]['cudnn']}/`).",
        "- License: **none stated** by the source repository. Cite the paper when you use or redistribute the data.",
        "",
    ]


def _problem_lines(pr: pd.DataFrame, rt: pd.DataFrame, kn: pd.DataFrame, report: dict) -> list[str]:
    """Data-card section: what a problem and a candidate are, with the counts of each kind."""
    lay = pr[pr["role"] == "layer"]
    rnd = pr[pr["role"] == "random"]
    # an example layer whose padding-free input is larger than its output ("same" padding)
    same = lay[(lay["stride_h"] == 1) & (lay["fil_h"] > 1)].sort_values(["network", "layer"])
    ex = next(same.itertuples(), None)
    sched = rnd["n_listed"]
    by_schema = rt.groupby("schema")["problem_id"].nunique()
    kschema = kn["schema"].value_counts()
    return [
        "## What a problem and a candidate are",
        "",
        "- A problem is one forward convolution, batch 1, NCHW, FP32: output channels K, input channels C,",
        "  output size H x W, filter R x R, stride. The kernels read an input that is already padded",
        "  (the kernel templates say so and run with padding 0), and the cuDNN reference was run the same way,",
        "  so `problem_id` is the MIOpen key of the padding-free convolution that was measured:",
        "  pad 0 and input size (y-1)*stride + R. A stride-1 network layer with \"same\" padding p therefore",
        "  appears with input size = its input + 2p"
        + (f" (e.g. {ex.network} {ex.layer}: `{ex.problem_id}`)." if ex is not None else "."),
        f"  All {len(pr)} problems satisfy the output-size rule "
        f"({', '.join(f'{k}: {v}' for k, v in report['output_size_status'].items())}).",
        "- A candidate (`kernel`) is a kernel schema plus a tile configuration; the id keeps the source's",
        "  column names (`RS_TK2_TH7_TW7_BK32_BH4_BW1_CM8`). Schemas: `RS` (register-tiled kernel,",
        "  stride 1), `RS2` (its stride-2 variant), `S` (shared-memory kernel, stride 1).",
        "  Typed columns with one meaning for every schema: `tile_k/h/w` outputs per thread,",
        "  `warp_k/h/w` threads per warp, `block_k/h/w` warps per block, `c_split` blocks sharing one output",
        "  tile over input channels. RS kernels: a warp is 32 threads along K (source `BK`).",
        f"- Candidates: {len(kn)} distinct ({', '.join(f'{k}: {v}' for k, v in kschema.items())});",
        f"  {len(rt)} runtime entries; problems with each schema: "
        f"{', '.join(f'{k}: {v}' for k, v in by_schema.items())}.",
        f"- Benchmark layers ({len(lay)}): every valid configuration of the schema(s) measured for the layer",
        f"  (`complete` = True; {int((lay['schemas'] == 'RS,S').sum())} layers have both RS and S",
        f"  configurations), {int(lay['n_listed'].min())} to {int(lay['n_listed'].max())} candidates per layer.",
        f"- Random-size problems ({len(rnd)}): a *sample* of configurations each (`complete` = False;",
        f"  {int(sched.min())} to {int(sched.max())} candidates, median {int(sched.median())}). `censored` is False",
        "  everywhere: no list is cut by speed.",
        "",
    ]


def _split_lines(split: pd.Series) -> list[str]:
    """Data-card section: the paper's split and the size of each part."""
    counts = split.value_counts()
    return [
        "## Splits",
        "",
        f"Split `{SPLIT_NAME}` is the paper's: `test` = the benchmark layers ({counts.get('test', 0)}),",
        f"`train` ({counts.get('train', 0)}) and `valid` ({counts.get('valid', 0)}) = the random-size problems,",
        "valid chosen by the stable geometry hash of `kbench.splits.assign_networks_split` (the AMD datasets'",
        "`networks` split, with the benchmark layers as the network layers).",
        "The random-size problems come from the paper's training files (`train_set_*`) and from its",
        "held-out files (`test_set_*`, random sizes the paper used to pick a random seed).",
        "",
    ]


def _benchmark_layer_lines(lay: pd.DataFrame, rt: pd.DataFrame, std: pd.DataFrame) -> list[str]:
    """Data-card section: the benchmark layers' table and the oracle's speed-up over cuDNN."""
    best = rt[rt["rank"] == 0].set_index("problem_id")
    speedups = (std["time_ms"] / best["time_ms"].reindex(std.index)).dropna()
    lines = [
        "## Benchmark layers",
        "",
        "Layer names are those of the cuDNN profile files (`cres3` -> res3). cuDNN: best of the algorithms",
        "without FFT and Winograd (the standard reference). Oracle speed-up = cuDNN time / best measured",
        "configuration.",
        "",
        "| network | layer | problem_id | schemas | candidates | best ms | best kernel "
        "| cuDNN ms (algorithm) | oracle speed-up |",
        "|---|---|---|---|---|---|---|---|---|",
        *_layer_rows(lay, best, std),
        "",
    ]
    if len(speedups):
        lines += [f"Oracle speed-up over cuDNN: geometric mean {float(np.exp(np.log(speedups).mean())):.2f}x, "
                  f"{int((speedups > 1).sum())} of {len(speedups)} layers faster than cuDNN.", ""]
    return lines


def _reference_input_mismatches(pr: pd.DataFrame, std: pd.DataFrame) -> pd.DataFrame:
    """Reference rows whose cuDNN run read another input size (``x_ref``) than the kernels (``x_h``), by layer."""
    refx = std.reset_index()
    refx["x_ref"] = parse_miopen_keys(refx["reference_key"])["x_h"].to_numpy()
    refx["x_h"] = pr.set_index("problem_id")["x_h"].reindex(refx["problem_id"]).to_numpy()
    return refx[refx["x_ref"] != refx["x_h"]].sort_values("layer")


def render_data_card(gpu: str, tables: dict[str, pd.DataFrame], report: dict) -> str:
    """The data card of a tile dataset, every number computed from the tables and the report."""
    gpu = resolve_gpu(gpu)
    spec = GPU_SPECS[gpu]
    pr, rt, kn, sp, ref = (tables[k] for k in ("problems", "runtimes", "kernels", "splits", "references"))
    split = sp.set_index("problem_id")[SPLIT_NAME]
    std = ref[ref["reference"] == REFERENCE_STANDARD].set_index("problem_id")
    anyref = ref[ref["reference"] == REFERENCE_ALL].set_index("problem_id")
    n_any_better = int((anyref["time_ms"] < std["time_ms"].reindex(anyref.index)).sum())
    lines = [
        *_intro_lines(gpu, spec),
        *_problem_lines(pr, rt, kn, report),
        *_split_lines(split),
        *_schema_section(pr, split),
        *_benchmark_layer_lines(pr[pr["role"] == "layer"], rt, std),
        *_data_quality_lines(report, spec),
        *_reference_lines(report, _reference_input_mismatches(pr, std), n_any_better, len(anyref)),
        *_device_lines(spec),
    ]
    return "\n".join(lines)


def write_data_card(gpu: str, path: str | Path | None = None, raw_dir: str | Path | None = None) -> Path:
    """Convert and write ``data_cards/<dataset>.md`` (or ``path``)."""
    gpu = resolve_gpu(gpu)
    tables, report = convert_tiles(gpu, raw_dir)
    path = Path(path) if path is not None else (
        REPO_ROOT / "data_cards" / f"{GPUS[gpu]['dataset']}.md")
    path.write_text(render_data_card(gpu, tables, report), encoding="utf-8")
    return path
