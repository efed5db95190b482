"""A board's second table and plot: what a practitioner asks of a selector.

Per entry (from its record, means over seeds): best-of-K (the first K candidates timed, the fastest
kept), against the board's reference heuristic the share of headroom closed, the shares of problems
improved, unchanged and regressed by more than 5% and the tails, the ranking quality, and on the
``networks`` split the network end-to-end time. The reference heuristics' own best-of-K curves come
from the same records (``overall.references``); the plot draws them beside the best-ranked entry's.

Every cell and line that quotes an autotune reference names which one
(:data:`kbench.scoring.selection_metrics.REFERENCE_TEXT`): ``autotune_top10``, the idealised one, or
``pytorch_autotune``, what PyTorch's ``benchmark = True`` really settled on. A reference recorded for part
of the test problems only (``pytorch_autotune``) says on how many, and its figures are over those.
"""

from __future__ import annotations

import html

from kbench.leaderboard import plots
from kbench.leaderboard.board import Board, Row, _value, fmt_pct, fmt_x, md_text
from kbench.leaderboard.noise import NOISE_METHOD
from kbench.scoring.metrics import BEST_OF
from kbench.scoring.selection_metrics import AUTOTUNE, PYTORCH_AUTOTUNE, REFERENCE_TEXT

HEURISTIC_COLORS = ["#6a3d9a", "#b15928", "#1b9e77", "#e7298a"]
NET = [("net_oracle_sum", "network ÷ oracle (sum)", "vs_oracle_sum",
        "network end-to-end time: the chosen kernels' times summed over each network's layers, over the "
        "oracle's sum; geomean over networks"),
       ("net_oracle_geo", "÷ oracle (per problem)", "vs_oracle_geomean",
        "the same layers, per-problem geomean of t_choice / t_best; geomean over networks"),
       ("net_ref_sum", "network ÷ reference (sum)", "vs_reference_sum",
        "the chosen kernels' network time over the reference heuristic's; geomean over networks"),
       ("net_ref_geo", "÷ reference (per problem)", "vs_reference_geomean",
        "the same layers, per-problem geomean of t_choice / t_ref; geomean over networks")]
TEXT = ("best-of-K: the first K candidates of the ranking are timed and the fastest kept (K = 10: PyTorch's "
        "autotune limit); geomean slowdown over the best kernel, the share of the oracle's performance in the "
        "tooltip. On a censored list the best of K is exact once one of the K is listed. Against the reference "
        "heuristic r = t_choice / t_ref: headroom closed = sum log(t_ref / t_choice) / sum log(t_ref / t_best) "
        "(1: the oracle, 0: the reference); improved / regressed: r below 1/1.05 / above 1.05; p95, worst: of r; "
        "regressed ×: geomean of r over the regressed. τ: Kendall tau-b, NDCG@10: gain t_best / t, of the "
        "ranking over the listed kernels (on censored find-db lists, the listed ones only). Two references are "
        f"autotune: {AUTOTUNE} ({REFERENCE_TEXT[AUTOTUNE]}) and, where the dataset records it, {PYTORCH_AUTOTUNE} "
        f"({REFERENCE_TEXT[PYTORCH_AUTOTUNE]}; its figures over the test problems it was recorded for).")


def _rows(board: Board) -> list[Row]:
    return [r for r in board.all_rows() if r.entry.method != NOISE_METHOD and "best_of_1" in r.overall]


def heuristics(board: Board) -> dict[str, dict]:
    """The reference heuristics of the board's records with their overall figures (the first record's)."""
    for row in _rows(board):
        refs = row.overall.get("references")
        if refs:
            return refs
    return {}


def networks(board: Board) -> dict | None:
    for row in _rows(board):
        net = row.record.metrics.get("networks")
        if net:
            return net
    return None


#: references with no speed-up column (cuDNN's fallback list is no heuristic anyone runs by default)
NO_SPEEDUP_COLUMN = {"cudnn_fallback"}


def speedup_refs(board: Board) -> list[str]:
    """The references that get a speed-up column with its tie test (every one the records compare with)."""
    return [n for n in heuristics(board) if n not in NO_SPEEDUP_COLUMN]


def coverage(figures: dict, n_part) -> str:
    """"on N of M test problems" where a reference has a choice on part of the board's problems only
    (``pytorch_autotune``: those it was recorded for), else ""."""
    n = figures.get("n")
    if not n or not n_part or n >= n_part:
        return ""
    return f"on {n:,.0f} of {n_part:,.0f} test problems"


