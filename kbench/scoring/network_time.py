"""Network end-to-end time on the ``networks`` split: what a selector does to a network's convolution time.

A **network instance** is one network of the split's source lists at one data type and layout (e.g.
``resnet50 FP16 NCHW``). Its time is the sum over its layers of the chosen kernel's time, each layer
counted as often as the list names it (its multiplicity). Where every layer of the list is in the
scored part in every direction the list names, the sum covers forward, backward-data and
backward-weights (a training step's convolutions); where only the forward layers all are, forward
alone; otherwise the instance is left out (counted in ``left_out``).

Layer lists: a dataset whose problems carry a ``network`` column (the tile sets: the paper's benchmark
layers) uses those rows, each layer once; the others use MITuna's network lists shipped with kbench
(:data:`kbench.sources.mituna.NETWORK_LAYERS`), matched on the full geometry, batch size included, and
the direction.

Per instance: the ratio of sums of the choice to the oracle's (the fastest kernel per layer) and to the
reference heuristic's, and beside each the per-problem geometric mean over the same layers (which
weighs a 10 µs layer as much as a 10 ms one, where the sum weighs them as a step's time does). Over
instances: the geometric mean of each. Censored choices (find-db lists) are timed at the last listed
time, so the sums are lower bounds as the per-problem times are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from kbench.sources.mituna import DIRECTION_BITS, LAYER_COLUMNS, MITUNA_SOURCE, shipped_network_layers

OWN_LAYERS_SOURCE = "the dataset's benchmark layers (the problems' network column), each layer once"
MITUNA_MULTIPLICITY = ("; a layer counts as often as lines of its list name it (most lists name each distinct layer "
                       "once; resnext101_pytorch repeats them)")


@dataclass
class NetworkSet:
    """The scored part's network instances as (instance, problem, multiplicity) terms."""

    source: str
    names: list[str]
    directions: list[str]
    inst: np.ndarray
    prob: np.ndarray
    weight: np.ndarray
    left_out: int


def _label(dirs) -> str:
    return "+".join(d for d in DIRECTION_BITS if d in set(dirs))


def network_set(problems: pd.DataFrame) -> NetworkSet | None:
    """The network instances of a part (``problems``: its rows in scoring-table order), or None when the part
    holds no network layers."""
    part = problems.reset_index(drop=True).assign(_idx=np.arange(len(problems)))
    if "layout" not in part.columns:
        part = part.assign(layout="")
    if "network" in part.columns:
        own = part[part["network"].notna() & (part["network"].astype(str) != "")]
        if own.empty:
            return None
        terms = own.assign(network=own["network"].astype(str), lines=1, _row=np.arange(len(own)))
        required = terms.groupby("network")["_row"].size()
        source = OWN_LAYERS_SOURCE
    else:
        if not set(LAYER_COLUMNS) <= set(part.columns):
            return None
        layers = shipped_network_layers()
        layers = layers.assign(_row=np.arange(len(layers)))
        terms = layers.merge(part[LAYER_COLUMNS + ["direction", "dtype", "layout", "_idx"]],
                             on=LAYER_COLUMNS + ["direction"], how="inner")
        required = layers.groupby("network")["_row"].size()
        source = MITUNA_SOURCE + MITUNA_MULTIPLICITY
        if terms.empty:
            return None
        forward = layers[layers["direction"] == "F"].groupby("network")["_row"].size()
    keys = ["network", "dtype", "layout"]
    present = terms.groupby(keys)["_row"].nunique()
    need = required.reindex(present.index.get_level_values("network")).to_numpy()
    whole = present.to_numpy() == need
    if "network" in part.columns:
        fwd_ok = np.zeros(len(present), dtype=bool)
    else:
        fwd_present = terms[terms["direction"] == "F"].groupby(keys)["_row"].nunique().reindex(present.index)
        fwd_need = forward.reindex(present.index.get_level_values("network")).to_numpy()
        fwd_ok = ~whole & (fwd_present.fillna(0).to_numpy() == fwd_need)
    mode = pd.Series(np.where(whole, "all", np.where(fwd_ok, "F", "")), index=present.index)
    terms = terms.join(mode.rename("_mode"), on=keys)
    terms = terms[(terms["_mode"] == "all") | ((terms["_mode"] == "F") & (terms["direction"] == "F"))]
    if terms.empty:
        return None
    terms = terms.sort_values(keys + ["_row"])
    inst_keys = terms[keys].astype(str).agg(" ".join, axis=1).str.strip()
    codes, names = pd.factorize(inst_keys, sort=True)
    dirs = terms.groupby(codes)["direction"].agg(_label)
    return NetworkSet(source=source, names=list(names), directions=[dirs[i] for i in range(len(names))],
                      inst=codes.astype(np.int64), prob=terms["_idx"].to_numpy(dtype=np.int64),
                      weight=terms["lines"].to_numpy(dtype=np.float64), left_out=int((mode == "").sum()))


