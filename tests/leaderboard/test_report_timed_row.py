"""tools/report.py's GPU table: a record with a timed selector gets a second row from its ``timed_top``."""

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _live(speedup: float) -> dict:
    ref = {"problems": 2, "speedup_geomean": speedup, "speedup_ci95": [speedup - 0.01, speedup + 0.01]}
    return {"problems": 2, "references": {"live_mode_b": ref, "pytorch_autotune": ref},
            "strongest_reference": "pytorch_autotune"}


def test_the_timed_selector_has_its_own_row(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    import report
    folder = tmp_path / "leaderboard" / "h200-3d-pytorch" / "random" / "m"
    folder.mkdir(parents=True)
    record = {"dataset": {"name": "h200-3d-pytorch"}, "split": "random", "method": "m", "device": {"gpu": "G"},
              "live": _live(1.009), "timed_top": {"k": 5, "live": _live(1.062)}}
    (folder / "verification.json").write_text(json.dumps(record))
    rows = report.gpu_markdown(tmp_path).splitlines()[2:]
    assert len(rows) == 2 and "its first 5 plans timed" in rows[1]
    assert "1.009x [0.999, 1.019]" in rows[0] and "1.062x [1.052, 1.072]" in rows[1]
    record["timed_top"].update(autotune_pass_choice="first_call", call_cost_ms=12.0, call_cost_median_ms=6.0)
    (folder / "verification.json").write_text(json.dumps(record))
    assert "its first 5 plans timed (its first calls: median 6.0 ms a problem)" in report.gpu_markdown(tmp_path)
    del record["timed_top"]
    (folder / "verification.json").write_text(json.dumps(record))
    assert len(report.gpu_markdown(tmp_path).splitlines()) == 3


def test_the_summary_names_the_timed_selector_against_the_same_reference(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    import report
    folder = tmp_path / "leaderboard" / "h200-3d-pytorch" / "random" / "m"
    folder.mkdir(parents=True)
    record = {"dataset": {"name": "h200-3d-pytorch"}, "split": "random", "method": "m", "device": {"gpu": "G"},
              "live": {**_live(1.009), "variant": "pytorch"}, "timed_top": {"k": 5, "live": _live(1.062)}}
    (folder / "verification.json").write_text(json.dumps(record))
    text = " ".join(report.gpu_summary_markdown(tmp_path).split())
    assert "by 1.009x on `h200-3d-pytorch` (G, over PyTorch's real autotune (benchmark = True))" in text
    assert ("With its first 5 plans timed on the GPU for each new shape (a tuning call, as autotune makes), it is "
            "1.062x over PyTorch's real autotune (benchmark = True) on `h200-3d-pytorch`.") in text
