"""A GPU re-timing record beside an entry: the board shows the measured speed-up next to the table one."""

import json
import shutil

import pytest

from kbench.cli import main
from kbench.leaderboard.site import build
from kbench.scoring.records import (
    DatasetRef,
    LiveFigures,
    LiveReference,
    PredictionsRef,
    SpeedupFigures,
    VerificationFigures,
    VerificationRecord,
)


def _figures(speedup: float, oracle: float) -> VerificationFigures:
    one = SpeedupFigures(problems=12, speedup_geomean=speedup, speedup_total=speedup, oracle_speedup_geomean=oracle,
                         slowdown_vs_oracle_geomean=oracle / speedup, choice_is_mode_a=0.25)
    return VerificationFigures(overall=one, by_direction={"F": one}, by_dtype={"FP32": one})


def _record() -> VerificationRecord:
    return VerificationRecord(
        kbench_version="0.1.0", method="toy-model", dataset=DatasetRef(name="toy", version="1", checksum="c"),
        split="random", part="test", predictions=PredictionsRef(path="preds.csv.gz", rows=12), date="2026-11-24",
        protocol={"seed": 0, "rounds": 5, "replays": 3}, problems_planned=12, problems_measured=12,
        device={"gpu": "NVIDIA H200"}, measured=_figures(1.0625, 1.125), table=_figures(1.1875, 1.25))


def _live(speedup: float, low: float, high: float) -> LiveReference:
    return LiveReference(problems=12, speedup_geomean=speedup, speedup_ci95=(low, high), oracle_speedup_geomean=1.25,
                         headroom_closed=0.5, choice_faster_share=0.5, choice_slower_share=0.0)


@pytest.fixture
def board(toy_board, tmp_path):
    dst = tmp_path / "leaderboard"
    shutil.copytree(toy_board, dst)
    return dst


def test_measured_speedup_shown_beside_table_figure(board):
    build(board)
    before = (board / "README.md").read_text()
    assert "GPU" not in before
    (board / "toy/random/toy-model/verification.json").write_text(_record().model_dump_json(indent=1))
    build(board)
    readme = (board / "README.md").read_text()
    row = next(line for line in readme.splitlines() if "toy-model" in line.lower() and line.startswith("|"))
    assert "3.166× (GPU 1.062×)" in row  # the table figure, then the measured one (1.0625 to 3 digits)
    note = next(line for line in readme.splitlines() if line.startswith("_(GPU ×)"))
    assert "toy-model on an NVIDIA H200: 1.062× measured against 1.188× from the table on the same 12 problems;" in note
    assert "oracle margin 1.125× measured, 1.250× table" in note
    page = (board / "site/toy.html").read_text()
    assert '<span class="gpu">(GPU 1.062×)</span>' in page
    # only the verified entry gets the GPU figure
    assert sum("(GPU " in line for line in readme.splitlines() if line.startswith("|")) == 1


def test_live_references_and_a_sampled_run_are_named_in_the_note(board):
    """A run cut by its budget times a seeded random subset of the problems, and a live run's
    references come with their intervals and the strongest one named."""
    live = LiveFigures(variant="pytorch", resamples=100, problems=10,
                       references={"table_mode_a": _live(1.0625, 1.0, 1.125), "live_mode_a": _live(1.0625, 1.0, 1.125),
                                   "live_mode_b": _live(1.03125, 1.0078125, 1.0546875),
                                   "pytorch_op": _live(1.125, 1.0625, 1.1875)},
                       strongest_reference="live_mode_b", by_direction={}, agreement=[])
    record = _record().model_copy(update={"problems_measured": 10, "live": live})
    (board / "toy/random/toy-model/verification.json").write_text(record.model_dump_json(indent=1))
    build(board)
    note = next(line for line in (board / "README.md").read_text().splitlines() if line.startswith("_(GPU ×)"))
    assert "on the same 12 problems (a seeded random 12 of the 12" not in note
    record = record.model_copy(update={"measured": _figures(1.0625, 1.125).model_copy(
        update={"overall": _figures(1.0625, 1.125).overall.model_copy(update={"problems": 10})})})
    (board / "toy/random/toy-model/verification.json").write_text(record.model_dump_json(indent=1))
    build(board)
    note = next(line for line in (board / "README.md").read_text().splitlines() if line.startswith("_(GPU ×)"))
    assert "on the same 10 problems (a seeded random 10 of the 12 test problems)" in note
    assert ("Over references asked on the GPU with the pytorch variant's filter (95% bootstrap intervals): "
            "cuDNN mode A 1.062× [1.000, 1.125]; cuDNN mode B 1.031× [1.008, 1.055]; "
            "PyTorch's own convolution 1.125× [1.062, 1.188]; the strongest is cuDNN mode B") in note
    # on a networks board the table's mode-A plan can be the strongest: named in words, not by its key
    record = record.model_copy(update={"live": live.model_copy(update={"strongest_reference": "table_mode_a"})})
    (board / "toy/random/toy-model/verification.json").write_text(record.model_dump_json(indent=1))
    build(board)
    note = next(line for line in (board / "README.md").read_text().splitlines() if line.startswith("_(GPU ×)"))
    assert note.endswith("the strongest is cuDNN mode A's first plan in the table._")


