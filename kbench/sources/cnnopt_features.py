"""Analytic model of the tiled direct-convolution kernels of the tile-size datasets.

The ``v100-tiles`` and ``rtx2080ti-tiles`` datasets (:mod:`kbench.sources.cnnopt`)
time every valid tile configuration of the hand-written CUDA kernels of
Xu, Yuan, Barton, Li, Sadayappan and Sukumaran-Rajam, "Effective Performance
Modeling and Domain-Specific Compiler Optimization of CNNs for GPUs", PACT 2022
(artifact: github.com/HPCRL/AE-PACT). Their hybrid model feeds a random forest
with the problem sizes, the tile sizes and *analytic* features of the kernel;
this module computes those analytic features, vectorised over any number of
(problem, configuration) rows.

How the kernels map tiles to threads (facts read from the artifact's kernel
templates ``Kernel/RSkernel/*/template_*.code`` and ``Kernel/SKernel/template.code``
and their generators ``calcAndExecuteCSG.py`` / ``tune.py``; the code here is our own):

* Every thread accumulates a ``tile_k x tile_h x tile_w`` block of outputs in
  registers. A warp is ``warp_k x warp_h x warp_w`` threads (32 in all) and a
  thread block is ``block_k x block_h x block_w`` warps, so a block computes a
  ``(tile*warp*block)_k x _h x _w`` output tile. ``c_split`` blocks share one
  output tile, each summing ``C / c_split`` input channels (atomic adds).
* ``RS`` kernel (and ``RS2``, its stride-2 variant): the 32 threads of a warp run
  along K (``warp = 32 x 1 x 1``, the source's ``BK = 32``), the warps of a
  block tile H x W (``block = 1 x BH x BW``). Per input channel the block stages
  its input window in shared memory; each thread copies its
  ``((th-1)s+R) x ((tw-1)s+S)`` input patch to registers and reads its weights
  straight from global memory (layout C,R,S,K: the 32 lanes read 32 consecutive
  k). The output leaves through a shared buffer ``OH x OW x (32+1)`` words.
* ``S`` kernel: a warp is ``1 x WW x WK`` threads (``WW * WK = 32``), a block
  ``BK x BH x BW`` warps; the block's output tile spans the full output width.
  Input window and weights are double-buffered in shared memory
  (``2 x IH x IW`` and ``2 x R x S x OK`` words); a thread keeps one input row
  segment ``(tw-1)s+S`` and two weights in registers; the output leaves through
  a ``(WK*BK) x OH x OW`` shared buffer.
* The kernels read a pre-padded input (no padding inside the kernel): input
  window of an ``OH x OW`` output tile is ``((OH-1)s+R) x ((OW-1)s+S)``.

Registers per thread follow the generators' own estimate (accumulators + input
registers + a few): the generators pass it to ``-maxrregcount``. Shared memory is
what the templates declare. Data movement is counted in bytes:

* global level, in 32-byte sectors (the unit global memory is served in on
  compute capability 6.x and later, CUDA C++ Best Practices Guide, "Coalesced
  Access to Global Memory"): a contiguous run of ``n`` words costs
  ``ceil(n/8)`` sectors; a tile that spans the full row width is one run.
  ``g2s_input`` (input window to shared), ``g2s_weight`` (S kernel: weights to
  shared), ``g2r_weight`` (RS kernel: weights to registers, one 128-byte
  request per warp load), ``s2g_output`` (results back to global).
* shared level, in warp-wide requests of 128 bytes (32 banks x 4 bytes, the
  shared-memory width per SM per clock): ``s2r_input``, ``s2r_weight`` (S),
  ``r2s_output``.

Occupancy is the CUDA occupancy rule with the register-file, shared-memory,
warp and thread-block limits of the SM; ``waves`` is the number of rounds of
resident blocks needed to run all blocks on all SMs (tail effect);
``analytical_time_s`` is the paper's bandwidth-scaled data movement: the max of
global-level bytes over DRAM bandwidth and shared-level bytes over shared-memory
bandwidth.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from kbench.core.errors import KbenchInputError, suggest

#: Threads in a warp (all NVIDIA GPUs).
WARP_SIZE = 32
#: Bytes in a global-memory sector (compute capability >= 6.0).
SECTOR_BYTES = 32
#: Shared memory: 32 banks, 4 bytes each, per SM per clock (CUDA C++ Programming
#: Guide, "Shared Memory" for compute capability 5.x and later).
SHARED_BANKS = 32
BANK_BYTES = 4
WORD_BYTES = 4  # FP32


@dataclass(frozen=True)
class GpuSpec:
    """Published per-GPU numbers the analytic model needs (see :data:`GPU_SPECS`)."""

    name: str
    sm_count: int
    fp32_cores: int
    boost_clock_mhz: float
    max_warps_per_sm: int
    max_blocks_per_sm: int
    registers_per_sm: int
    shared_memory_per_sm_bytes: int
    dram_bandwidth_gbs: float
    sources: tuple[str, ...]

    @property
    def peak_fp32_flops(self) -> float:
        """2 FLOPs (one FMA) per FP32 core per clock at the boost clock."""
        return 2.0 * self.fp32_cores * self.boost_clock_mhz * 1e6

    @property
    def shared_bandwidth_bytes_s(self) -> float:
        """All SMs, one 32-bank x 4-byte shared-memory access per clock."""
        return self.sm_count * SHARED_BANKS * BANK_BYTES * self.boost_clock_mhz * 1e6

    @property
    def dram_bandwidth_bytes_s(self) -> float:
        return self.dram_bandwidth_gbs * 1e9

    def as_dict(self) -> dict:
        d = asdict(self)
        d["peak_fp32_flops"] = self.peak_fp32_flops
        d["shared_bandwidth_bytes_s"] = self.shared_bandwidth_bytes_s
        return d


_VOLTA_WP = ("NVIDIA, 'NVIDIA Tesla V100 GPU Architecture' whitepaper, WP-08608-001_v1.1 (2017), "
             "Table 1 (Tesla V100 SXM2: 80 SMs, 5120 FP32 cores, GPU Boost 1530 MHz, 64 max warps/SM, "
             "32 max thread blocks/SM, 256 KB register file/SM, shared memory configurable up to "
             "96 KB/SM) and text (HBM2, 900 GB/s peak bandwidth)")
_VOLTA_TG = ("NVIDIA, 'Volta Tuning Guide' (CUDA Toolkit documentation, DA-08647-001), section "
             "'Occupancy': 64 concurrent warps/SM, 64K 32-bit registers/SM, 255 registers/thread, "
             "32 thread blocks/SM, 96 KB shared memory/SM")
_TURING_WP = ("NVIDIA, 'NVIDIA Turing GPU Architecture' whitepaper, WP-09183-001_v01 (2018), "
              "GeForce RTX 2080 Ti specifications (reference board): 68 SMs, 4352 CUDA cores, "
              "GPU Boost 1545 MHz, 352-bit GDDR6 at 14 Gbps = 616 GB/s, 256 KB register file/SM")
_TURING_TG = ("NVIDIA, 'Turing Tuning Guide' (CUDA Toolkit documentation, DA-09073-001), section "
              "'Occupancy': 32 concurrent warps/SM, 64K 32-bit registers/SM, 255 registers/thread, "
              "16 thread blocks/SM, 64 KB shared memory/SM")

#: Per-GPU specifications, from NVIDIA's published documents (cited in ``sources``).
#: The V100 numbers are the SXM2 part (the whitepaper's Tesla V100 column; the
#: PCIe card has the same SM resources at a lower clock): using its higher
#: clock keeps :func:`kbench.sources.cnnopt`'s peak-throughput floor conservative.
GPU_SPECS: dict[str, GpuSpec] = {
    "v100": GpuSpec(
        name="NVIDIA Tesla V100", sm_count=80, fp32_cores=5120, boost_clock_mhz=1530.0,
        max_warps_per_sm=64, max_blocks_per_sm=32, registers_per_sm=65536,
        shared_memory_per_sm_bytes=96 * 1024, dram_bandwidth_gbs=900.0,
        sources=(_VOLTA_WP, _VOLTA_TG),
    ),
    "rtx2080ti": GpuSpec(
        name="NVIDIA GeForce RTX 2080 Ti", sm_count=68, fp32_cores=4352, boost_clock_mhz=1545.0,
        max_warps_per_sm=32, max_blocks_per_sm=16, registers_per_sm=65536,
        shared_memory_per_sm_bytes=64 * 1024, dram_bandwidth_gbs=616.0,
        sources=(_TURING_WP, _TURING_TG),
    ),
}

#: Tile columns every row needs (the typed columns of the tile datasets' runtimes).
TILE_COLUMNS = ["schema", "tile_k", "tile_h", "tile_w", "warp_k", "warp_h", "warp_w",
                "block_k", "block_h", "block_w", "c_split"]
#: Problem columns every row needs (canonical problem columns).
PROBLEM_FEATURE_COLUMNS = ["k", "c", "y_h", "y_w", "fil_h", "fil_w", "stride_h", "stride_w"]
#: Kernel schemas the model knows.
SCHEMAS = ("RS", "RS2", "S")

#: The analytic feature columns :func:`kernel_model` returns, in order.
FEATURE_COLUMNS = [
    "flops", "block_out_k", "block_out_h", "block_out_w", "in_tile_h", "in_tile_w",
    "threads_per_block", "warps_per_block", "n_blocks",
    "regs_per_thread", "regs_per_block", "smem_bytes_per_block",
    "blocks_per_sm_warps", "blocks_per_sm_smem", "blocks_per_sm_regs", "blocks_per_sm",
    "occupancy", "waves", "wave_efficiency",
    "g2s_input_bytes", "g2s_weight_bytes", "g2r_weight_bytes", "s2g_output_bytes",
    "s2r_input_bytes", "s2r_weight_bytes", "r2s_output_bytes",
    "global_bytes", "shared_bytes", "global_time_s", "shared_time_s", "analytical_time_s",
]


def get_spec(gpu: str) -> GpuSpec:
    try:
        return GPU_SPECS[gpu]
    except KeyError:
        raise KbenchInputError(
            f"unknown GPU {gpu!r}; known: {', '.join(GPU_SPECS)}.{suggest(gpu, GPU_SPECS)}"
        ) from None


#: Named int64 or float64 arrays, one value per row of the model's input.
_Arrays = dict[str, np.ndarray]


def _ceil_div(a, b):
    return -(-a // b)


def _sectors(runs, run_words):
    """32-byte sectors to move ``runs`` contiguous runs of ``run_words`` 4-byte words each."""
    return runs * _ceil_div(run_words * WORD_BYTES, SECTOR_BYTES)


def kernel_model(df: pd.DataFrame, gpu: str | GpuSpec) -> pd.DataFrame:
    """Analytic features of each (problem, tile configuration) row of ``df``.

    ``df`` needs :data:`PROBLEM_FEATURE_COLUMNS` (canonical problem columns; ``y``
    is the output size) and :data:`TILE_COLUMNS`. Returns a frame with
    :data:`FEATURE_COLUMNS` on ``df``'s index. Fully vectorised.
    """
    spec = gpu if isinstance(gpu, GpuSpec) else get_spec(gpu)
    cols, is_s = _model_inputs(df)
    # each step adds its features to `out`; later steps read the earlier ones
    out = _block_geometry(cols)
    out.update(_block_resources(cols, is_s, out))
    out.update(_occupancy(spec, out))
    out.update(_global_traffic(cols, is_s, out))
    out.update(_shared_traffic(cols, is_s, out))
    out.update(_bandwidth_times(spec, out))
    return _typed_features(out, df.index)


def _model_inputs(df: pd.DataFrame) -> tuple[_Arrays, np.ndarray]:
    """The problem and tile columns of ``df`` as int64 arrays, and which rows are ``S``-kernel rows."""
    missing = [c for c in PROBLEM_FEATURE_COLUMNS + TILE_COLUMNS if c not in df.columns]
    if missing:
        raise KbenchInputError(f"kernel_model: missing columns {missing}")
    schema = df["schema"].astype(str).to_numpy()
    unknown = sorted(set(schema) - set(SCHEMAS))
    if unknown:
        raise KbenchInputError(f"kernel_model: unknown kernel schema(s) {unknown}; known: {SCHEMAS}")
    cols = {c: df[c].to_numpy(dtype=np.int64) for c in PROBLEM_FEATURE_COLUMNS + TILE_COLUMNS[1:]}
    return cols, schema == "S"


def _channels_per_block(cols: _Arrays) -> np.ndarray:
    """Input channels each block sums over (``c_split`` blocks share one output tile)."""
    return _ceil_div(cols["c"], cols["c_split"])


def _thread_patch(cols: _Arrays) -> tuple[np.ndarray, np.ndarray]:
    """Height and width of the input patch behind one thread's ``tile_h x tile_w`` outputs."""
    R, S, sh, sw = cols["fil_h"], cols["fil_w"], cols["stride_h"], cols["stride_w"]
    return (cols["tile_h"] - 1) * sh + R, (cols["tile_w"] - 1) * sw + S


