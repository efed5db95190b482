"""``kbench model trace``: hand-worked problems of tiny models (directions, geometry, keys, layouts, 3D,
transposed, multiplicity), the problems file read back by the collector, and bad input."""

from __future__ import annotations

import importlib.util
import json

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
nn = torch.nn

from kbench.cli import main  # noqa: E402
from kbench.collect.measure.cudnn.problems import load_problems  # noqa: E402
from kbench.core.errors import KbenchInputError  # noqa: E402
from kbench.model.trace import parse_input_shape, trace_model, write_trace  # noqa: E402
from kbench.sources.problem import parse_miopen_keys  # noqa: E402


class TwoConvs(nn.Module):
    """conv 3->8 k3 p1, then conv 8->4 k1: the issue's hand-worked example."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return self.conv2(torch.relu(self.conv1(x)))


def two_convs():
    return TwoConvs()


class SharedConv(nn.Module):
    """One conv module called twice per step (weights shared): multiplicity 2."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.body = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        return self.body(self.body(self.stem(x)))


def no_conv():
    return nn.Sequential(nn.Flatten(), nn.Linear(12, 2))


def broken():
    raise RuntimeError("weights file missing")


KEYS = {
    ("conv1", "F"): "3-8-8-3x3-8-8-8-1-1x1-1x1-1x1-0-NCHW-FP32-F",
    ("conv1", "W"): "8-8-8-3x3-3-8-8-1-1x1-1x1-1x1-0-NCHW-FP32-W",
    ("conv2", "F"): "8-8-8-1x1-4-8-8-1-0x0-1x1-1x1-0-NCHW-FP32-F",
    ("conv2", "B"): "4-8-8-1x1-8-8-8-1-0x0-1x1-1x1-0-NCHW-FP32-B",
    ("conv2", "W"): "4-8-8-1x1-8-8-8-1-0x0-1x1-1x1-0-NCHW-FP32-W",
}


def test_two_convs_train_directions_geometry_and_keys():
    tr = trace_model(TwoConvs(), (1, 3, 8, 8))
    calls = tr.calls
    # autograd's order: two forwards, then backward from the last layer; conv1's input needs no grad: no B
    assert calls["op"].tolist() == ["convolution", "convolution", "convolution_backward", "convolution_backward"]
    assert calls["layer"].tolist() == ["conv1", "conv2", "conv2", "conv1"]
    assert calls["directions"].tolist() == ["F", "F", "B;W", "W"]
    assert calls["output_mask"].tolist() == ["", "", "111", "011"]
    assert calls["forward_call"].tolist() == [-1, -1, 1, 0]
    got = {(r.layers, r.direction): r.problem_id for r in tr.problems.itertuples()}
    assert got == KEYS
    p = tr.problems.set_index("problem_id")
    row = p.loc[KEYS[("conv1", "F")]]
    assert (row.n, row.c, row.k, row.groups, row.x_h, row.x_w, row.y_h, row.y_w) == (1, 3, 8, 1, 8, 8, 8, 8)
    assert (row.fil_h, row.fil_w, row.pad_h, row.pad_w, row.stride_h, row.dil_h) == (3, 3, 1, 1, 1, 1)
    assert set(p["dtype"]) == {"FP32"} and set(p["layout"]) == {"NCHW"}
    assert p["multiplicity"].tolist() == [1] * 5
    assert "x_d" not in tr.problems  # a 2D trace: the columns load_problems reads today
    assert tr.info["counts"]["by_direction"] == {"F": 2, "B": 1, "W": 2}
    assert tr.info["counts"]["calls"] == 4


def test_inference_is_forward_only_and_the_model_is_not_changed():
    model = TwoConvs().train()
    model.conv2.eval()  # a mixed-mode model keeps its modes
    before = {k: v.clone() for k, v in model.state_dict().items()}
    tr = trace_model(model, (2, 3, 8, 8), mode="inference")
    assert tr.problems["direction"].tolist() == ["F", "F"]
    assert set(tr.problems["n"]) == {2}
    assert model.training and model.conv1.training and not model.conv2.training and all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None and p.dtype == torch.float32 for p in model.parameters())