def test_bad_verification_record_is_one_clear_error(board, capsys):
    path = board / "toy/random/toy-model/verification.json"
    doc = json.loads(_record().model_dump_json())
    del doc["measured"]
    path.write_text(json.dumps(doc))
    assert main(["leaderboard", "build", "--leaderboard", str(board), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "verification.json" in err and "measured" in err and "Traceback" not in err


def test_validate_accepts_a_matching_record_and_names_a_mismatch(board, toy):
    from kbench.leaderboard.schema import validate_tree
    path = board / "toy/random/toy-model/verification.json"
    record = json.loads((board / "toy/random/toy-model/result.json").read_text())
    # a re-timing names the predictions it timed (a record without their sha256 is refused)
    good = _record().model_copy(update={"dataset": DatasetRef(**record["dataset"]), "predictions": PredictionsRef(
        path="preds.csv.gz", sha256="0" * 64, rows=12)})
    path.write_text(good.model_dump_json())
    assert validate_tree(board, check_data=False)["entries"] >= 1
    path.write_text(good.model_copy(update={"method": "other", "split": "networks"}).model_dump_json())
    with pytest.raises(Exception) as err:
        validate_tree(board, check_data=False)
    assert "verification.json is for toy/networks/test, not toy/random/test" in str(err.value)
    assert "verification.json method 'other' is not the folder's 'toy-model'" in str(err.value)
    # the toy data card says an H200 measured it: a re-timing on another GPU model confirms nothing here
    path.write_text(good.model_copy(update={"device": {"gpu": "NVIDIA H100 80GB HBM3"}}).model_dump_json())
    with pytest.raises(Exception) as err:
        validate_tree(board, check_data=False)
    assert ("verification.json was timed on an NVIDIA H100 80GB HBM3, not on the dataset's NVIDIA H200 "
            "(a toy card): keep it with the raw timings (raw/toy/verify/), not beside the entry") in str(err.value)


def test_validate_names_a_record_of_other_predictions(board, toy):
    """A re-run entry has new predictions; a re-timing of the old ones no longer describes it. The
    re-timing names the first seed's predictions as a gzip CSV (what verify-on-gpu reads)."""
    from kbench.leaderboard.rescorer import validate_board
    from kbench.leaderboard.store import predictions_csv_gz, read_seed_predictions
    from kbench.scoring.prediction_files import sha256_bytes
    record = json.loads((board / "toy/random/toy-model/result.json").read_text())
    seeds = read_seed_predictions(board / "toy/random/toy-model/preds.parquet")
    mine = sha256_bytes(predictions_csv_gz(seeds[min(seeds)]))
    path = board / "toy/random/toy-model/verification.json"
    same = _record().model_copy(update={"dataset": DatasetRef(**record["dataset"]),
                                        "predictions": PredictionsRef(path="preds.csv.gz", sha256=mine, rows=12)})
    path.write_text(same.model_dump_json())
    assert validate_board(board)["entries"] >= 1
    other = "0" * 64
    path.write_text(same.model_copy(update={"predictions": PredictionsRef(path="preds.csv.gz", sha256=other,
                                                                          rows=12)}).model_dump_json())
    with pytest.raises(Exception) as err:
        validate_board(board)
    assert f"re-timed other predictions (sha256 {other[:12]}…) than the entry's first seed ({mine[:12]}…)" \
        in str(err.value)
