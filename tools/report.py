"""Render the README's generated blocks: the dataset table, the scoring rules, the leaderboard rules, the
GPU figures, the model step times and the performance table.

    python tools/report.py            # rewrites the blocks in README.md

The performance table comes from ``bench/results/*.json``; the scoring rules from the "Scoring
rules" part of :data:`kbench.scoring.evaluate.EXPECTED_FORMAT`, the text ``kbench evaluate --explain``
prints, so the README and the command say the same; the leaderboard rules from
:data:`kbench.leaderboard.policy.RULES_MD`, as the board states them; the GPU figures from the board
entries' ``verification.json`` records; the model step times from the ``kbench model bench`` records in
``raw/models/*.json`` (``tests/data/test_dataset.py`` checks every block).
"""

from __future__ import annotations

import functools
import json
import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- bench:start -->", "<!-- bench:end -->"


def rows() -> list[str]:
    res = ROOT / "bench" / "results"
    out = ["| what | measured | target | machine |", "|---|---|---|---|"]

    def mach(d):
        m = d.get("machine", {})
        la = f", load average {m['loadavg_1min']:.1f}" if m.get("loadavg_1min") is not None else ""
        return f"{m.get('cpu_count')} cores, {m.get('processor')}, Python {m.get('python')}{la}"

    if (res / "load.json").exists():
        d = json.loads((res / "load.json").read_text())
        out.append(f"| `kbench.load(\"{d['dataset']}\")` and every table read, fresh process, import excluded (median of "
                   f"{len(d['load_seconds'])}) | {d['load_median_s']:.3f} s | < 0.5 s | {mach(d)} |")
        out.append(f"| parsing the raw find-db instead (`convert_finddb`) | {d['parse_raw_finddb_s']:.1f} s | | {mach(d)} |")
    if (res / "load_memory.json").exists():
        d = json.loads((res / "load_memory.json").read_text())
        for name, r in d["datasets"].items():
            s, c = r["strings"], r["categoricals"]
            out.append(f"| memory of `kbench.load(\"{name}\")`'s tables, categoricals (plain strings before) | "
                       f"{c['total_bytes'] / 1e6:,.1f} MB ({s['total_bytes'] / 1e6:,.1f} MB, "
                       f"{r['ratio_total_bytes']:.1f}x) | | {mach(d)} |")
            out.append(f"| peak memory of loading {name} and scoring its test part, categoricals (strings) | "
                       f"{c['peak_rss_after_evaluate_kib'] / 1024:,.0f} MiB "
                       f"({s['peak_rss_after_evaluate_kib'] / 1024:,.0f} MiB) | | {mach(d)} |")
    if (res / "evaluate.json").exists():
        d = json.loads((res / "evaluate.json").read_text())
        out.append(f"| `Evaluator(...)(preds)` on {d['dataset']} {d['split']}/test ({d['problems']:,} problems, "
                   f"{d['kernels_per_ranking']} kernels ranked each; median) | {d['api_call_median_s']:.3f} s | < 0.2 s | {mach(d)} |")
        out.append(f"| whole `kbench evaluate` command, same file (median) | {d['cli_command_median_s']:.2f} s | < 2 s | {mach(d)} |")
    if (res / "reformer_latency.json").exists():
        d = json.loads((res / "reformer_latency.json").read_text())
        inf = d["inference"]["reformer"]
        paths = [("ONNX Runtime path (I/O binding)", "onnxruntime", "< 10 µs (paper: 49 µs)"),
                 ("numpy path", "numpy", ""), ("PyTorch", "torch", "")]
        for label, key, target in paths:
            if "batch1" not in inf.get(key, {}):
                continue
            b1 = inf[key]["batch1"]
            out.append(f"| Reformer CPU inference, one problem, 1 thread, {label} (p50 / p99) | "
                       f"{b1['p50_us']:.1f} / {b1['p99_us']:.1f} µs | {target} | {mach(d)} |")
    for path in sorted(res.glob("selector_latency_*.json")):
        d = json.loads(path.read_text())
        m = d.get("machine", {})
        where = ", ".join(filter(None, [f"{m.get('cpus')} cores", m.get("processor"), f"Python {m.get('python')}",
                                        f"load average {d['loadavg_before'][0]:.1f}"]))
        lat, save = d["latency_ms"], d["table_saving"]
        out.append(f"| `{d['baseline']}` selector CPU latency, one {d['dataset']} problem, batch 1, 1 thread "
                   f"(features + booster + ranking; p50 / p99); break-even: calls of the convolution whose mean "
                   f"saving over cuDNN mode A ({save['mean_saved_ms'] * 1e3:.1f} µs, table) pay for one prediction "
                   f"| {lat['p50']:.1f} / {lat['p99']:.1f} ms; {d['break_even_calls']:,.0f} calls | | {where} |")
    if (res / "validate.json").exists():
        d = json.loads((res / "validate.json").read_text())
        m = d["machine"]
        where = f"{m['cpus']} cores, Python {m['python']}, load average {m['load_average_1min_before']:.1f} before the run"
        sp = d["stored_predictions"]
        stored = f"{d['rescored']} entries, {sp['files']} files of {sp['bytes'] / 1e6:.1f} MB"
        if "gpu_retimings" in d:  # the whole command: re-timings and transfer records too, in `jobs` processes
            out.append(f"| `kbench leaderboard validate`: every figure of the board re-derived from its stored "
                       f"inputs ({stored}; {d['gpu_retimings']} GPU re-timings, {d['transfer_records']} transfer "
                       f"records; {d['jobs']} processes) | {d['wall_s']:.0f} s | < 2 min | {where} |")
        else:  # a record of the result records' re-scoring alone
            out.append(f"| `kbench leaderboard validate`: the whole board re-scored from its stored predictions "
                       f"({stored}) | {d['wall_s']:.0f} s | | {where} |")
    for path in sorted(res.glob("compact_selector_*.json")):
        d = json.loads(path.read_text())
        m, aims = d["machine"], d["aims"]
        where = f"{m['cpu_count']} cores ({m['cores_used']} used), {m['processor']}, load average {m['loadavg_1min']:.1f}"
        out.append(f"| `{d['model']}` through `kbench.selector` on {d['dataset']} (numpy scorer, batch 1, features "
                   f"included; p50 / p99; size; share of `{d['best_entry']['method']}`'s speed-up kept) | "
                   f"{d['latency_ms_p50']:.2f} / {d['latency_ms_p99']:.1f} ms; {d['size_bytes'] / 1e6:.2f} MB; "
                   f"{100 * d['kept_gain']:.1f}% | <= {aims['latency_ms_p50_max']:g} ms, <= "
                   f"{aims['size_bytes_max'] / 1e6:g} MB, >= {100 * aims['kept_gain_min']:g}% | {where} |")
    for path in sorted(res.glob("forest_latency*.json")):  # the CPU machine's, and a GPU machine's (_gpu)
        d = json.loads(path.read_text())
        m, at16 = d["machine"], d["latency_by_rows"]["16"]
        where = f"{m['cpu_count']} cores ({m['cores_used']} used), {m['processor']}, load average {m['loadavg_1min']:.1f}"
        names = [("numpy", "kbench's numpy walk"), ("xgboost", "xgboost"), ("onnxruntime", "onnxruntime"),
                 ("cuda", f"torch on the {d.get('gpu')}")]
        shown = [(label, at16[f"{key}_ms_p50"]) for key, label in names if f"{key}_ms_p50" in at16]
        out.append(f"| a forest of the full `xgboost-plans-safe` recipe's shape ({d['rounds']:,} rounds, depth "
                   f"{d['max_depth']}, {d['tree_nodes']:,} nodes), 16 candidate plans of one problem, p50: "
                   + ", ".join(label for label, _ in shown) + " | "
                   + " / ".join(f"{v:.2f}" for _, v in shown) + f" ms | <= {d['aim_ms']:g} ms | {where} |")
    if (res / "use_plans_overhead.json").exists():
        d = json.loads((res / "use_plans_overhead.json").read_text())
        where = f"{d['gpu']['gpu']}, torch {d['torch']}, cuDNN {d['gpu']['cudnn_backend']}"
        how = ("behind a spin kernel, host clock" if d.get("protocol") else
               f"{d['calls']:,} calls back to back: the launch queue fills, so host and GPU time together")
        for name, case in d["cases"].items():
            for label, words in (("forward", "forward"), ("forward_backward", "forward + backward")):
                ours, theirs = case[f"use_plans_{label}"], case[f"pytorch_{label}"]
                out.append(f"| `kbench.torch.use_plans` against PyTorch's own path, {name}, {words}, per call "
                           f"({how}) | {ours['host_us_per_call']:.0f} µs ({theirs['host_us_per_call']:.0f} µs) "
                           f"| | {where} |")
    if (res / "default_run.json").exists():
        d = json.loads((res / "default_run.json").read_text())
        jobs = f" ({d['jobs']} worker processes)" if d.get("jobs") else ""  # runs before --jobs: one process
        fits = ", ".join(f"{m} {v:.0f} s" for m, v in sorted(d["fit_s_per_seed"].items(), key=lambda kv: -(kv[1] or 0))
                         if v is not None and v >= 1)
        out.append(f"| default `kbench run` from scratch (mi100 random, 5 seeds; training per seed: {fits}) | "
                   f"{d['wall_min']:.1f} min | ≤ 10 min{jobs} | {mach(d)} |")
    out.append("")
    out.append("Experiment reports generated from the records: "
               + ", ".join(f"[`{p.name}`]({p.relative_to(ROOT).as_posix()})" for p in sorted(
                   [*(ROOT / "experiments" / "results").glob("*.md"), *(ROOT / "tools" / "results").glob("*.md")],
                   key=lambda p: p.name)) + ".")
    return out