def reference_label(name: str, figures: dict, n_part) -> str:
    """A reference's name with what it is, where it is an autotune one, and its coverage where partial:
    ``autotune_top10 (idealised autotune: the best of mode A's first 10 plans, each timed exactly)``."""
    what = [x for x in (REFERENCE_TEXT.get(name, ""), coverage(figures, n_part)) if x]
    return name + (f" ({'; '.join(what)})" if what else "")


def _speedup_cell(figures: dict, n_part=None) -> tuple[str, str, str]:
    """Speed-up over a reference, marked ≈ where its 95% interval holds 1 (in most seeds)."""
    v = figures.get("speedup_geomean")
    if v is None:
        return "—", "", ""
    tied = (figures.get("tied") or 0) >= 0.5
    part = coverage(figures, n_part)
    title = (f"95% interval {fmt_x(figures.get('speedup_ci_low'))} to {fmt_x(figures.get('speedup_ci_high'))}"
             + ("; tied with the reference" if tied else "")
             + (f"; {part}, the speed-up over them only" if part else f"; {figures.get('n', 0):.0f} problems"))
    return fmt_x(v) + (" ≈" if tied else ""), _value(v), title


def break_even(figures: dict, latency_ms: float | None, name: str = "autotune") -> str | None:
    """After how many calls per shape a selector and a reference ``name`` that chooses by timing (an
    autotuner) break even, once the selector's latency (``latency_ms`` per shape) and the autotuner's
    first call (``first_call_ms``) are counted; from the sums over the problems in ``figures``."""
    if latency_ms is None or figures.get("first_call_ms") is None or not figures.get("n"):
        return None
    sel0, auto0 = figures["n"] * latency_ms, figures["first_call_ms"]
    per_sel, per_auto = figures["sum_choice_ms"], figures["sum_ref_ms"]
    if per_sel > per_auto:
        if sel0 >= auto0:
            return f"{name} is ahead from the first call on"
        return (f"the selector is ahead for the first {(auto0 - sel0) / (per_sel - per_auto):,.0f} calls per shape, "
                f"{name} after")
    if sel0 <= auto0:
        return "the selector is ahead at every number of calls"
    return f"the selector is ahead after {(sel0 - auto0) / (per_auto - per_sel):,.0f} calls per shape"


#: what an autotune reference's first call holds, as the break-even line says it
FIRST_CALL_TEXT = {AUTOTUNE: "ms of timings, the 10 plans' table times",
                   PYTORCH_AUTOTUNE: "ms of PyTorch's own tuning, measured"}


def columns(board: Board) -> list[tuple[str, str, str]]:
    """(id, header, tooltip) of the table's columns."""
    ref = board.reference or "the reference"
    cols = [("method", "method", "method, or a reference heuristic's own order")]
    refs = heuristics(board)
    cols += [(f"sp_{n}", f"× {n}", f"speed-up over {reference_label(n, refs[n], board.n_problems)}: geomean of "
              f"t_{n} / t_choice; ≈: its 95% interval holds 1 (tied with it)") for n in speedup_refs(board)]
    cols += [(f"b{k}", f"best-of-{k}", f"geomean slowdown of the best of the first {k} candidates") for k in BEST_OF]
    cols += [("headroom", "headroom closed", f"share of the headroom over {ref} closed"),
             ("improved", "improved", f"share of problems more than 5% faster than {ref}"),
             ("unchanged", "unchanged", f"share of problems within 5% of {ref}"),
             ("regressed", "regressed", f"share of problems more than 5% slower than {ref}"),
             ("p95", "p95 ÷ ref", f"95th percentile of t_choice / t_{ref}"),
             ("worst", "worst ÷ ref", f"largest t_choice / t_{ref}"),
             ("regx", "regressed ×", "geomean of t_choice / t_ref over the regressed problems"),
             ("tau", "τ", "Kendall tau-b of the ranking against the measured times, over the listed kernels"),
             ("ndcg", "NDCG@10", "NDCG@10 of the ranking, gain t_best / t, over the listed kernels")]
    if networks(board):
        cols += [(cid, label, tip) for cid, label, _key, tip in NET]
    return cols


def _cell(text: str, value) -> tuple[str, str, str]:
    return text, _value(value), ""


