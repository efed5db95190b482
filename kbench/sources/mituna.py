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

from kbench.core.errors import KbenchInputError
from kbench.sources.problem import expected_output_size

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


#: where the network layer lists come from (the raw folder ``mituna/`` holds a copy; MIT license)
MITUNA_SOURCE = ("MITuna's network lists (github.com/ROCm/MITuna, commit 97391e4f9014134ca145e0665d0ee55feb7e27ec, "
                 "utils/recurrent_cfgs/)")
#: the network layers as shipped with kbench (written by ``python tools/network_layers.py``)
NETWORK_LAYERS = Path(__file__).with_name("network_layers.csv")
#: MITuna's list of every recurrent configuration: a mix of networks and batch sizes, not one network
MIXED_LIST = "all"
#: MIOpenDriver ``-F``: a bit per direction; 0 runs all three
DIRECTION_BITS = {"F": 1, "B": 2, "W": 4}
LAYER_COLUMNS = ["n", "c", "k", "groups", "x_d", "x_h", "x_w", "fil_d", "fil_h", "fil_w", "pad_d", "pad_h", "pad_w",
                 "stride_d", "stride_h", "stride_w", "dil_d", "dil_h", "dil_w", "spatial_dims"]


def network_layer_table(layers: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, str]]:
    """The convolution layers of each list that is one whole network, for network end-to-end time.

    One row per (network, layer geometry, direction) with ``lines``: how many lines of the list name
    that layer in that direction (its multiplicity; ``-F 0`` names all three directions). Left out,
    with the reason: the list of every configuration (:data:`MIXED_LIST`) and every list all of whose
    layers are in another list (an excerpt, e.g. ``resnet50_4jobs``). Returns (table, left out).
    """
    conv = layers[layers["mode"] == "conv"].copy()
    forw = conv["forw"].to_numpy()
    parts = []
    for d, bit in DIRECTION_BITS.items():
        sel = (forw == 0) | ((forw & bit) != 0)
        parts.append(conv[sel].assign(direction=d))
    rows = pd.concat(parts, ignore_index=True)
    key = rows[LAYER_COLUMNS].astype(str).agg("-".join, axis=1) + "|" + rows["direction"]
    sets = {net: set(k) for net, k in key.groupby(rows["network"])}
    left_out = {MIXED_LIST: "every configuration MITuna tunes (several networks and batch sizes), not one network"}
    for net, s in sorted(sets.items()):
        if net == MIXED_LIST:
            continue
        whole = sorted(o for o, t in sets.items() if o not in (net, MIXED_LIST) and s <= t and (s != t or o < net))
        if whole:
            left_out[net] = f"every layer of it is in {whole[0]} (an excerpt)"
    rows = rows[~rows["network"].isin(left_out)]
    table = (rows.groupby(["network", "direction"] + LAYER_COLUMNS, sort=True).size().rename("lines").reset_index())
    order = table["direction"].map({d: i for i, d in enumerate(DIRECTION_BITS)})
    table = table.assign(_o=order).sort_values(["network", "_o"] + LAYER_COLUMNS).drop(columns="_o")
    return table[["network", "direction", "lines"] + LAYER_COLUMNS].reset_index(drop=True), left_out


def write_network_layers(folder: str | Path, out: str | Path = NETWORK_LAYERS) -> tuple[Path, dict[str, str]]:
    """Write the shipped network layer table from a folder of MITuna lists; returns (path, lists left out)."""
    table, left_out = network_layer_table(read_network_layers(folder))
    Path(out).write_text(table.to_csv(index=False, lineterminator="\n"), encoding="utf-8")
    return Path(out), left_out


def shipped_network_layers() -> pd.DataFrame:
    """The network layer table shipped with kbench (:data:`NETWORK_LAYERS`)."""
    return pd.read_csv(NETWORK_LAYERS)
