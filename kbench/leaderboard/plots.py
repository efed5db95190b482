"""Leaderboard plots, drawn at build time with matplotlib to SVG, byte-for-byte deterministic.

Determinism: the object-oriented API (no pyplot state), the Agg-free SVG backend, a
fixed ``svg.hashsalt`` (element ids), text kept as text (``svg.fonttype: none``, no
embedded font subsets), and no date or creator metadata.
"""

from __future__ import annotations

import io

import numpy as np

RC = {"svg.hashsalt": "kbench-leaderboard", "svg.fonttype": "none", "font.size": 9.0,
      "font.family": "sans-serif", "axes.spines.top": False, "axes.spines.right": False,
      "path.simplify": True}
METADATA = {"Date": None, "Creator": None}
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d"]
CEILING_STYLE = ("#111111", (0, (1, 1.5)))
FLOOR_STYLES = [("#7a7a7a", (0, (5, 2))), ("#a0522d", (0, (3, 1.5, 1, 1.5))), ("#9a9a9a", (0, (2, 2))),
                ("#556b2f", (0, (6, 2, 1, 2)))]
DIRECTIONS = {"F": "forward (F)", "B": "backward data (B)", "W": "backward weights (W)"}
DIR_COLORS = {"F": "#4c72b0", "B": "#dd8452", "W": "#55a868"}


def method_styles(rows: list[tuple[str, str]]) -> dict[str, tuple[str, object]]:
    """A stable (colour, line style) per method, shared by every plot of a table.

    ``rows`` are (name, role): ranked entries get palette colours and solid lines in name
    order; the ceiling is black and dotted; each floor gets its own grey-brown dash pattern.
    """
    styles: dict[str, tuple[str, object]] = {}
    entries = sorted(n for n, r in rows if r == "entry")
    for i, name in enumerate(entries):
        styles[name] = (PALETTE[i % len(PALETTE)], "-")
    floors = sorted(n for n, r in rows if r == "floor")
    for i, name in enumerate(floors):
        styles[name] = FLOOR_STYLES[i % len(FLOOR_STYLES)]
    for name, _role in rows:
        styles.setdefault(name, CEILING_STYLE)
    return styles


def _svg(fig) -> bytes:
    import matplotlib
    buf = io.BytesIO()
    with matplotlib.rc_context(RC):
        fig.savefig(buf, format="svg", metadata=METADATA, bbox_inches="tight")
    return buf.getvalue()


def _figure(width=6.4, height=4.0):
    import matplotlib
    from matplotlib.figure import Figure
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(width, height), dpi=100)
        ax = fig.add_subplot(1, 1, 1)
    return fig, ax


def _style(styles: dict, name: str):
    return styles.get(name, ("#333333", "-"))


def _pct(x, _pos=None) -> str:
    if x == 0:
        return "0%"
    v = 100 * x
    return f"{v:.0f}%" if v >= 1 else f"{v:.1g}%"


def lop_cdf(series: list[tuple[str, str, np.ndarray]], styles: dict, title: str) -> bytes:
    """ECDF of per-problem LoP, one line per (name, role, lop array)."""
    import matplotlib
    from matplotlib.ticker import FuncFormatter
    with matplotlib.rc_context(RC):
        fig, ax = _figure(6.4, 4.2)
        finite = [np.sort(v[np.isfinite(v)]) for _, _, v in series]
        top = max((np.quantile(v, 0.999) for v in finite if len(v)), default=1.0)
        top = max(top, 0.1)
        grid = np.unique(np.concatenate([[0.0], np.geomspace(1e-3, top, 240)]))
        for (name, role, _), v in zip(series, finite):
            if not len(v):
                continue
            y = np.searchsorted(v, grid, side="right") / len(v)
            color, ls = _style(styles, name)
            label = name if role == "entry" else f"{name} ({role})"
            ax.step(grid, y, where="post", color=color, linestyle=ls, linewidth=1.6, label=label)
        ax.axvline(0.05, color="#bbbbbb", linewidth=0.8, zorder=0)
        ax.text(0.05, 0.02, " 5%", color="#888888", fontsize=8, transform=ax.get_xaxis_transform())
        ax.set_xscale("symlog", linthresh=1e-3, linscale=0.4)
        ax.set_xlim(0, top)
        ax.set_ylim(0, 1.005)
        ax.xaxis.set_major_formatter(FuncFormatter(_pct))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _p: f"{100 * y:.0f}%"))
        ax.set_xlabel("loss of performance, t_choice / t_best − 1 (symmetric log scale)")
        ax.set_ylabel("share of test problems with LoP ≤ x")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="major", color="#eeeeee", linewidth=0.6)
        ax.legend(loc="lower right", fontsize=8, frameon=False)
        return _svg(fig)


