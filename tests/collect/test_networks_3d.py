"""The builders of the 3D corpus's networks (tools/collect/networks_3d.py): convolution counts derived by hand
from each architecture, exact layer shapes, and one forward per network on the meta device."""

import importlib.util
from pathlib import Path

import pytest
import torch
from torch import nn

# a script of tools/, which the package never imports: loaded from its file
_SPEC = importlib.util.spec_from_file_location(
    "networks_3d", Path(__file__).resolve().parents[2] / "tools" / "collect" / "networks_3d.py")
N = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(N)

BATCH = 2


def _build(name):
    """NETWORKS_3D[name] built straight on the meta device (no weights allocated or initialised)."""
    with torch.device("meta"):
        return N.NETWORKS_3D[name].factory()


def _counts(net):
    """(Conv3d modules, ConvTranspose3d modules) of ``net``."""
    mods = list(net.modules())
    return sum(type(m) is nn.Conv3d for m in mods), sum(type(m) is nn.ConvTranspose3d for m in mods)


def _trace(net, inputs):
    """The forward's output and its 3D convolution calls, in order: (module name, module, input shape,
    output shape), as the corpus tracer records them with forward hooks."""
    calls = []
    names = {m: n for n, m in net.named_modules()}
    hooks = [m.register_forward_hook(lambda m, i, o: calls.append((names[m], m, tuple(i[0].shape), tuple(o.shape))))
             for m in net.modules() if isinstance(m, (nn.Conv3d, nn.ConvTranspose3d))]
    try:
        out = net(*inputs)
    finally:
        for h in hooks:
            h.remove()
    return out, calls


@pytest.fixture(scope="module")
def traced():
    """Every network of NETWORKS_3D, built and traced once at batch 2: name -> (net, output, calls)."""
    result = {}
    for name in N.NETWORKS_3D:
        net = _build(name)
        out, calls = _trace(net, N.example_inputs(name, BATCH))
        result[name] = (net, out, calls)
    return result


# Conv3d and ConvTranspose3d modules built, and 3D convolution calls in one forward, derived by hand:
EXPECTED_COUNTS = {
    # Conv3d: 2 convs x 3 analysis levels + 2 bottleneck convs + 2 convs x 3 synthesis levels + 1 head = 15;
    # ConvTranspose3d: one per synthesis level = 3; every module called once: 18 calls
    "unet3d": (15, 3, 18),
    # 6 stages. Conv3d: 2 x 6 encoder + 2 x 5 decoder + 5 seg heads (one per decoder stage, built for deep
    # supervision) = 27; ConvTranspose3d: 5. Without deep supervision only the last head runs:
    # 12 + 10 + 1 + 5 = 28 calls
    "nnunet_3d_fullres_iso": (27, 5, 28),
    # 7 stages: 2 x 7 + 2 x 6 + 6 heads = 32 Conv3d, 6 ConvTranspose3d; calls 14 + 12 + 1 + 6 = 33
    "nnunet_3d_fullres_aniso": (32, 6, 33),
    # Conv3d: stage convs 1 + 2 + 3 + 3 + 3 = 12, down-convs 4, decoder stage convs 3 + 3 + 2 + 1 = 9, head 1:
    # 26; ConvTranspose3d: 4 up-convs; 30 calls
    "vnet": (26, 4, 30),
    # stem Conv3d_1a, 2b, 2c = 3; 9 Mixed modules x 6 convs (b0: 1, b1: 2, b2: 2, b3: 1) = 54; logits 1: 58
    "i3d": (58, 0, 58),
    # per pathway: 16 bottlenecks (3 + 4 + 6 + 3) x 3 convs = 48, plus a projection shortcut on the first
    # block of each of the 4 stages = 52; two pathways 104; stems 2; lateral convs 4 (stem, res2, res3, res4):
    # 110
    "slowfast_r50": (110, 0, 110),
    # stem 2 (1x3x3 and the channelwise 5x1x1); 26 blocks (3 + 5 + 11 + 7) x 3 convs = 78; 4 shortcuts (the
    # first block of each stage has stride 2); SE on blocks 0, 2, ... of each stage: 2 + 3 + 6 + 4 = 15 SE x 2
    # FC convs = 30; head conv5 + lin5 = 2: 116
    "x3d_m": (116, 0, 116),
    # X3D-S has X3D-M's depths and widths (only its input differs): 116
    "x3d_s": (116, 0, 116),
}


