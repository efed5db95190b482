"""Check on the GPU which strides PyTorch hands cuDNN for 5-D convolution tensors.

``kbench.collect.measure.strides.pytorch_strides`` states the rule from ATen's source: every tensor reaches
cuDNN with the dense strides of its memory format (NCDHW, or NDHWC for ``channels_last_3d``), size-1
dimensions included. This script reads what PyTorch really passes: it runs PyTorch's own 3D
convolutions (forward, data gradient, weight gradient) with cuDNN's API log on, parses every tensor
descriptor's dimensions and strides from the log, and compares them with the rule, for the cases where
size-1 dimensions make the strides ambiguous (one input channel, a 1x1x1 filter, depth 1, a 1x1x1
output, depthwise)::

    python tools/collect/stride_rules_3d.py --out stride_rules_3d.json     # on the GPU machine

The log is cuDNN's own (``CUDNN_LOGLEVEL_DBG=3``, ``CUDNN_LOGDEST_DBG``), set before cuDNN loads.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path

#: (name, x shape, w shape, stride, padding, groups): each case's shapes are distinct, so the log's
#: descriptors can be told apart by their dimensions
CASES = [
    ("one input channel", (2, 1, 8, 16, 16), (8, 1, 3, 3, 3), 1, 1, 1),
    ("1x1x1 filter", (2, 32, 4, 8, 8), (16, 32, 1, 1, 1), 1, 0, 1),
    ("depth 1", (3, 16, 1, 8, 8), (24, 16, 1, 3, 3), 1, (0, 1, 1), 1),
    ("1x1x1 output", (2, 40, 2, 2, 2), (48, 40, 2, 2, 2), 1, 0, 1),
    ("depthwise", (2, 56, 4, 10, 10), (56, 1, 3, 3, 3), 1, 1, 56),
    ("plain 3x3x3", (2, 64, 6, 12, 12), (72, 64, 3, 3, 3), 1, 1, 1),
    ("strided stem", (2, 3, 8, 32, 32), (80, 3, 3, 7, 7), (1, 2, 2), (1, 3, 3), 1),
]
LAYOUTS = ("NCDHW", "NDHWC")


def run_cases() -> list[dict]:
    """Run every case in both memory formats and all three directions; what each tensor should carry."""
    import torch
    torch.backends.cudnn.benchmark = False
    from kbench.collect.measure.strides import pytorch_strides
    expected = []
    for name, xs, ws, stride, pad, groups in CASES:
        for layout in LAYOUTS:
            fmt = torch.channels_last_3d if layout == "NDHWC" else torch.contiguous_format
            x = torch.randn(xs, device="cuda", dtype=torch.bfloat16).to(memory_format=fmt).requires_grad_()
            w = torch.randn(ws, device="cuda", dtype=torch.bfloat16).to(memory_format=fmt).requires_grad_()
            y = torch.nn.functional.conv3d(x, w, None, stride, pad, 1, groups)
            y.backward(torch.randn_like(y))  # data and weight gradients through cuDNN
            torch.cuda.synchronize()
            for tensor, shape in (("x", xs), ("w", ws), ("y", tuple(y.shape))):
                expected.append({"case": name, "layout": layout, "tensor": tensor, "dims": list(shape),
                                 "rule": list(pytorch_strides(shape, layout))})
    return expected


_LIST = re.compile(r"(\w*(?:dim|stride)\w*)\W*?(?:type=\w+;\s*)?val=\[([0-9, ]+)\]", re.IGNORECASE)


def logged_descriptors(text: str) -> list[tuple[list[int], list[int]]]:
    """(dims, strides) of every tensor descriptor in a cuDNN API log: each strides list paired with the
    dimensions list of the same length logged just before it."""
    pairs, last_dims = [], None
    for field, values in _LIST.findall(text):
        numbers = [int(v) for v in values.replace(" ", "").split(",") if v]
        if "stride" in field.lower():
            if last_dims is not None and len(last_dims) == len(numbers):
                pairs.append((last_dims, numbers))
            last_dims = None
        else:
            last_dims = numbers
    return pairs


def compare(expected: list[dict], pairs: list[tuple[list[int], list[int]]]) -> dict:
    """Per expected tensor: the strides the log shows for its dimensions, and whether they are the rule's."""
    seen: dict[tuple, set] = {}
    for dims, strides in pairs:
        seen.setdefault(tuple(dims), set()).add(tuple(strides))
    rows = []
    for e in expected:
        logged = sorted(seen.get(tuple(e["dims"]), ()))
        # a shape logged under both layouts carries both layouts' strides: match the rule among them
        rows.append({**e, "logged": [list(s) for s in logged], "found": bool(logged),
                     "agrees": tuple(e["rule"]) in {tuple(s) for s in logged}})
    found = [r for r in rows if r["found"]]
    return {"tensors": len(rows), "logged": len(found), "agree": sum(r["agrees"] for r in found),
            "descriptors_in_log": len(pairs), "rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON to write")
    ap.add_argument("--keep-log", default=None, help="copy cuDNN's API log here")
    args = ap.parse_args(argv)
    log = Path(tempfile.mkdtemp()) / "cudnn_api.log"
    # cuDNN reads these when it loads, which is at the first convolution
    os.environ["CUDNN_LOGLEVEL_DBG"] = "3"
    os.environ["CUDNN_LOGDEST_DBG"] = str(log)
    expected = run_cases()
    text = log.read_text(errors="replace") if log.exists() else ""
    if args.keep_log:
        Path(args.keep_log).write_text(text)
    import torch
    report = {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
              "gpu": torch.cuda.get_device_name(0), "log_bytes": len(text), **compare(expected, logged_descriptors(text))}
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"{report['agree']} of {report['logged']} logged tensors carry the rule's strides "
          f"({report['tensors']} expected, {report['descriptors_in_log']} descriptors in a {len(text):,}-byte log)")
    for r in report["rows"]:
        if r["found"] and not r["agrees"]:
            print(f"  differs: {r['case']} {r['layout']} {r['tensor']} {r['dims']}: rule {r['rule']}, logged {r['logged']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
