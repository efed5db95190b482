import gzip
import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from kbench.collect.measure import cudnn
from kbench.collect.raw_store import writer


def _rec(key, status="ok"):
    return {"key": key, "status": status, "direction": "F"}


def test_batches_resume_and_kill(tmp_path):
    w = writer.RawWriter(tmp_path, run_id="r1", batch_size=2)
    for k in ("a", "b", "c"):
        w.start(k)
        w.add(_rec(k), [{"plan": "eng0", "time": 1.0}])
    # a and b were flushed as one batch; c is still in memory: a kill now loses only c
    done, unfinished = writer.resume_state(tmp_path)
    assert done == {"a", "b"} and unfinished == {"c": 1}
    w.close()
    done, unfinished = writer.resume_state(tmp_path)
    assert done == {"a", "b", "c"} and unfinished == {}
    plans = writer.load_records(tmp_path, "plans")
    assert sorted(plans["key"]) == ["a", "b", "c"] and set(plans["run_id"]) == {"r1"}


def test_torn_files_are_ignored(tmp_path):
    w = writer.RawWriter(tmp_path, run_id="r1", batch_size=1)
    w.start("a")
    w.add(_rec("a"), [])
    # a half-written temporary batch and a torn journal line, as a kill mid-write leaves them
    (tmp_path / "parts" / ".r1-00001.problems.jsonl.gz.tmp").write_bytes(b"\x1f\x8b garbage")
    with open(tmp_path / writer.JOURNAL, "a") as fh:
        fh.write("start\tb\tr1")
    done, unfinished = writer.resume_state(tmp_path)
    assert done == {"a"} and unfinished == {}


def test_compact_keeps_every_record(tmp_path):
    w = writer.RawWriter(tmp_path, run_id="r1", batch_size=1)
    for k in "abc":
        w.add(_rec(k), [{"plan": "eng0"}, {"plan": "eng1"}])
    before = writer.load_records(tmp_path, "plans").sort_values(["key", "plan"]).reset_index(drop=True)
    counts = writer.compact(tmp_path)
    assert counts == {"plans": 6, "problems": 3}
    assert not list((tmp_path / "parts").glob("*.jsonl.gz"))
    after = writer.load_records(tmp_path, "plans").sort_values(["key", "plan"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(before[after.columns], after)
    writer.RawWriter(tmp_path, run_id="r2", batch_size=1).add(_rec("d"), [])
    assert writer.resume_state(tmp_path)[0] == set("abcd")


def test_compacted_tables_read_back_equal_in_the_raw_encoding(tmp_path, raw_encoding_problems):
    """Compaction writes zstd level 19 with dictionaries on the text columns only, losslessly: the file
    reads back equal (schema and pandas metadata included) to the table pandas makes of the records."""
    w = writer.RawWriter(tmp_path, run_id="r1", batch_size=2)
    for i, k in enumerate("abc"):
        w.add({**_rec(k), "n": i, "flop": 1e9 * i, "truncated": i == 1, "error": None if i else "oom"},
              [{"plan": f"eng{j}", "engine_id": j, "precise_ms": 0.1 * j + i, "correct": j != 1,
                "numeric_notes": "['CUDNN_NUMERICAL_NOTE_TENSOR_CORE']"} for j in range(3)])
    w.close()
    parts = writer.read_parts(tmp_path)
    writer.compact(tmp_path)
    for kind in ("problems", "plans"):
        path = tmp_path / f"{kind}-0000.parquet"
        want = pa.Table.from_pandas(pd.DataFrame.from_records([r for b in getattr(parts, kind) for r in b]),
                                    preserve_index=False)
        got = pq.read_table(path)
        assert got.equals(want, check_metadata=True) and got.schema.metadata == want.schema.metadata
        assert raw_encoding_problems(path) == []
        text = set(writer.text_columns(got.schema))
        assert {"key", "run_id"} <= text and not {"n", "flop", "truncated", "engine_id", "precise_ms"} & text


def test_dedupe_prefers_a_finished_measurement():
    probs = pd.DataFrame([{"key": "a", "status": "crashed", "run_id": "r1"},
                          {"key": "a", "status": "ok", "run_id": "r2"},
                          {"key": "b", "status": "ok", "run_id": "r1"}])
    plans = pd.DataFrame([{"key": "a", "plan": "eng0", "run_id": "r2"},
                          {"key": "b", "plan": "eng0", "run_id": "r1"},
                          {"key": "b", "plan": "eng0", "run_id": "r9"}])
    p, q = writer.dedupe(probs, plans)
    assert p.set_index("key")["run_id"].to_dict() == {"a": "r2", "b": "r1"}
    assert len(q) == 2


def test_crashed_problems_are_recorded_and_skipped_without_a_gpu(tmp_path):
    rows = pd.DataFrame([dict(n=1, c=4, k=8, x_h=8, x_w=8, fil_h=1, fil_w=1, dtype="FP16", layout="NCHW")])
    path = tmp_path / "p.csv"
    rows.to_csv(path, index=False)
    keys = cudnn.load_problems(path, directions=("F", "B"))["key"].tolist()
    out = tmp_path / "raw"
    w = writer.RawWriter(out, run_id="r1", batch_size=1)
    w.add(_rec(keys[0]), [])
    for _ in range(writer.CRASH_LIMIT):  # the process died twice on keys[1]
        w.start(keys[1])
    summary = cudnn.collect(path, out, directions=("F", "B"), progress=False)
    assert summary["pending"] == 0 and summary["measured"] == 0
    probs = writer.load_records(out, "problems").set_index("key")
    assert probs.loc[keys[1], "status"] == "crashed"
    assert "ended during this problem" in probs.loc[keys[1], "error"]


def test_batch_files_are_plain_jsonl_gz(tmp_path):
    w = writer.RawWriter(tmp_path, run_id="r1", batch_size=1)
    w.add(_rec("a"), [{"plan": "eng0", "rel_err": float("nan")}])
    files = sorted((tmp_path / "parts").glob("*.jsonl.gz"))
    assert [f.name.split(".", 1)[1] for f in files] == ["plans.jsonl.gz", "problems.jsonl.gz"]
    with gzip.open(files[1], "rt") as fh:
        assert json.loads(fh.readline())["key"] == "a"


def test_columns_that_older_compacted_files_lack_come_back_empty(tmp_path):
    """A newer collector's column (t_wait_s, say) is missing from older compacted files: asking for it
    gives NaN for their rows, not a 'damaged file' error, as it already did for batch parts."""
    old = writer.RawWriter(tmp_path, run_id="r1", batch_size=1)
    old.add(_rec("a"), [])
    writer.compact(tmp_path)
    new = writer.RawWriter(tmp_path, run_id="r2", batch_size=1)
    new.add({**_rec("b"), "t_wait_s": 0.25}, [])
    writer.compact(tmp_path)
    new = writer.RawWriter(tmp_path, run_id="r3", batch_size=1)
    new.add({**_rec("c"), "t_wait_s": 0.5}, [])  # left as a batch part
    got = writer.load_records(tmp_path, "problems", ["key", "t_wait_s"]).set_index("key")["t_wait_s"]
    assert pd.isna(got["a"]) and got["b"] == 0.25 and got["c"] == 0.5
    assert list(writer.load_records(tmp_path, "problems", ["t_wait_s"])["t_wait_s"].dropna()) == [0.25, 0.5]