def _best_cells(figures: dict) -> dict:
    out = {}
    for k in BEST_OF:
        v, share = figures.get(f"best_of_{k}"), figures.get(f"best_of_{k}_oracle")
        bound = figures.get(f"best_of_{k}_censored") or 0
        title = (f"{fmt_pct(share, 1)} of the oracle" if share is not None else "") + (
            f"; {fmt_pct(bound, 1)} of the problems a lower bound (censored)" if bound else "")
        out[f"b{k}"] = (fmt_x(v), _value(v), title)
    return out


def entry_cells(row: Row, board: Board) -> dict:
    o = row.overall
    ref = (o.get("references") or {}).get(board.reference or "", {})
    out = {"method": (html.escape(row.entry.name) + ("" if row.role == "entry" else f" ({html.escape(row.role)})"),
                      row.entry.name.lower(), row.entry.meta.description or "")}
    out.update(_best_cells(o))
    for name in speedup_refs(board):
        out[f"sp_{name}"] = _speedup_cell((o.get("references") or {}).get(name, {}), board.n_problems)
    out["headroom"] = _cell(fmt_pct(ref.get("headroom_closed"), 1), ref.get("headroom_closed"))
    for key in ("improved", "unchanged", "regressed"):
        out[key] = _cell(fmt_pct(ref.get(key), 1), ref.get(key))
    out["p95"] = _cell(fmt_x(ref.get("slowdown_p95")), ref.get("slowdown_p95"))
    out["worst"] = _cell(fmt_x(ref.get("slowdown_worst")), ref.get("slowdown_worst"))
    out["regx"] = _cell(fmt_x(ref.get("regressed_geomean")), ref.get("regressed_geomean"))
    out["tau"] = _cell("—" if o.get("kendall_tau") is None else f"{o['kendall_tau']:.3f}", o.get("kendall_tau"))
    out["ndcg"] = _cell("—" if o.get("ndcg_at_10") is None else f"{o['ndcg_at_10']:.3f}", o.get("ndcg_at_10"))
    net = row.record.metrics.get("networks") or {}
    for cid, _label, key, _tip in NET:
        out[cid] = _cell(fmt_x(net.get(key)), net.get(key))
    return out


def reference_kind(name: str, figures: dict, n_part) -> str:
    """What a reference row is (an autotune reference: which one), and its coverage where partial."""
    measured = figures.get("best_of_1") is None and figures.get("oracle_speedup") is not None
    kind = REFERENCE_TEXT.get(name) or ("measured reference" if measured else "reference heuristic")
    part = coverage(figures, n_part)
    return f"{kind}; {part}" if part else kind


def heuristic_cells(name: str, figures: dict, board: Board) -> dict:
    what = reference_kind(name, figures, board.n_problems)
    part = coverage(figures, board.n_problems)
    if figures.get("best_of_1") is None and figures.get("oracle_speedup") is not None:
        # a measured reference (one time per problem, no order of its own): the same at every K
        v = figures["oracle_speedup"]
        out = {"method": (f"{html.escape(name)} ({html.escape(what)})", name.lower(),
                          "one measured time per problem, no order of its own: the same at every K"
                          + (f"; {part}, its figures over those problems" if part else ""))}
        out.update({f"b{k}": (fmt_x(v), _value(v), "a measured time: the same at every K") for k in BEST_OF})
    else:
        out = {"method": (f"{html.escape(name)} ({html.escape(what)})", name.lower(),
                          "the heuristic's own order: its first K candidates timed"
                          + (f"; {part}, its figures over those problems" if part else ""))}
        out.update(_best_cells(figures))
    net = networks(board) or {}
    own = name == board.reference
    for cid, _label, key, _tip in NET:
        v = {"vs_oracle_sum": net.get("reference_vs_oracle_sum"),
             "vs_oracle_geomean": net.get("reference_vs_oracle_geomean")}.get(key) if own else None
        out[cid] = _cell(fmt_x(v), v)
    return out


