"""Hostile predictions files given to `kbench evaluate`, `kbench validate` and the reader behind them.

Every refused input must give exit 2 and one message naming the file and the fix, with no traceback
and no file touched; every accepted one must score exactly like the frame it holds.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest
from advkit import adversarial, case, refused, snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbench.cli import main
from kbench.core.errors import KbenchError
from kbench.scoring import evaluate as evaluate_module
from kbench.scoring import prediction_files as prediction_files_module
from kbench.scoring.evaluate import Evaluator

DATASET = ["-d", "mi300x", "--no-reference", "-q"]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ev():
    return Evaluator("mi300x", split="random", reference=None)


@pytest.fixture(scope="module")
def good(ev) -> pd.DataFrame:
    """A valid, non-trivial predictions frame: every measured kernel, slowest first (ids as plain strings,
    as a CSV gives them; the dataset's ``problem_id`` is categorical)."""
    rt = ev.dataset.runtimes
    rt = rt[rt["problem_id"].isin(set(ev.ids))].sort_values(["problem_id", "time_ms"], ascending=[True, False])
    preds = rt.groupby("problem_id", sort=True)["kernel"].agg(";".join).rename("ranking").reset_index()
    return preds.astype({"problem_id": str})


@pytest.fixture(scope="module")
def good_metrics(ev, good):
    return ev(good).metrics


@pytest.fixture
def work(tmp_path, good) -> Path:
    """A folder holding good.csv; tests add their inputs beside it."""
    (tmp_path / "in").mkdir()
    good.to_csv(tmp_path / "in" / "good.csv", index=False)
    return tmp_path / "in"


def scored(capsys, path: str | Path, tmp_path: Path, extra=()) -> dict:
    """`kbench evaluate path --json`: exit 0, no change to the input; returns the record's metrics."""
    out = tmp_path / "out" / "result.json"
    watch = [Path(path)] if Path(path).exists() and not str(path).startswith("/dev/fd") else []
    before = snapshot(*watch)
    code = main(["evaluate", str(path), *DATASET, "--json", str(out), *extra])
    err = capsys.readouterr().err
    assert code == 0, err[-2000:]
    assert snapshot(*watch) == before
    return json.loads(out.read_text())["metrics"]


# ----------------------------------------------------------------------------- the path itself
@adversarial("predictions", "error", fixed=True)
def test_a_directory(capsys, work):
    refused(capsys, ["evaluate", str(work), *DATASET], [str(work), "is a directory"], [work])


@adversarial("predictions", "error", fixed=True)
def test_an_unreadable_file(capsys, work, monkeypatch):
    path = work / "locked.csv"
    path.write_text("problem_id,ranking\n")
    path.chmod(0)
    if os.geteuid() == 0:  # root reads any file: make open() fail as it would for a user
        real_open = open

        def deny(p, *a, **k):
            if Path(p) == path:
                raise PermissionError(13, "Permission denied", str(p))
            return real_open(p, *a, **k)
        monkeypatch.setattr(prediction_files_module, "open", deny, raising=False)
    refused(capsys, ["evaluate", str(path), *DATASET], [str(path), "permission denied", "chmod u+r"], [work])


@adversarial("predictions", "error", fixed=True)
def test_a_broken_symlink(capsys, work):
    link = work / "link.csv"
    link.symlink_to(work / "gone.csv")
    refused(capsys, ["evaluate", str(link), *DATASET], [str(link), "broken symbolic link", "gone.csv"], [work])


@adversarial("predictions", "error", fixed=True)
def test_a_symlink_loop(capsys, work):
    link = work / "loop.csv"
    link.symlink_to(link)
    refused(capsys, ["evaluate", str(link), *DATASET], [str(link), "symbolic link loop"], [work])


@adversarial("predictions", "accepted")
def test_a_symlink_to_a_valid_file_scores_like_it(capsys, work, tmp_path, good_metrics):
    link = work / "link.csv"
    link.symlink_to(work / "good.csv")
    assert scored(capsys, link, tmp_path) == good_metrics


@adversarial("predictions", "accepted", fixed=True)
def test_a_process_substitution_of_zcat_works_like_the_file(work, tmp_path, good_metrics):
    (work / "good.csv.gz").write_bytes(gzip.compress((work / "good.csv").read_bytes()))
    out = tmp_path / "r.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for source in ("zcat", "cat"):  # decompressed by zcat, or gzip bytes through the pipe (fixed)
        # `kbench` itself, run as the console script does (whichever module holds the CLI)
        kbench = f"{sys.executable} -c 'import sys; from kbench.cli import main; sys.exit(main(sys.argv[1:]))'"
        cmd = (f"{kbench} evaluate <({source} {work / 'good.csv.gz'}) -d mi300x "
               f"--no-reference -q --json {out}")
        proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert json.loads(out.read_text())["metrics"] == good_metrics


@adversarial("predictions", "accepted")
def test_a_named_fifo_works_like_the_file(capsys, work, tmp_path, good_metrics):
    fifo = work / "preds.fifo"
    os.mkfifo(fifo)
    data = (work / "good.csv").read_bytes()

    def feed():
        with open(fifo, "wb") as fh:
            fh.write(data)
    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    assert scored(capsys, fifo, tmp_path) == good_metrics
    writer.join(10)


# ----------------------------------------------------------------------------- the bytes
BYTES_REFUSED = [
    case((b"", ["the file is empty", "problem_id"]), "empty-file", "predictions", "error"),
    case((b"\x91\x00\xff\xfe\xfa" + bytes(range(256)) * 4, ["not UTF-8", "UTF-8 CSV"]), "binary-garbage",
         "predictions", "error"),
    case((b"problem_id;ranking\np;a\n", ["semicolons", "comma"]), "semicolon-delimiter", "predictions", "error"),
    case((b"problem_id\tranking\np\ta\n", ["tabs", "comma"]), "tab-delimiter", "predictions", "error"),
    case((b"PAR1\x15\x04\x15\x10" + b"\x00" * 64, ["Parquet file", "read_parquet"]), "parquet-as-csv",
         "predictions", "error", fixed=True),
    case((b"PK\x03\x04" + b"\x00" * 64, ["zip archive", "gzip"]), "zip-as-csv", "predictions", "error", fixed=True),
    case((gzip.compress(b"problem_id,ranking\n" * 100)[:-12], ["damaged gzip"]), "truncated-gzip",
         "predictions", "error", fixed=True),
    case((b"problem_id,ranking,ranking\np,a,a\n", ["['ranking']", "more than once"]), "duplicate-column",
         "predictions", "error", fixed=True),
    case((b"problem_id,,ranking\np,x,a\n", ["empty column name"]), "empty-column-name", "predictions", "error",
         fixed=True),
    case((b"problem_id,ranking\np,a,extra\n", ["not a valid CSV", "Expected 2 columns"]), "extra-field",
         "predictions", "error"),
]


@pytest.mark.parametrize("content", BYTES_REFUSED)
def test_refused_content(capsys, work, content):
    data, must = content
    path = work / "preds.csv"
    path.write_bytes(data)
    refused(capsys, ["evaluate", str(path), *DATASET], [str(path), *must], [work])


@adversarial("predictions", "error", fixed=True)
def test_a_header_only_file_even_with_allow_partial(capsys, work):
    path = work / "header.csv"
    path.write_text("problem_id,ranking\n")
    refused(capsys, ["evaluate", str(path), *DATASET, "--allow-partial"], [str(path), "header but no rows"], [work])


@adversarial("predictions", "error", fixed=True)
def test_validate_names_every_problem_of_a_bad_file(capsys, work, good):
    path = work / "bad.csv"
    bad = good.copy()
    bad.loc[0, "ranking"] = bad.loc[0, "ranking"].replace(";", ";;", 1)
    bad.loc[1, "problem_id"] = "not-a-problem"
    bad.to_csv(path, index=False)
    refused(capsys, ["validate", str(path), "-d", "mi300x"],
            [str(path), "'not-a-problem'", "empty name(s): check for ';;'"], [work])


@adversarial("predictions", "accepted", fixed=True)
def test_utf16_with_a_bom_is_read(capsys, work, tmp_path, good_metrics):
    for codec in ("utf-16", "utf-16-be", "utf-32"):
        path = work / f"{codec}.csv"
        text = (work / "good.csv").read_text()
        path.write_bytes(("\ufeff" + text).encode(codec) if codec.endswith("be") else text.encode(codec))
        assert scored(capsys, path, tmp_path) == good_metrics


@adversarial("predictions", "accepted", fixed=True)
def test_gzip_is_read_by_content_whatever_the_name(capsys, work, tmp_path, good_metrics):
    data = gzip.compress((work / "good.csv").read_bytes())
    for name in ("preds.csv.gz", "preds.csv"):
        (work / name).write_bytes(data)
        assert scored(capsys, work / name, tmp_path) == good_metrics
    # a multi-member gzip file (cat a.gz b.gz) holds the concatenated text
    text = (work / "good.csv").read_bytes()
    cut = text.index(b"\n", len(text) // 2) + 1
    (work / "multi.csv.gz").write_bytes(gzip.compress(text[:cut]) + gzip.compress(text[cut:]))
    assert scored(capsys, work / "multi.csv.gz", tmp_path) == good_metrics


@adversarial("predictions", "accepted", fixed=True)
def test_a_quoted_header_and_crlf_are_read(capsys, work, tmp_path, good, good_metrics):
    import csv
    path = work / "quoted.csv"
    good.to_csv(path, index=False, quoting=csv.QUOTE_ALL, lineterminator="\r\n")
    assert path.read_bytes().startswith(b'"problem_id","ranking"\r\n')
    assert scored(capsys, path, tmp_path) == good_metrics


@adversarial("predictions", "error", fixed=True)
def test_quoted_separators_and_newlines_stay_inside_their_field(capsys, work, good):
    path = work / "quoted.csv"
    first, rest = good.loc[0, "ranking"].split(";", 1)
    lines = ["problem_id,ranking", f'"{good.loc[0, "problem_id"]},x","{good.loc[0, "ranking"]}"',
             f'"{good.loc[1, "problem_id"]}","{first}\n{rest}"']
    path.write_text("\n".join(lines) + "\n")
    err = refused(capsys, ["evaluate", str(path), *DATASET, "--allow-partial"], [str(path)], [work])
    # the comma and the newline were read as part of the values, not as separators
    assert f"{good.loc[0, 'problem_id']},x" in err
    assert repr(first + "\n" + rest.split(";")[0])[1:-1] in err


# ----------------------------------------------------------------------------- size
@adversarial("predictions", "error", fixed=True)
def test_a_single_100_mb_line(capsys, work):
    path = work / "long.csv"
    with open(path, "wb") as fh:
        fh.write(b"problem_id,kernel\n" + b"x" * 100_000_000 + b",GemmFwd1x1_0_1\n")
    err = refused(capsys, ["evaluate", str(path), *DATASET], [str(path), "(100,000,000 characters)"], [work])
    assert len(err) < 5_000  # the id is cut in the message


@adversarial("predictions", "error", fixed=True)
def test_a_million_duplicate_rows(capsys, work, good):
    path = work / "dups.csv"
    row = f"{good.loc[0, 'problem_id']},{good.loc[0, 'ranking'].split(';')[0]}\n".encode()
    path.write_bytes(b"problem_id,kernel\n" + row * 1_000_000)
    refused(capsys, ["evaluate", str(path), *DATASET, "--allow-partial"],
            [str(path), "999999 duplicated problem_id(s)", good.loc[0, "problem_id"], "one row per problem"], [work])


@adversarial("predictions", "error", fixed=True)
def test_a_gzip_bomb_is_refused_at_the_size_limit(capsys, work, monkeypatch):
    monkeypatch.setenv("KBENCH_MAX_PREDICTIONS_BYTES", str(20_000_000))
    member = gzip.compress(b"0" * 1_000_000, compresslevel=9)
    path = work / "bomb.csv.gz"
    path.write_bytes(gzip.compress(b"problem_id,kernel\n") + member * 50)  # 50 MB from about 50 KB
    assert path.stat().st_size < 100_000
    refused(capsys, ["evaluate", str(path), *DATASET],
            [str(path), "decompressed content", "20,000,000-byte limit", "KBENCH_MAX_PREDICTIONS_BYTES"], [work])


@adversarial("predictions", "error", fixed=True)
def test_a_plain_file_over_the_limit_is_refused_unread(capsys, work, monkeypatch):
    monkeypatch.setenv("KBENCH_MAX_PREDICTIONS_BYTES", "1000")
    path = work / "big.csv"
    path.write_bytes(b"problem_id,kernel\n" + b"p,k\n" * 1000)
    refused(capsys, ["evaluate", str(path), *DATASET], [str(path), "(4,018 bytes)", "1,000-byte limit"], [work])


def test_the_default_limit_is_2_gib():
    assert prediction_files_module.MAX_PREDICTIONS_BYTES == 2 * 1024 ** 3
    assert "at most 2 GiB" in evaluate_module.EXPECTED_FORMAT


# ----------------------------------------------------------------------------- ids, rankings, scores
@adversarial("predictions", "accepted")
def test_ids_and_names_with_surrounding_whitespace_are_trimmed(capsys, work, tmp_path, good, good_metrics):
    path = work / "spaces.csv"
    padded = good.assign(problem_id="  " + good.problem_id + "\t",
                         ranking=good.ranking.str.replace(";", " ; ", regex=False))
    padded.to_csv(path, index=False)
    assert scored(capsys, path, tmp_path) == good_metrics


@pytest.mark.parametrize("mark", [case("\u200b", "zero-width-space", "predictions", "error", fixed=True),
                                  case("é", "non-ascii", "predictions", "error", fixed=True)])
def test_ids_with_invisible_or_non_ascii_characters_are_named(capsys, work, good, mark):
    path = work / "ids.csv"
    bad = good.copy()
    bad.loc[0, "problem_id"] = bad.loc[0, "problem_id"][:5] + mark + bad.loc[0, "problem_id"][5:]
    bad.to_csv(path, index=False)
    shown = repr(bad.loc[0, "problem_id"])  # a zero-width space is shown escaped (\u200b)
    refused(capsys, ["evaluate", str(path), *DATASET], [str(path), shown, "1 problem id(s) not in mi300x"], [work])


@adversarial("predictions", "error", fixed=True)
def test_a_ranking_with_an_empty_entry(capsys, work, good):
    path = work / "empty-entry.csv"
    bad = good.copy()
    bad.loc[3, "ranking"] = bad.loc[3, "ranking"].replace(";", ";;", 1)
    bad.to_csv(path, index=False)
    refused(capsys, ["evaluate", str(path), *DATASET], [str(path), "1 empty name(s): check for ';;'"], [work])


@adversarial("predictions", "accepted")
def test_a_repeated_kernel_counts_at_its_first_position(ev, good, good_metrics):
    twice = good.assign(ranking=good.ranking + ";" + good.ranking)  # a;b;c;a;b;c scores as a;b;c
    assert ev(twice).metrics == good_metrics
    assert "counts at its first position" in evaluate_module.EXPECTED_FORMAT


def long_form(good: pd.DataFrame) -> pd.DataFrame:
    lists = good.ranking.str.split(";")
    out = good[["problem_id"]].assign(kernel=lists).explode("kernel")
    out["score"] = -out.groupby(level=0).cumcount().to_numpy().astype(float)  # 0, -1, -2 ...: preferred first
    return out.reset_index(drop=True)


@pytest.mark.parametrize("value", [case("nan", "nan-score", "predictions", "error", fixed=True),
                                   case("inf", "inf-score", "predictions", "error", fixed=True),
                                   case("-inf", "minus-inf-score", "predictions", "error", fixed=True)])
def test_a_non_finite_score(capsys, work, good, value):
    path = work / "long.csv"
    frame = long_form(good).astype({"score": object})
    frame.loc[4, "score"] = value
    frame.to_csv(path, index=False)
    must = ["file rows [6]"] + (["infinite", "finite numbers"] if "inf" in value else ["empty or NaN cell"])
    err = refused(capsys, ["evaluate", str(path), *DATASET], [str(path), *must], [work])
    assert err.count("\n  - ") == 1  # one problem, reported once


@adversarial("predictions", "accepted")
def test_negative_scores_rank_like_the_ranking(capsys, work, tmp_path, good, good_metrics):
    path = work / "long.csv"
    frame = long_form(good)
    assert (frame.score <= 0).all()
    frame.to_csv(path, index=False)
    assert scored(capsys, path, tmp_path) == good_metrics


@adversarial("predictions", "error", fixed=True)
def test_ranking_and_kernel_columns_both_present(capsys, work, good):
    path = work / "both.csv"
    good.assign(kernel=good.ranking.str.split(";").str[-1]).to_csv(path, index=False)
    refused(capsys, ["evaluate", str(path), *DATASET], [str(path), "both a 'ranking' and a 'kernel' column"], [work])


# ----------------------------------------------------------------------------- fuzzing
FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@adversarial("predictions", "fuzz")
@FUZZ
@given(data=st.binary(max_size=400))
def test_fuzz_random_bytes_never_crash(ev, tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "random.csv"
    path.write_bytes(data)
    try:
        ev(path, allow_partial=True)
    except KbenchError as exc:
        assert str(path) in str(exc)
    assert path.read_bytes() == data


def mutate(original: bytes, edits) -> bytes:
    data = bytearray(original)
    for kind, pos, byte in edits:
        at = pos % (len(data) + 1)
        if kind == "flip" and data:
            data[at % len(data)] ^= 1 << (byte % 8)
        elif kind == "insert":
            data.insert(at, byte)
        elif kind == "delete" and data:
            del data[at % len(data)]
        elif kind == "truncate":
            del data[at:]
    return bytes(data)


@pytest.fixture(scope="module")
def small_valid(good) -> bytes:
    """The first 40 problems, as CSV text (scored with --allow-partial)."""
    return good.head(40).to_csv(index=False).encode()


@adversarial("predictions", "fuzz")
@FUZZ
@given(edits=st.lists(st.tuples(st.sampled_from(["flip", "insert", "delete", "truncate"]),
                                st.integers(0, 10 ** 6), st.integers(0, 255)), min_size=1, max_size=4))
def test_fuzz_mutations_are_refused_or_scored_from_their_own_content(ev, small_valid, tmp_path_factory, edits):
    import hashlib
    import io
    data = mutate(small_valid, edits)
    path = tmp_path_factory.mktemp("fuzz") / "mutated.csv"
    path.write_bytes(data)
    try:
        result = ev(path, allow_partial=True)
    except KbenchError as exc:
        assert str(path) in str(exc)
        return
    # the record names the mutated bytes, never the original's
    assert result.predictions.sha256 == hashlib.sha256(data).hexdigest()
    # and its score is the score of what the mutated file holds, read by an independent parser
    try:
        frame = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False, encoding="utf-8-sig")
    except Exception:  # pandas refuses what pyarrow read: nothing independent to compare with
        return
    try:
        expected = ev(frame, allow_partial=True)
    except KbenchError:
        raise AssertionError(f"read from the file but refused as a frame: {data[:200]!r}") from None
    assert result.metrics == expected.metrics
    assert result.counts == expected.counts