def test_registry():
    assert set(N.NETWORKS_3D) == set(EXPECTED_COUNTS)
    kinds = {name: entry.kind for name, entry in N.NETWORKS_3D.items()}
    assert {n for n, k in kinds.items() if k == "volumetric"} == {
        "unet3d", "nnunet_3d_fullres_iso", "nnunet_3d_fullres_aniso", "vnet"}
    assert {n for n, k in kinds.items() if k == "video"} == {"i3d", "slowfast_r50", "x3d_m", "x3d_s"}
    assert N.input_shapes("unet3d") == [(1, 96, 96, 96)]
    assert N.input_shapes("nnunet_3d_fullres_iso") == [(4, 128, 128, 128)]
    assert N.input_shapes("nnunet_3d_fullres_aniso") == [(1, 20, 320, 256)]
    assert N.input_shapes("vnet") == [(1, 64, 128, 128)]
    assert N.input_shapes("i3d") == [(3, 32, 224, 224)]
    assert N.input_shapes("slowfast_r50") == [(3, 4, 224, 224), (3, 32, 224, 224)]
    assert N.input_shapes("x3d_m") == [(3, 16, 224, 224)]
    assert N.input_shapes("x3d_s") == [(3, 13, 160, 160)]
    for entry in N.NETWORKS_3D.values():
        assert entry.citation and callable(entry.factory)


@pytest.mark.parametrize("name", list(EXPECTED_COUNTS))
def test_convolution_counts(traced, name):
    net, _, calls = traced[name]
    conv3d, transposed, n_calls = EXPECTED_COUNTS[name]
    assert _counts(net) == (conv3d, transposed)
    assert len(calls) == n_calls


@pytest.mark.parametrize("name, expected", [
    # segmentation: n_classes channels at the input's spatial size
    ("unet3d", (BATCH, 3, 96, 96, 96)),
    ("nnunet_3d_fullres_iso", (BATCH, 4, 128, 128, 128)),
    ("nnunet_3d_fullres_aniso", (BATCH, 3, 20, 320, 256)),
    ("vnet", (BATCH, 2, 64, 128, 128)),
    # classifiers: (batch, num_classes)
    ("i3d", (BATCH, 400)), ("slowfast_r50", (BATCH, 400)), ("x3d_m", (BATCH, 400)), ("x3d_s", (BATCH, 400)),
])
def test_output_shapes(traced, name, expected):
    _, out, _ = traced[name]
    assert out.device.type == "meta"
    assert tuple(out.shape) == expected


def test_unet3d_layers(traced):
    net, _, calls = traced["unet3d"]
    convs = [(tuple(m.weight.shape), i, o) for _, m, i, o in calls if type(m) is nn.Conv3d]
    # the analysis path at 96^3, 48^3, 24^3, 12^3: 1 -> 32 -> 64, 64 -> 64 -> 128, 128 -> 256, 256 -> 512
    assert [w[:2] for w, _, _ in convs[:8]] == [(32, 1), (64, 32), (64, 64), (128, 64), (128, 128), (256, 128),
                                               (256, 256), (512, 256)]
    assert convs[7][1] == (BATCH, 256, 12, 12, 12)
    # the synthesis convs after concatenation: 512 + 256 = 768 -> 256, 256 + 128 = 384 -> 128, 128 + 64 = 192 -> 64
    assert [convs[i][0][:2] for i in (8, 10, 12)] == [(256, 768), (128, 384), (64, 192)]
    assert all(m.kernel_size == (3, 3, 3) and m.padding == (1, 1, 1) for _, m, _, _ in calls[:8])
    ups = [m for _, m, _, _ in calls if type(m) is nn.ConvTranspose3d]
    # ConvTranspose3d weights are (in, out, k, k, k)
    assert [tuple(m.weight.shape) for m in ups] == [(512, 512, 2, 2, 2), (256, 256, 2, 2, 2), (128, 128, 2, 2, 2)]
    assert all(m.stride == (2, 2, 2) for m in ups)
    assert tuple(net.head.weight.shape) == (3, 64, 1, 1, 1)


