"""Trace the 3D convolution layers of real networks into ``kbench/collect/measure/network_layers_3d.csv``.

The 3D corpus (:mod:`kbench.collect.measure.corpus3d`) measures these layers. Each network is built with
random weights (no download), moved to the ``meta`` device and run forward once there (shapes only,
no arithmetic); a forward hook on every ``Conv3d`` and ``ConvTranspose3d`` records the call's input
and output sizes and the layer's parameters::

    python tools/collect/trace_3d_networks.py        # writes kbench/collect/measure/network_layers_3d.csv

The networks: torchvision's video models (``r3d_18``, ``mc3_18``, ``r2plus1d_18``, ``s3d``, ``mvit_v1_b``,
``mvit_v2_s``, ``swin3d_t``; torchvision's own modules) and the volumetric and video networks that
torchvision does not ship, built from their published configurations in
``tools/collect/networks_3d.py`` (3D U-Net, nnU-Net's plain U-Net in an isotropic and an anisotropic
plan, V-Net, I3D, SlowFast R50, X3D-M and X3D-S).

One row per convolution call, in call order. A transposed convolution is written as the convolution
whose data gradient it computes (``transposed`` = 1): its input and output swap, so ``c`` is the
transposed layer's output channels, ``k`` its input channels, ``x_*`` its output size and ``y_*`` its
input size. Its forward pass is then cuDNN's data gradient (direction B) of that convolution, its
backward pass for the data a forward convolution (F), its weight gradient a weight gradient (W).
``needs_input_grad`` is autograd's own answer (the input's ``requires_grad`` with the weights requiring
grad and the network's input not): 0 for a layer whose input derives from the network's input alone,
for which a training step computes no data gradient (no B). The batch size is left out (the network's input was traced at batch 1);
the corpus multiplies the layers by its batch sizes.
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "kbench" / "collect" / "measure" / "network_layers_3d.csv"
#: the video clip torchvision's video models are trained on: 16 frames of 112 x 112 (C, D, H, W)
VIDEO_CLIP = (3, 16, 112, 112)
#: torchvision builders and their inputs (without the batch); the transformer models' conv stems
#: (and MViT's pooling convolutions) are their 3D convolutions
TORCHVISION_3D = {"r3d_18": VIDEO_CLIP, "mc3_18": VIDEO_CLIP, "r2plus1d_18": VIDEO_CLIP, "s3d": (3, 16, 224, 224),
                  "mvit_v1_b": (3, 16, 224, 224), "mvit_v2_s": (3, 16, 224, 224), "swin3d_t": (3, 16, 224, 224)}
SPATIAL = ("d", "h", "w")
COLUMNS = (["network", "kind", "layer", "call", "transposed", "needs_input_grad", "c", "k", "groups"]
           + [f"{p}_{s}" for p in ("x", "fil", "pad", "stride", "dil", "y") for s in SPATIAL])


def _import_torchvision():
    # torchvision registers fake kernels for its C++ ops at import; when its compiled extension does
    # not match the installed torch (a CUDA wheel beside torch's CPU build), that step fails although
    # the model definitions, all this script needs, work
    sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))
    import torchvision
    return torchvision


def _triple(v) -> tuple[int, int, int]:
    return (int(v),) * 3 if isinstance(v, int) else tuple(int(e) for e in v)


def _padding(mod) -> tuple[int, int, int]:
    fil, dil = _triple(mod.kernel_size), _triple(mod.dilation)
    if isinstance(mod.padding, str):  # 'same' / 'valid'
        return tuple(d * (f - 1) // 2 for d, f in zip(dil, fil)) if mod.padding == "same" else (0, 0, 0)
    return _triple(mod.padding)


def trace(network: str, kind: str, model, inputs) -> list[dict]:
    """One row per 3D convolution call of ``model`` on ``inputs`` (meta tensors)."""
    import torch
    rows: list[dict] = []

    def hook(mod, args, output, layer):
        x = args[0]
        transposed = isinstance(mod, torch.nn.ConvTranspose3d)
        # the convolution whose data gradient a transposed convolution computes: input and output swap
        conv_x, conv_y = (output, x) if transposed else (x, output)
        row = dict(network=network, kind=kind, layer=layer, call=len(rows), transposed=int(transposed),
                   needs_input_grad=int(x.requires_grad),
                   c=int(conv_x.shape[1]), k=int(conv_y.shape[1]), groups=int(mod.groups))
        for prefix, values in (("x", conv_x.shape[2:]), ("y", conv_y.shape[2:]), ("fil", _triple(mod.kernel_size)),
                               ("pad", _padding(mod)), ("stride", _triple(mod.stride)),
                               ("dil", _triple(mod.dilation))):
            row.update({f"{prefix}_{s}": int(v) for s, v in zip(SPATIAL, values)})
        rows.append(row)

    for name, mod in model.named_modules():
        if isinstance(mod, (torch.nn.Conv3d, torch.nn.ConvTranspose3d)):
            mod.register_forward_hook(lambda m, a, o, _name=name: hook(m, a, o, _name))
    with torch.enable_grad():  # requires_grad propagates as in a training step (meta: no arithmetic)
        model(*inputs)
    return rows


def networks():
    """(name, kind, model factory, input shapes without the batch) of every traced network."""
    tv = _import_torchvision()
    for name, shape in TORCHVISION_3D.items():
        yield name, "video", (lambda _n=name: getattr(tv.models.video, _n)(weights=None)), (shape,)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from networks_3d import NETWORKS_3D
    for name, (factory, shape, kind, _citation) in NETWORKS_3D.items():
        shapes = shape if isinstance(shape[0], tuple) else (shape,)
        yield name, kind, factory, shapes


def main(argv=None) -> int:
    import pandas as pd
    import torch
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    rows = []
    for name, kind, factory, shapes in networks():
        # built on the CPU (some builders compute widths with real tensors), then moved to the meta device
        model = factory().eval().to("meta")
        inputs = [torch.empty((1, *s), device="meta") for s in shapes]
        traced = trace(name, kind, model, inputs)
        # docs/three_d.md's network table: calls, transposed, without a data gradient, filter depth > 1
        print(f"| {name} | {kind} | {len(traced)} | {sum(r['transposed'] for r in traced)} | "
              f"{sum(1 - r['needs_input_grad'] for r in traced)} | {sum(r['fil_d'] > 1 for r in traced)} |")
        rows += traced
    df = pd.DataFrame(rows, columns=COLUMNS)
    df.to_csv(args.out, index=False)
    tv = _import_torchvision()
    print(f"{len(df)} 3D conv calls from {df['network'].nunique()} networks (torch {torch.__version__}, "
          f"torchvision {tv.__version__}) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
