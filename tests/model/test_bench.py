"""``kbench model bench`` on the CPU: no CUDA is one clear message and exit code 2; the record's types; one
(mode, step) in its own process comes back as a result, a failure recorded as one."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kbench.cli import main  # noqa: E402
from kbench.model.bench import ModelBench, ModeResult, _quartiles, _run_in_process, mode_name  # noqa: E402
from kbench.model.plan_cache import write_plan_cache  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from test_plan_cache import make_cache  # noqa: E402

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")


@no_cuda
def test_without_cuda_it_says_so_with_exit_code_2(tmp_path, capsys):
    out = tmp_path / "raw" / "models" / "r3d_18.json"
    assert main(["model", "bench", "torchvision:r3d_18", "--input-shape", "16,3,16,112,112", "--autocast", "bf16",
                 "--memory-format", "channels_last_3d", "--out", str(out)]) == 2
    assert "PyTorch sees none here" in capsys.readouterr().err
    assert not out.exists()


def test_unknown_modes_and_steps_are_refused(tmp_path, capsys):
    assert main(["model", "bench", "torch.nn:Identity", "--input-shape", "1,3,8,8", "--modes", "default,fast",
                 "--out", str(tmp_path / "b.json")]) == 2
    assert "--modes takes default,autotune" in capsys.readouterr().err
    assert main(["model", "bench", "torch.nn:Identity", "--input-shape", "1,3,8,8", "--step", "training",
                 "--out", str(tmp_path / "b.json")]) == 2


def test_the_quartiles_and_the_mode_name(tmp_path):
    assert _quartiles([5.0, 1.0, 4.0, 2.0, 3.0]) == (3.0, 2.0, 4.0)
    assert _quartiles([7.0]) == (7.0, 7.0, 7.0)
    cache = write_plan_cache(make_cache(), tmp_path / "c.json")
    assert mode_name(cache) == "cache:oracle"


def test_the_record_validates():
    result = ModeResult(mode="cache:oracle", step="train", status="ok", cache="c.json", first_step_ms=812.0,
                        step_ms_median=19.2, step_ms_q1=19.1, step_ms_q3=19.4, step_ms_iqr=0.3, step_ms=[19.2],
                        conv_share=0.61, use_plans_stats={"through_cache": {"F": 11, "B": 10, "W": 11}})
    record = ModelBench(model="torchvision:r3d_18", input_shape=[16, 3, 16, 112, 112], dtype="fp32", autocast="bf16",
                        memory_format="channels_last_3d", warmup=10, steps=30, environment={}, gpu={},
                        results=[result])
    back = ModelBench.model_validate_json(record.model_dump_json())
    assert back.results[0].mode == "cache:oracle" and back.schema_version == 3
    assert back.record == "kbench-model-bench" and "no optimizer" in back.step_definitions["train"]
    with pytest.raises(ValueError):
        ModeResult(mode="default", step="training", status="ok")


@no_cuda
def test_one_mode_runs_in_its_own_process_and_a_failure_comes_back_as_a_result():
    spec = {"model": "torch.nn:Identity", "input_shape": [1, 3, 8, 8], "dtype": "fp32", "autocast": None,
            "memory_format": "contiguous", "mode": "default", "step": "train", "cache": None, "warmup": 1,
            "steps": 2}
    result = ModeResult(**_run_in_process(spec, timeout_s=120))
    assert result.status == "failed" and result.mode == "default" and result.error
    assert result.wall_s is not None  # written by the child process itself


def test_a_cache_made_for_another_trace_is_noted():
    from kbench.model.bench import trace_differences
    spec = {"model": "tests:two_convs", "input_shape": [2, 3, 8, 8], "dtype": "fp32", "autocast": None,
            "memory_format": "contiguous"}
    assert trace_differences(make_cache(), spec) == ["the cache was made for input_shape [1, 3, 8, 8], the bench "
                                                     "runs [2, 3, 8, 8]"]


def test_the_profile_counts_each_gpu_activity_once_and_finds_the_convolutions():
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent

    from kbench.model.bench import kernel_times

    def event(id, name, start, end, device=DeviceType.CPU, linked=0, annotation=False, parent=None):
        e = FunctionEvent(id=id, name=name, thread=0, start_us=start, end_us=end, device_type=device,
                          is_user_annotation=annotation, linked_correlation_id=linked)
        if parent is not None:
            e.set_cpu_parent(parent)
        return e

    conv = event(1, "aten::convolution", 0, 50)
    cudnn = event(2, "aten::cudnn_convolution", 1, 49, parent=conv)
    add = event(3, "aten::add_", 60, 61)
    node = event(4, "PlannedConvolutionBackward0", 100, 200)
    planned = event(5, "kbench::conv_B", 110, 150, annotation=True, parent=node)  # the cached path's range
    gpu = DeviceType.CUDA
    events = [conv, cudnn, add, node, planned,
              event(11, "sm90_xmma_fprop", 0, 10, gpu, linked=2),        # PyTorch's conv: under aten::convolution
              event(12, "elementwise_add", 10, 13, gpu, linked=3),       # not a convolution
              event(13, "sm90_xmma_dgrad", 20, 30, gpu, linked=4),       # the cached path's, inside its range
              event(14, "splitKreduce", 30, 35, gpu, linked=4),
              event(15, "copy_kernel", 40, 42, gpu, linked=4),           # launched by the node, outside the range
              event(16, "kbench::conv_B", 20, 35, gpu, annotation=True)]  # the range on the GPU: no activity
    conv_ms, all_ms, heaviest = kernel_times(events)
    # by hand: 10 + 3 + 10 + 5 + 2 = 30 us in all (the range's 15 us not counted); conv 10 + 10 + 5 = 25 us
    assert (round(conv_ms, 6), round(all_ms, 6)) == (0.025, 0.030)
    assert heaviest[0] == {"name": "sm90_xmma_dgrad", "calls": 1, "cuda_ms": 0.010, "conv": True}
    assert {k["name"]: k["conv"] for k in heaviest} == {"sm90_xmma_fprop": True, "sm90_xmma_dgrad": True,
                                                        "splitKreduce": True, "elementwise_add": False,
                                                        "copy_kernel": False}


def test_a_kernel_linked_to_no_op_counts_inside_a_conv_aten_range_only():
    # cuDNN launches through the driver API: in PyTorch's modes its kernels link to no op, and only the
    # kbench::conv_aten* range that conv_ranges puts around the op places them
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent

    from kbench.model.bench import kernel_times

    def event(id, name, start, end, device=DeviceType.CPU, linked=0, annotation=False):
        return FunctionEvent(id=id, name=name, thread=0, start_us=start, end_us=end, device_type=device,
                             is_user_annotation=annotation, linked_correlation_id=linked)

    gpu = DeviceType.CUDA
    events = [event(1, "kbench::conv_aten", 0, 40, annotation=True),
              event(2, "kbench::conv_aten_backward", 50, 90, annotation=True),
              event(3, "kbench::conv_aten", 5, 30, gpu, annotation=True),            # the ranges on the GPU
              event(4, "kbench::conv_aten_backward", 60, 100, gpu, annotation=True),
              event(11, "sm90_xmma_fprop", 10, 20, gpu, linked=999),   # inside the forward's range
              event(12, "sm90_xmma_dgrad", 60, 70, gpu, linked=999),   # inside the backward's
              event(13, "sm90_xmma_wgrad", 70, 100, gpu, linked=999),  # ends where the range ends: inside
              event(14, "vectorized_elementwise", 30, 34, gpu),        # after the forward's range: outside
              event(15, "sm90_xmma_fprop", 100, 110, gpu)]             # after the backward's: outside
    conv_ms, all_ms, heaviest = kernel_times(events)
    # by hand: conv 10 + 10 + 30 = 50 us; all 50 + 4 + 10 = 64 us (the ranges count for nothing)
    assert (round(conv_ms, 6), round(all_ms, 6)) == (0.050, 0.064)
    assert {(k["name"], k["conv"]): k["calls"] for k in heaviest} == {
        ("sm90_xmma_fprop", True): 1, ("sm90_xmma_fprop", False): 1, ("sm90_xmma_dgrad", True): 1,
        ("sm90_xmma_wgrad", True): 1, ("vectorized_elementwise", False): 1}


def _cpu_profile(model, x, train: bool):
    from kbench.model.bench import conv_ranges
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with conv_ranges() as ranges:
            if train:
                out = model(x)
                out.sum().backward()
            else:
                with torch.no_grad():
                    out = model(x)
    return out, ranges.calls, prof.events()


def _mixed():
    from test_use_plans import Mixed
    return Mixed()


#: the op each kbench::conv_aten* range holds
OP_OF = {"kbench::conv_aten": "aten::convolution", "kbench::conv_aten_backward": "aten::convolution_backward"}


def _ranges_below(event) -> int:
    return sum((c.name in OP_OF) + _ranges_below(c) for c in event.cpu_children)


@pytest.mark.parametrize("make, shape, n_convs", [("two_convs", (1, 3, 8, 8), 2), ("mixed", (2, 4, 5), 5)])
def test_conv_ranges_wrap_exactly_the_convolution_ops_forward_and_backward(make, shape, n_convs):
    from test_trace import TwoConvs

    from kbench.model.bench import ATEN_CONV_RANGES
    torch.manual_seed(0)
    model, x = (TwoConvs() if make == "two_convs" else _mixed()), torch.randn(shape)
    # one aten.convolution per conv module forward, one aten.convolution_backward per module backward (each
    # computes at least its weight's gradient; the first's input needs none)
    for train, backward_calls in ((True, n_convs), (False, 0)):
        plain = model(x)
        out, calls, events = _cpu_profile(model, x, train)
        assert torch.equal(out, plain)  # the mode runs every op as it is
        assert calls == {"kbench::conv_aten": n_convs, "kbench::conv_aten_backward": backward_calls}
        ranges = [e for e in events if e.name in ATEN_CONV_RANGES.values()]
        assert Counter(e.name for e in ranges) == {"kbench::conv_aten": n_convs,
                                                   **({"kbench::conv_aten_backward": n_convs} if train else {})}
        # each range holds exactly its one op; the profiler records each convolution op twice, at autograd's
        # level (above the dispatch mode) and below it, where the mode calls it: each such pair has one
        # range between its two records
        assert all([c.name for c in r.cpu_children] == [OP_OF[r.name]] for r in ranges)
        conv_ops = [e for e in events if e.name in OP_OF.values()]
        inner = [e for e in conv_ops if e.cpu_parent is not None and e.cpu_parent.name in OP_OF]
        outer = [e for e in conv_ops if e not in inner]
        assert len(inner) == len(outer) == len(ranges)
        assert all(_ranges_below(e) == 1 for e in outer)


@pytest.mark.gpu
def test_gpu_the_default_modes_conv_share_is_measured():
    from kbench.model.bench import _profile_share
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(32, 32, 3, padding=1)).cuda()
    x = torch.randn(8, 16, 32, 32, device="cuda")
    torch.backends.cudnn.benchmark = False

    def run():
        for p in net.parameters():
            p.grad = None
        net(x).sum().backward()

    run()
    conv_ms, all_ms, heaviest, calls = _profile_share(torch, run)
    assert calls == {"kbench::conv_aten": 2, "kbench::conv_aten_backward": 2}
    assert 0 < conv_ms <= all_ms
    assert any(k["conv"] for k in heaviest)
