"""Trace the convolution layers of torchvision's architectures into a CSV.

This script made ``kbench/collect/measure/torchvision_layers.csv``, the list of real
network layers that the corpus generator (:mod:`kbench.collect.measure.corpus`) reads.
It builds each model with random weights (no download), moves it to the
``meta`` device, runs one forward pass there (shapes only, no arithmetic) and records, for every
``Conv2d`` call, the input size and the convolution parameters::

    python tools/collect/trace_torchvision.py --out kbench/collect/measure/torchvision_layers.csv

It needs ``torchvision`` (not a kbench dependency); the CSV is committed so
that nobody else does. The batch size is left out: the corpus multiplies the
layers by its own batch sizes.
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

#: (model builder name, input height/width, builder keyword arguments)
MODELS = [
    ("resnet18", 224, {}), ("resnet34", 224, {}), ("resnet50", 224, {}), ("resnet101", 224, {}),
    ("resnet152", 224, {}), ("resnext50_32x4d", 224, {}), ("resnext101_32x8d", 224, {}),
    ("wide_resnet50_2", 224, {}),
    ("regnet_y_400mf", 224, {}), ("regnet_y_1_6gf", 224, {}), ("regnet_y_8gf", 224, {}),
    ("regnet_x_400mf", 224, {}), ("regnet_x_3_2gf", 224, {}),
    ("mobilenet_v2", 224, {}), ("mobilenet_v3_large", 224, {}), ("mobilenet_v3_small", 224, {}),
    ("efficientnet_b0", 224, {}), ("efficientnet_b3", 300, {}), ("efficientnet_v2_s", 384, {}),
    ("convnext_tiny", 224, {}), ("convnext_base", 224, {}),
    ("densenet121", 224, {}), ("densenet201", 224, {}),
    ("inception_v3", 299, {"aux_logits": False, "init_weights": False}),
    ("googlenet", 224, {"aux_logits": False, "init_weights": False}),
    ("vgg16", 224, {}), ("vgg19_bn", 224, {}),
    ("shufflenet_v2_x1_0", 224, {}), ("mnasnet1_0", 224, {}), ("squeezenet1_1", 224, {}),
    ("alexnet", 224, {}),
]
COLUMNS = ["network", "layer", "c", "k", "groups", "x_h", "x_w", "fil_h", "fil_w", "pad_h", "pad_w",
           "stride_h", "stride_w", "dil_h", "dil_w", "y_h", "y_w"]


def _import_torchvision():
    # torchvision registers fake kernels for its C++ ops at import; when its
    # compiled extension does not match the installed torch, that step fails
    # although the model definitions work. They are all this script needs.
    sys.modules.setdefault("torchvision._meta_registrations",
                           types.ModuleType("torchvision._meta_registrations"))
    import torchvision
    return torchvision


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def trace_model(name: str, size: int, kwargs: dict) -> list[dict]:
    import torch
    tv = _import_torchvision()
    builder = getattr(tv.models, name)
    # Built on the CPU (some builders compute widths with real tensors), then
    # moved to the meta device, where the forward pass computes shapes only.
    model = builder(weights=None, **kwargs).eval().to("meta")
    rows: list[dict] = []

    def hook(mod, inputs, output, layer=""):
        x = inputs[0]
        fil = _pair(mod.kernel_size)
        stride, dil = _pair(mod.stride), _pair(mod.dilation)
        if isinstance(mod.padding, str):  # 'same' / 'valid'
            pad = tuple(d * (f - 1) // 2 for d, f in zip(dil, fil)) if mod.padding == "same" else (0, 0)
        else:
            pad = _pair(mod.padding)
        rows.append(dict(network=name, layer=layer, c=int(x.shape[1]), k=int(mod.out_channels),
                         groups=int(mod.groups), x_h=int(x.shape[2]), x_w=int(x.shape[3]),
                         fil_h=fil[0], fil_w=fil[1], pad_h=pad[0], pad_w=pad[1],
                         stride_h=stride[0], stride_w=stride[1], dil_h=dil[0], dil_w=dil[1],
                         y_h=int(output.shape[2]), y_w=int(output.shape[3])))

    for lname, mod in model.named_modules():
        if isinstance(mod, torch.nn.Conv2d):
            mod.register_forward_hook(lambda m, i, o, _n=lname: hook(m, i, o, _n))
    with torch.no_grad():
        model(torch.empty(1, 3, size, size, device="meta"))
    return rows


def main(argv=None) -> int:
    import pandas as pd
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[2] / "kbench" / "collect" / "measure" / "torchvision_layers.csv"))
    args = ap.parse_args(argv)
    tv = _import_torchvision()
    rows = []
    for name, size, kwargs in MODELS:
        rows += trace_model(name, size, kwargs)
    df = pd.DataFrame(rows, columns=COLUMNS)
    df.to_csv(args.out, index=False)
    print(f"{len(df)} conv layers from {df['network'].nunique()} models (torchvision {tv.__version__}) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