DATASETS_START, DATASETS_END = "<!-- datasets:start -->", "<!-- datasets:end -->"
SCORING_START, SCORING_END = "<!-- scoring:start -->", "<!-- scoring:end -->"


GPU_START, GPU_END = "<!-- gpu:start -->", "<!-- gpu:end -->"
MODELS_START, MODELS_END = "<!-- models:start -->", "<!-- models:end -->"
GPU_SUMMARY_START, GPU_SUMMARY_END = "<!-- gpu-summary:start -->", "<!-- gpu-summary:end -->"
RULES_START, RULES_END = "<!-- rules:start -->", "<!-- rules:end -->"
#: the references a verification record's ``live`` part times, as the README names them
REFERENCE_NAMES = {"live_mode_b": "live cuDNN mode B", "live_mode_a": "live cuDNN mode A",
                   "table_mode_a": "cuDNN mode A (the table's)", "pytorch_op": "PyTorch's own convolution",
                   "pytorch_autotune": "PyTorch's real autotune (benchmark = True)"}


def verification_records(root: Path = ROOT) -> list[tuple[str, dict]]:
    """(path in the repository, record) of every board entry re-timed with the live references."""
    out = []
    for path in sorted((root / "leaderboard").glob("*/*/*/verification.json")):
        record = json.loads(path.read_text())
        if record.get("live"):
            out.append((path.relative_to(root).as_posix(), record))
    return out


