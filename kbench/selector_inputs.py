"""What a selector accepts (:mod:`kbench.selector`): a problem's fields checked against the vocabulary it
was trained on, with a "did you mean" for PyTorch-style values, and the structure of a selector's files
checked before any tree is walked (an edited depth or child index would otherwise change rankings)."""

from __future__ import annotations

import difflib
import math
from pathlib import Path

import numpy as np

from kbench.core.errors import KbenchInputError

DTYPE_BYTES = {"FP64": 8, "FP32": 4, "TF32": 4, "INT32": 4, "FP16": 2, "BF16": 2,
               "INT8": 1, "FP8": 1, "BF8": 1, "INT8x4": 1}
SPATIAL = ("d", "h", "w")
REQUIRED = ["direction", "dtype", "layout_x", "layout_w", "layout_y", "spatial_dims", "n", "c", "k", "groups"] + [
    f"{p}_{s}" for p in ("x", "y", "fil", "pad", "stride", "dil") for s in SPATIAL]
#: the text fields of a problem, checked against the vocabulary the selector was trained on
TEXT_FIELDS = ("direction", "dtype", "layout_x", "layout_w", "layout_y")
#: the vocabulary of a selector exported before selectors recorded their own
DEFAULT_VOCABULARY = {"direction": ["B", "F", "W"], "dtype": sorted(DTYPE_BYTES),
                      **{f: ["NCHW", "NHWC", "NCDHW", "NDHWC"] for f in TEXT_FIELDS[2:]}, "spatial_dims": [2, 3]}
#: PyTorch-style (and other common) spellings, lower-cased, of kbench's values: a "did you mean"
#: instead of a silently different ranking (``channels_last`` depends on the rank: see _layout_alias)
VALUE_ALIASES = {
    "direction": {"forward": "F", "fwd": "F", "fprop": "F", "conv_fprop": "F",
                  "backward_data": "B", "backward-data": "B", "bwd_data": "B", "dgrad": "B", "backward_input": "B",
                  "conv_dgrad": "B", "backward_weights": "W", "backward-weights": "W", "backward_weight": "W",
                  "bwd_weights": "W", "wgrad": "W", "conv_wgrad": "W"},
    "dtype": {"half": "FP16", "float16": "FP16", "torch.float16": "FP16", "torch.half": "FP16",
              "bfloat16": "BF16", "torch.bfloat16": "BF16", "float": "FP32", "float32": "FP32",
              "torch.float32": "FP32", "torch.float": "FP32", "double": "FP64", "float64": "FP64",
              "torch.float64": "FP64", "int8": "INT8", "torch.int8": "INT8", "tf32": "TF32"},
}
_INT_FIELDS_MIN = {**{c: 1 for c in REQUIRED[6:] if not c.startswith("pad_")},
                   **{c: 0 for c in REQUIRED[6:] if c.startswith("pad_")}, "spatial_dims": 2}


def _layout_alias(value: str, spatial_dims) -> str | None:
    """``channels_last`` / ``contiguous_format`` (PyTorch's memory formats) as the layout of the problem's rank."""
    three_d = str(spatial_dims) == "3"
    v = value.lower().removeprefix("torch.")
    if v in ("channels_last", "channels_last_3d"):
        return "NDHWC" if three_d or v.endswith("3d") else "NHWC"
    if v in ("contiguous_format", "contiguous", "channels_first"):
        return "NCDHW" if three_d else "NCHW"
    return None


def _suggestion(field: str, value, allowed: list, problem) -> str | None:
    """The vocabulary value a mistyped or PyTorch-style ``value`` most likely means, or None."""
    text = str(value).strip()
    if field == "direction" and text.lower() in ("backward", "bwd"):
        return "B (backward data) or W (backward weights)"
    candidate = (_layout_alias(text, problem.get("spatial_dims")) if field.startswith("layout_")
                 else VALUE_ALIASES.get(field, {}).get(text.lower()))
    if candidate is None:
        upper = {str(a).upper(): a for a in allowed}
        candidate = upper.get(text.upper())
    if candidate is None:
        close = difflib.get_close_matches(text.upper(), [str(a) for a in allowed], n=1, cutoff=0.6)
        candidate = close[0] if close else None
    return candidate


