"""kbench collect autotune: the runner writes one line per problem-direction as it goes, resumes by key,
honours --limit and the time budget, stops on a fatal CUDA error; the probe itself runs on the GPU."""

from __future__ import annotations

import json

import pytest

from kbench.collect.measure.cudnn import autotune
from kbench.collect.measure.cudnn.protocol import FatalCudaError


class FakeProbe:
    """Stands in for AutotuneProbe: PyTorch 'settles on' eng<k> for the k-th problem it is given."""

    def __init__(self, fail_at=None):
        self.seen, self.fail_at = [], fail_at

    def env(self):
        return {"gpu": "FAKE GPU", "torch_cudnn_benchmark": True, "torch_cudnn_benchmark_limit": 10}

    def probe(self, p):
        if self.fail_at is not None and len(self.seen) == self.fail_at:
            raise FatalCudaError("fake: the CUDA context is gone")
        self.seen.append(p["key"])
        return {"key": p["key"], "status": "ok", "torch_autotune_plans": f"eng{len(self.seen)}",
                "first_call_cost_ms": 10.0 * len(self.seen)}


@pytest.fixture
def problems(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("n,c,k,x_h,x_w,fil_h,fil_w,dtype,layout\n1,8,8,8,8,3,3,FP16,NHWC\n1,8,16,8,8,3,3,FP16,NHWC\n")
    return path  # 2 geometries x F, B, W = 6 problem-directions


def test_records_resume_and_limit(problems, tmp_path):
    out = tmp_path / "out"
    first = FakeProbe()
    summary = autotune.probe_autotune(problems, out, limit=4, make_probe=lambda: first)
    assert summary == {"total": 6, "pending": 4, "measured": 4}
    lines = [json.loads(x) for x in (out / autotune.RECORDS).read_text().splitlines()]
    assert [r["torch_autotune_plans"] for r in lines] == ["eng1", "eng2", "eng3", "eng4"]
    assert json.loads((out / "env.jsonl").read_text())["torch_cudnn_benchmark"] is True
    second = FakeProbe()
    assert autotune.probe_autotune(problems, out, make_probe=lambda: second)["measured"] == 2
    assert set(second.seen).isdisjoint(first.seen) and len(set(first.seen + second.seen)) == 6
    # all done: nothing pending, no probe started
    assert autotune.probe_autotune(problems, out, make_probe=lambda: pytest.fail("no probe needed")) == \
        {"total": 6, "pending": 0, "measured": 0}


def test_a_torn_last_line_is_probed_again(problems, tmp_path):
    out = tmp_path / "out"
    autotune.probe_autotune(problems, out, limit=2, make_probe=FakeProbe)
    path = out / autotune.RECORDS
    keys = [json.loads(x)["key"] for x in path.read_text().splitlines()]
    path.write_text(path.read_text() + '{"key": "torn')  # a run stopped while writing
    assert autotune.done_keys(path) == set(keys)
    assert autotune.probe_autotune(problems, out, make_probe=FakeProbe)["measured"] == 4


def test_a_fatal_cuda_error_stops_with_what_was_done_saved(problems, tmp_path):
    out = tmp_path / "out"
    summary = autotune.probe_autotune(problems, out, make_probe=lambda: FakeProbe(fail_at=3))
    assert summary["measured"] == 3 and "CUDA context" in summary["fatal"]
    lines = [json.loads(x) for x in (out / autotune.RECORDS).read_text().splitlines()]
    # the fourth problem broke the context: recorded as failed and fatal, so the restart goes past it
    assert [r["status"] for r in lines] == ["ok", "ok", "ok", "failed"] and lines[3]["fatal"] is True
    again = FakeProbe()
    assert autotune.probe_autotune(problems, out, make_probe=lambda: again, retry_failed=True)["measured"] == 2
    assert lines[3]["key"] not in again.seen


class FailingFirst(FakeProbe):
    """Fails (not fatally) every problem it is given for the first time in this test."""

    failed: set = set()

    def probe(self, p):
        if p["key"] not in self.failed:
            self.failed.add(p["key"])
            return {"key": p["key"], "status": "failed", "error": "no plan"}
        return super().probe(p)


def test_retry_failed_probes_the_failed_ones_again_and_packaging_keeps_the_ok_record(problems, tmp_path):
    from kbench.collect.packaging.autotune import load_autotune
    out = tmp_path / "out"
    FailingFirst.failed = set()
    assert autotune.probe_autotune(problems, out, limit=2, make_probe=FailingFirst)["measured"] == 2
    first_two = [json.loads(x)["key"] for x in (out / autotune.RECORDS).read_text().splitlines()]
    # without the flag the failed ones count as done; with it they are pending again
    assert autotune.done_keys(out) == set(first_two) and autotune.done_keys(out, ok_only=True) == set()
    again = FailingFirst()
    assert autotune.probe_autotune(problems, out, limit=2, make_probe=lambda: again,
                                   retry_failed=True)["measured"] == 2
    assert again.seen == first_two
    records, _ = load_autotune(out)  # each key twice, failed then ok: the ok record is kept
    assert len(records) == 2 and records.set_index("key").loc[first_two, "status"].tolist() == ["ok", "ok"]


def test_the_time_budget_starts_no_problem_after_it(problems, tmp_path):
    summary = autotune.probe_autotune(problems, tmp_path / "out", time_budget_s=-1.0, make_probe=FakeProbe)
    assert summary["measured"] == 0 and summary["pending"] == 6


def test_shards_split_the_keys_by_crc32_and_resume_from_every_records_file(problems, tmp_path):
    import gzip
    import zlib

    from kbench.collect.raw_store.shard import Shard
    out = tmp_path / "out"
    probes = [FakeProbe(), FakeProbe()]
    for k in (0, 1):
        summary = autotune.probe_autotune(problems, out, shard=Shard(k, 2), make_probe=lambda k=k: probes[k])
        assert summary["measured"] == summary["total"]
    # each key in the shard of its CRC-32 modulo 2, whichever shard started first: the two cover the 6 keys once
    for k in (0, 1):
        assert all(zlib.crc32(key.encode()) % 2 == k for key in probes[k].seen)
    assert sorted(probes[0].seen + probes[1].seen) == sorted(autotune.done_keys(out)) and len(probes[0].seen + probes[1].seen) == 6
    assert [f.name for f in autotune.record_files(out)] == ["autotune-0-of-2.jsonl", "autotune-1-of-2.jsonl"]
    starts = [json.loads(x) for x in (out / "env.jsonl").read_text().splitlines()]
    assert [s["shard"] for s in starts] == ["0/2", "1/2"]
    # a gzipped copy (as a raw folder keeps them) counts as done: nothing is probed again
    for f in autotune.record_files(out):
        f.with_name(f.name + ".gz").write_bytes(gzip.compress(f.read_bytes()))
        f.unlink()
    assert autotune.probe_autotune(problems, out, make_probe=lambda: pytest.fail("all done")) == \
        {"total": 6, "pending": 0, "measured": 0}


def test_the_benchmark_limit_goes_to_the_probe_and_is_checked(problems, tmp_path, capsys):
    made = []

    def make(**kw):
        made.append(kw)
        return FakeProbe()

    autotune.probe_autotune(problems, tmp_path / "a", limit=1, make_probe=make, benchmark_limit=0)
    autotune.probe_autotune(problems, tmp_path / "b", limit=1, make_probe=make)
    assert made == [{"benchmark_limit": 0}, {}]  # PyTorch's own default where none is given
    from kbench.collect.command import main

    assert main(["autotune", "--problems", str(problems), "--out", str(tmp_path / "o"), "--benchmark-limit", "-1"]) == 2
    assert "--benchmark-limit -1" in capsys.readouterr().err


def test_the_shard_option_is_checked(problems, tmp_path, capsys):
    from kbench.collect.command import main
    assert main(["autotune", "--problems", str(problems), "--out", str(tmp_path / "o"), "--shard", "2/2"]) == 2
    assert "shard 2 of 2 does not exist" in capsys.readouterr().err


@pytest.mark.gpu
def test_on_the_gpu_autotune_settles_on_a_mode_a_plan(problems, tmp_path):
    summary = autotune.probe_autotune(problems, tmp_path / "out")
    lines = [json.loads(x) for x in (tmp_path / "out" / autotune.RECORDS).read_text().splitlines()]
    assert summary["measured"] == 6 and all(r["status"] == "ok" for r in lines)
    matched = [r for r in lines if r["torch_autotune_status"] == "matched"]
    assert matched and all(r["torch_autotune_plans"].split(";")[0] in r["candidates"].split(";") for r in matched)
    assert all(r["first_call_ms"] >= r["second_call_ms"] > 0 for r in lines)