def _speedup(reference: dict) -> str:
    low, high = reference["speedup_ci95"]
    return f"{reference['speedup_geomean']:.3f}x [{low:.3f}, {high:.3f}]"


def gpu_markdown(root: Path = ROOT) -> str:
    """The table of the board entries re-timed on the GPU: the choice's measured speed-up over each live
    reference, with its 95% bootstrap interval over problems, from the verification records."""
    lines = ["| board | entry | GPU | problems | over live mode B | over live mode A | over PyTorch's convolution "
             "| over PyTorch's real autotune | strongest reference |", "|---|---|---|---|---|---|---|---|---|"]
    for path, record in verification_records(root):
        rows = [(f"[`{record['method']}`]({path})", record["live"])]
        timed = record.get("timed_top")
        if timed and timed.get("live"):  # the same run's timed selector: the entry's first K plans timed
            cost = (f" (its first calls: median {timed['call_cost_median_ms']:.1f} ms a problem)"
                    if timed.get("call_cost_median_ms") is not None else "")
            rows.append((f"[`{record['method']}`]({path}), its first {timed['k']} plans timed{cost}", timed["live"]))
        for entry, live in rows:
            cells = [_speedup(live["references"][name]) if name in live["references"] else "–"
                     for name in ("live_mode_b", "live_mode_a", "pytorch_op")]
            auto = live["references"].get("pytorch_autotune")
            cells.append("–" if auto is None else _speedup(auto) + (
                f" ({auto['problems']:,} problems)" if auto["problems"] != live["problems"] else ""))
            lines.append(f"| {record['dataset']['name']} `{record['split']}` | {entry} "
                         f"| {record['device']['gpu']} | {live['problems']:,} | {' | '.join(cells)} "
                         f"| {REFERENCE_NAMES[live['strongest_reference']]} |")
    return "\n".join(lines)