def test_unet3d_paper_parameter_count():
    # the paper: 19,069,955 parameters for 3 input channels and 3 classes. Its convolutions carry a bias and
    # no batch norm, its transposed convolutions no bias; here the 14 normalised 3x3x3 convs trade their bias
    # for a BatchNorm weight and shift (one more per channel: (32 + 64 + 64 + 128 + 128 + 256 + 256 + 512) analysis
    # + 2 x (256 + 128 + 64) synthesis = 1440 + 896 = 2336) and the transposed convs have biases (512 + 256 + 128)
    with torch.device("meta"):
        net = N.unet3d(in_channels=3, n_classes=3)
    assert sum(p.numel() for p in net.parameters()) == 19_069_955 + 2336 + 896


def test_nnunet_iso_layers(traced):
    net, _, calls = traced["nnunet_3d_fullres_iso"]
    stage_out = [stage[1][0].out_channels for stage in net.encoder]
    assert stage_out == [32, 64, 128, 256, 320, 320]
    assert stage_out[-1] == 320
    first_convs = [stage[0][0] for stage in net.encoder]
    assert [c.stride for c in first_convs] == [(1, 1, 1)] + [(2, 2, 2)] * 5
    # 128 / 2^5 = 4: the bottleneck's second conv sees 320 x 4^3
    bottleneck = [(n, i) for n, _, i, _ in calls if n == "encoder.5.1.0"]
    assert bottleneck == [("encoder.5.1.0", (BATCH, 320, 4, 4, 4))]
    # the first transposed conv 320 -> 320 back to 8^3, the decoder conv after it sees 320 + 320 channels
    _, up, i, o = next(c for c in calls if type(c[1]) is nn.ConvTranspose3d)
    assert tuple(up.weight.shape) == (320, 320, 2, 2, 2) and i[1:] == (320, 4, 4, 4) and o[1:] == (320, 8, 8, 8)
    assert tuple(net.decoder[0][0][0].weight.shape) == (320, 640, 3, 3, 3)
    assert tuple(net.decoder[-1][0][0].weight.shape) == (32, 64, 3, 3, 3)
    assert all(type(m[2]) is nn.LeakyReLU and type(m[1]) is nn.InstanceNorm3d for s in net.encoder for m in s)


def test_nnunet_aniso_layers(traced):
    net, _, calls = traced["nnunet_3d_fullres_aniso"]
    first_convs = [stage[0][0] for stage in net.encoder]
    assert [c.kernel_size for c in first_convs] == [(1, 3, 3)] * 2 + [(3, 3, 3)] * 5
    assert [c.padding for c in first_convs] == [(0, 1, 1)] * 2 + [(1, 1, 1)] * 5
    # 20x320x256 through strides (1,1,1), (1,2,2), (1,2,2), (2,2,2), (2,2,2), (1,2,2), (1,2,2): D 20, 20, 20,
    # 10, 5, 5, 5; H 320, 160, 80, 40, 20, 10, 5; W 256, 128, 64, 32, 16, 8, 4
    outs = [o for n, _, _, o in calls if n.startswith("encoder.") and n.endswith(".1.0")]
    assert [o[2:] for o in outs] == [(20, 320, 256), (20, 160, 128), (20, 80, 64), (10, 40, 32), (5, 20, 16),
                                     (5, 10, 8), (5, 5, 4)]
    # transposed convs: kernel = stride of the encoder stage below, bottleneck first
    ups = [m for m in net.transpconvs]
    assert [m.kernel_size for m in ups] == [(1, 2, 2), (1, 2, 2), (2, 2, 2), (2, 2, 2), (1, 2, 2), (1, 2, 2)]
    assert all(m.kernel_size == m.stride for m in ups)
    # the last decoder stage uses the first encoder stage's (1,3,3) kernel
    assert net.decoder[-1][0][0].kernel_size == (1, 3, 3)


def test_nnunet_deep_supervision():
    with torch.device("meta"):
        net = N.nnunet_from_plan(N.NNUNET_3D_FULLRES_ISO, deep_supervision=True)
    outs = net(torch.empty((1, 4, 128, 128, 128), device="meta"))
    # one output per decoder stage, largest first: 128, 64, 32, 16, 8
    assert [tuple(o.shape) for o in outs] == [(1, 4, s, s, s) for s in (128, 64, 32, 16, 8)]


