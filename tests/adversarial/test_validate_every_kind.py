"""`kbench leaderboard validate` re-derives every kind of record, in one process and spread over a pool:
a figure tampered consistently (the seed mean and the standard deviation made to agree with the edited
seed) in a result record, a tuning record, a GPU re-timing and a transfer record is refused, however
many processes (``--jobs``) re-score the board.

The board is a copy of real entries, laid out as in the repository (leaderboard/..., raw/.../verify/...).
"""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

import pytest
from advkit import adversarial, refused

from kbench.cli import main

REPO = Path(__file__).resolve().parents[2]
FIXED = "62"
RESULT = ("mi300x", "random", "xgboost")
TUNING = ("mi50-tuning", "random", "nearest-neighbour")
VERIFIED = ("h100-pytorch", "random", "xgboost-plans-safe")
TRANSFER = ("mi100-to-mi300x", "target-xgboost", "kfull.json")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A repository folder holding a board of one entry of each kind, and the raw timings of its re-timing."""
    repo = tmp_path_factory.mktemp("every-kind")
    for parts in (RESULT, TUNING, VERIFIED):
        shutil.copytree(REPO / "leaderboard" / Path(*parts), repo / "leaderboard" / Path(*parts))
    pair, method, _ = TRANSFER
    shutil.copytree(
        REPO / "leaderboard" / "transfer" / pair / method, repo / "leaderboard" / "transfer" / pair / method
    )
    dataset, _, method = VERIFIED
    shutil.copytree(REPO / "raw" / dataset / "verify" / method, repo / "raw" / dataset / "verify" / method)
    return repo


@pytest.fixture
def board(pristine, tmp_path) -> Path:
    """A writable copy of :func:`pristine`; returns its leaderboard folder."""
    shutil.copytree(pristine, tmp_path / "repo")
    return tmp_path / "repo" / "leaderboard"


def edit(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc, indent=1))


def one_seed_edited(key: str, value: float, overall: tuple[str, ...] = ("metrics", "overall"), seed: int = 2):
    """Seed index ``seed``'s ``key`` set to ``value``, with the seed mean, the standard deviation and the
    record's own figure made to agree with it: only re-scoring the stored predictions finds the edit."""

    def change(doc):
        seeds = doc["seeds"]
        seeds["per_seed"][seed][key] = value
        values = [p[key] for p in seeds["per_seed"]]
        seeds["mean"][key] = statistics.fmean(values)
        seeds["std"][key] = statistics.stdev(values)
        target = doc
        for part in overall:
            target = target[part]
        target[key] = seeds["mean"][key]

    return change


def validate(board: Path, jobs: int) -> list[str]:
    return ["leaderboard", "validate", "--leaderboard", str(board), "--jobs", str(jobs)]


@adversarial("submissions", "accepted", fixed=FIXED)
def test_the_untouched_board_is_re_derived_whole(board, capsys):
    assert main(validate(board, 2)) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "re-scored 3 entries" in out and "scored 1 GPU re-timing(s) again" in out
    assert "re-scored 1 transfer record(s)" in out


@pytest.mark.parametrize("jobs", [1, 2])
@adversarial("submissions", "error", fixed=FIXED)
def test_a_tampered_result_and_tuning_record(board, capsys, jobs):
    edit(board / Path(*RESULT) / "result.json", one_seed_edited("top1", 0.999))
    edit(board / Path(*TUNING) / "result.json", one_seed_edited("average_accuracy", 0.999, ("metrics",)))
    refused(
        capsys,
        validate(board, jobs),
        [
            "/".join(RESULT),
            "seeds.per_seed[2] (seed 2).top1: claimed 0.999",
            "/".join(TUNING),
            "seeds.per_seed[2] (seed 2).average_accuracy: claimed",
        ],
        [board.parent],
    )


@pytest.mark.parametrize("jobs", [1, 2])
@adversarial("submissions", "error", fixed=FIXED)
def test_a_tampered_re_timing_and_transfer_record(board, capsys, jobs):
    edit(
        board / Path(*VERIFIED) / "verification.json",
        lambda d: d["measured"]["overall"].update(speedup_geomean=d["measured"]["overall"]["speedup_geomean"] * 1.01),
    )
    pair, method, name = TRANSFER
    # a transfer record stores its first seed's predictions: that seed is the one re-scored
    edit(board / "transfer" / pair / method / name, one_seed_edited("top1", 0.999, seed=0))
    refused(
        capsys,
        validate(board, jobs),
        [
            "/".join(VERIFIED),
            "verification.json is not what its raw timings give",
            f"transfer/{pair}/{method}/{name}",
            "seeds.per_seed[0] (seed 0).top1",
        ],
        [board.parent],
    )


@adversarial("submissions", "error", fixed=FIXED)
def test_jobs_below_one(board, capsys):
    refused(capsys, validate(board, 0), ["--jobs 0", "1 or more"], [board.parent])