def test_channels_last_and_dtypes():
    tr = trace_model(TwoConvs(), (1, 3, 8, 8), memory_format="channels_last", dtype="fp16")
    assert set(tr.problems["layout"]) == {"NHWC"} and set(tr.problems["dtype"]) == {"FP16"}
    assert tr.problems["problem_id"].iloc[0] == "3-8-8-3x3-8-8-8-1-1x1-1x1-1x1-0-NHWC-NHWC-NHWC-FP16-F"
    tr = trace_model(TwoConvs(), (1, 3, 8, 8), autocast="bf16")
    assert set(tr.problems["dtype"]) == {"BF16"} and set(tr.calls["torch_dtype"]) == {"bfloat16"}


def test_a_channels_last_weight_makes_the_layer_nhwc_as_cudnn_does():
    """ATen's cudnn_conv_suggest_memory_format: the input or the weight channels-last -> NHWC, and the
    output is channels-last, so the next layer (contiguous weight) is NHWC too."""

    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Conv2d(3, 8, 3, padding=1)
            self.b = nn.Conv2d(8, 4, 1)

        def forward(self, x):
            return self.b(self.a(x))

    model = Mixed()
    model.a.weight.data = model.a.weight.data.contiguous(memory_format=torch.channels_last)
    tr = trace_model(model, (1, 3, 8, 8))
    assert tr.calls["layout"].tolist() == ["NHWC"] * 4


def test_conv3d_gives_3d_rows_with_depth():
    model = nn.Sequential(nn.Conv3d(3, 8, (3, 3, 3), stride=(1, 2, 2), padding=1), nn.ReLU(), nn.Conv3d(8, 4, 1))
    tr = trace_model(model, (2, 3, 4, 8, 8), memory_format="channels_last_3d", autocast="bf16")
    p = tr.problems
    assert set(p["spatial_dims"]) == {3} and set(p["layout"]) == {"NDHWC"}
    first = p.iloc[0]
    assert (first.x_d, first.x_h, first.y_d, first.y_h, first.fil_d, first.pad_d, first.stride_d,
            first.stride_h) == (4, 8, 4, 4, 3, 1, 1, 2)
    assert first.problem_id == "3-4-8-8-3x3x3-8-4-4-4-2-1x1x1-1x2x2-1x1x1-0-NDHWC-NDHWC-NDHWC-BF16-F"
    parsed = parse_miopen_keys(p["problem_id"])
    for col in ["n", "c", "k", "x_d", "x_h", "y_d", "y_w", "fil_d", "pad_d", "stride_h"]:
        assert parsed[col].tolist() == p[col].tolist(), col
    assert (parsed["output_size_status"] == "ok").all()


def test_conv1d_is_2d_with_h_1():
    tr = trace_model(nn.Conv1d(4, 6, 5, padding=2, stride=2), (3, 4, 20), mode="inference")
    row = tr.problems.iloc[0]
    assert (row.x_h, row.x_w, row.fil_h, row.fil_w, row.pad_h, row.pad_w, row.stride_h, row.stride_w,
            row.y_h, row.y_w) == (1, 20, 1, 5, 0, 2, 1, 2, 1, 10)
    assert row.problem_id == "4-1-20-1x5-6-1-10-3-0x2-1x2-1x1-0-NCHW-FP32-F"


