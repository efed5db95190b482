"""``kbench collect cudnn``: measure every cuDNN engine configuration per problem.

For each problem (a 2D or 3D convolution in one direction, data type and layout) the
collector

1. builds the convolution as a cuDNN graph with the cuDNN frontend Python API
   (``conv_fprop`` / ``conv_dgrad`` / ``conv_wgrad``) and asks cuDNN for its
   execution plans with heuristic mode A, mode B and the fallback list, each
   on a graph of its own so that each list's order is recorded as cuDNN gave
   it; a fourth graph asks for all three and holds the union (distinct
   engine configurations, named like ``eng67_k2=5_k13=0``);
2. finds each plan's numerical notes (tensor cores, down-converted inputs,
   reduced-precision reduction, FFT, Winograd, non-determinism) with the
   frontend's note filters, or from what those filters said of the same engine
   before (:mod:`kbench.collect.notes_cache`, checked by a probe every
   :data:`~kbench.collect.notes_cache.CHECK_EVERY`-th problem; ``--no-notes-cache``
   probes every problem), and its behaviour notes;
3. builds every plan, runs it once on random data (never zeros) into an output
   poisoned with NaN, and compares it with PyTorch's convolution computed in
   float64 from the same inputs: ``rel_err = |out - ref|_2 / |ref|_2``. A plan
   over the data type's tolerance (:data:`TOLERANCE`) is flagged wrong and
   never counts as a winner. For FP32 data it also computes the error that
   TF32 rounding of the inputs alone causes (``e_tf32``) and calls a plan
   ``fp32`` precise when its error is under a tenth of that, else ``reduced``;
4. times each plan: a CUDA graph of ``k`` back-to-back executions is captured
   (``k`` chosen from a second, warm execution so one replay takes about
   :data:`COARSE_TARGET_MS`; the first execution, which may load the plan's
   kernels, is recorded as ``first_exec_ms`` and used for nothing else), replayed
   once to upload it and then timed replay by replay with CUDA events, one plan
   at a time, behind a spin kernel that keeps the GPU busy until the host has
   queued every timed launch; time per execution = replay time / ``k``. A
   replay shorter than half the target is recaptured with a larger ``k``
   (:func:`launch_bound_mask` finds such measurements in recorded data). Every
   plan gets a coarse time (median of :data:`COARSE_REPLAYS` replays, one replay
   for a plan whose warm execution was over :data:`FAR_BEHIND` times the fastest
   correct one so far);
   the plans within
   :data:`PRECISE_BAND` of the best, cuDNN's own choices and PyTorch's choice
   are then re-timed precisely (:data:`PRECISE_ROUNDS` rounds of
   :data:`PRECISE_REPLAYS` replays, the plans taking turns so that clock drift
   is shared), and the best plan once more at the end (``repeat_ms``, the noise
   check). Then the verification pass (:mod:`kbench.collect.label_retiming.front_runners`, ``--no-verify``
   skips it) re-times the front-runners in a fresh interleaved order, a third
   time where the two readings disagree, and stores ``first_ms``, ``verify_ms``,
   ``verify2_ms``, ``verified`` and the label time ``verified_ms`` per plan and
   the phase's seconds (``t_verify_s``) per problem. The L2 cache is not flushed: back-to-back executions on the same
   buffers, the way a layer runs inside a network step (stated in the card);
5. records what PyTorch runs for the same convolution with
   ``torch.backends.cudnn.benchmark = False``, by matching the kernels it
   launches (PyTorch profiler) against those of cuDNN's top plans;
6. records the GPU's clocks and temperature per problem, and the GPU name,
   driver, CUDA, cuDNN, frontend and PyTorch versions at start and end. It
   never changes clocks, power limits or any other card setting.

Steps 1 and 2 and the building of step 3 launch nothing on the GPU (the input
tensors are allocated but filled only afterwards, together with the float64
reference); everything from filling the inputs on is the problem's GPU part.
Ranks sharing a GPU (``--ranks-per-gpu``) hold the GPU's turn
(:mod:`kbench.collect.gpu_turn`) for the GPU part only; ``t_wait_s`` records a
problem's wait for it, which ``t_total_s`` leaves out.

Every failure (a plan that does not build, run, capture or compute the right
answer) is recorded with its error text and never stops the run. A CUDA error
that poisons the process ends it with exit code 3 after saving what was done;
the next run resumes (see :mod:`kbench.collect.writer`).

The package, one module per job (every name below is importable from here, as
``from kbench.collect.measure import cudnn``; ``cudnn.collect`` is the command):

- :mod:`.problems`: the problems file read into one row per problem-direction, with its key;
- :mod:`.candidates`: what counts as a right answer, the numerical notes and the candidate sets
  (:func:`default_set`, :func:`pytorch_default_mask`, :data:`VARIANT_TEXT`);
- :mod:`.protocol`: the timing protocol's numbers and the pure rules drawn from them, a plan's
  timing state, and how a failure is recorded;
- :mod:`.plans`: steps 1 and 2 and the builds of step 3, on the host (the frontend's graphs);
- :mod:`.timing`: steps 3 and 4 on the GPU (first run and check, coarse, precise and
  verification timing);
- :mod:`.pytorch_choice`: step 5, what PyTorch runs for the same convolution;
- :mod:`.collector`: :class:`CudnnCollector`, which holds the GPU state and measures one problem
  (``measure``), and its :class:`Options`;
- :mod:`.run`: :func:`collect`, the pending problems of a raw folder measured one after another.
"""