def _block_geometry(cols: _Arrays) -> _Arrays:
    """FLOPs, a block's output tile and input window, threads and warps per block, and blocks in all."""
    K, C, H, W = cols["k"], cols["c"], cols["y_h"], cols["y_w"]
    R, S, sh, sw = cols["fil_h"], cols["fil_w"], cols["stride_h"], cols["stride_w"]
    tk, th, tw = cols["tile_k"], cols["tile_h"], cols["tile_w"]
    wk, wh, ww = cols["warp_k"], cols["warp_h"], cols["warp_w"]
    bk, bh, bw = cols["block_k"], cols["block_h"], cols["block_w"]

    out = {}
    out["flops"] = 2.0 * K * C * H * W * R * S
    ok_, oh, ow = tk * wk * bk, th * wh * bh, tw * ww * bw
    out["block_out_k"], out["block_out_h"], out["block_out_w"] = ok_, oh, ow
    out["in_tile_h"], out["in_tile_w"] = (oh - 1) * sh + R, (ow - 1) * sw + S
    threads = wk * wh * ww * bk * bh * bw
    out["threads_per_block"], out["warps_per_block"] = threads, threads // WARP_SIZE
    out["n_blocks"] = _ceil_div(K, ok_) * _ceil_div(H, oh) * _ceil_div(W, ow) * cols["c_split"]
    return out