def check_problem(problem, vocabulary: dict | None = None, dataset: str = "the selector's dataset") -> None:
    """Every field of ``problem`` present and within the vocabulary the selector was trained on: one
    :class:`KbenchInputError` that lists every bad field, with a "did you mean" where one fits."""
    vocabulary = vocabulary or DEFAULT_VOCABULARY
    if not hasattr(problem, "get") or not hasattr(problem, "__contains__"):
        raise KbenchInputError(f"selector: the problem must be a mapping of kbench's canonical problem columns "
                               f"(docs/data_model.md), not {type(problem).__name__}")
    missing = [c for c in REQUIRED if c not in problem]
    if missing:
        raise KbenchInputError(f"selector: the problem lacks {', '.join(missing)} (kbench's canonical problem "
                               "columns, docs/data_model.md)")
    problems = []
    for field in TEXT_FIELDS:
        allowed = [str(a) for a in vocabulary.get(field, DEFAULT_VOCABULARY[field])]
        value = problem[field]
        if str(value) in allowed:
            continue
        hint = _suggestion(field, value, allowed, problem)
        problems.append(f"{field}={value!r} is not one of {dataset}'s values ({', '.join(allowed)})"
                        + (f"; did you mean {hint!r}?" if hint and " or " not in hint else
                           f"; did you mean {hint}?" if hint else ""))
    for field, low in _INT_FIELDS_MIN.items():
        value = problem[field]
        if not _whole_number_at_least(value, low):
            problems.append(f"{field}={_shown(value)} is not a whole number >= {low} (at most {MAX_SIZE:,})")
    dims = [int(d) for d in vocabulary.get("spatial_dims", DEFAULT_VOCABULARY["spatial_dims"])]
    if not any(f.startswith("spatial_dims=") for f in problems) and int(problem["spatial_dims"]) not in dims:
        problems.append(f"spatial_dims={problem['spatial_dims']!r} is not one of {dataset}'s values "
                        f"({', '.join(map(str, dims))})")
    if problems:
        raise KbenchInputError("selector: " + "; ".join(problems) + " (kbench's canonical problem columns, "
                               "docs/data_model.md)")


def vocabulary_of(problems) -> dict:
    """The values each text field (and ``spatial_dims``) takes in a dataset's ``problems`` table: what a
    selector trained on it knows."""
    vocabulary = {f: sorted(problems[f].astype(str).unique().tolist()) for f in TEXT_FIELDS}
    vocabulary["spatial_dims"] = sorted(int(d) for d in problems["spatial_dims"].unique())
    return vocabulary


#: the convolution directions a selector ranks kernels for
DIRECTIONS = ("F", "B", "W")
#: the largest size a problem field may have (a tensor dimension, a count): far above any real problem
MAX_SIZE = 2 ** 31
#: the deepest tree a selector file may hold: every tree is walked as a complete binary tree of the
#: forest's depth, so a forged ``depth: 40`` would take gigabytes
MAX_DEPTH = 16
#: the most cells (trees x leaves of a complete tree) a forest may expand to (about 0.4 GB of arrays)
MAX_CELLS = 2 ** 25


def _size(value, field: str) -> float:
    """A problem's size field as a float: a finite whole number in [0, MAX_SIZE], else an input error."""
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    number = float(value) if ok and abs(value) <= MAX_SIZE else math.nan
    if not ok or not math.isfinite(number) or number < 0 or number != int(number):
        raise KbenchInputError(f"selector: the problem's {field} is {str(value)[:40]!r}; give a whole number "
                               f"from 0 to {MAX_SIZE:,}")
    return number


def _shown(value) -> str:
    """A field's value as a message shows it: its repr, cut to 40 characters (a 400-digit number stays short)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _whole_number_at_least(value, low: int) -> bool:
    """A finite whole number from ``low`` to :data:`MAX_SIZE` (an int too large for a float included)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return False
    if isinstance(value, (int, np.integer)):
        return low <= int(value) <= MAX_SIZE
    return math.isfinite(float(value)) and float(value) == int(value) and low <= value <= MAX_SIZE


def _checked(problem, vocabulary: dict, dataset: str):
    """``problem`` with a ``layout`` shorthand spread to layout_x/w/y, after :func:`check_problem`."""
    if hasattr(problem, "get") and "layout" in problem and not any(f"layout_{t}" in problem for t in "xwy"):
        problem = {**problem, **{f"layout_{t}": problem["layout"] for t in "xwy"}}
    check_problem(problem, vocabulary, dataset)
    return problem


FOREST_ARRAYS = ("left", "right", "feature", "threshold", "default_left", "roots", "group", "base")


