"""The plan cache file: a round trip, every refusal of check_environment, and every malformed file as one
clear error naming the file and the field."""

from __future__ import annotations

import json

import pytest

from kbench.core.errors import KbenchInputError
from kbench.model.plan_cache import (
    PlanCache,
    PlanCacheHeader,
    PlanEntry,
    TraceRef,
    check_environment,
    load_plan_cache,
    plan_engine_and_knobs,
    write_plan_cache,
)

ENV = {"gpu": "NVIDIA H200", "compute_capability": "9.0", "cudnn_backend": "9.19.0", "cudnn_frontend": "1.32.0",
       "torch": "2.11.0+cu130"}
KEY_F = "3-8-8-3x3-8-8-8-1-1x1-1x1-1x1-0-NCHW-FP32-F"
KEY_W = "8-8-8-3x3-3-8-8-1-1x1-1x1-1x1-0-NCHW-FP32-W"


def make_cache() -> PlanCache:
    trace = TraceRef(model="tests:two_convs", input_shape=[1, 3, 8, 8], dtype="fp32", memory_format="contiguous",
                     mode="train")
    header = PlanCacheHeader(**ENV, filled_by="oracle", source="dataset:tinycudnn@1.0.0", trace=trace)
    plans = {KEY_F: PlanEntry(plan="eng67_k2=5_k13=0", engine_id=67, knobs={"k2": 5, "k13": 0}, direction="F",
                              layers="conv1", time_ms=0.25),
             KEY_W: PlanEntry(plan="eng0", engine_id=0, direction="W", layers="conv1")}
    return PlanCache(header=header, plans=plans)


@pytest.fixture
def cache_file(tmp_path):
    return write_plan_cache(make_cache(), tmp_path / "two_convs.plans.json")


def test_round_trip(cache_file):
    back = load_plan_cache(cache_file)
    made = make_cache()
    assert back.plans == made.plans and back.missing == made.missing == []
    assert back.header.model_dump(exclude={"created"}) == made.header.model_dump(exclude={"created"})
    assert back.plan_for(KEY_F) == "eng67_k2=5_k13=0" and back.plan_for("nope") is None
    assert back.header.kind == "oracle" and back.header.trace.input_shape == [1, 3, 8, 8]
    doc = json.loads(cache_file.read_text())
    assert doc["format"] == "kbench-plan-cache-1" and doc["header"]["gpu"] == "NVIDIA H200"
    assert doc["plans"][KEY_F]["knobs"] == {"k2": 5, "k13": 0}


def test_plan_names_give_engine_and_knobs():
    assert plan_engine_and_knobs("eng67_k2=5_k13=0") == (67, {"k2": 5, "k13": 0})
    assert plan_engine_and_knobs("eng0") == (0, {})
    assert plan_engine_and_knobs("eng28_k2=4_k3=-1") == (28, {"k2": 4, "k3": -1})
    assert plan_engine_and_knobs("ConvBinWinograd3x3U") == (None, {})


def test_the_same_machine_passes():
    check_environment(make_cache(), dict(ENV))


@pytest.mark.parametrize("field, other, words", [
    ("gpu", "NVIDIA H100 80GB HBM3", "GPU model"),
    ("cudnn_backend", "9.20.0", "cuDNN (backend) version"),
    ("cudnn_frontend", "1.33.0", "cuDNN frontend version"),
    ("torch", "2.12.0+cu130", "torch version"),
])
def test_another_gpu_or_version_is_refused_naming_both(field, other, words):
    with pytest.raises(KbenchInputError) as err:
        check_environment(make_cache(), {**ENV, field: other})
    text = str(err.value)
    assert f"it was made for {words} {ENV[field]!r}, this machine has {other!r}" in text
    assert "re-run `kbench model tune` on this machine" in text
    assert text.startswith("the plan cache does not fit this machine")


def test_two_differences_are_both_named():
    with pytest.raises(KbenchInputError) as err:
        check_environment(make_cache(), {**ENV, "gpu": "NVIDIA H100 80GB HBM3", "torch": "2.12.0"})
    assert "GPU model 'NVIDIA H200'" in str(err.value) and "torch version '2.11.0+cu130'" in str(err.value)


def _write(tmp_path, doc_or_text) -> str:
    path = tmp_path / "bad.plans.json"
    path.write_text(doc_or_text if isinstance(doc_or_text, str) else json.dumps(doc_or_text))
    return path


def _error(path) -> str:
    with pytest.raises(KbenchInputError) as err:
        load_plan_cache(path)
    text = str(err.value)
    assert "bad.plans.json" in text and "kbench model tune" in text
    return text


def test_a_truncated_file_is_corrupt_json(tmp_path, cache_file):
    text = cache_file.read_text()
    msg = _error(_write(tmp_path, text[: len(text) // 2]))
    assert "not valid JSON" in msg and "corrupt or truncated" in msg


def test_a_missing_file(tmp_path):
    with pytest.raises(KbenchInputError, match="file not found"):
        load_plan_cache(tmp_path / "absent.json")


def test_not_an_object(tmp_path):
    assert "expected a JSON object, found list" in _error(_write(tmp_path, [1, 2]))


def test_another_format(tmp_path, cache_file):
    doc = json.loads(cache_file.read_text()) | {"format": "kbench-plan-cache-0"}
    assert "field format is 'kbench-plan-cache-0'" in _error(_write(tmp_path, doc))


def test_a_missing_field_is_named(tmp_path, cache_file):
    doc = json.loads(cache_file.read_text())
    del doc["header"]["gpu"]
    assert "field header.gpu is missing" in _error(_write(tmp_path, doc))
    doc = json.loads(cache_file.read_text())
    del doc["plans"][KEY_F]["plan"]
    assert f"field plans.{KEY_F}.plan is missing" in _error(_write(tmp_path, doc))


def test_a_wrong_type_is_named(tmp_path, cache_file):
    doc = json.loads(cache_file.read_text())
    doc["plans"][KEY_F]["engine_id"] = "sixty-seven"
    msg = _error(_write(tmp_path, doc))
    assert f"field plans.{KEY_F}.engine_id is wrong" in msg
    doc = json.loads(cache_file.read_text())
    doc["plans"] = ["eng0"]
    assert "field plans is wrong" in _error(_write(tmp_path, doc))
    doc = json.loads(cache_file.read_text())
    doc["header"]["filled_by"] = "guess"
    assert "field header.filled_by is wrong" in _error(_write(tmp_path, doc))
    doc = json.loads(cache_file.read_text())
    doc["plans"][KEY_F]["direction"] = "X"
    assert f"field plans.{KEY_F}.direction is wrong" in _error(_write(tmp_path, doc))
