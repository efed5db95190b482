"""``kbench model check`` on the CPU through the stand-in frontend (``fake_cudnn``, which computes each
plan with PyTorch's own CPU ops): every layer of a model with 1d, 2d, 3d, grouped and transposed
convolutions is within tolerance and ran on the cache; a plan whose weight gradient is 1.5 times too
large is caught with the error that follows from the definition (|1.5 g - g| / |g| = 0.5); a layer
left out of the cache falls back and is counted; bad input gets exit code 2."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from test_use_plans import Mixed, cache_of  # noqa: E402

from kbench.cli import main  # noqa: E402
from kbench.core.errors import KbenchInputError  # noqa: E402
from kbench.model.check import check_model, relative_error  # noqa: E402
from kbench.model.plan_cache import write_plan_cache  # noqa: E402
from kbench.model.trace import trace_model  # noqa: E402

SHAPE = (2, 4, 5)
LAYERS = ["c1", "t2", "c2", "c3", "t3"]  # Mixed's convolution modules in call order


def mixed():
    return Mixed()


def no_convs():
    return torch.nn.Linear(5, 5)


def write_cache(tmp_path, drop_layer: str | None = None):
    trace = trace_model(Mixed(), SHAPE)
    problems = trace.problems
    if drop_layer is not None:
        problems = problems[~problems["layers"].str.split(";").map(lambda names: drop_layer in names)]
    path = tmp_path / "cache.json"
    write_plan_cache(cache_of({pid: "eng2" for pid in problems["problem_id"]}), path)
    return path


def test_relative_error_by_hand():
    ref = torch.tensor([3.0, 4.0], dtype=torch.float64)  # |ref| = 5
    assert relative_error(torch.tensor([3.0, 4.0]), ref) == 0.0
    assert relative_error(torch.tensor([6.0, 8.0]), ref) == pytest.approx(1.0)
    assert relative_error(torch.tensor([3.0, 5.0]), ref) == pytest.approx(0.2)
    assert relative_error(torch.zeros(2), torch.zeros(2, dtype=torch.float64)) == 0.0


def test_every_layer_within_tolerance_and_through_the_cache(fake_frontend, tmp_path):
    out = tmp_path / "check.json"
    record = check_model("test_check:mixed", SHAPE, cache_path=write_cache(tmp_path), out=out, device="cpu",
                         progress=False)
    assert [lc.layer for lc in record.layers] == LAYERS
    assert record.summary["layers"] == record.summary["within_tolerance"] == record.summary["all_through_cache"] == 5
    first = record.layers[0]
    assert "B" not in first.kbench_error  # the model's input needs no gradient: the first layer has no B
    assert first.through_cache == {"F": 1, "W": 1}
    for lc in record.layers[1:]:
        assert set(lc.kbench_error) == {"F", "B", "W"} | ({"bias"} if lc.layer != "c2" else set())
        assert lc.through_cache == {"F": 1, "B": 1, "W": 1} and lc.fallback == {}
    for lc in record.layers:
        assert lc.compute_dtype == "FP32" and lc.tolerance == 1e-2
        # the stand-in computes each plan with PyTorch's own CPU ops: kbench's error is PyTorch's (the bias's
        # gradient is a sum kbench's path takes itself, in another order)
        for d, err in lc.kbench_error.items():
            if d != "bias":
                assert err == pytest.approx(lc.pytorch_error[d], rel=1e-3, abs=1e-9), (lc.layer, d)
            assert err <= 1e-5
    assert json.loads(out.read_text())["summary"] == record.summary


def test_a_wrong_weight_gradient_is_over_the_tolerance(fake_frontend, tmp_path, monkeypatch, capsys):
    real = fake_frontend.pygraph._compute

    def scaled(self, pack, index):
        real(self, pack, index)
        if self.node[0] == "W":
            pack[self.out].mul_(1.5)
    monkeypatch.setattr(fake_frontend.pygraph, "_compute", scaled)
    record = check_model("test_check:mixed", SHAPE, cache_path=write_cache(tmp_path), device="cpu", progress=False)
    assert record.summary["within_tolerance"] == 0
    for lc in record.layers:
        assert lc.kbench_error["W"] == pytest.approx(0.5, abs=1e-4)  # |1.5 g - g| / |g|
        assert lc.pytorch_error["W"] <= 1e-5 and lc.kbench_error["F"] <= 1e-5
    assert record.summary["worst_kbench"]["share_of_tolerance"] == pytest.approx(50, abs=0.01)
    assert record.summary["worst_kbench"]["direction"] == "W"


def test_a_layer_missing_from_the_cache_falls_back_and_is_counted(fake_frontend, tmp_path):
    record = check_model("test_check:mixed", SHAPE, cache_path=write_cache(tmp_path, drop_layer="c2"),
                         device="cpu", progress=False)
    by_layer = {lc.layer: lc for lc in record.layers}
    assert by_layer["c2"].through_cache == {} and by_layer["c2"].fallback == {"not_in_cache": 3}
    assert by_layer["c2"].within_tolerance  # PyTorch's own op ran it
    assert record.summary["all_through_cache"] == 4 and record.summary["fallback"] == {"not_in_cache": 3}


def test_bad_input_exits_2(tmp_path, capsys):
    cache = write_cache(tmp_path)
    args = ["model", "check", "test_check:mixed", "--input-shape", "2,4,5", "--cache", str(cache)]
    if not torch.cuda.is_available():
        assert main([*args, "--out", str(tmp_path / "c.json")]) == 2
        assert "PyTorch sees none here" in capsys.readouterr().err
    assert main([*args, "--out", str(cache)]) == 2  # the output would overwrite the cache
    assert "inputs are never overwritten" in capsys.readouterr().err
    assert json.loads(cache.read_text())["plans"]
    (tmp_path / "broken.json").write_text("{")
    assert main([*args[:-1], str(tmp_path / "broken.json"), "--out", str(tmp_path / "c.json")]) == 2
    assert "broken.json" in capsys.readouterr().err
    with pytest.raises(KbenchInputError, match="runs no convolution module"):
        check_model("test_check:no_convs", SHAPE, cache_path=cache, device="cpu", progress=False)