def speedup_by_direction(rows: list[tuple[str, str, dict[str, float | None]]], reference: str,
                         title: str) -> bytes:
    """Grouped bars: geomean speed-up over the reference heuristic per direction, per method."""
    import matplotlib
    with matplotlib.rc_context(RC):
        n = len(rows)
        fig, ax = _figure(max(6.4, 0.55 * n + 2.5), 4.2)
        dirs = [d for d in DIRECTIONS if any(r[2].get(d) is not None for r in rows)]
        width = 0.8 / max(len(dirs), 1)
        x = np.arange(n)
        for j, d in enumerate(dirs):
            vals = np.array([r[2].get(d) if r[2].get(d) is not None else np.nan for r in rows], dtype=float)
            ax.bar(x + (j - (len(dirs) - 1) / 2) * width, vals, width=width * 0.95, color=DIR_COLORS[d],
                   label=DIRECTIONS[d])
        ax.axhline(1.0, color="#333333", linewidth=0.9, label=f"{reference} (1×)")
        ax.set_xticks(x)
        ax.set_xticklabels([name if role == "entry" else f"{name}\n({role})" for name, role, _ in rows],
                           rotation=30, ha="right")
        ax.set_xlim(-0.6, n - 0.4)
        ax.set_ylabel(f"geomean speed-up over {reference} (×)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, axis="y", color="#eeeeee", linewidth=0.6)
        ax.set_axisbelow(True)
        ax.legend(fontsize=8, frameon=False, ncols=len(dirs) + 1, loc="upper center", bbox_to_anchor=(0.5, -0.28))
        return _svg(fig)


def accuracy_vs_latency(points: list[tuple[str, str, float, float]], styles: dict, title: str) -> bytes:
    """Scatter of top-1 (y) against CPU batch-1 latency in ms (x, log), one point per (name, role, ms, top1)."""
    import matplotlib
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    with matplotlib.rc_context(RC):
        fig, ax = _figure(6.4, 4.2)
        for name, role, ms, top1 in points:
            color = _style(styles, name)[0]
            filled = role == "entry"
            ax.scatter([ms], [top1], s=46, color=color if filled else "white", edgecolors=color,
                       linewidths=1.4, zorder=3)
            ax.annotate(name, (ms, top1), textcoords="offset points", xytext=(6, 4), fontsize=8, color=color)
        ax.set_xscale("log")
        xs = [p[2] for p in points]
        if xs:
            ax.set_xlim(min(xs) / 2.5, max(xs) * 4)
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_ylim(0, 1.04)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _p: f"{100 * y:.0f}%"))
        ax.set_xlabel("CPU inference latency per decision, batch 1 (ms, log scale)")
        ax.set_ylabel("top-1 accuracy (test)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="major", color="#eeeeee", linewidth=0.6)
        return _svg(fig)


def tuning_accuracy(rows: list[tuple[str, dict[str, float]]], title: str) -> bytes:
    """Grouped bars: accuracy per tuning parameter, one bar per method (``rows``: name, {param: acc})."""
    import matplotlib
    from matplotlib.ticker import FuncFormatter
    with matplotlib.rc_context(RC):
        params = list(rows[0][1]) if rows else []
        fig, ax = _figure(max(6.4, 0.9 * len(params) + 2.5), 4.2)
        width = 0.8 / max(len(rows), 1)
        x = np.arange(len(params))
        for j, (name, acc) in enumerate(rows):
            vals = np.array([acc.get(p, np.nan) for p in params], dtype=float)
            ax.bar(x + (j - (len(rows) - 1) / 2) * width, vals, width=width * 0.95,
                   color=PALETTE[j % len(PALETTE)], label=name)
        ax.set_xticks(x)
        ax.set_xticklabels(params, rotation=30, ha="right")
        ax.set_ylim(0, 1)
        ax.yaxis.set_major_formatter(FuncFormatter(_pct))
        ax.set_ylabel("test accuracy of the parameter")
        ax.set_title(title, fontsize=10)
        ax.grid(True, axis="y", color="#eeeeee", linewidth=0.6)
        ax.set_axisbelow(True)
        ax.legend(fontsize=8, frameon=False, ncols=min(len(rows), 3), loc="upper center",
                  bbox_to_anchor=(0.5, -0.28))
        return _svg(fig)


ROLE_LABELS = {"heuristic": "reference heuristic", "measured": "measured reference, no order"}


def best_of_k(series: list[tuple[str, str, dict[int, float]]], styles: dict, title: str,
              top: float | None = None) -> bytes:
    """Best-of-K curves: geomean slowdown of the best of the first K candidates against K, one line per
    (name, role, {K: slowdown}); a reference heuristic's own order is drawn dashed with hollow markers.
    ``top`` caps the y axis; a curve that leaves it says so in the legend."""
    import matplotlib
    from matplotlib.ticker import FixedLocator, FuncFormatter
    with matplotlib.rc_context(RC):
        fig, ax = _figure(6.4, 4.2)
        ks = sorted({k for _, _, curve in series for k in curve})
        for name, role, curve in series:
            xs = [k for k in ks if curve.get(k) is not None]
            if not xs:
                continue
            color, ls = _style(styles, name)
            heuristic = role in ("heuristic", "measured")
            label = name if role == "entry" else f"{name} ({ROLE_LABELS.get(role, role)})"
            if top is not None and max(curve[k] for k in xs) > top:
                label += " — off the scale: see the table"
            ax.plot(xs, [curve[k] for k in xs], color=color, linestyle="--" if heuristic else ls, linewidth=1.6,
                    marker="o", markersize=5, markerfacecolor="white" if heuristic else color, label=label)
        ax.axhline(1.0, color="#bbbbbb", linewidth=0.8, zorder=0)
        if top is not None:
            ax.set_ylim(0.995, top)
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(FixedLocator(ks))
        ax.xaxis.set_minor_locator(FixedLocator([]))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
        ax.set_xlabel("K: candidates timed, the fastest kept (log scale)")
        ax.set_ylabel("geomean slowdown of the best of K (×)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="major", color="#eeeeee", linewidth=0.6)
        ax.legend(loc="upper right", fontsize=8, frameon=False)
        return _svg(fig)


def learning_curve(points: list[dict], model: str, title: str) -> bytes:
    """Geomean slowdown (y, mean ± std over seeds) against train problems (x, log), one point per share
    of the train part (``experiments/learning_curve.py``'s summary), each labelled with its top-1."""
    import matplotlib
    from matplotlib.ticker import FuncFormatter, NullFormatter
    points = sorted(points, key=lambda p: p["train_problems"])
    xs = [p["train_problems"] for p in points]
    with matplotlib.rc_context(RC):
        fig, ax = _figure(6.4, 3.8)
        ax.errorbar(xs, [p["geomean_slowdown_mean"] for p in points], yerr=[p["geomean_slowdown_std"] for p in points],
                    color=PALETTE[0], marker="o", markersize=5, linewidth=1.6, capsize=3, label=model)
        for p in points:
            ax.annotate(f"{100 * p['fraction']:g}%: top-1 {100 * p['top1_mean']:.1f}%",
                        (p["train_problems"], p["geomean_slowdown_mean"]), textcoords="offset points",
                        xytext=(6, 6), fontsize=8, color="#333333")
        ax.set_xscale("log")
        ax.set_xlim(min(xs) / 1.6, max(xs) * 2.2)
        ax.set_xticks(xs)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:,.0f}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.axhline(1.0, color=CEILING_STYLE[0], linestyle=CEILING_STYLE[1], linewidth=1.0)
        ax.set_xlabel("train problems (log scale)")
        ax.set_ylabel("geomean slowdown (test; 1 = oracle)")
        ax.set_title(title, fontsize=10)
        ax.legend(loc="upper right", fontsize=8, frameon=False)
        ax.grid(True, which="major", color="#eeeeee", linewidth=0.6)
        return _svg(fig)