def _block_resources(cols: _Arrays, is_s: np.ndarray, feats: _Arrays) -> _Arrays:
    """Registers per thread (the generators' estimate) and block; shared memory per block (the templates')."""
    R, S = cols["fil_h"], cols["fil_w"]
    tk, th, tw = cols["tile_k"], cols["tile_h"], cols["tile_w"]
    wk, bk = cols["warp_k"], cols["block_k"]
    ok_, oh, ow = feats["block_out_k"], feats["block_out_h"], feats["block_out_w"]
    ih, iw = feats["in_tile_h"], feats["in_tile_w"]

    # registers per thread: accumulators + input registers (+ weight / index registers)
    patch_h, patch_w = _thread_patch(cols)
    regs = np.where(is_s, tk * th * tw + patch_w + 2, tk * th * tw + patch_h * patch_w + 1)
    # shared memory per block (words), as the templates declare it
    smem_words = np.where(
        is_s,
        2 * ih * iw + (wk * bk) * oh * ow + 2 * R * S * ok_,
        ih * iw + oh * ow * (wk + 1),
    )
    return {"regs_per_thread": regs, "regs_per_block": regs * feats["threads_per_block"],
            "smem_bytes_per_block": smem_words * WORD_BYTES}


def _occupancy(spec: GpuSpec, feats: _Arrays) -> _Arrays:
    """Resident blocks per SM under each limit, the occupancy, and the waves of blocks over all SMs."""
    warps, threads, nb = feats["warps_per_block"], feats["threads_per_block"], feats["n_blocks"]
    by_warps = spec.max_warps_per_sm // np.maximum(warps, 1)
    by_smem = spec.shared_memory_per_sm_bytes // np.maximum(feats["smem_bytes_per_block"], 1)
    by_regs = spec.registers_per_sm // np.maximum(feats["regs_per_thread"] * threads, 1)
    per_sm = np.minimum(np.minimum(by_warps, by_smem), np.minimum(by_regs, spec.max_blocks_per_sm))
    out = {"blocks_per_sm_warps": by_warps, "blocks_per_sm_smem": by_smem,
           "blocks_per_sm_regs": by_regs, "blocks_per_sm": per_sm,
           "occupancy": per_sm * warps / spec.max_warps_per_sm}
    # A configuration that the model says cannot fit still ran: count it as one block per SM.
    slots = spec.sm_count * np.maximum(per_sm, 1)
    waves = _ceil_div(nb, slots)
    out["waves"] = waves
    out["wave_efficiency"] = nb / (waves * slots)
    return out