def _geomean(values) -> float | None:
    v = np.asarray([x for x in values if x is not None], dtype=np.float64)
    return float(np.exp(np.log(v).mean())) if len(v) else None


def network_metrics(ns: NetworkSet, t_choice: np.ndarray, t_best: np.ndarray, t_ref: np.ndarray | None,
                    scored: np.ndarray, reference: str | None) -> dict:
    """Per instance and over instances: the choice's network time against the oracle's and the reference's.

    Only instances whose every layer is scored count (all of them when the whole part is predicted).
    """
    k = len(ns.names)
    complete = np.bincount(ns.inst, weights=(~scored[ns.prob]).astype(np.float64), minlength=k) == 0
    w, p, i = ns.weight, ns.prob, ns.inst
    sum_c = np.bincount(i, weights=w * t_choice[p], minlength=k)
    sum_b = np.bincount(i, weights=w * t_best[p], minlength=k)
    count = np.bincount(i, minlength=k)
    geo_b = np.exp(np.bincount(i, weights=np.log(t_choice[p] / t_best[p]), minlength=k) / count)
    if t_ref is not None:
        tr = t_ref[p]
        sum_r = np.bincount(i, weights=w * tr, minlength=k)  # NaN where the reference has no choice for a layer
        geo_r = np.exp(np.bincount(i, weights=np.log(t_choice[p] / tr), minlength=k) / count)
        geo_rb = np.exp(np.bincount(i, weights=np.log(tr / t_best[p]), minlength=k) / count)
    else:
        sum_r = geo_r = geo_rb = np.full(k, np.nan)

    def num(x):
        return None if not np.isfinite(x) else float(x)

    lines = np.bincount(i, weights=w, minlength=k)
    per = {}
    for j in np.flatnonzero(complete):
        per[ns.names[j]] = {
            "directions": ns.directions[j], "problems": int(count[j]), "layers": float(lines[j]),
            "oracle_ms": float(sum_b[j]), "choice_ms": float(sum_c[j]), "reference_ms": num(sum_r[j]),
            "vs_oracle_sum": float(sum_c[j] / sum_b[j]), "vs_oracle_geomean": float(geo_b[j]),
            "vs_reference_sum": num(sum_c[j] / sum_r[j]), "vs_reference_geomean": num(geo_r[j]),
            "reference_vs_oracle_sum": num(sum_r[j] / sum_b[j]),
            "reference_vs_oracle_geomean": num(geo_rb[j]),
        }
    agg = {key: _geomean(v[key] for v in per.values())
           for key in ("vs_oracle_sum", "vs_oracle_geomean", "vs_reference_sum", "vs_reference_geomean",
                       "reference_vs_oracle_sum", "reference_vs_oracle_geomean")}
    return {"source": ns.source, "reference": reference, "instances": len(per),
            "instances_left_out": int(ns.left_out + (~complete).sum()), **agg, "per_network": per}
