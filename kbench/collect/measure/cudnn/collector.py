"""The collector: :class:`CudnnCollector` holds the GPU state and measures one problem.

:meth:`CudnnCollector.measure` runs the steps of :mod:`kbench.collect.cudnn` in order: the host
part (:class:`~kbench.collect.cudnn.plans.PlanLists`), then, holding the GPU's turn, the inputs,
the float64 reference and the GPU part (:class:`~kbench.collect.cudnn.timing.PlanTiming`,
:class:`~kbench.collect.cudnn.pytorch_choice.PyTorchChoice`). :class:`Options` are its switches.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from kbench.collect.measure.cudnn.candidates import NOTE_NAMES
from kbench.collect.measure.cudnn.plans import PlanLists
from kbench.collect.measure.cudnn.problems import conv_args, conv_flop, record_columns, tensor_shapes
from kbench.collect.measure.cudnn.protocol import PROBLEM_TIME_CAP_S, _err
from kbench.collect.measure.cudnn.pytorch_choice import PyTorchChoice
from kbench.collect.measure.cudnn.timing import PlanTiming
from kbench.collect.measure.environment import _Nvml, environment
from kbench.collect.measure.strides import STRIDE_CONVENTIONS, tensor_strides
from kbench.core.errors import KbenchInputError


@dataclass
class Options:
    notes: bool = True
    torch_choice: bool = True
    precise: bool = True
    verify: bool = True  # the verification pass (kbench.collect.label_retiming.front_runners; its module doc derives the defaults)
    verify_band: float = 0.03  # front-runners: within this fraction of the best ...
    verify_min_plans: int = 3  # ... and at least this many best plans per candidate set
    verify_disagree: float = 0.05  # |log(verify / first)| above which a third timing decides
    verify_max_passes: int = 3
    notes_cache: bool = True  # numerical notes from kbench.collect.notes_cache where every plan's engine is known
    # cuDNN's kernel cache: every graph becomes a dynamic-shape graph sharing the cache of its
    # topology (kernel_cache_topology), so a runtime-compiled kernel is compiled once per process
    # instead of once per problem. Off: dynamic shapes change the plans offered (on the H100 with
    # cuDNN 9.19, none for most backward problems; tools/collect/kernel_cache_check.py has the figures).
    kernel_cache: bool = False
    # the GPU's turn-lock file when ranks share the GPU (--ranks-per-gpu; kbench.collect.gpu_turn):
    # the GPU part of each problem runs holding it, the host-only part (lists, notes, builds) without
    gpu_turn: str | None = None
    seed: int = 0
    # the strides handed to cuDNN (kbench.collect.strides): "pytorch" as PyTorch's descriptors carry
    # them; "legacy" as runs before PyTorch's convention was adopted, kept to measure the difference
    tensor_strides: str = "pytorch"
    # seconds of plan runs on one problem after which its remaining (lowest-ranked) plans are not run and
    # the problem is recorded as truncated; more for re-measuring a problem that one very slow plan cut short
    problem_time_cap_s: float = PROBLEM_TIME_CAP_S


class CudnnCollector(PlanLists, PlanTiming, PyTorchChoice):
    """Holds the GPU state (torch, cuDNN handle, stream) and measures one problem at a time."""

    def __init__(self, options: Options | None = None):
        import torch
        try:
            import cudnn  # nvidia-cudnn-frontend
        except ImportError as exc:
            raise KbenchInputError(
                f"timing cuDNN plans needs nvidia-cudnn-frontend and PyTorch with CUDA on an NVIDIA GPU ({exc}). "
                "Make plans on this machine (--plan-only where the command has it) and time them on the GPU "
                "machine: bash tools/device/run_on_device.sh (docs/collect_scale_out.md).") from None
        self.torch, self.cudnn = torch, cudnn
        self.opt = options or Options()
        if self.opt.tensor_strides not in STRIDE_CONVENTIONS:
            raise KbenchInputError(f"tensor strides {self.opt.tensor_strides!r}: expected one of "
                                   f"{', '.join(STRIDE_CONVENTIONS)}")
        if not torch.cuda.is_available():
            raise KbenchInputError("collect cudnn needs a CUDA GPU; none is visible to PyTorch.")
        torch.backends.cudnn.benchmark = False
        self.stream = torch.cuda.Stream()
        self.handle = cudnn.create_handle()
        cudnn.set_stream(handle=self.handle, stream=self.stream.cuda_stream)
        self.nvml = _Nvml()
        self.gen = torch.Generator(device="cuda")
        self.gen.manual_seed(self.opt.seed)
        self.workspace = torch.empty(1, dtype=torch.uint8, device="cuda")
        self.notes_reliable = None  # decided on the first problem (see _note_probe_check)
        from kbench.collect.measure.notes_cache import NotesCache
        self.notes_cache = NotesCache() if self.opt.notes and self.opt.notes_cache else None
        self.kernel_caches: dict[tuple, object] = {}  # kernel_cache_topology -> cuDNN kernel cache
        from kbench.collect.measure.gpu_turn import GpuTurn
        self.turn = GpuTurn(self.opt.gpu_turn)
        self.capture_s = 0.0  # seconds of CUDA-graph capture in the current problem (t_capture_s)
        cd = cudnn.data_type
        self.cdt = {"FP16": cd.HALF, "BF16": cd.BFLOAT16, "FP32": cd.FLOAT}
        self.tdt = {"FP16": torch.float16, "BF16": torch.bfloat16, "FP32": torch.float32}
        hm = cudnn.heur_mode
        self.modes = {"a": hm.A, "b": hm.B, "fallback": hm.FALLBACK}
        nn = cudnn.numerical_note
        self.notes = {n: getattr(nn, n) for n in NOTE_NAMES if hasattr(nn, n)}

    def env(self) -> dict:
        return {**environment(self.torch, self.cudnn), "tensor_strides": self.opt.tensor_strides,
                "problem_time_cap_s": self.opt.problem_time_cap_s}

    def warm_up(self, seconds: float = 2.0) -> None:
        """Keep the GPU busy for a moment so that the first problems do not meet idle clocks."""
        t = self.torch
        with self.turn.hold():
            a = t.randn(4096, 4096, device="cuda", dtype=t.float16, generator=self.gen)
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                for _ in range(20):
                    a = (a @ a).clamp_(-1, 1)
                t.cuda.synchronize()
            del a

    # -- tensors ------------------------------------------------------------------
    def _tensors(self, p):
        """Uninitialised x, w, y (and which of them is the output): allocation only, no GPU work, so
        that it may run while another rank holds the GPU's turn; :meth:`_fill_inputs` fills them."""
        t = self.torch
        dt = self.tdt[p["dtype"]]

        def empty(shape):
            # the strides PyTorch's cuDNN descriptors carry (kbench.collect.strides), or the legacy ones;
            # the layout names the memory format of every tensor, 4-D (NCHW, NHWC) or 5-D (NCDHW, NDHWC)
            strides = tensor_strides(shape, p["layout"], self.opt.tensor_strides)
            return t.empty_strided(shape, strides, dtype=dt, device="cuda")
        x, w, y = (empty(shape) for shape in tensor_shapes(p))
        out = {"F": y, "B": x, "W": w}[p["direction"]]
        return x, w, y, out

    def _fill_inputs(self, p, x, w, y) -> None:
        """The direction's inputs from U(-1, 1) in float32, rounded to the data type, in the order x, w, y
        (the seeded generator's draws are those of every earlier h100 run)."""
        t = self.torch
        d = p["direction"]
        for v, is_input in ((x, d in "FW"), (w, d in "FB"), (y, d in "BW")):
            if is_input:
                v.copy_(t.empty(v.shape, dtype=t.float32, device="cuda").uniform_(-1, 1, generator=self.gen))

    def _reference(self, p, x, w, y):
        """float64 PyTorch result of the same convolution from the same inputs."""
        return self._torch_conv(p, x.double().contiguous(), w.double().contiguous(),
                                y.double().contiguous(), conv_args(p))

    def _torch_conv(self, p, x, w, y, args):
        t = self.torch
        d = p["direction"]
        if d == "F":
            conv = t.nn.functional.conv3d if x.dim() == 5 else t.nn.functional.conv2d
            return conv(x, w, None, **args)
        mask = [True, False, False] if d == "B" else [False, True, False]
        res = t.ops.aten.convolution_backward(y, x, w, None, list(args["stride"]), list(args["padding"]),
                                              list(args["dilation"]), False, [0] * (x.dim() - 2),
                                              args["groups"], mask)
        return res[0] if d == "B" else res[1]

    # -- one problem ------------------------------------------------------------------
    def lists(self, p: dict) -> tuple[dict, list[dict]]:
        """Steps 1 and 2 and the builds only, no GPU work and no timing: the problem's record with cuDNN's
        lists (``heur_a``, ``heur_b``, ``heur_fallback``; ``status`` ``no_plans`` where cuDNN offers none)
        and each plan's record (engine, knobs, numerical notes, ``build_ok``), as :meth:`measure` has them
        before it times anything."""
        rec = {k: p[k] for k in record_columns(p)}
        rec.update(kind=p.get("kind", ""), sources=p.get("sources", ""), status="ok", error="")
        try:
            x, w, y, _ = self._tensors(p)
        except Exception as exc:  # noqa: BLE001
            rec.update(status="failed", error="setup: " + _err(exc))
            return rec, []
        host = self._host_part(p, rec, x, w, y)
        plans = [ps.rec for ps in host["plans"]] if host is not None else []
        del host, x, w, y  # the graph and its built plans go here
        return rec, plans

    def measure(self, p: dict) -> tuple[dict, list[dict]]:
        t = self.torch
        t0 = time.perf_counter()
        rec = {k: p[k] for k in record_columns(p)}
        rec.update(kind=p.get("kind", ""), sources=p.get("sources", ""), order=int(p.get("order", -1)),
                   flop=conv_flop(p), status="ok", error="")
        rec.update({f"{k}_start": v for k, v in self.nvml.sample().items()})
        waited0 = self.turn.waited_s
        try:
            x, w, y, out = self._tensors(p)
        except Exception as exc:  # noqa: BLE001
            with self.turn.hold():
                self._check_cuda()
            rec.update(status="failed", error="setup: " + _err(exc))
            return rec, []
        # 1-2. the host-only part: cuDNN's lists, the notes, every plan built (no GPU work: while
        # ranks share the GPU, one does this while another holds the GPU's turn)
        host = self._host_part(p, rec, x, w, y)
        plans = host["plans"] if host is not None else []
        with self.turn.hold():  # from here on the GPU is used: ranks sharing it take turns
            t_setup = time.perf_counter()
            try:
                self._fill_inputs(p, x, w, y)
                ref = self._reference(p, x, w, y)
                ref_norm = float(ref.norm())
                e_tf32 = None
                if p["dtype"] == "FP32":
                    tx, tw, ty = (_tf32_round(t, v) for v in (x, w, y))
                    rt = self._reference(p, tx, tw, ty)
                    e_tf32 = float((rt - ref).norm()) / ref_norm if ref_norm > 0 else None
                    del rt, tx, tw, ty
                rec.update(ref_norm=ref_norm, e_tf32=e_tf32, t_setup_s=time.perf_counter() - t_setup)
            except Exception as exc:  # noqa: BLE001
                self._check_cuda()
                rec.update(status="failed", error="setup: " + _err(exc))
                host = None  # its graph goes while the turn is held
                return rec, []
            if host is not None:
                self._gpu_part(p, rec, x, w, y, out, ref, ref_norm, e_tf32, **host)
                del host  # the built plans' kernels are unloaded with the graph: GPU work as well
            rec.update({f"{k}_end": v for k, v in self.nvml.sample().items()})
            del x, w, y, out, ref
            if self.turn.shared:
                # hand the freed memory back to the GPU: a rank sharing it may need it for its next
                # problem (two problem-directions measured this way in November 2026 failed their
                # setup out of memory while the other rank's cache held 51 GiB)
                t.cuda.empty_cache()
        # seconds of work: the waits for the GPU's turn (ranks sharing a GPU) are t_wait_s
        rec["t_wait_s"] = self.turn.waited_s - waited0
        rec["t_total_s"] = time.perf_counter() - t0 - rec["t_wait_s"]
        return rec, [ps.rec for ps in plans]

    def _gpu_part(self, p, rec, x, w, y, out, ref, ref_norm, e_tf32, g, pack, plans, built, names) -> None:
        """Steps 3 to 7: run, check and time the built plans (into ``rec`` and the plans' records)."""
        # 3. one workspace for all (captured graphs keep its address)
        self._ensure_workspace(built)
        # 4. run once, check, capture, coarse timing (the captures' share in t_capture_s)
        t_time = time.perf_counter()
        self.capture_s = 0.0
        valid = self._coarse_timing(p, rec, g, pack, built, out, ref, ref_norm, e_tf32)
        rec["t_coarse_s"] = time.perf_counter() - t_time
        rec["t_capture_s"] = self.capture_s
        t_phase = time.perf_counter()
        # 5. PyTorch's choice
        torch_plans = self._torch_plans(p, rec, x, w, y, g, pack, plans, valid, names)
        rec["t_torch_s"] = time.perf_counter() - t_phase
        t_phase = time.perf_counter()
        # 6. precise re-timing
        if self.opt.precise and valid:
            self._precise_retiming(p, rec, g, pack, valid, torch_plans)
        rec["t_precise_s"] = time.perf_counter() - t_phase
        t_phase = time.perf_counter()
        # 7. verification: the front-runners timed again in a fresh order (kbench.collect.label_retiming.front_runners)
        if self.opt.verify and valid:
            self._verify(p, rec, g, pack, valid)
        rec["t_verify_s"] = time.perf_counter() - t_phase
        rec["t_time_s"] = time.perf_counter() - t_time
        for ps in plans:
            ps.graph = None


def _tf32_round(t, v):
    """Round float32 values to TF32 (10 mantissa bits), nearest, as float32."""
    v = v.contiguous().float()
    i = v.view(t.int32)
    r = (i + 0x1000) & ~0x1FFF
    return r.view(t.float32)
