"""Loading, errors, integrity checks, align."""

import shutil
import subprocess
import sys

import numpy as np
import pytest

import kbench
from kbench.core.errors import DataIntegrityError, KbenchInputError
from kbench.data.build import PACKAGE_DATA
from kbench.data.dataset import read_dataset_folder


def test_load_tables_and_info(mi100):
    assert {"problem_id", "direction", "dtype", "layout", "n", "c", "k", "censored", "geometry_id"} <= set(mi100.problems)
    assert list(mi100.runtimes.columns[:5]) == ["problem_id", "kernel", "time_ms", "workspace_bytes", "algorithm"]
    assert mi100.info["source"]["commit"] == "2d1fd997a6fcf801ac4ca7a63e0656ef1cb9f488"
    assert mi100.info["censoring"]["rule"] == "finddb-top4"
    assert set(mi100.runtimes["problem_id"]) == set(mi100.problems["problem_id"])
    assert (mi100.runtimes["time_ms"] > 0).all()
    # censoring flag follows the rule: 4 raw entries <=> censored
    assert ((mi100.problems["n_raw"] >= 4) == mi100.problems["censored"]).all()
    assert mi100.problems["problem_id"].is_unique


def test_alias_and_case():
    assert kbench.load("GFX90878").name == "mi100"


def test_unknown_name_lists_and_suggests():
    with pytest.raises(KbenchInputError, match=r"unknown dataset 'mi10'.*Available: .*mi100.*Did you mean .*'mi100'"):
        kbench.load("mi10")


def test_unknown_split(mi100):
    with pytest.raises(KbenchInputError, match="no split 'randm'.*Did you mean 'random'"):
        mi100.split("randm")


@pytest.fixture
def copy_of_mi300x(tmp_path):
    dst = tmp_path / "mi300x"
    shutil.copytree(PACKAGE_DATA / "mi300x", dst)
    return dst


def test_truncated_file_is_detected(copy_of_mi300x):
    f = copy_of_mi300x / "runtimes.parquet"
    f.write_bytes(f.read_bytes()[:1000])
    with pytest.raises(DataIntegrityError, match=r"runtimes.parquet: size 1000 bytes.*kbench build-data"):
        read_dataset_folder(copy_of_mi300x)


def test_corrupt_file_is_detected(copy_of_mi300x):
    f = copy_of_mi300x / "problems.parquet"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(DataIntegrityError, match="problems.parquet: sha256 does not match"):
        read_dataset_folder(copy_of_mi300x)


def test_tables_are_read_on_first_use_and_equal_an_eager_read(copy_of_mi300x):
    from kbench.data.dataset import read_table
    ds = read_dataset_folder(copy_of_mi300x)
    assert ds.tables.read() == set()  # opening verifies every file but reads no table
    ds.split("random")
    assert ds.tables.read() == {"splits"}
    assert ds.heuristics is not None and ds.tables.read() == {"splits", "heuristics"}
    eager = {f.stem: read_table(f) for f in copy_of_mi300x.glob("*.parquet")}
    assert sorted(ds.tables) == sorted(eager)
    for name, frame in ds.tables.items():  # items() reads the rest
        assert frame.equals(eager[name]), name
    assert ds.tables.read() == set(eager) and ds.tables.get("nothing") is None


def test_a_hashed_file_that_is_no_parquet_is_refused_when_the_folder_opens(copy_of_mi300x):
    import hashlib
    import json
    f = copy_of_mi300x / "kernels.parquet"
    f.write_bytes(b"not a parquet file")
    manifest = json.loads((copy_of_mi300x / "manifest.json").read_text())
    manifest["files"]["kernels.parquet"] = {"sha256": hashlib.sha256(f.read_bytes()).hexdigest(),
                                            "bytes": f.stat().st_size}
    from kbench.sources.dataset_files import dataset_checksum
    manifest["checksum"] = dataset_checksum(manifest["files"])
    (copy_of_mi300x / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataIntegrityError, match="kernels.parquet: cannot be read as parquet"):
        read_dataset_folder(copy_of_mi300x)


@pytest.mark.slow
def test_align_shares_problems_and_kernels():
    a, b = kbench.load("mi210").align("mi250x")
    assert len(a.problems) == len(b.problems) > 1000
    assert set(a.problems.problem_id) == set(b.problems.problem_id)
    assert set(a.runtimes.kernel) <= set(b.kernels.kernel) and set(b.runtimes.kernel) <= set(a.kernels.kernel)