def gpu_summary_markdown(root: Path = ROOT) -> str:
    """The README's first-screen bullet: on the ``pytorch`` variant's ``random`` boards, the best re-timed
    entry's speed-up over the strongest reference decided on the GPU, per dataset (2D and 3D sets of one
    GPU apart), with the dataset's GPU."""
    best: dict[str, tuple[float, str, str]] = {}
    timed: dict[str, tuple[float, str, int]] = {}  # the best timed selector per dataset: figure, reference, K
    for _, record in verification_records(root):
        live = record["live"]
        if live["variant"] != "pytorch" or record["split"] != "random":
            continue
        strongest = live["strongest_reference"]
        figure = live["references"][strongest]["speedup_geomean"]
        name = record["dataset"]["name"]
        if name not in best or figure > best[name][0]:
            best[name] = (figure, strongest, record["device"]["gpu"])
        top = record.get("timed_top") or {}
        if top.get("live") and strongest in top["live"]["references"]:
            figure = top["live"]["references"][strongest]["speedup_geomean"]
            if name not in timed or figure > timed[name][0]:
                timed[name] = (figure, strongest, top["k"])
    parts = [f"{figure:.3f}x on `{name}` ({gpu}, over {REFERENCE_NAMES[strongest]})"
             for name, (figure, strongest, gpu) in sorted(best.items(), key=lambda kv: -kv[1][0])]
    text = ("* **Confirmed on the GPU against what PyTorch users run.** On the `pytorch` variant's `random` "
            "boards the best re-timed entry is faster than the strongest reference, timed with the references "
            "decided on the GPU itself, by " + ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "")
            + parts[-1] + " (\"Measured on the GPU\" below).")
    for name, (figure, strongest, k) in sorted(timed.items()):
        text += (f" With its first {k} plans timed on the GPU for each new shape (a tuning call, as autotune "
                 f"makes), it is {figure:.3f}x over {REFERENCE_NAMES[strongest]} on `{name}`.")
    return textwrap.fill(text, width=100, subsequent_indent="  ", break_on_hyphens=False, break_long_words=False)


def model_records(root: Path = ROOT) -> list[tuple[str, dict]]:
    """(path in the repository, record) of every ``kbench model bench`` record in ``raw/models/``."""
    out = []
    for path in sorted((root / "raw" / "models").glob("*.json")):
        record = json.loads(path.read_text())
        if record.get("record") == "kbench-model-bench":
            out.append((path.relative_to(root).as_posix(), record))
    return out