from kbench.collect.measure.cudnn.candidates import (
    FP32_PRECISE_FRACTION,
    NOTE_NAMES,
    REDUCED_NOTES,
    TOLERANCE,
    VARIANT_TEXT,
    classify_note_probe,
    default_set,
    pytorch_default_mask,
)
from kbench.collect.measure.cudnn.collector import CudnnCollector, Options
from kbench.collect.measure.cudnn.plans import kernel_cache_topology
from kbench.collect.measure.cudnn.problems import (
    ALIASES,
    CHANNELS_LAST,
    DEFAULTS,
    DEFAULTS_3D,
    DEPTH,
    DIRECTIONS,
    DTYPES,
    GEOMETRY,
    LAYOUTS,
    LAYOUTS_3D,
    canonical,
    conv_args,
    conv_flop,
    geometry_of,
    load_problems,
    parse_list,
    problem_keys,
    record_columns,
    spatial_dims,
    tensor_shapes,
)
from kbench.collect.measure.cudnn.protocol import (
    COARSE_REPLAYS,
    COARSE_TARGET_MS,
    FAR_BEHIND,
    MAX_INNER,
    PRECISE_BAND,
    PRECISE_MAX_PLANS,
    PRECISE_REPLAYS,
    PRECISE_ROUND_MS,
    PRECISE_ROUNDS,
    PROBLEM_TIME_CAP_S,
    SLOW_PLAN_MS,
    SPIN_BASE_US,
    SPIN_CYCLES_PER_US,
    SPIN_PER_LAUNCH_US,
    WARM_CONSISTENCY,
    WORKSPACE_CAP,
    FatalCudaError,
    PlanState,
    _err,
    inconsistent_with_warm,
    inner_count,
    launch_bound_mask,
    plan_priority,
    replays_per_round,
    spin_cycles,
    timing_stats,
)
from kbench.collect.measure.cudnn.pytorch_choice import TORCH_PROFILE_TOP, match_torch, split_segments
from kbench.collect.measure.cudnn.run import _py, collect, seed_notes_cache
from kbench.collect.measure.environment import host_cpu

__all__ = [
    # problems
    "ALIASES", "CHANNELS_LAST", "DEFAULTS", "DEFAULTS_3D", "DEPTH", "DIRECTIONS", "DTYPES", "GEOMETRY",
    "LAYOUTS", "LAYOUTS_3D", "canonical", "conv_args", "conv_flop", "geometry_of", "load_problems",
    "parse_list", "problem_keys", "record_columns", "spatial_dims", "tensor_shapes",
    # candidates
    "FP32_PRECISE_FRACTION", "NOTE_NAMES", "REDUCED_NOTES", "TOLERANCE", "VARIANT_TEXT",
    "classify_note_probe", "default_set", "pytorch_default_mask",
    # protocol
    "COARSE_REPLAYS", "COARSE_TARGET_MS", "FAR_BEHIND", "MAX_INNER", "PRECISE_BAND", "PRECISE_MAX_PLANS",
    "PRECISE_REPLAYS", "PRECISE_ROUND_MS", "PRECISE_ROUNDS", "PROBLEM_TIME_CAP_S", "SLOW_PLAN_MS",
    "SPIN_BASE_US", "SPIN_CYCLES_PER_US", "SPIN_PER_LAUNCH_US", "WARM_CONSISTENCY", "WORKSPACE_CAP",
    "FatalCudaError", "PlanState", "inconsistent_with_warm", "inner_count", "launch_bound_mask",
    "plan_priority", "replays_per_round", "spin_cycles", "timing_stats",
    # plans, PyTorch's choice, the collector, the run
    "kernel_cache_topology", "TORCH_PROFILE_TOP", "match_torch", "split_segments",
    "CudnnCollector", "Options", "collect", "seed_notes_cache",
    # the host's CPU, recorded with the environment
    "host_cpu",
    # private helpers that kbench.gpu_check and the studies reach through this package
    "_err", "_py",
]