def test_vnet_layers(traced):
    net, _, calls = traced["vnet"]
    first = calls[0][1]
    assert tuple(first.weight.shape) == (16, 1, 5, 5, 5) and first.padding == (2, 2, 2)
    downs = [m for _, m, _, _ in calls if type(m) is nn.Conv3d and m.kernel_size == (2, 2, 2)]
    assert [tuple(m.weight.shape[:2]) for m in downs] == [(32, 16), (64, 32), (128, 64), (256, 128)]
    # the bottom stage at 256 channels, 64x128x128 / 16 = 4x8x8
    assert [i for n, _, i, _ in calls if n == "encoder.3.0.0"] == [(BATCH, 256, 4, 8, 8)]
    # up-convs to half the stage width, concatenated with the skip of the same width
    ups = [m for _, m, _, _ in calls if type(m) is nn.ConvTranspose3d]
    assert [tuple(m.weight.shape) for m in ups] == [(256, 128, 2, 2, 2), (256, 64, 2, 2, 2), (128, 32, 2, 2, 2),
                                                    (64, 16, 2, 2, 2)]
    assert [len(stage) for stage in net.decoder] == [3, 3, 2, 1]
    assert [stage[0][0].in_channels for stage in net.decoder] == [256, 128, 64, 32]
    n_5x5x5 = sum(1 for _, m, _, _ in calls if type(m) is nn.Conv3d and m.kernel_size == (5, 5, 5))
    assert n_5x5x5 == 12 + 9
    assert tuple(net.head.weight.shape) == (2, 32, 1, 1, 1)


def test_i3d_layers(traced):
    net, _, calls = traced["i3d"]
    conv1a = net.features.Conv3d_1a_7x7[0]
    assert tuple(conv1a.weight.shape) == (64, 3, 7, 7, 7)
    assert conv1a.stride == (2, 2, 2) and conv1a.padding == (3, 3, 3)
    # "same" padding: 32x224x224 -> 16x112x112
    assert calls[0][3] == (BATCH, 64, 16, 112, 112)
    assert [net.features.get_submodule(n).out_channels for n in N.I3D_MIXED] == [
        256, 480, 512, 512, 512, 528, 832, 832, 1024]
    # Mixed_3b at 16x28x28 (two (1,2,2) pools after the stem), Mixed_4b at 8x14x14, Mixed_5b at 4x7x7
    inputs = {n: i for n, _, i, _ in calls}
    assert inputs["features.Mixed_3b.branch0.0"] == (BATCH, 192, 16, 28, 28)
    assert inputs["features.Mixed_4b.branch0.0"] == (BATCH, 480, 8, 14, 14)
    assert inputs["features.Mixed_5b.branch0.0"] == (BATCH, 832, 4, 7, 7)
    # the (2,7,7) average pool leaves 3 time steps for the logits
    assert inputs["logits"] == (BATCH, 1024, 3, 1, 1)
    assert tuple(net.logits.weight.shape) == (400, 1024, 1, 1, 1)
    assert {m.kernel_size for _, m, _, _ in calls[1:]} == {(1, 1, 1), (3, 3, 3)}