def _global_traffic(cols: _Arrays, is_s: np.ndarray, feats: _Arrays) -> _Arrays:
    """Global-level bytes (via 32-byte sectors); a tile spanning the full width is one run."""
    W, R, S, tk = cols["y_w"], cols["fil_h"], cols["fil_w"], cols["tile_k"]
    ok_, oh, ow = feats["block_out_k"], feats["block_out_h"], feats["block_out_w"]
    ih, iw = feats["in_tile_h"], feats["in_tile_w"]
    nb, warps, c_blk = feats["n_blocks"], feats["warps_per_block"], _channels_per_block(cols)

    out = {}
    full_in = ow == W  # input window spans the full padded width
    in_runs = np.where(full_in, 1, ih)
    in_run_words = np.where(full_in, ih * iw, iw)
    out["g2s_input_bytes"] = nb * c_blk * _sectors(in_runs, in_run_words) * SECTOR_BYTES
    # S: per channel R*S runs of OK contiguous weights (layout C,R,S,K) into shared memory
    out["g2s_weight_bytes"] = np.where(is_s, nb * c_blk * _sectors(R * S, ok_) * SECTOR_BYTES, 0)
    # RS: every warp loads, per channel, R*S*tk vectors of 32 consecutive weights
    out["g2r_weight_bytes"] = np.where(
        is_s, 0, nb * warps * c_blk * R * S * tk * _sectors(1, WARP_SIZE) * SECTOR_BYTES)
    out_runs = np.where(ow == W, ok_, ok_ * oh)
    out_run_words = np.where(ow == W, oh * ow, ow)
    out["s2g_output_bytes"] = nb * _sectors(out_runs, out_run_words) * SECTOR_BYTES
    return out


