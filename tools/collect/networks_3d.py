"""Builders of the 3D convolutional networks that kbench's 3D corpus traces and torchvision does not ship.

The 3D corpus is the list of the ``nn.Conv3d`` and ``nn.ConvTranspose3d`` calls of real networks, recorded
from the modules themselves: a tracer builds each network, moves it to PyTorch's ``meta`` device (shapes
only, no arithmetic), hangs forward hooks on its 3D convolutions and runs one forward pass. torchvision's
video models (r3d_18, mc3_18, r2plus1d_18, s3d, mvit, swin3d) are traced from torchvision itself; this file
holds plain ``torch.nn`` builders, written from the published configurations, for the others:

* ``unet3d``: 3D U-Net, Çiçek, Abdulkadir, Lienkamp, Brox and Ronneberger, "3D U-Net: Learning Dense
  Volumetric Segmentation from Sparse Annotation", MICCAI 2016 (arXiv:1606.06650).
* ``nnunet_plain``: nnU-Net's PlainConvUNet, Isensee, Jaeger, Kohl, Petersen and Maier-Hein, "nnU-Net: a
  self-configuring method for deep learning-based biomedical image segmentation", Nature Methods 18,
  203-211 (2021); the module as MIC-DKFZ/dynamic-network-architectures builds it, with two plans
  (``NNUNET_3D_FULLRES_ISO``, ``NNUNET_3D_FULLRES_ANISO``).
* ``vnet``: V-Net, Milletari, Navab and Ahmadi, "V-Net: Fully Convolutional Neural Networks for
  Volumetric Medical Image Segmentation", 3DV 2016 (arXiv:1606.04797).
* ``i3d``: the Inflated Inception-v1 of Carreira and Zisserman, "Quo Vadis, Action Recognition? A New
  Model and the Kinetics Dataset", CVPR 2017 (arXiv:1705.07750).
* ``slowfast_r50``: SlowFast R50, Feichtenhofer, Fan, Malik and He, "SlowFast Networks for Video
  Recognition", ICCV 2019 (arXiv:1812.03982), as PySlowFast's ``SLOWFAST_4x16_R50`` config.
* ``x3d``: X3D, Feichtenhofer, "X3D: Expanding Architectures for Efficient Video Recognition", CVPR 2020
  (arXiv:2004.04730), as PySlowFast's ``X3D_XS/S/M/L`` configs.

``NETWORKS_3D`` names each traced network with a builder that takes no arguments, the input it is traced
at (without the batch dimension), its kind ("video" or "volumetric") and its citation. Every module runs
on the ``meta`` device::

    net = factory().to("meta")
    out = net(*[torch.empty((batch, *shape), device="meta") for shape in input_shapes(name)])

Only the convolutions' shapes matter to the corpus; normalisation, activation and pooling layers are kept
where the papers put them so that each module is the network and not a skeleton of it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch import nn

Triple = tuple[int, int, int]


def _triple(v: int | Sequence[int]) -> Triple:
    """``v`` as a (depth, height, width) triple: an int stands for the same value in all three."""
    if isinstance(v, int):
        return (v, v, v)
    t = tuple(int(x) for x in v)
    if len(t) != 3:
        raise ValueError(f"expected an int or 3 values, got {v!r}")
    return t


def _same(kernel: Triple) -> Triple:
    """The symmetric padding that keeps a stride-1 convolution's output the size of its input (odd kernels)."""
    return tuple(k // 2 for k in kernel)


# --------------------------------------------------------------------------------------------- 3D U-Net


class _ConvBnRelu(nn.Sequential):
    """3x3x3 convolution, BatchNorm3d, ReLU: one convolution of 3D U-Net."""

    def __init__(self, c_in: int, c_out: int):
        # bias off: the batch norm that follows has its own shift
        super().__init__(nn.Conv3d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm3d(c_out), nn.ReLU(inplace=True))


class UNet3D(nn.Module):
    """3D U-Net (Çiçek et al. 2016), the network of the paper's Fig. 1.

    Analysis path: 4 resolution levels of two 3x3x3 convolutions (each followed by BatchNorm3d and ReLU),
    the second doubling the channels (32 -> 64, 64 -> 128, 128 -> 256, and the bottleneck 256 -> 512),
    with a 2x2x2 max pool of stride 2 between levels. Synthesis path: a 2x2x2 transposed convolution of
    stride 2 that keeps the channels (512 -> 512, 256 -> 256, 128 -> 128 as in the paper), concatenation
    with the analysis level's output, two 3x3x3 convolutions, and a final 1x1x1 convolution to the classes.

    The paper's convolutions are unpadded (input 132x132x116, output 44x44x28); this uses padding 1
    ("same"), as the common implementations do, so that the output has the input's spatial size, which
    must then be divisible by 8. The paper's tile has 3 channels; built with ``in_channels=3`` this has the
    paper's 19,069,955 parameters plus one per normalised channel (a BatchNorm weight and shift where the
    paper's convolutions have a bias) and the transposed convolutions' biases.
    """

    def __init__(self, in_channels: int = 1, n_classes: int = 3):
        super().__init__()
        # (first conv's output, second conv's output) per level; the last is the bottleneck
        levels = [(32, 64), (64, 128), (128, 256), (256, 512)]
        self.encoder = nn.ModuleList()
        c = in_channels
        for mid, out in levels:
            self.encoder.append(nn.Sequential(_ConvBnRelu(c, mid), _ConvBnRelu(mid, out)))
            c = out
        self.pool = nn.MaxPool3d(2, stride=2)
        self.up = nn.ModuleList()
        self.decoder = nn.ModuleList()
        for (_, skip), (_, below) in zip(reversed(levels[:-1]), reversed(levels[1:])):
            # ``below`` is the width of the level underneath: the bottleneck's 512, then the synthesis levels'
            self.up.append(nn.ConvTranspose3d(below, below, 2, stride=2))
            # the synthesis level returns to the analysis level's output width (768 -> 256, 384 -> 128, 192 -> 64)
            self.decoder.append(nn.Sequential(_ConvBnRelu(below + skip, skip), _ConvBnRelu(skip, skip)))
        self.head = nn.Conv3d(levels[0][1], n_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for i, level in enumerate(self.encoder):
            if i:
                x = self.pool(x)
            x = level(x)
            skips.append(x)
        x = skips.pop()
        for up, level in zip(self.up, self.decoder):
            x = level(torch.cat([up(x), skips.pop()], dim=1))
        return self.head(x)


def unet3d(in_channels: int = 1, n_classes: int = 3) -> UNet3D:
    """3D U-Net of Çiçek et al. 2016 ("same" padding); the paper segments 3 labels of Xenopus kidney volumes."""
    return UNet3D(in_channels, n_classes)


# --------------------------------------------------------------------------------------- nnU-Net (plain)


class NnUNetPlan(NamedTuple):
    """The architecture part of an nnU-Net 3d_fullres plan: what PlainConvUNet is built from."""

    in_channels: int
    n_classes: int
    features: tuple[int, ...]
    kernels: tuple[Triple, ...]
    strides: tuple[Triple, ...]
    patch_size: Triple


#: nnU-Net's isotropic 3d_fullres plan, BraTS-like: 4 MRI modalities (T1, T1ce, T2, FLAIR), a 128^3
#: patch, 4 classes (background and the 3 tumour labels), 6 stages down to 4^3.
NNUNET_3D_FULLRES_ISO = NnUNetPlan(
    in_channels=4, n_classes=4,
    features=(32, 64, 128, 256, 320, 320),
    kernels=((3, 3, 3),) * 6,
    strides=((1, 1, 1),) + ((2, 2, 2),) * 5,
    patch_size=(128, 128, 128),
)

#: The form of nnU-Net's 3d_fullres plan for anisotropic (thick-slice) data such as its prostate task, not
#: a copy of one plans file: in-plane-only (1,3,3) kernels and (1,2,2) strides while the slice spacing is
#: coarser than the in-plane spacing, isotropic ones after; one channel, a 20x320x256 patch, 3 classes
#: (background and 2 zones), 7 stages down to 5x5x4.
NNUNET_3D_FULLRES_ANISO = NnUNetPlan(
    in_channels=1, n_classes=3,
    features=(32, 64, 128, 256, 320, 320, 320),
    kernels=((1, 3, 3), (1, 3, 3)) + ((3, 3, 3),) * 5,
    strides=((1, 1, 1), (1, 2, 2), (1, 2, 2), (2, 2, 2), (2, 2, 2), (1, 2, 2), (1, 2, 2)),
    patch_size=(20, 320, 256),
)


class _ConvNormNonlin(nn.Sequential):
    """nnU-Net's ConvDropoutNormReLU without dropout: conv (with bias), InstanceNorm3d (affine), LeakyReLU(0.01)."""

    def __init__(self, c_in: int, c_out: int, kernel: Triple, stride: Triple):
        super().__init__(
            nn.Conv3d(c_in, c_out, kernel, stride=stride, padding=_same(kernel), bias=True),
            nn.InstanceNorm3d(c_out, eps=1e-5, affine=True),
            nn.LeakyReLU(0.01, inplace=True),
        )


class PlainConvUNet(nn.Module):
    """nnU-Net's PlainConvUNet (dynamic_network_architectures.architectures.unet.PlainConvUNet), 3D.

    Encoder: one stage per entry of ``features``, each 2 conv-norm-nonlin blocks whose first convolution
    carries the stage's stride (nnU-Net downsamples by strided convolution, no pooling). Decoder, from the
    bottleneck up: a ConvTranspose3d with kernel = stride = the stride of the encoder stage below, to the
    skip's channels; concatenation with the skip; 2 conv-norm-nonlin blocks with that encoder stage's
    kernel. As in the original, a 1x1x1 segmentation head is built for every decoder stage (so that
    weights trained with deep supervision load); with ``deep_supervision=False`` only the full-resolution
    head is called and the forward returns its output, with True it returns the heads' outputs, largest
    first.
    """

    def __init__(self, in_channels: int, n_classes: int, features: Sequence[int],
                 kernels: Sequence[int | Sequence[int]], strides: Sequence[int | Sequence[int]],
                 deep_supervision: bool = False):
        super().__init__()
        if not len(features) == len(kernels) == len(strides):
            raise ValueError("features, kernels and strides need one entry per stage")
        kernels = [_triple(k) for k in kernels]
        strides = [_triple(s) for s in strides]
        self.deep_supervision = deep_supervision
        self.encoder = nn.ModuleList()
        c = in_channels
        for f, k, s in zip(features, kernels, strides):
            self.encoder.append(nn.Sequential(_ConvNormNonlin(c, f, k, s), _ConvNormNonlin(f, f, k, (1, 1, 1))))
            c = f
        self.transpconvs = nn.ModuleList()
        self.decoder = nn.ModuleList()
        self.seg_layers = nn.ModuleList()
        for s in range(len(features) - 1, 0, -1):
            below, skip = features[s], features[s - 1]
            self.transpconvs.append(nn.ConvTranspose3d(below, skip, strides[s], stride=strides[s], bias=True))
            self.decoder.append(nn.Sequential(_ConvNormNonlin(2 * skip, skip, kernels[s - 1], (1, 1, 1)),
                                              _ConvNormNonlin(skip, skip, kernels[s - 1], (1, 1, 1))))
            self.seg_layers.append(nn.Conv3d(skip, n_classes, 1, bias=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor | list[torch.Tensor]:
        skips = []
        for stage in self.encoder:
            x = stage(x)
            skips.append(x)
        x = skips.pop()
        outputs = []
        last = len(self.decoder) - 1
        for i, (up, stage, seg) in enumerate(zip(self.transpconvs, self.decoder, self.seg_layers)):
            x = stage(torch.cat([up(x), skips.pop()], dim=1))
            if self.deep_supervision or i == last:
                outputs.append(seg(x))
        return outputs[::-1] if self.deep_supervision else outputs[-1]


def nnunet_plain(in_channels: int, n_classes: int, features: Sequence[int], kernels: Sequence[int | Sequence[int]],
                 strides: Sequence[int | Sequence[int]], deep_supervision: bool = False) -> PlainConvUNet:
    """nnU-Net's PlainConvUNet (Isensee et al. 2021): 2 convs per encoder and decoder stage, InstanceNorm3d,
    LeakyReLU, strided-conv downsampling, transposed-conv upsampling; kernels and strides per stage."""
    return PlainConvUNet(in_channels, n_classes, features, kernels, strides, deep_supervision)


def nnunet_from_plan(plan: NnUNetPlan, deep_supervision: bool = False) -> PlainConvUNet:
    """The PlainConvUNet of an nnU-Net plan (``NNUNET_3D_FULLRES_ISO``, ``NNUNET_3D_FULLRES_ANISO``)."""
    return nnunet_plain(plan.in_channels, plan.n_classes, plan.features, plan.kernels, plan.strides,
                        deep_supervision)


# ------------------------------------------------------------------------------------------------ V-Net


def _conv5_prelu(c_in: int, c_out: int) -> nn.Sequential:
    """A 5x5x5 "same" convolution and its PReLU, V-Net's convolution."""
    return nn.Sequential(nn.Conv3d(c_in, c_out, 5, padding=2), nn.PReLU(c_out))


class _ResidualStage(nn.Sequential):
    """A V-Net stage: ``n`` 5x5x5 convolutions at ``width`` channels whose output is added to the stage's input."""

    def __init__(self, c_in: int, width: int, n: int):
        super().__init__(*[_conv5_prelu(c_in if i == 0 else width, width) for i in range(n)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + x


class VNet(nn.Module):
    """V-Net (Milletari et al. 2016), the network of the paper's Fig. 2.

    Compression path: residual stages of 1, 2, 3, 3, 3 convolutions (5x5x5, PReLU) at 16, 32, 64, 128, 256
    channels, joined by 2x2x2 stride-2 convolutions that double the channels. Decompression path: 2x2x2
    stride-2 transposed convolutions to half the stage's width, concatenation with the compression stage of
    that resolution (restoring the width: 256, 128, 64, 32), residual stages of 3, 3, 2, 1 convolutions, and
    a final 1x1x1 convolution to the classes (the paper's softmax is left to the loss). The paper uses no
    normalisation layer, so none is added. The first stage's residual adds the input, repeated across the
    16 channels (the input channels must divide 16); the paper's input is 1x64x128x128 (D, H, W).
    """

    def __init__(self, in_channels: int = 1, n_classes: int = 2):
        super().__init__()
        widths, enc_convs, dec_convs = (16, 32, 64, 128, 256), (1, 2, 3, 3, 3), (3, 3, 2, 1)
        if widths[0] % in_channels:
            raise ValueError(f"V-Net's first residual repeats the input over {widths[0]} channels: "
                             f"in_channels={in_channels} does not divide it")
        # the first stage's residual: the input repeated to the stage's width
        self.input_repeats = widths[0] // in_channels
        self.first = nn.Sequential(*[_conv5_prelu(in_channels if i == 0 else widths[0], widths[0])
                                     for i in range(enc_convs[0])])
        self.down = nn.ModuleList()
        self.encoder = nn.ModuleList()
        for i in range(1, len(widths)):
            self.down.append(nn.Sequential(nn.Conv3d(widths[i - 1], widths[i], 2, stride=2), nn.PReLU(widths[i])))
            self.encoder.append(_ResidualStage(widths[i], widths[i], enc_convs[i]))
        self.up = nn.ModuleList()
        self.decoder = nn.ModuleList()
        c = widths[-1]
        for width, n in zip(reversed(widths[1:]), dec_convs):
            # up to width / 2, concatenated with the width / 2 skip: the stage works at ``width``
            self.up.append(nn.Sequential(nn.ConvTranspose3d(c, width // 2, 2, stride=2), nn.PReLU(width // 2)))
            self.decoder.append(_ResidualStage(width, width, n))
            c = width
        self.head = nn.Conv3d(c, n_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.first(x) + x.repeat(1, self.input_repeats, 1, 1, 1)
        skips = [x]
        for down, stage in zip(self.down, self.encoder):
            x = stage(down(x))
            skips.append(x)
        x = skips.pop()
        for up, stage in zip(self.up, self.decoder):
            x = stage(torch.cat([up(x), skips.pop()], dim=1))
        return self.head(x)


def vnet(in_channels: int = 1, n_classes: int = 2) -> VNet:
    """V-Net of Milletari et al. 2016 (prostate MRI, foreground/background), input 1x64x128x128."""
    return VNet(in_channels, n_classes)


# -------------------------------------------------------------------------------------------------- I3D


class _Unit3D(nn.Sequential):
    """I3D's Unit3D: convolution without bias, BatchNorm3d (eps 1e-3, as the TF original), ReLU."""

    def __init__(self, c_in: int, c_out: int, kernel: int | Sequence[int] = 1, stride: int | Sequence[int] = 1):
        kernel = _triple(kernel)
        super().__init__(nn.Conv3d(c_in, c_out, kernel, stride=stride, padding=_same(kernel), bias=False),
                         nn.BatchNorm3d(c_out, eps=1e-3), nn.ReLU(inplace=True))


class _Mixed(nn.Module):
    """An inflated Inception-v1 module: 1x1x1 | 1x1x1 -> 3x3x3 | 1x1x1 -> 3x3x3 | 3x3x3 max pool -> 1x1x1.

    ``widths`` = (b0, b1 reduce, b1, b2 reduce, b2, b3); I3D's third branch is 3x3x3 where Inception-v1's
    is 5x5.
    """

    def __init__(self, c_in: int, widths: Sequence[int]):
        super().__init__()
        b0, b1r, b1, b2r, b2, b3 = widths
        self.branch0 = _Unit3D(c_in, b0)
        self.branch1 = nn.Sequential(_Unit3D(c_in, b1r), _Unit3D(b1r, b1, 3))
        self.branch2 = nn.Sequential(_Unit3D(c_in, b2r), _Unit3D(b2r, b2, 3))
        self.branch3 = nn.Sequential(nn.MaxPool3d(3, stride=1, padding=1), _Unit3D(c_in, b3))
        self.out_channels = b0 + b1 + b2 + b3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.branch0(x), self.branch1(x), self.branch2(x), self.branch3(x)], dim=1)


#: Inception-v1's branch widths, (b0, b1 reduce, b1, b2 reduce, b2, b3) per Mixed module
I3D_MIXED = {
    "Mixed_3b": (64, 96, 128, 16, 32, 32), "Mixed_3c": (128, 128, 192, 32, 96, 64),
    "Mixed_4b": (192, 96, 208, 16, 48, 64), "Mixed_4c": (160, 112, 224, 24, 64, 64),
    "Mixed_4d": (128, 128, 256, 24, 64, 64), "Mixed_4e": (112, 144, 288, 32, 64, 64),
    "Mixed_4f": (256, 160, 320, 32, 128, 128),
    "Mixed_5b": (256, 160, 320, 32, 128, 128), "Mixed_5c": (384, 192, 384, 48, 128, 128),
}


class I3D(nn.Module):
    """I3D (Carreira and Zisserman 2017): Inception-v1 with its filters and pools inflated to 3D.

    The endpoints keep the DeepMind release's names. "Same" padding is the TF original's SAME: here the
    symmetric padding k // 2, which gives the same output sizes for the 3x32x224x224 clip (16x112x112
    after Conv3d_1a, 4x7x7 before the logits). The logits are a 1x1x1 convolution with bias on the
    (2,7,7)-average-pooled features, averaged over the remaining time steps: (batch, num_classes).
    """

    def __init__(self, num_classes: int = 400, in_channels: int = 3):
        super().__init__()
        layers: dict[str, nn.Module] = {
            "Conv3d_1a_7x7": _Unit3D(in_channels, 64, 7, stride=2),
            "MaxPool3d_2a_3x3": nn.MaxPool3d((1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1)),
            "Conv3d_2b_1x1": _Unit3D(64, 64, 1),
            "Conv3d_2c_3x3": _Unit3D(64, 192, 3),
            "MaxPool3d_3a_3x3": nn.MaxPool3d((1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1)),
        }
        c = 192
        pools = {"Mixed_4b": nn.MaxPool3d(3, stride=2, padding=1), "Mixed_5b": nn.MaxPool3d(2, stride=2)}
        pool_names = {"Mixed_4b": "MaxPool3d_4a_3x3", "Mixed_5b": "MaxPool3d_5a_2x2"}
        for name, widths in I3D_MIXED.items():
            if name in pools:
                layers[pool_names[name]] = pools[name]
            layers[name] = _Mixed(c, widths)
            c = layers[name].out_channels
        self.features = nn.Sequential()
        for name, layer in layers.items():
            self.features.add_module(name, layer)
        self.avg_pool = nn.AvgPool3d((2, 7, 7), stride=1)
        self.dropout = nn.Dropout(0.5)
        self.logits = nn.Conv3d(c, num_classes, 1, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.logits(self.dropout(self.avg_pool(self.features(x))))
        return x.mean(dim=(2, 3, 4))


def i3d(num_classes: int = 400) -> I3D:
    """I3D (Carreira and Zisserman 2017), RGB stream, Kinetics-400 classes, input 3x32x224x224 (or 3x64x224x224)."""
    return I3D(num_classes)


# ----------------------------------------------------------------------------------------- SlowFast R50


class _Bottleneck(nn.Module):
    """PySlowFast's ResBlock with its BottleneckTransform: Tx1x1 -> 1x3x3 (spatial stride) -> 1x1x1, BN after
    each, ReLU after the first two and after the sum; a 1x1x1 projection shortcut where the width or the
    stride changes."""

    def __init__(self, c_in: int, c_out: int, inner: int, temporal_kernel: int, stride: int):
        super().__init__()
        self.a = nn.Sequential(
            nn.Conv3d(c_in, inner, (temporal_kernel, 1, 1), padding=(temporal_kernel // 2, 0, 0), bias=False),
            nn.BatchNorm3d(inner), nn.ReLU(inplace=True))
        self.b = nn.Sequential(
            nn.Conv3d(inner, inner, (1, 3, 3), stride=(1, stride, stride), padding=(0, 1, 1), bias=False),
            nn.BatchNorm3d(inner), nn.ReLU(inplace=True))
        self.c = nn.Sequential(nn.Conv3d(inner, c_out, 1, bias=False), nn.BatchNorm3d(c_out))
        self.shortcut = None
        if c_in != c_out or stride != 1:
            self.shortcut = nn.Sequential(nn.Conv3d(c_in, c_out, 1, stride=(1, stride, stride), bias=False),
                                          nn.BatchNorm3d(c_out))
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.shortcut is None else self.shortcut(x)
        return self.relu(identity + self.c(self.b(self.a(x))))


def _res_stage(c_in: int, c_out: int, inner: int, blocks: int, temporal_kernel: int, stride: int) -> nn.Sequential:
    """A ResNet stage of bottlenecks, the stride (spatial) on the first block's 1x3x3 convolution."""
    return nn.Sequential(*[_Bottleneck(c_in if i == 0 else c_out, c_out, inner, temporal_kernel, stride if i == 0 else 1)
                           for i in range(blocks)])


def _stem(c_in: int, c_out: int, temporal_kernel: int) -> nn.Sequential:
    """PySlowFast's ResNetBasicStem: Tx7x7 stride (1,2,2) conv, BN, ReLU, (1,3,3) stride (1,2,2) max pool."""
    return nn.Sequential(
        nn.Conv3d(c_in, c_out, (temporal_kernel, 7, 7), stride=(1, 2, 2), padding=(temporal_kernel // 2, 3, 3),
                  bias=False),
        nn.BatchNorm3d(c_out), nn.ReLU(inplace=True),
        nn.MaxPool3d((1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1)))


class _FuseFastToSlow(nn.Module):
    """PySlowFast's lateral connection: a (k,1,1) convolution of stride (alpha,1,1) from the fast pathway's
    channels to ``ratio`` times them, BN, ReLU, concatenated onto the slow pathway."""

    def __init__(self, fast_channels: int, ratio: int, kernel: int, alpha: int):
        super().__init__()
        self.conv = nn.Conv3d(fast_channels, fast_channels * ratio, (kernel, 1, 1), stride=(alpha, 1, 1),
                              padding=(kernel // 2, 0, 0), bias=False)
        self.bn = nn.BatchNorm3d(fast_channels * ratio)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, slow: torch.Tensor, fast: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.cat([slow, self.relu(self.bn(self.conv(fast)))], dim=1), fast


class SlowFastR50(nn.Module):
    """SlowFast R50 (Feichtenhofer et al. 2019), PySlowFast's ``SLOWFAST_4x16_R50``.

    Slow pathway: stem (1,7,7) 3 -> 64; fast pathway: stem (5,7,7) 3 -> 64 / beta_inv. ResNet-50 stages
    res2-res5 of 3, 4, 6, 3 bottlenecks, widths (inner/out) 64/256, 128/512, 256/1024, 512/2048 for the
    slow pathway and 1 / beta_inv of them for the fast one; temporal kernel of each bottleneck's first
    1x1x1-spatial convolution: slow 1, 1, 3, 3 and fast 3, 3, 3, 3 over res2-res5; spatial stride 2 in the
    1x3x3 convolution of the first block of res3-res5. After the stems and after res2, res3, res4 a lateral
    (5,1,1) convolution of temporal stride alpha takes the fast features (fast width -> 2x fast width) onto
    the slow ones, so the slow stages take 64+16, 256+64, 512+128, 1024+256 channels. Head: global average
    pool of each pathway, concatenation (2048 + 256), dropout, a linear layer to the classes.

    ``forward(slow, fast)`` takes the two clips: slow 3x4x224x224 and fast 3x32x224x224 (alpha = 8).
    """

    def __init__(self, num_classes: int = 400, alpha: int = 8, beta_inv: int = 8, fusion_ratio: int = 2,
                 fusion_kernel: int = 5):
        super().__init__()
        blocks = (3, 4, 6, 3)
        inner = (64, 128, 256, 512)
        out = (256, 512, 1024, 2048)
        slow_t, fast_t = (1, 1, 3, 3), (3, 3, 3, 3)
        strides = (1, 2, 2, 2)
        stem_width = 64
        self.slow_stem = _stem(3, stem_width, 1)
        self.fast_stem = _stem(3, stem_width // beta_inv, 5)
        self.fuse = nn.ModuleList([_FuseFastToSlow(stem_width // beta_inv, fusion_ratio, fusion_kernel, alpha)])
        self.slow_stages = nn.ModuleList()
        self.fast_stages = nn.ModuleList()
        slow_in, fast_in = stem_width, stem_width // beta_inv
        for i in range(4):
            fused = slow_in + fast_in * fusion_ratio
            self.slow_stages.append(_res_stage(fused, out[i], inner[i], blocks[i], slow_t[i], strides[i]))
            self.fast_stages.append(_res_stage(fast_in, out[i] // beta_inv, inner[i] // beta_inv, blocks[i],
                                               fast_t[i], strides[i]))
            slow_in, fast_in = out[i], out[i] // beta_inv
            if i < 3:
                self.fuse.append(_FuseFastToSlow(fast_in, fusion_ratio, fusion_kernel, alpha))
        self.pool = nn.AdaptiveAvgPool3d(1)
        self.dropout = nn.Dropout(0.5)
        self.projection = nn.Linear(slow_in + fast_in, num_classes)

    def forward(self, slow: torch.Tensor, fast: torch.Tensor) -> torch.Tensor:
        slow, fast = self.fuse[0](self.slow_stem(slow), self.fast_stem(fast))
        for i, (slow_stage, fast_stage) in enumerate(zip(self.slow_stages, self.fast_stages)):
            slow, fast = slow_stage(slow), fast_stage(fast)
            if i + 1 < len(self.fuse):
                slow, fast = self.fuse[i + 1](slow, fast)
        x = torch.cat([self.pool(slow).flatten(1), self.pool(fast).flatten(1)], dim=1)
        return self.projection(self.dropout(x))


def slowfast_r50(num_classes: int = 400, alpha: int = 8, beta_inv: int = 8) -> SlowFastR50:
    """SlowFast R50, 4x16 (Feichtenhofer et al. 2019): inputs slow 3x4x224x224, fast 3x32x224x224."""
    return SlowFastR50(num_classes, alpha, beta_inv)


# -------------------------------------------------------------------------------------------------- X3D


def _x3d_round_width(width: float, multiplier: float, min_width: int = 8, divisor: int = 8) -> int:
    """PySlowFast's round_width: ``width * multiplier`` to a multiple of ``divisor``, at least ``min_width``,
    rounded up where rounding to the nearest lost more than 10%."""
    width *= multiplier
    rounded = max(min_width, int(width + divisor / 2) // divisor * divisor)
    if rounded < 0.9 * width:
        rounded += divisor
    return int(rounded)


class _Swish(nn.Module):
    """x * sigmoid(x), X3D's activation after the channelwise convolution."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


class _SqueezeExcitation(nn.Module):
    """PySlowFast's SE: global average pool, 1x1x1 conv to round_width(c, 1/16), ReLU, 1x1x1 conv back, sigmoid
    gate. The two FC layers are 1x1x1 Conv3d on a 1x1x1 tensor, so they are in the 3D corpus too."""

    def __init__(self, channels: int, ratio: float = 0.0625):
        super().__init__()
        squeezed = _x3d_round_width(channels, ratio)
        self.pool = nn.AdaptiveAvgPool3d(1)
        self.fc1 = nn.Conv3d(channels, squeezed, 1, bias=True)
        self.relu = nn.ReLU(inplace=True)
        self.fc2 = nn.Conv3d(squeezed, channels, 1, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.fc2(self.relu(self.fc1(self.pool(x)))))


class _X3DBlock(nn.Module):
    """PySlowFast's ResBlock with its X3DTransform: 1x1x1 expand (BN, ReLU), 3x3x3 channelwise conv with the
    spatial stride (BN, SE on every other block, Swish), 1x1x1 project (BN); a 1x1x1 projection shortcut
    where the width or the stride changes; ReLU after the sum."""

    def __init__(self, c_in: int, c_out: int, inner: int, stride: int, squeeze_excite: bool):
        super().__init__()
        self.a = nn.Sequential(nn.Conv3d(c_in, inner, 1, bias=False), nn.BatchNorm3d(inner), nn.ReLU(inplace=True))
        b: list[nn.Module] = [
            nn.Conv3d(inner, inner, 3, stride=(1, stride, stride), padding=1, groups=inner, bias=False),
            nn.BatchNorm3d(inner)]
        if squeeze_excite:
            b.append(_SqueezeExcitation(inner))
        b.append(_Swish())
        self.b = nn.Sequential(*b)
        self.c = nn.Sequential(nn.Conv3d(inner, c_out, 1, bias=False), nn.BatchNorm3d(c_out))
        self.shortcut = None
        if c_in != c_out or stride != 1:
            self.shortcut = nn.Sequential(nn.Conv3d(c_in, c_out, 1, stride=(1, stride, stride), bias=False),
                                          nn.BatchNorm3d(c_out))
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.shortcut is None else self.shortcut(x)
        return self.relu(identity + self.c(self.b(self.a(x))))


class X3DVariant(NamedTuple):
    """An X3D config of PySlowFast: the depth multiplier of its stages and its published input (C, T, H, W)."""

    depth_factor: float
    input_shape: tuple[int, int, int, int]


#: PySlowFast's configs/Kinetics/X3D_*.yaml: width factor 2.0, bottleneck factor 2.25 and conv5 2048 for
#: all; XS, S and M share the depth factor 2.2 and differ in their input (frames x crop), L is deeper.
X3D_VARIANTS = {
    "XS": X3DVariant(2.2, (3, 4, 160, 160)),
    "S": X3DVariant(2.2, (3, 13, 160, 160)),
    "M": X3DVariant(2.2, (3, 16, 224, 224)),
    "L": X3DVariant(5.0, (3, 16, 312, 312)),
}
X3D_S_INPUT = X3D_VARIANTS["S"].input_shape
X3D_M_INPUT = X3D_VARIANTS["M"].input_shape


class X3D(nn.Module):
    """X3D (Feichtenhofer 2020), PySlowFast's X3D model.

    Stem: (1,3,3) stride (1,2,2) conv 3 -> 24, then a channelwise (5,1,1) conv (groups 24), BN, ReLU.
    Stages res2-res5 at widths 24, 48, 96, 192, inner (expanded) widths int(2.25 * w) = 54, 108, 216, 432,
    with ceil(depth_factor * (1, 2, 5, 3)) blocks (3, 5, 11, 7 for XS/S/M), spatial stride 2 on the first
    block of each; SE on blocks 0, 2, 4, ... of each stage. Head: conv5 1x1x1 192 -> 432 (BN, ReLU),
    global average pool, 1x1x1 conv 432 -> 2048 (ReLU), dropout, a linear layer to the classes.
    """

    def __init__(self, variant: str = "M", num_classes: int = 400):
        super().__init__()
        if variant not in X3D_VARIANTS:
            raise ValueError(f"unknown X3D variant {variant!r}; known: {', '.join(X3D_VARIANTS)}")
        depth_factor = X3D_VARIANTS[variant].depth_factor
        width_factor, bottleneck_factor, dim_c5 = 2.0, 2.25, 2048
        stem_width = _x3d_round_width(12, width_factor)  # DIM_C1 12 -> 24
        self.stem = nn.Sequential(
            nn.Conv3d(3, stem_width, (1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1), bias=False),
            nn.Conv3d(stem_width, stem_width, (5, 1, 1), padding=(2, 0, 0), groups=stem_width, bias=False),
            nn.BatchNorm3d(stem_width), nn.ReLU(inplace=True))
        stages = []
        c_in = stem_width
        base = 12  # res2 at DIM_C1 (SCALE_RES2 off), doubled per stage before the width factor
        for base_blocks in (1, 2, 5, 3):
            c_out = _x3d_round_width(base, width_factor)
            inner = int(bottleneck_factor * c_out)
            n = int(math.ceil(depth_factor * base_blocks))
            stages.append(nn.Sequential(*[_X3DBlock(c_in if i == 0 else c_out, c_out, inner, 2 if i == 0 else 1,
                                                    squeeze_excite=i % 2 == 0) for i in range(n)]))
            c_in = c_out
            base *= 2
        self.stages = nn.Sequential(*stages)
        self.conv5 = nn.Sequential(nn.Conv3d(c_in, inner, 1, bias=False), nn.BatchNorm3d(inner), nn.ReLU(inplace=True))
        self.pool = nn.AdaptiveAvgPool3d(1)
        self.lin5 = nn.Sequential(nn.Conv3d(inner, dim_c5, 1, bias=False), nn.ReLU(inplace=True))
        self.dropout = nn.Dropout(0.5)
        self.projection = nn.Linear(dim_c5, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.lin5(self.pool(self.conv5(self.stages(self.stem(x)))))
        return self.projection(self.dropout(x.flatten(1)))


def x3d(variant: str = "M", num_classes: int = 400) -> X3D:
    """X3D-XS/S/M/L (Feichtenhofer 2020); the published inputs are in ``X3D_VARIANTS`` (M 3x16x224x224,
    S 3x13x160x160)."""
    return X3D(variant, num_classes)


# ------------------------------------------------------------------------------------------ the registry


class Network3D(NamedTuple):
    """A network of the 3D corpus: a builder without arguments, the input it is traced at (C, D/T, H, W) without
    the batch dimension (a tuple of such shapes for a network of several inputs), its kind and its citation."""

    factory: Callable[[], nn.Module]
    input_shape: tuple[int, ...] | tuple[tuple[int, ...], ...]
    kind: str
    citation: str


CITE_UNET3D = ("Çiçek, Abdulkadir, Lienkamp, Brox, Ronneberger. 3D U-Net: Learning Dense Volumetric Segmentation "
               "from Sparse Annotation. MICCAI 2016. arXiv:1606.06650")
CITE_NNUNET = ("Isensee, Jaeger, Kohl, Petersen, Maier-Hein. nnU-Net: a self-configuring method for deep "
               "learning-based biomedical image segmentation. Nature Methods 18, 203-211 (2021). "
               "PlainConvUNet of MIC-DKFZ/dynamic-network-architectures")
CITE_VNET = ("Milletari, Navab, Ahmadi. V-Net: Fully Convolutional Neural Networks for Volumetric Medical Image "
             "Segmentation. 3DV 2016. arXiv:1606.04797")
CITE_I3D = ("Carreira, Zisserman. Quo Vadis, Action Recognition? A New Model and the Kinetics Dataset. CVPR 2017. "
            "arXiv:1705.07750")
CITE_SLOWFAST = ("Feichtenhofer, Fan, Malik, He. SlowFast Networks for Video Recognition. ICCV 2019. "
                 "arXiv:1812.03982. PySlowFast config SLOWFAST_4x16_R50")
CITE_X3D = ("Feichtenhofer. X3D: Expanding Architectures for Efficient Video Recognition. CVPR 2020. "
            "arXiv:2004.04730. PySlowFast configs X3D_{}")

NETWORKS_3D: dict[str, Network3D] = {
    # 96^3 is a common training patch for 3D U-Net (the paper's unpadded 132x132x116 tile does not fit the
    # padded form, which needs sizes divisible by 8)
    "unet3d": Network3D(unet3d, (1, 96, 96, 96), "volumetric", CITE_UNET3D),
    "nnunet_3d_fullres_iso": Network3D(functools.partial(nnunet_from_plan, NNUNET_3D_FULLRES_ISO),
                                       (NNUNET_3D_FULLRES_ISO.in_channels, *NNUNET_3D_FULLRES_ISO.patch_size),
                                       "volumetric", CITE_NNUNET),
    "nnunet_3d_fullres_aniso": Network3D(functools.partial(nnunet_from_plan, NNUNET_3D_FULLRES_ANISO),
                                         (NNUNET_3D_FULLRES_ANISO.in_channels, *NNUNET_3D_FULLRES_ANISO.patch_size),
                                         "volumetric", CITE_NNUNET),
    "vnet": Network3D(vnet, (1, 64, 128, 128), "volumetric", CITE_VNET),
    "i3d": Network3D(i3d, (3, 32, 224, 224), "video", CITE_I3D),
    "slowfast_r50": Network3D(slowfast_r50, ((3, 4, 224, 224), (3, 32, 224, 224)), "video", CITE_SLOWFAST),
    "x3d_m": Network3D(functools.partial(x3d, "M"), X3D_M_INPUT, "video", CITE_X3D.format("M")),
    "x3d_s": Network3D(functools.partial(x3d, "S"), X3D_S_INPUT, "video", CITE_X3D.format("S")),
}


def input_shapes(name: str) -> list[tuple[int, ...]]:
    """The input shapes (without batch) of ``NETWORKS_3D[name]``, one per argument of its forward."""
    shape = NETWORKS_3D[name].input_shape
    return list(shape) if isinstance(shape[0], tuple) else [shape]


def example_inputs(name: str, batch: int = 1, device: str | torch.device = "meta") -> list[torch.Tensor]:
    """Empty input tensors for one forward of ``NETWORKS_3D[name]`` at ``batch`` (on ``meta``: no memory)."""
    return [torch.empty((batch, *shape), device=device) for shape in input_shapes(name)]
