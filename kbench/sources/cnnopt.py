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
that convolution (:func:`kbench.sources.problem.to_miopen_key`).

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

from kbench.core.errors import KbenchInputError, suggest
from kbench.sources.cnnopt_features import GPU_SPECS
from kbench.sources.dataset_files import DATASET_VERSION, REPO_ROOT, split_sizes, write_dataset
from kbench.sources.problem import PROBLEM_COLUMNS, geometry_ids, output_size_status, to_miopen_key
from kbench.sources.splits import assign_networks_split

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
#: :func:`kbench.sources.splits.assign_networks_split` like the AMD datasets' ``networks`` split.
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
    out: dict = {"error": next((line.strip() for line in lines if line.startswith("Error")), "")}
    for key, field in (("Input size", "input"), ("Kernel size", "kernel"), ("Output size", "output")):
        m = next((re.findall(r"\d+", line.split(":", 1)[1]) for line in lines if line.startswith(key + ":")), None)
        out[field] = tuple(int(v) for v in m) if m else None
    alg = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("Algorithm:")), "")
    out["algorithm_line"] = alg
    csv_lines = [line for line in lines if line.startswith('"')]
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
    # test = layers, train/valid = random problems by the grouped stable hash of kbench.sources.splits
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
    """The fields of a tile dataset's :class:`kbench.data.registry.DatasetSpec` (the registry registers it)."""
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
    """Manifest information of a tile dataset, with the keys of :func:`kbench.data.build.spec_info`."""

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
    """Convert and write one tile dataset with :func:`kbench.sources.dataset_files.write_dataset`; returns the manifest."""

    tables, report = convert_tiles(gpu, raw_dir)
    return write_dataset(out_dir, tables, dataset_info(gpu, report, tables["splits"]))