def _shared_traffic(cols: _Arrays, is_s: np.ndarray, feats: _Arrays) -> _Arrays:
    """Shared-level bytes (via 128-byte warp-wide requests)."""
    R, S = cols["fil_h"], cols["fil_w"]
    tk, th, tw = cols["tile_k"], cols["tile_h"], cols["tile_w"]
    nb, warps, c_blk = feats["n_blocks"], feats["warps_per_block"], _channels_per_block(cols)

    req = SHARED_BANKS * BANK_BYTES
    patch_h, patch_w = _thread_patch(cols)
    in_loads = np.where(is_s, R * th * patch_w, patch_h * patch_w)
    return {"s2r_input_bytes": nb * warps * c_blk * in_loads * req,
            "s2r_weight_bytes": np.where(is_s, nb * warps * c_blk * R * S * tk * req, 0),
            "r2s_output_bytes": nb * warps * tk * th * tw * req}


def _bandwidth_times(spec: GpuSpec, feats: _Arrays) -> _Arrays:
    """Each level's bytes over its bandwidth; the analytical time is the slower of the two."""
    out = {}
    out["global_bytes"] = (feats["g2s_input_bytes"] + feats["g2s_weight_bytes"]
                           + feats["g2r_weight_bytes"] + feats["s2g_output_bytes"])
    out["shared_bytes"] = feats["s2r_input_bytes"] + feats["s2r_weight_bytes"] + feats["r2s_output_bytes"]
    out["global_time_s"] = out["global_bytes"] / spec.dram_bandwidth_bytes_s
    out["shared_time_s"] = out["shared_bytes"] / spec.shared_bandwidth_bytes_s
    out["analytical_time_s"] = np.maximum(out["global_time_s"], out["shared_time_s"])
    return out