def test_best_is_fastest(mi100):
    best = mi100.best.set_index("problem_id")["time_ms"]
    mins = mi100.runtimes.groupby("problem_id")["time_ms"].min()
    assert np.allclose(best.loc[mins.index], mins)


def test_every_registered_dataset_is_shipped():
    from kbench.data.registry import DATASETS
    table = kbench.list_datasets().set_index("name")
    from_raw = [n for n, s in DATASETS.items() if s.raw_file]
    assert table.loc[from_raw, "available"].all() and (table.loc[from_raw, "problems"] > 0).all()


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "kbench.cli", *args], capture_output=True, text=True)


@pytest.mark.slow
def test_cli_datasets_and_info():
    r = run_cli("datasets")
    assert r.returncode == 0 and "mi100" in r.stdout
    r = run_cli("info", "gfx90878")
    assert r.returncode == 0 and "182,427" in r.stdout


def test_cli_unknown_dataset_exit_2():
    r = run_cli("info", "mi1OO")
    assert r.returncode == 2
    assert "unknown dataset" in r.stderr and "Traceback" not in r.stderr


def test_data_card_numbers_come_from_the_data(mi100):
    from kbench.data.cards import render_card
    text = render_card(mi100)
    assert text.startswith("---\nlicense: mit\n")
    assert f"{len(mi100.problems):,} problems" in text
    c = mi100.info["cleaning"]
    assert f"Entries with time <= 0: {c['entries_time_le_0']:,}" in text
    for name, sizes in mi100.info["splits"].items():
        assert f"| {name} | {sizes['train']:,} | {sizes['valid']:,} | {sizes['test']:,} |" in text


def test_readme_dataset_table_matches_the_shipped_manifests():
    # the table is generated (python tools/report.py); a rebuilt dataset must not leave it stale
    from pathlib import Path

    from kbench.data.dataset import datasets_markdown
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    table = readme.split("<!-- datasets:start -->\n", 1)[1].split("\n<!-- datasets:end -->", 1)[0]
    assert table == datasets_markdown(), "README dataset table is stale: run `python tools/report.py`"