def test_slowfast_layers(traced):
    net, _, calls = traced["slowfast_r50"]
    lateral = net.fuse[0].conv
    assert tuple(lateral.weight.shape) == (16, 8, 5, 1, 1)
    assert lateral.stride == (8, 1, 1) and lateral.padding == (2, 0, 0)
    inputs = {n: (i, o) for n, _, i, o in calls}
    # the fast stem output 8 x 32 x 56 x 56 becomes 16 x 4 x 56 x 56: the slow pathway's 4 frames
    assert inputs["fuse.0.conv"] == ((BATCH, 8, 32, 56, 56), (BATCH, 16, 4, 56, 56))
    assert [f.conv.in_channels for f in net.fuse] == [8, 32, 64, 128]
    assert [f.conv.out_channels for f in net.fuse] == [16, 64, 128, 256]
    # slow stage inputs: 64 + 16, 256 + 64, 512 + 128, 1024 + 256
    assert [s[0].a[0].in_channels for s in net.slow_stages] == [80, 320, 640, 1280]
    assert [s[0].a[0].in_channels for s in net.fast_stages] == [8, 32, 64, 128]
    assert [len(s) for s in net.slow_stages] == [3, 4, 6, 3]
    assert [s[-1].c[0].out_channels for s in net.slow_stages] == [256, 512, 1024, 2048]
    assert [s[-1].c[0].out_channels for s in net.fast_stages] == [32, 64, 128, 256]
    # temporal kernel of the first conv: slow 1, 1, 3, 3 and fast 3, 3, 3, 3
    assert [s[0].a[0].kernel_size for s in net.slow_stages] == [(1, 1, 1), (1, 1, 1), (3, 1, 1), (3, 1, 1)]
    assert all(s[0].a[0].kernel_size == (3, 1, 1) for s in net.fast_stages)
    assert [s[0].b[0].stride for s in net.slow_stages] == [(1, 1, 1), (1, 2, 2), (1, 2, 2), (1, 2, 2)]
    assert net.slow_stem[0].kernel_size == (1, 7, 7) and net.fast_stem[0].kernel_size == (5, 7, 7)
    assert inputs["slow_stages.3.2.c.0"][1] == (BATCH, 2048, 4, 7, 7)
    assert inputs["fast_stages.3.2.c.0"][1] == (BATCH, 256, 32, 7, 7)
    assert net.projection.in_features == 2048 + 256


def test_x3d_layers(traced):
    net, _, calls = traced["x3d_m"]
    assert tuple(net.conv5[0].weight.shape) == (432, 192, 1, 1, 1)
    stem_xy, stem_t = net.stem[0], net.stem[1]
    assert tuple(stem_xy.weight.shape) == (24, 3, 1, 3, 3) and stem_xy.stride == (1, 2, 2)
    assert tuple(stem_t.weight.shape) == (24, 1, 5, 1, 1) and stem_t.groups == 24
    assert [len(s) for s in net.stages] == [3, 5, 11, 7]
    # inner widths int(2.25 w): 54, 108, 216, 432; the 3x3x3 conv is channelwise
    depthwise = [s[0].b[0] for s in net.stages]
    assert [(c.in_channels, c.groups, c.stride) for c in depthwise] == [
        (54, 54, (1, 2, 2)), (108, 108, (1, 2, 2)), (216, 216, (1, 2, 2)), (432, 432, (1, 2, 2))]
    # SE widths: round_width(c / 16) = 8, 8, 16, 32 (27 rounds to 24, below 90% of 27, so 32)
    assert [s[0].b[2].fc1.out_channels for s in net.stages] == [8, 8, 16, 32]
    assert [isinstance(b.b[2], N._SqueezeExcitation) for b in net.stages[1]] == [True, False, True, False, True]
    inputs = {n: i for n, _, i, _ in calls}
    # 16 frames all along; 224 -> 112 (stem) -> 56, 28, 14, 7
    assert inputs["stages.3.0.b.0"] == (BATCH, 432, 16, 14, 14)
    assert inputs["conv5.0"] == (BATCH, 192, 16, 7, 7)
    # the SE FC convs and lin5 run on pooled 1x1x1 tensors
    assert inputs["stages.3.0.b.2.fc1"] == (BATCH, 432, 1, 1, 1)
    assert inputs["lin5.0"] == (BATCH, 432, 1, 1, 1)
    assert tuple(net.lin5[0].weight.shape) == (2048, 432, 1, 1, 1)
    # X3D-S: the same layers at 13 frames of 160 -> 80 -> 40, 20, 10, 5
    _, _, calls_s = traced["x3d_s"]
    assert {n: i for n, _, i, _ in calls_s}["conv5.0"] == (BATCH, 192, 13, 5, 5)
    # X3D-L is deeper: ceil(5.0 x (1, 2, 5, 3)) blocks
    with torch.device("meta"):
        assert [len(s) for s in N.x3d("L").stages] == [5, 10, 25, 15]


def test_to_meta_from_cpu():
    # the tracer's form: built on the CPU, moved to meta, one forward
    net = N.NETWORKS_3D["x3d_s"].factory().to("meta")
    out = net(*[torch.empty((1, *shape), device="meta") for shape in N.input_shapes("x3d_s")])
    assert tuple(out.shape) == (1, 400)