def test_transposed_conv_maps_to_the_equivalent_convolution():
    """ConvTranspose2d(8 -> 4, k4 s2 p1) on 1x8x5x5 gives 1x4x10x10. The equivalent conv takes the 10x10,
    4-channel tensor to the 5x5, 8-channel one: c=4, k=8. Its forward is that conv's B; grad_input an F."""
    model = nn.Sequential(nn.Conv2d(3, 8, 1), nn.ConvTranspose2d(8, 4, 4, stride=2, padding=1))
    tr = trace_model(model, (1, 3, 5, 5))
    deconv = tr.calls[tr.calls["layer"] == "1"]
    assert deconv["directions"].tolist() == ["B", "F;W"] and set(deconv["transposed"]) == {1}
    assert deconv["input_shape"].tolist() == ["1x8x5x5", "1x8x5x5"]
    assert deconv["output_padding"].iloc[0] == "0x0"
    p = tr.problems[tr.problems["layers"] == "1"].set_index("direction")
    assert set(p.index) == {"B", "F", "W"} and set(p["transposed"]) == {1}
    for d in "BFW":
        assert (p.loc[d, "c"], p.loc[d, "k"], p.loc[d, "x_h"], p.loc[d, "y_h"], p.loc[d, "fil_h"],
                p.loc[d, "stride_h"], p.loc[d, "pad_h"]) == (4, 8, 10, 5, 4, 2, 1)
    assert p.loc["F", "problem_id"] == "4-10-10-4x4-8-5-5-1-1x1-2x2-1x1-0-NCHW-FP32-F"
    # output_padding is implied by the sizes: the equivalent conv's output-size rule gives the 5x5 back
    model = nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1)
    tr = trace_model(model, (1, 8, 5, 5), mode="inference")
    assert tr.calls["output_padding"].iloc[0] == "1x1" and tr.problems["x_h"].iloc[0] == 10
    assert (parse_miopen_keys(tr.problems["problem_id"])["output_size_status"] == "ok").all()


def test_multiplicity_counts_a_module_called_twice():
    tr = trace_model(SharedConv(), (2, 3, 8, 8))
    p = tr.problems.set_index(["layers", "direction"])
    assert p.loc[("body", "F"), "multiplicity"] == 2
    assert p.loc[("body", "B"), "multiplicity"] == 2 and p.loc[("body", "W"), "multiplicity"] == 2
    assert p.loc[("stem", "F"), "multiplicity"] == 1 and ("stem", "B") not in p.index
    assert tr.info["counts"]["calls_by_direction"] == {"F": 3, "B": 2, "W": 3}
    assert (tr.calls["layer"] == "?").sum() == 0


def test_round_trip_through_the_collectors_problem_reader(tmp_path):
    tr = trace_model(SharedConv(), (2, 3, 8, 8), memory_format="channels_last", dtype="bf16")
    out = write_trace(tr, tmp_path / "t")
    read = load_problems(out / "problems.csv")
    assert read["key"].tolist() == pd.read_csv(out / "problems.csv")["problem_id"].tolist()
    assert read["direction"].tolist() == tr.problems["direction"].tolist()
    info = json.loads((out / "trace.json").read_text())
    assert info["format"] == "kbench-model-trace-1" and info["counts"]["problem_directions"] == len(read)
    calls = pd.read_csv(out / "calls.csv")
    assert len(calls) == info["counts"]["calls"] == 6


@settings(max_examples=25, deadline=None)
@given(c=st.integers(1, 6), k=st.integers(1, 6), h=st.integers(4, 12), w=st.integers(4, 12),
       fil=st.integers(1, 3), pad=st.integers(0, 2), stride=st.integers(1, 3), dil=st.integers(1, 2),
       n=st.integers(1, 3), cl=st.booleans())
def test_random_geometries_parse_back_to_the_same_geometry(c, k, h, w, fil, pad, stride, dil, n, cl):
    model = nn.Sequential(nn.ReLU(), nn.Conv2d(c, k, fil, stride=stride, padding=pad, dilation=dil))
    if dil * (fil - 1) + 1 > min(h, w) + 2 * pad:
        return
    tr = trace_model(model, (n, c, h, w), memory_format="channels_last" if cl else "contiguous")
    p = tr.problems
    parsed = parse_miopen_keys(p["problem_id"])
    for col in ["n", "c", "k", "groups", "x_h", "x_w", "y_h", "y_w", "fil_h", "fil_w", "pad_h", "pad_w",
                "stride_h", "stride_w", "dil_h", "dil_w"]:
        assert parsed[col].tolist() == p[col].tolist(), col
    assert (parsed["output_size_status"] == "ok").all()
    assert parsed["direction"].tolist() == p["direction"].tolist() == ["F", "W"]  # input needs no grad: no B
    if c > 1:  # with one channel, channels-last strides are contiguous ones too: ATen (and the trace) says NCHW
        assert set(parsed["layout_x"]) == {"NHWC" if cl else "NCHW"}
    assert (p[["n", "c", "k", "x_h", "x_w"]].to_numpy()[0] == [n, c, k, h, w]).all()


