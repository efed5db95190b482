"""Real network layers from MITuna's MIOpenDriver command lists.

Each line of ``utils/recurrent_cfgs/*.txt`` is an MIOpenDriver command, e.g.::

    ./bin/MIOpenDriver conv -n 128 -c 1024 -H 14 -W 14 -k 2048 -y 1 -x 1 -p 0 -q 0 -u 2 -v 2 -l 1 -j 1 -m conv -g 1 -F 1 -t 1

sometimes prefixed by the API call that logged it (``miopenConvolutionForward: ``).
Flags follow MIOpenDriver's ``conv`` driver (``driver/conv_driver.hpp``); an
omitted flag takes the driver's default. ``convfp16``/``convbfp16`` select the
data type, which the networks split ignores.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
import pandas as pd

from kbench.errors import KbenchInputError
from kbench.problem import expected_output_size

#: MIOpenDriver conv flags: short flag -> (column, default) (driver/conv_driver.hpp AddCmdLineArgs).
DRIVER_FLAGS = {
    "-n": ("n", 100), "-c": ("c", 3), "-H": ("x_h", 32), "-W": ("x_w", 32), "-k": ("k", 32),
    "-y": ("fil_h", 3), "-x": ("fil_w", 3), "-p": ("pad_h", 0), "-q": ("pad_w", 0),
    "-u": ("stride_h", 1), "-v": ("stride_w", 1), "-l": ("dil_h", 1), "-j": ("dil_w", 1),
    "-g": ("groups", 1), "-!": ("x_d", 32), "-@": ("fil_d", 3), "-$": ("pad_d", 0),
    "-#": ("stride_d", 1), "-^": ("dil_d", 1), "-_": ("spatial_dims", 2), "-F": ("forw", 0),
}
LONG_FLAGS = {"--batchsize": "-n", "--in_channels": "-c", "--in_h": "-H", "--in_w": "-W",
              "--out_channels": "-k", "--fil_h": "-y", "--fil_w": "-x", "--pad_h": "-p",
              "--pad_w": "-q", "--conv_stride_h": "-u", "--conv_stride_w": "-v",
              "--dilation_h": "-l", "--dilation_w": "-j", "--group_count": "-g", "--in_d": "-!",
              "--fil_d": "-@", "--pad_d": "-$", "--conv_stride_d": "-#", "--dilation_d": "-^",
              "--spatial_dim": "-_", "--forw": "-F", "--mode": "-m"}
CONV_COMMANDS = {"conv": "FP32", "convfp16": "FP16", "convbfp16": "BF16", "convint8": "INT8"}


def parse_driver_line(line: str) -> dict | None:
    """One MIOpenDriver line -> dict of geometry fields, or None if it is not a convolution."""
    m = re.search(r"MIOpenDriver\s+(\S+)(.*)$", line)
    if not m or m.group(1) not in CONV_COMMANDS:
        return None
    tokens = shlex.split(m.group(2).rstrip(". \t"))
    row = {col: default for col, default in DRIVER_FLAGS.values()}
    row["mode"] = "conv"
    i = 0
    while i < len(tokens):
        flag = LONG_FLAGS.get(tokens[i], tokens[i])
        value = tokens[i + 1] if i + 1 < len(tokens) else None
        if flag == "-m":
            row["mode"] = value
        elif flag in DRIVER_FLAGS and value is not None:
            row[DRIVER_FLAGS[flag][0]] = int(value)
        i += 2
    if row["spatial_dims"] == 2:
        row.update(x_d=1, fil_d=1, pad_d=0, stride_d=1, dil_d=1)
    row["dtype"] = CONV_COMMANDS[m.group(1)]
    return row


def read_network_layers(folder: str | Path) -> pd.DataFrame:
    """Every convolution layer in a folder of MITuna lists, with its network (file stem).

    Transposed convolutions (``-m trans``) are kept with ``mode='trans'`` so
    callers can count and exclude them.
    """
    folder = Path(folder)
    rows = []
    files = sorted(folder.glob("*.txt"))
    if not files:
        raise KbenchInputError(f"{folder}: no MITuna network lists (*.txt) found.")
    for path in files:
        for lineno, line in enumerate(path.read_text().splitlines(), start=1):
            try:
                row = parse_driver_line(line)
            except ValueError as exc:
                raise KbenchInputError(f"{path}:{lineno}: cannot parse MIOpenDriver line ({exc}): {line}") from None
            if row is not None:
                row["network"] = path.stem
                rows.append(row)
    layers = pd.DataFrame(rows)
    for s in ("d", "h", "w"):
        layers[f"y_{s}"] = expected_output_size(layers[f"x_{s}"], layers[f"fil_{s}"], layers[f"pad_{s}"],
                                                layers[f"stride_{s}"], layers[f"dil_{s}"])
    return layers.astype({c: np.int64 for c in layers.columns if c not in ("mode", "dtype", "network")})