def check_structure(meta: dict, arrays: dict, folder: Path) -> None:
    """Refuse a selector whose files do not hold what scoring reads: known directions and kernels, bounded
    depths, and trees whose child indices lie in range and lead down to leaves within the stated depth
    (an edited depth or child index would otherwise change the rankings silently)."""
    where = folder / "selector.json"
    problems = []
    plans = meta.get("kind") == "plans"
    depth = meta.get("depth")
    if not isinstance(depth, dict) or not depth or (set(depth) != {"plans"} if plans else not set(depth) <= set(DIRECTIONS)):
        raise KbenchInputError(f"{where}: 'depth' must name the forest of each direction ({', '.join(DIRECTIONS)})"
                               " or, for a plans selector, 'plans'.")
    if not isinstance(meta.get("columns"), list) or not all(isinstance(c, str) for c in meta["columns"]):
        raise KbenchInputError(f"{where}: 'columns' must list the feature names.")
    if not plans:
        kernels = meta.get("kernels")
        if not isinstance(kernels, list) or not all(isinstance(k, str) for k in kernels):
            raise KbenchInputError(f"{where}: 'kernels' must list the kernel names.")
        for key in ("classes", "directions"):
            block = meta.get(key)
            if not isinstance(block, dict) or not set(block) <= set(DIRECTIONS) or not all(
                    isinstance(v, list) and set(v) <= set(kernels) for v in block.values()):
                problems.append(f"'{key}' must map directions ({', '.join(DIRECTIONS)}) to kernels it lists")
        prior = meta.get("prior")
        if not isinstance(prior, dict) or not all(
                isinstance(v, list) and len(v) == len(kernels) and all(
                    isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in v)
                for v in prior.values()):
            problems.append("'prior' must give one finite number per kernel")
    for name, d in depth.items():
        if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d <= MAX_DEPTH:
            problems.append(f"depth of {name!r} is {d!r}; it must be a whole number from 0 to {MAX_DEPTH}")
            continue
        missing = [a for a in FOREST_ARRAYS if f"{name}.{a}" not in arrays]
        if missing:
            problems.append(f"trees.safetensors has no {', '.join(f'{name}.{a}' for a in missing)}")
            continue
        problems += [f"forest {name!r}: {p}" for p in _forest_problems(
            {a: arrays[f"{name}.{a}"] for a in FOREST_ARRAYS}, d, len(meta["columns"]),
            None if plans else len((meta.get("classes") or {}).get(name, [])))]
    if problems:
        raise KbenchInputError(f"{where}: the selector's files are damaged or edited ({len(problems)} problem(s)): "
                               + "; ".join(problems[:6]) + ". Export it again.")


def _forest_problems(a: dict, depth: int, n_columns: int, n_classes: int | None) -> list[str]:
    """What is wrong with one forest's arrays (see :func:`check_structure`)."""
    if any(np.asarray(v).ndim != 1 for v in a.values()):
        return ["an array is not one-dimensional"]
    n = len(a["left"])
    if any(len(a[k]) != n for k in ("right", "feature", "threshold", "default_left")):
        return ["its node arrays differ in length"]
    left, right = np.asarray(a["left"], np.int64), np.asarray(a["right"], np.int64)
    roots, group, base = np.asarray(a["roots"], np.int64), np.asarray(a["group"], np.int64), np.asarray(a["base"])
    out = []
    if len(roots) * 2 ** depth > MAX_CELLS:
        out.append(f"{len(roots):,} trees of depth {depth} expand to more than {MAX_CELLS:,} cells")
    leaf = left < 0
    if ((left < -1) | (left >= n) | (right < -1) | (right >= n) | ((right < 0) != leaf)).any():
        out.append("a child index is out of range, or a node has one child only")
    elif (~leaf & ((left <= np.arange(n)) | (right <= np.arange(n)))).any():
        out.append("a child comes before its parent (a loop)")
    if ((roots < 0) | (roots >= n)).any() or len(group) != len(roots) or ((group < 0) | (group >= len(base))).any():
        out.append("a tree root or output group is out of range")
    if not np.isfinite(np.asarray(a["threshold"], np.float64)).all() or not np.isfinite(base.astype(np.float64)).all():
        out.append("a threshold, leaf value or base score is not finite")
    feature = np.asarray(a["feature"], np.int64)
    if ((feature[~leaf] < 0) | (feature[~leaf] >= n_columns)).any():
        out.append("a split reads a feature column it does not have")
    if n_classes is not None and n_classes and len(base) != n_classes:
        out.append(f"{len(base)} output groups for {n_classes} classes")
    if out:
        return out
    node = roots.copy()
    for _ in range(depth):  # every path must end in a leaf within the stated depth
        node = np.concatenate([np.where(leaf[node], node, left[node]), np.where(leaf[node], node, right[node])])
        node = np.unique(node)
    if not leaf[node].all():
        out.append(f"a tree is deeper than the stated depth {depth}")
    return out