# ----------------------------------------------------------------------------- the command and bad input
def test_cli_trace_writes_the_files(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).parent))
    out = tmp_path / "trace"
    rc = main(["model", "trace", "test_trace:two_convs", "--input-shape", "1,3,8,8", "--out", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "4 convolution calls" in text and "F 2 (2 calls), B 1 (1 calls), W 2 (2 calls)" in text
    assert sorted(p.name for p in out.iterdir()) == ["calls.csv", "problems.csv", "trace.json"]
    assert main(["model", "trace", "test_trace:two_convs", "--input-shape", "1,3,8,8", "--out",
                 str(tmp_path / "t2"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["counts"]["calls"] == 4


@pytest.mark.parametrize("argv, says", [
    (["test_trace:broken"], "does not build: RuntimeError: weights file missing"),
    (["test_trace:no_conv", "--input-shape", "1,3,2,2"], "ran no convolution"),
    (["test_trace:two_convs", "--input-shape", "1,5,8,8"], "the forward pass on an input of shape 1,5,8,8"),
    (["test_trace:two_convs", "--input-shape", "1,3,a"], "--input-shape '1,3,a'"),
    (["test_trace:nothing_here"], "has no attribute 'nothing_here'"),
    (["no_such_module_xyz:f"], "cannot import 'no_such_module_xyz'"),
    (["test_trace:two_convs", "--memory-format", "channels_last_3d"], "needs a 5D input"),
])
def test_bad_input_is_one_clear_message_exit_2(tmp_path, monkeypatch, capsys, argv, says):
    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).parent))
    if "--input-shape" not in argv:
        argv = argv + ["--input-shape", "1,3,8,8"]
    out = tmp_path / "out"
    assert main(["model", "trace", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kbench: error: ") and says in err and "Traceback" not in err
    assert not out.exists()


def test_parse_input_shape():
    assert parse_input_shape("32,3,224,224") == (32, 3, 224, 224)
    assert parse_input_shape("16x3x16x112x112") == (16, 3, 16, 112, 112)
    for bad in ("", "3,4", "1,2,3,4,5,6", "1,0,8,8"):
        with pytest.raises(KbenchInputError):
            parse_input_shape(bad)


def test_torchvision_resnet18_when_installed():
    # not importorskip: a torchvision whose compiled ops do not match torch fails to import, and the trace
    # still builds its models (kbench.model.spec imports it without those ops)
    if importlib.util.find_spec("torchvision") is None:
        pytest.skip("torchvision is not installed")
    from kbench.model.spec import build_model
    tr = trace_model(build_model("torchvision:resnet18"), (2, 3, 64, 64), dtype="fp16", memory_format="channels_last")
    counts = tr.info["counts"]
    assert counts["forward_calls"] == counts["backward_calls"] == 20  # 17 3x3/7x7 convs + 3 downsample 1x1
    assert counts["calls_by_direction"] == {"F": 20, "B": 19, "W": 20}  # conv1 has no B
    assert set(tr.problems["layout"]) == {"NHWC"}


class TiedAndConstant(nn.Module):
    """Two modules sharing one weight, a plain (non-buffer) tensor attribute, a depthwise conv, padding='same'."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(4, 4, 3, padding=1)
        self.b = nn.Conv2d(4, 4, 3, padding=1)
        self.b.weight = self.a.weight
        self.scale = torch.full((1, 4, 1, 1), 2.0)
        self.depthwise = nn.Conv2d(4, 4, 5, padding="same", groups=4, bias=False)

    def forward(self, x):
        return self.depthwise(self.b(self.a(x)) * self.scale)


def test_tied_weights_constants_depthwise_and_same_padding(tmp_path):
    tr = trace_model(TiedAndConstant(), (2, 4, 9, 9))
    p = tr.problems.set_index(["layers", "direction"])
    assert p.loc[("depthwise", "F"), "groups"] == 4 and p.loc[("depthwise", "F"), "pad_h"] == 2
    assert p.loc[("depthwise", "F"), "problem_id"] == "4-9-9-5x5-4-9-9-2-2x2-1x1-1x1-0-NCHW-FP32-F_g4"
    assert p.loc[("depthwise", "W"), "depthwise"] == 1 and p.loc[("a;b", "F"), "depthwise"] == 0
    # a and b are one geometry with one weight: one problem each direction, two calls, both layers named
    assert p.loc[("a;b", "F"), "multiplicity"] == 2 and p.loc[("b;a", "W"), "multiplicity"] == 2
    out = write_trace(tr, tmp_path / "t")
    assert load_problems(out / "problems.csv")["key"].tolist() == tr.problems["problem_id"].tolist()


def test_timm_without_timm_is_a_clear_error(tmp_path, capsys):
    if importlib.util.find_spec("timm") is not None:
        pytest.skip("timm is installed")
    assert main(["model", "trace", "timm:resnet50", "--input-shape", "1,3,8,8", "--out", str(tmp_path / "o")]) == 2
    assert "timm is not installed" in capsys.readouterr().err


@settings(max_examples=20, deadline=None)
@given(cin=st.integers(1, 5), cout=st.integers(1, 5), h=st.integers(2, 7), fil=st.integers(1, 4),
       stride=st.integers(1, 3), pad=st.integers(0, 2), extra=st.integers(0, 2), dil=st.integers(1, 2))
def test_random_transposed_geometries_are_their_equivalent_convolution(cin, cout, h, fil, stride, pad, extra, dil):
    output_padding = min(extra, stride - 1)  # output_padding >= stride never runs on cuDNN: the next test
    out_h = (h - 1) * stride - 2 * pad + dil * (fil - 1) + output_padding + 1
    if out_h < 1:
        return
    model = nn.Sequential(nn.Conv2d(2, cin, 1),  # so that the transposed conv's input needs grad: it has an F
                          nn.ConvTranspose2d(cin, cout, fil, stride=stride, padding=pad, dilation=dil,
                                             output_padding=output_padding))
    tr = trace_model(model, (2, 2, h, h))
    p = tr.problems[tr.problems["transposed"] == 1]
    assert sorted(p["direction"]) == ["B", "F", "W"]
    parsed = parse_miopen_keys(p["problem_id"])
    assert (parsed["output_size_status"] == "ok").all()
    assert set(parsed["c"]) == {cout} and set(parsed["k"]) == {cin}
    assert set(parsed["x_h"]) == {out_h} and set(parsed["y_h"]) == {h}
    assert set(parsed["fil_h"]) == {fil} and set(parsed["stride_h"]) == {stride} and set(parsed["pad_h"]) == {pad}


def test_a_transposed_conv_that_never_runs_on_cudnn_makes_no_problem():
    """output_padding 1 >= stride 1 (allowed as the dilation is 2): ATen's use_cudnn is false for it."""
    model = nn.Sequential(nn.Conv2d(2, 3, 1), nn.ConvTranspose2d(3, 4, 3, stride=1, dilation=2, output_padding=1))
    tr = trace_model(model, (1, 2, 5, 5))
    deconv = tr.calls[tr.calls["layer"] == "1"]
    assert deconv["cudnn"].tolist() == [0, 0] and deconv["problem_ids"].tolist() == ["", ""]
    assert set(tr.problems["layers"]) == {"0"} and tr.info["counts"]["calls_not_on_cudnn"] == 2