def table_html(board: Board) -> str:
    rows = _rows(board)
    if not rows:
        return ""
    cols = columns(board)
    heads = "".join(f'<th scope="col" class="{"text" if cid == "method" else "num"}" data-col="{cid}" '
                    f'data-sort="{"text" if cid == "method" else "num"}" title="{html.escape(tip)}">'
                    f'<button type="button">{html.escape(label)}</button></th>' for cid, label, tip in cols)

    def tr(key: str, cells: dict) -> str:
        tds = []
        for cid, _label, _tip in cols:
            text, value, title = cells.get(cid, ("—", "", ""))
            attrs = f' class="{"text" if cid == "method" else "num"}" data-col="{cid}"'
            attrs += f' data-value="{html.escape(value)}"' if cid != "method" else ""
            attrs += f' title="{html.escape(title)}"' if title else ""
            tds.append(f"<td{attrs}>{text if cid == 'method' else html.escape(text)}</td>")
        return f'<tr data-method="{html.escape(key)}">' + "".join(tds) + "</tr>"

    body = "\n".join(tr(r.entry.method, entry_cells(r, board)) for r in rows if r.role == "entry")
    refs = [tr(r.entry.method, entry_cells(r, board)) for r in rows if r.role != "entry"]
    refs += [tr(f"heuristic:{n}", heuristic_cells(n, f, board)) for n, f in heuristics(board).items()]
    return (f'<div class="table-wrap"><table class="lb sel" id="sel-{board.slug}" aria-label="'
            f'{html.escape(board.dataset)} split {html.escape(board.split)}: best-of-K, against the reference, '
            f'ranking quality">\n<thead><tr>{heads}</tr></thead>\n<tbody class="entries">\n{body}\n</tbody>\n'
            f'<tbody class="ref">\n' + "\n".join(refs) + "\n</tbody>\n</table></div>")


def section_html(board: Board) -> str:
    table = table_html(board)
    if not table:
        return ""
    parts = [f'<p class="note">{html.escape(TEXT)}</p>', table]
    net = networks(board)
    if net:
        parts.append(f'<p class="note">{html.escape(network_note(net))}</p>')
        parts.append(per_network_html(board))
    return "\n".join(parts)


def network_note(net: dict) -> str:
    return (f"Network end-to-end time over {net['instances']:.0f} network instance(s) (a network list at one data "
            f"type and layout; {net['instances_left_out']:.0f} left out: some layer not in the test part); forward, "
            f"backward-data and backward-weights where the part has every direction, forward alone otherwise. "
            f"Layer multiplicity: {net['source']}.")


def per_network_html(board: Board) -> str:
    """The best-ranked entry's network times, network by network."""
    best = next((r for r in board.rows if r.record.metrics.get("networks")), None)
    if best is None:
        return ""
    per = best.record.metrics["networks"]["per_network"]
    head = ("<tr><th scope=\"col\" class=\"text\">network</th><th scope=\"col\" class=\"text\">directions</th>"
            "<th scope=\"col\">layers</th><th scope=\"col\">oracle ms</th><th scope=\"col\">÷ oracle (sum)</th>"
            "<th scope=\"col\">÷ oracle (per problem)</th><th scope=\"col\">÷ reference (sum)</th>"
            "<th scope=\"col\">÷ reference (per problem)</th><th scope=\"col\">reference ÷ oracle (sum)</th></tr>")
    rows = []
    for name, v in per.items():
        rows.append(f'<tr data-network="{html.escape(name)}"><td class="text">{html.escape(name)}</td>'
                    f'<td class="text">{html.escape(str(v.get("directions")))}</td>'
                    f'<td class="num">{v.get("layers", 0):.0f}</td><td class="num">{v.get("oracle_ms", 0):.4g}</td>'
                    + "".join(f'<td class="num">{fmt_x(v.get(k))}</td>' for k in
                              ("vs_oracle_sum", "vs_oracle_geomean", "vs_reference_sum", "vs_reference_geomean",
                               "reference_vs_oracle_sum")) + "</tr>")
    return (f"<details><summary>network by network: {html.escape(best.entry.name)} (the best-ranked entry, "
            f"seed mean)</summary><div class=\"table-wrap\"><table class=\"lb net\" id=\"net-{board.slug}\">"
            f"<thead>{head}</thead><tbody>\n" + "\n".join(rows) + "\n</tbody></table></div></details>")