def _typed_features(out: _Arrays, index: pd.Index) -> pd.DataFrame:
    """The frame in :data:`FEATURE_COLUMNS` order: FLOPs, ratios and times float64, counts int64."""
    res = pd.DataFrame(out, index=index)[FEATURE_COLUMNS]
    for c in FEATURE_COLUMNS:
        if c in ("flops", "occupancy", "wave_efficiency") or c.endswith("_time_s"):
            res[c] = res[c].astype(np.float64)
        else:
            res[c] = res[c].astype(np.int64)
    return res


def tile_features(runtimes: pd.DataFrame, problems: pd.DataFrame, gpu: str | GpuSpec) -> pd.DataFrame:
    """Analytic features for every row of a tile dataset's ``runtimes`` table.

    Joins the problem columns on ``problem_id`` and returns :func:`kernel_model`'s
    frame on ``runtimes``' index (no time or label columns: safe to use as
    model input).
    """
    cols = ["problem_id"] + PROBLEM_FEATURE_COLUMNS
    prob = problems[cols].drop_duplicates("problem_id").set_index("problem_id")
    missing = ~runtimes["problem_id"].isin(prob.index)
    if missing.any():
        raise KbenchInputError(
            f"tile_features: {int(missing.sum())} runtime row(s) name problems not in the problems table, "
            f"e.g. {runtimes.loc[missing, 'problem_id'].iloc[0]!r}")
    joined = prob.loc[runtimes["problem_id"].to_numpy()].reset_index(drop=True)
    joined.index = runtimes.index
    for c in TILE_COLUMNS:
        joined[c] = runtimes[c].to_numpy()
    return kernel_model(joined, gpu)


def analytical_ranking_score(features: pd.DataFrame) -> pd.Series:
    """The ``analytical`` ablation's score: bandwidth-scaled data movement (lower is better)."""
    return features["analytical_time_s"]


#: Problem-size inputs of the paper's models (the "problem sizes" feature group).
PROBLEM_INPUTS = ["k", "c", "y_h", "y_w", "fil_h", "stride_h"]
#: Tile-size inputs (the "tile sizes" feature group); the schema enters one-hot.
TILE_INPUTS = ["schema_RS", "schema_RS2", "schema_S", "tile_k", "tile_h", "tile_w", "warp_k", "warp_h",
               "warp_w", "block_k", "block_h", "block_w", "c_split"]


def feature_groups(runtimes: pd.DataFrame, problems: pd.DataFrame,
                   gpu: str | GpuSpec) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """Model inputs of every runtime row, in the paper's three groups.

    Returns ``(X, groups)``: ``X`` on ``runtimes``' index with the problem sizes,
    the tile sizes (schema one-hot) and the analytic features; ``groups`` maps
    ``"problem"``, ``"tile"`` and ``"analytic"`` to their column lists (``ml-rf``
    uses the first two, ``hybrid-rf`` all three).
    """
    prob = problems.drop_duplicates("problem_id").set_index("problem_id")[PROBLEM_INPUTS]
    x = prob.loc[runtimes["problem_id"].to_numpy()].reset_index(drop=True)
    x.index = runtimes.index
    for s in SCHEMAS:
        x[f"schema_{s}"] = (runtimes["schema"].to_numpy() == s).astype(np.int8)
    for c in TILE_COLUMNS[1:]:
        x[c] = runtimes[c].to_numpy()
    feats = tile_features(runtimes, problems, gpu)
    x = pd.concat([x, feats], axis=1)
    return x, {"problem": list(PROBLEM_INPUTS), "tile": list(TILE_INPUTS), "analytic": list(FEATURE_COLUMNS)}