def test_readme_scoring_rules_are_the_explain_text():
    """The README's scoring rules are generated from EXPECTED_FORMAT (``kbench evaluate --explain``):
    one source for both, so they cannot disagree."""
    import importlib.util
    from pathlib import Path

    from kbench.scoring.evaluate import EXPECTED_FORMAT
    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("report", root / "tools" / "report.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    readme = (root / "README.md").read_text()
    block = readme.split(report.SCORING_START + "\n", 1)[1].split("\n" + report.SCORING_END, 1)[0]
    assert block == report.scoring_rules_markdown(EXPECTED_FORMAT), \
        "README scoring rules are stale: run `python tools/report.py`"
    # every rule of the explain text is in the README, word for word (whitespace aside)
    rules = EXPECTED_FORMAT.split("\nScoring rules\n", 1)[1]
    assert " ".join(rules.split()) == " ".join(block.split())


def test_scoring_rules_markdown_on_a_hand_made_text():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "report", Path(__file__).resolve().parents[2] / "tools" / "report.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    text = "Head\n\nScoring rules\n  1. First rule,\n     continued.\n  2. Second.\n  A closing\n  note.\n"
    assert report.scoring_rules_markdown(text) == "1. First rule, continued.\n2. Second.\n\nA closing note."


def test_readme_first_screens_are_the_newcomer_path():
    """Install, load, evaluate, datasets, leaderboard: the README's first 100 lines hold no collector
    internals (throughputs, ranks per GPU, agreement figures); docs/collect_scale_out.md does."""
    import re
    from pathlib import Path

    head = "\n".join((Path(__file__).resolve().parents[2] / "README.md").read_text().splitlines()[:100])
    assert not re.search(r"per minute|ln ratio|ranks-per-gpu|ranks per GPU|cores ladder|bootstrap", head)


def test_a_variant_loads_by_its_base_name_with_the_same_problems_and_splits():
    """``load("h200", variant="pytorch")`` is h200-pytorch: the same problem ids and split assignments,
    and a candidate set that holds the default set's plans of every problem (TF32 plans on FP32 data
    and reduced-precision reduction on FP16/BF16 are added, docs/variants.md)."""
    base, var = kbench.load("h200"), kbench.load("h200", variant="pytorch")
    assert var.name == "h200-pytorch" and var.info["variant"] == "pytorch" and base.info["variant"] == "default"
    assert kbench.load("h200", variant="default").name == "h200"
    assert list(base.problems["problem_id"]) == list(var.problems["problem_id"])
    for split in ("random", "networks"):
        a, b = base.split(split), var.split(split)
        assert all(set(a[p]) == set(b[p]) for p in ("train", "valid", "test"))
    pairs = lambda rt: set(zip(rt["problem_id"].astype(str), rt["kernel"].astype(str)))  # noqa: E731
    assert pairs(base.runtimes) < pairs(var.runtimes)
    fp32 = set(base.problems.loc[base.problems["dtype"] == "FP32", "problem_id"])
    # on FP32 data the variant adds the TF32 plans that PyTorch runs with allow_tf32 = True
    assert var.runtimes["problem_id"].isin(fp32).sum() > base.runtimes["problem_id"].isin(fp32).sum()


def test_an_unknown_variant_names_the_variants_there_are():
    with pytest.raises(KbenchInputError, match=r"variant='tf16': 'h200' has no such variant. Variants: "
                                               r"h100: default, pytorch; h200: default, pytorch"):
        kbench.load("h200", variant="tf16")
    with pytest.raises(KbenchInputError, match="'mi100' has no such variant"):
        kbench.load("mi100", variant="pytorch")


def _report_module():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "report", Path(__file__).resolve().parents[2] / "tools" / "report.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    return report


def test_readme_gpu_figures_and_leaderboard_rules_are_generated():
    """The README's GPU figures come from the board entries' verification records and its leaderboard
    rules from kbench.leaderboard.policy.RULES_MD (``python tools/report.py``): none is typed by hand."""
    from pathlib import Path

    report = _report_module()
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for start, end, body in ((report.GPU_START, report.GPU_END, report.gpu_markdown()),
                             (report.GPU_SUMMARY_START, report.GPU_SUMMARY_END, report.gpu_summary_markdown()),
                             (report.RULES_START, report.RULES_END, report.rules_markdown()),
                             (report.MODELS_START, report.MODELS_END, report.models_markdown())):
        block = readme.split(start + "\n", 1)[1].split("\n" + end, 1)[0]
        assert block == body, f"README block {start} is stale: run `python tools/report.py`"
    assert len(report.verification_records()) >= 1
    assert len(report.model_records()) >= 1


def test_the_model_table_is_the_records(tmp_path):
    """Hand-made bench records: one row per (step, mode), the speed-up over the same step's default, no conv
    share from a schema-1 record nor from a schema-2 record's PyTorch modes, a failed mode named."""
    import json

    report = _report_module()
    (tmp_path / "raw" / "models").mkdir(parents=True)

    def result(mode, step, ms, first, share, status="ok"):
        return {"mode": mode, "step": step, "status": status, "step_ms_median": ms, "step_ms_iqr": 0.25,
                "first_step_ms": first, "conv_share": share}
    record = {"record": "kbench-model-bench", "schema_version": 2, "model": "torchvision:tiny",
              "input_shape": [2, 3, 8, 8], "dtype": "fp32", "autocast": "bf16", "memory_format": "channels_last",
              "gpu": {"gpu": "NVIDIA H200"},
              "results": [result("default", "inference", 4.0, 100.0, 0.5), result("default", "train", 10.0, 1500.0, 0.6),
                          result("cache:oracle", "train", 8.0, 2500.0, 0.55),
                          result("autotune", "train", None, None, None, status="failed")]}
    (tmp_path / "raw" / "models" / "tiny.json").write_text(json.dumps(record))
    (tmp_path / "raw" / "models" / "tiny.oracle.json").write_text(json.dumps({"format": "kbench-plan-cache-1"}))
    old = dict(record, schema_version=1, model="torchvision:old", results=[result("default", "train", 5.0, 50.0, 0.3)])
    (tmp_path / "raw" / "models" / "old.json").write_text(json.dumps(old))
    lines = report.models_markdown(tmp_path).splitlines()
    place = "NVIDIA H200 | 2x3x8x8, autocast bf16, channels_last"
    assert lines[2:6] == [
        f"| [`torchvision:old`](raw/models/old.json) | {place} | train | default | 5.00 ms (0.25) | 1.000x | 50 ms | – |",
        f"| [`torchvision:tiny`](raw/models/tiny.json) | {place} | train | default | 10.00 ms (0.25) | 1.000x "
        "| 1,500 ms | – |",
        f"| [`torchvision:tiny`](raw/models/tiny.json) | {place} | train | cache:oracle | 8.00 ms (0.25) | 1.250x "
        "| 2,500 ms | 0.55 |",
        f"| [`torchvision:tiny`](raw/models/tiny.json) | {place} | inference | default | 4.00 ms (0.25) | 1.000x "
        "| 100 ms | – |"]
    assert lines[7].startswith("[`raw/models/old.json`](raw/models/old.json) is a schema-1 record")
    assert lines[8].startswith("[`raw/models/tiny.json`](raw/models/tiny.json): no conv share for PyTorch's own modes")
    assert lines[9] == "[`raw/models/tiny.json`](raw/models/tiny.json): failed: train autotune (the record has the errors)."


def test_a_cache_mode_that_fell_back_is_named_with_its_share_of_calls(tmp_path):
    """A cache filled in part sends the rest of the calls to PyTorch: 3 of 4 calls through it is 75.0%."""
    import json

    report = _report_module()
    (tmp_path / "raw" / "models").mkdir(parents=True)
    stats = {"calls": {"F": 2, "B": 1, "W": 1}, "through_cache": {"F": 2, "B": 1, "W": 0},
             "fallback": {"not_in_cache": 1, "build_failed": 0}}
    full = dict(stats, through_cache=stats["calls"], fallback={"not_in_cache": 0})
    results = [{"mode": mode, "step": "train", "status": "ok", "step_ms_median": 10.0, "step_ms_iqr": 0.5,
                "first_step_ms": 1000.0, "conv_share": 0.5, "use_plans_stats": st}
               for mode, st in (("default", None), ("cache:oracle", stats), ("cache:selector", full))]
    record = {"record": "kbench-model-bench", "schema_version": 3, "model": "torchvision:tiny",
              "input_shape": [2, 3, 8, 8], "dtype": "fp32", "autocast": None, "memory_format": "contiguous",
              "gpu": {"gpu": "NVIDIA H200"}, "results": results}
    (tmp_path / "raw" / "models" / "tiny.json").write_text(json.dumps(record))
    lines = report.models_markdown(tmp_path).splitlines()
    assert lines[5:] == ["", "[`raw/models/tiny.json`](raw/models/tiny.json): train cache:oracle ran 3 of its 4 "
                         "convolution calls through the cache (75.0%); the others went to PyTorch's own choice "
                         "(not_in_cache 1)."]


def test_a_schema_3_record_shows_the_share_of_pytorchs_own_modes(tmp_path):
    """Schema 3 measures PyTorch's convolutions inside kbench::conv_aten* ranges: every mode's share is shown."""
    import json

    report = _report_module()
    (tmp_path / "raw" / "models").mkdir(parents=True)
    results = [{"mode": mode, "step": "train", "status": "ok", "step_ms_median": ms, "step_ms_iqr": 0.5,
                "first_step_ms": 1000.0, "conv_share": share}
               for mode, ms, share in (("default", 20.0, 0.625), ("autotune", 16.0, 0.5), ("cache:oracle", 25.0, 0.75))]
    record = {"record": "kbench-model-bench", "schema_version": 3, "model": "torchvision:tiny",
              "input_shape": [2, 3, 8, 8], "dtype": "fp32", "autocast": None, "memory_format": "contiguous",
              "gpu": {"gpu": "NVIDIA H200"}, "results": results}
    (tmp_path / "raw" / "models" / "tiny.json").write_text(json.dumps(record))
    lines = report.models_markdown(tmp_path).splitlines()
    # 0.625 -> "0.62" (round half to even), 20/16 = 1.250x, 20/25 = 0.800x
    assert [line.rsplit("|", 4)[1:] for line in lines[2:]] == [
        [" 1.000x ", " 1,000 ms ", " 0.62 ", ""], [" 1.250x ", " 1,000 ms ", " 0.50 ", ""],
        [" 0.800x ", " 1,000 ms ", " 0.75 ", ""]]


def test_readme_has_no_speedup_figure_outside_a_generated_block():
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    prose = re.sub(r"<!-- ([\w-]+):start -->.*?<!-- \1:end -->", "", readme, flags=re.S)
    assert re.findall(r"\b\d\.\d{2,}x\b|\[\d\.\d+, \d\.\d+\]", prose) == []