def markdown(board: Board) -> str:
    """The README's view: the best-ranked entry and the reference heuristics' own orders."""
    best = next((r for r in board.rows if "best_of_1" in r.overall), None)
    refs = heuristics(board)
    if best is None and not refs:
        return ""
    net = networks(board)
    heads = ["ranking"] + [f"best-of-{k}" for k in BEST_OF] + [
        f"headroom closed over {board.reference}", "improved / unchanged / regressed", "worst ÷ ref"]
    if net:
        heads += ["network ÷ oracle (sum; per problem)", "network ÷ reference (sum; per problem)"]
    lines = ["| " + " | ".join(heads) + " |", "|" + "|".join(["---"] * len(heads)) + "|"]
    if best is not None:
        c = entry_cells(best, board)
        cells = [f"{md_text(best.entry.name)} (best entry)"] + [c[f"b{k}"][0] for k in BEST_OF] + [
            c["headroom"][0], f"{c['improved'][0]} / {c['unchanged'][0]} / {c['regressed'][0]}", c["worst"][0]]
        if net:
            cells += [f"{c['net_oracle_sum'][0]}; {c['net_oracle_geo'][0]}",
                      f"{c['net_ref_sum'][0]}; {c['net_ref_geo'][0]}"]
        lines.append("| " + " | ".join(x.replace("|", "\\|") for x in cells) + " |")
    for name, figures in refs.items():
        c = heuristic_cells(name, figures, board)
        what = reference_kind(name, figures, board.n_problems)
        cells = [f"{md_text(name)} ({md_text(what)})"] + [c[f"b{k}"][0] for k in BEST_OF] + ["—", "—", "—"]
        if net:
            cells += [f"{c['net_oracle_sum'][0]}; {c['net_oracle_geo'][0]}", "—"]
        lines.append("| " + " | ".join(x.replace("|", "\\|") for x in cells) + " |")
    out = "\n".join(lines)
    if best is not None and speedup_refs(board):
        figs = best.overall.get("references") or {}
        out += "\n\n" + md_text(f"{best.entry.name} (best entry), speed-up over each reference (≈: tied, its 95% "
                                  "interval holds 1): " + "; ".join(
                                      f"{reference_label(n, figs.get(n, {}), board.n_problems)} "
                                      f"{_speedup_cell(figs.get(n, {}))[0]}" for n in speedup_refs(board)) + ".")
        for name, figures in figs.items():
            when = break_even(figures, best.entry.meta.inference_latency_ms, name)
            if when:
                out += " " + md_text(f"Against {name} (first call {figures['first_call_ms']:,.0f} "
                                     f"{FIRST_CALL_TEXT.get(name, 'ms of timings')} over "
                                     f"{figures['n']:,.0f} shapes; the selector's latency "
                                     f"{best.entry.meta.inference_latency_ms:.3g} ms per shape): {when}.")
    if net:
        out += "\n\n_" + md_text(network_note(net)) + "_"
    return out


def plot(board: Board) -> tuple[str, str, str, bytes] | None:
    """(file, title, alt, SVG) of the best-of-K curves: the best-ranked entry and each reference heuristic."""
    best = next((r for r in board.rows if "best_of_1" in r.overall), None)
    refs = {n: f for n, f in heuristics(board).items()
            if f.get("best_of_1") is not None or f.get("oracle_speedup") is not None}
    if best is None:
        return None
    series = [(best.entry.name, "entry", {k: best.overall.get(f"best_of_{k}") for k in BEST_OF})]
    for n, f in refs.items():
        if f.get("best_of_1") is not None:
            series.append((n, "heuristic", {k: f.get(f"best_of_{k}") for k in BEST_OF}))
        else:  # a measured reference: one time per problem, the same at every K
            series.append((n, "measured", {k: f["oracle_speedup"] for k in BEST_OF}))
    styles = plots.method_styles([(r.entry.name, r.role) for r in board.all_rows()])
    for i, name in enumerate(refs):
        styles[name] = (HEURISTIC_COLORS[i % len(HEURISTIC_COLORS)], "--")
    # the y axis spans the best entry's and the board's reference's curves (other heuristics may leave it)
    firsts = [c[BEST_OF[0]] for n, _r, c in series if (n == board.reference or _r == "entry") and c[BEST_OF[0]]]
    top = 1.0 + 1.25 * (max(firsts + [1.02]) - 1.0)
    where = f"{board.dataset} / {board.split} (test)"
    name = f"{board.slug}-best-of-k.svg"
    title = f"Best of the first K candidates, {where}"
    text = "; ".join(f"{n}: " + ", ".join(f"K={k} {fmt_x(v)}" for k, v in curve.items() if v is not None)
                     for n, _role, curve in series)
    alt = (f"Line chart of the geometric-mean slowdown of the best of the first K candidates against K (1, 3, 5, "
           f"10) on {where}, for the best-ranked entry and each reference heuristic's own order (a measured "
           f"reference, one time per problem, is flat); lower is better, 1× is the oracle. {text}.")
    return name, title, alt, plots.best_of_k(series, styles, title, top)