def models_markdown(root: Path = ROOT) -> str:
    """The table of the model step times: per record, step and mode, the median step time (IQR), its
    speed-up over PyTorch's default of the same step, the first step and the convolutions' share of the
    step's GPU time. Schema-1 records summed each kernel twice in their profile: no share from them. In
    schema-2 records PyTorch's own modes (``default``, ``autotune``) read a share of 0: the kernels cuDNN
    launches there are linked to no ``aten::convolution`` op in the profile, so only the cache modes,
    whose calls lie in kbench's own ranges, have a share. Schema 3 puts PyTorch's convolution ops in
    kbench ranges too (``kbench.model.bench.conv_ranges``): every mode's share is shown."""
    lines = ["| model | GPU | input | step | mode | step time (IQR) | vs default | first step | conv share |",
             "|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for path, record in model_records(root):
        shape = "x".join(str(v) for v in record["input_shape"])
        dtype = f"autocast {record['autocast']}" if record.get("autocast") else record["dtype"]
        where = f"{shape}, {dtype}, {record['memory_format']}"
        ok = [r for r in record["results"] if r["status"] == "ok"]
        default = {r["step"]: r["step_ms_median"] for r in ok if r["mode"] == "default"}
        schema = int(record.get("schema_version", 1))
        if schema < 2:
            notes.append(f"[`{path}`]({path}) is a schema-1 record: its profile summed each kernel twice, so "
                         "its conv share is left out.")
        elif schema == 2 and any(not r["mode"].startswith("cache:") for r in ok):
            notes.append(f"[`{path}`]({path}): no conv share for PyTorch's own modes; in a schema-2 record the "
                         "kernels cuDNN launches there are linked to no convolution op.")
        for r in sorted(ok, key=lambda r: (r["step"] != "train", r["step"])):
            vs = f"{default[r['step']] / r['step_ms_median']:.3f}x" if r["step"] in default else "–"
            measured = schema >= 3 or (schema == 2 and r["mode"].startswith("cache:"))
            share = f"{r['conv_share']:.2f}" if measured and r.get("conv_share") is not None else "–"
            lines.append(f"| [`{record['model']}`]({path}) | {record['gpu']['gpu']} | {where} | {r['step']} "
                         f"| {r['mode']} | {r['step_ms_median']:.2f} ms ({r['step_ms_iqr']:.2f}) | {vs} "
                         f"| {r['first_step_ms']:,.0f} ms | {share} |")
        notes += partial_cache_notes(path, ok)
        failed = [f"{r['step']} {r['mode']}" for r in record["results"] if r["status"] != "ok"]
        if failed:
            notes.append(f"[`{path}`]({path}): failed: {', '.join(failed)} (the record has the errors).")
    return "\n".join(lines + ([""] + notes if notes else []))


def partial_cache_notes(path: str, results: list[dict]) -> list[str]:
    """A note per cache mode whose step sent some convolution calls to PyTorch instead of its cache (a
    cache filled only in part, as a timing run stopped by its budget leaves it): that mode's time is
    not the cache's alone."""
    notes = []
    for r in results:
        stats = r.get("use_plans_stats") or {}
        calls, through = (sum((stats.get(k) or {}).values()) for k in ("calls", "through_cache"))
        if r["mode"].startswith("cache:") and calls and through < calls:
            fallbacks = ", ".join(f"{k} {v:,}" for k, v in (stats.get("fallback") or {}).items() if v)
            notes.append(f"[`{path}`]({path}): {r['step']} {r['mode']} ran {through:,} of its {calls:,} convolution "
                         f"calls through the cache ({100 * through / calls:.1f}%); the others went to PyTorch's "
                         f"own choice ({fallbacks}).")
    return notes


def rules_markdown() -> str:
    """The leaderboard's rules, as the board states them (:data:`kbench.leaderboard.policy.RULES_MD`)."""
    from kbench.leaderboard.policy import RULES_MD
    return RULES_MD.rstrip("\n")


def scoring_rules_markdown(expected_format: str) -> str:
    """The "Scoring rules" part of ``expected_format`` as Markdown: a numbered list, then its closing note."""
    section = expected_format.split("\nScoring rules\n", 1)[1]
    items: list[str] = []
    note: list[str] = []
    for line in section.strip("\n").splitlines():
        words = line.strip()
        if re.match(r"\d+\. ", words):
            items.append(words)
        elif items and not note and line.startswith("     "):  # a rule's continuation line
            items[-1] += " " + words
        elif words:
            note.append(words)
    wrap = functools.partial(textwrap.fill, width=100, break_on_hyphens=False, break_long_words=False)
    return "\n".join(wrap(item, subsequent_indent="   ") for item in items) + "\n\n" + wrap(" ".join(note))


def update_doc_block(doc: Path, start: str, end: str, body: str) -> None:
    """Rewrite what lies between the markers ``start`` and ``end`` of ``doc`` as a newline and ``body``
    (the renderers of docs/baselines.md share it)."""
    text = doc.read_text()
    a, b = text.index(start) + len(start), text.index(end)
    doc.write_text(text[:a] + "\n" + body + text[b:])
    print(f"updated {doc}")


def replace_block(text: str, start: str, end: str, body: str) -> str:
    """``text`` with what lies between the markers ``start`` and ``end`` replaced by ``body``."""
    head, rest = text.split(start, 1)
    return head + start + "\n" + body + "\n" + end + rest.split(end, 1)[1]


def main() -> None:
    import sys
    sys.path.insert(0, str(ROOT))
    from kbench.data.dataset import datasets_markdown
    from kbench.scoring.evaluate import EXPECTED_FORMAT
    readme = ROOT / "README.md"
    text = readme.read_text()
    text = replace_block(text, DATASETS_START, DATASETS_END, datasets_markdown())
    text = replace_block(text, SCORING_START, SCORING_END, scoring_rules_markdown(EXPECTED_FORMAT))
    text = replace_block(text, RULES_START, RULES_END, rules_markdown())
    text = replace_block(text, GPU_SUMMARY_START, GPU_SUMMARY_END, gpu_summary_markdown())
    text = replace_block(text, GPU_START, GPU_END, gpu_markdown())
    text = replace_block(text, MODELS_START, MODELS_END, models_markdown())
    block = START + "\n" + "\n".join(rows()) + "\n" + END
    if START in text:
        head, rest = text.split(START, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.replace("BENCH_TABLE", block)
    readme.write_text(text)
    print(block)


if __name__ == "__main__":
    main()
