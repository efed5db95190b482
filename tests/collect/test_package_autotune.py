"""PyTorch's autotune records packaged beside a dataset (kbench.collect.packaging.autotune): the hand-made
folder ``fixtures/autotune_sample`` (records of five of raw_sample's problem-directions and one it does not
hold) against the recorded H100 sample, every figure worked out by hand from the fixture's lines."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from kbench.collect.packaging import package
from kbench.collect.packaging.autotune import STATUSES, autotune_tables, card_section, load_autotune
from kbench.core.errors import KbenchInputError

FIXTURES = Path(__file__).with_name("fixtures")
RAW_SAMPLE, SAMPLE = FIXTURES / "raw_sample", FIXTURES / "autotune_sample"
W = "1152-7-7-5x5-1152-7-7-16-2x2-1x1-1x1-0-NHWC-NHWC-NHWC-FP32-W_g1152"
BF = "128-112-112-3x3-128-112-112-128-1x1-1x1-1x1-0-NHWC-NHWC-NHWC-BF16-F"
FP16F = "16-190-190-3x3-16-93-92-16-1x0-2x2-3x3-0-NCHW-FP16-F_g16"
BW, BB = "192-17-17-1x7-192-17-17-64-0x3-1x1-1x1-0-NCHW-BF16-W", "192-17-17-1x7-192-17-17-64-0x3-1x1-1x1-0-NCHW-BF16-B"


@pytest.fixture(scope="module")
def packed():
    problems, plans, env = package.load_raw(RAW_SAMPLE)
    tables, _ = package.build_tables(problems, plans, None, "default")
    return tables, env


def test_tables_hand_worked(packed):
    tables, env = packed
    heuristic, table, info = autotune_tables(SAMPLE, env, tables["problems"]["problem_id"], tables["runtimes"])
    # the two problems whose plan is in the default set (by key); of BF's two matched plans, the first
    assert list(heuristic.itertuples(index=False, name=None)) == [
        (W, "pytorch_autotune", 0, "eng61_k2=3_k12=5_k17=11"),
        (BF, "pytorch_autotune", 0, "eng62_k2=0_k13=1_k18=0_k25=0_k27=8_k28=1"),
    ]
    assert str(heuristic["rank"].dtype) == "int16"
    got = table.set_index("problem_id")
    assert got["status"].to_dict() == {BF: "in_set", W: "in_set", FP16F: "not_in_set", BW: "unmatched", BB: "failed"}
    assert got["n_matched"].to_dict() == {BF: 2, W: 1, FP16F: 1, BW: 0, BB: 0}
    # BF's two plans, timed in the table: the slower over the faster; one plan: 1; none in the set: NaN
    t = tables["runtimes"].set_index(["problem_id", "kernel"])["time_ms"]
    bf = [t[(BF, f"eng62_k2=0_k13=1_k18=0_k25={k}_k27=8_k28=1")] for k in (0, 1)]
    assert got.at[BF, "matched_spread"] == max(bf) / min(bf) and got.at[W, "matched_spread"] == 1.0
    assert pd.isna(got.at[FP16F, "matched_spread"]) and pd.isna(got.at[BW, "matched_spread"])
    assert got.loc[[BF, W, FP16F, BW], "first_call_cost_ms"].tolist() == [39.5, 11.5, 6.5, 2.5]
    assert got.loc[[BF, W], "second_call_ms"].tolist() == [0.5, 0.5] and pd.isna(got.at[BB, "first_call_ms"])
    assert got.at[FP16F, "kernel"] == "" and got.at[BF, "kernel"] == "eng62_k2=0_k13=1_k18=0_k25=0_k27=8_k28=1"
    assert info == {
        "folder": SAMPLE.as_posix(),
        "runs": 1,
        "records": 6,
        "records_outside_the_dataset": 1,
        "problem_directions": 12,
        "recorded": 5,
        "in_set": 2,
        "not_in_set": 1,
        "unmatched": 1,
        "failed": 1,
        "benchmark_limit": [10],
    }
    assert set(table["status"]) <= set(STATUSES)


def test_card_section_hand_worked(packed):
    tables, env = packed
    _, table, info = autotune_tables(SAMPLE, env, tables["problems"]["problem_id"], tables["runtimes"])
    text = card_section(table, info, tables["problems"])
    assert "recorded for 5 of the 12 problem-directions (41.7%); 1 probe(s) failed\nand 1 were not matched" in text
    assert "Of the 3 matched, 2 (66.7%)\nsettled on a plan of this candidate set" in text
    assert "1 matched more than one plan, plans whose knobs launch the same kernels (their table times differ" in text
    assert "`benchmark_limit` 10" in text
    # F: BF (40 / 39.5 ms) and FP16F (7 / 6.5 ms); W: W (12 / 11.5) and BW (4 / 2.5); B: only the failed probe
    assert "| F | 2 | 1 | 23.5 ms | 23.0 ms | 46.0 ms |" in text
    assert "| W | 2 | 1 | 8.0 ms | 7.0 ms | 14.0 ms |" in text
    assert "| B |" not in text


def test_package_writes_the_heuristic_table_manifest_and_card(tmp_path):
    from kbench.data.dataset import read_dataset_folder

    card = tmp_path / "card.md"
    manifest = package.package(RAW_SAMPLE, "h100", tmp_path / "h100", card=card, autotune=SAMPLE)
    ds = read_dataset_folder(tmp_path / "h100", "h100")
    h = ds.heuristics.astype(str)
    assert sorted(h.loc[h["heuristic"] == "pytorch_autotune", "problem_id"]) == [W, BF]
    assert len(ds.tables["autotune"]) == 5 and manifest["files"]["autotune.parquet"]["rows"] == 5
    # the folder as the repository names it, wherever the checkout sits
    assert (
        ds.info["autotune"]["in_set"] == 2 and ds.info["autotune"]["folder"] == "tests/collect/fixtures/autotune_sample"
    )
    text = card.read_text()
    assert "## PyTorch's autotune (`benchmark = True`)" in text
    assert "| all | pytorch_autotune | 2 |" in text  # the gap table counts its problems only
    # without the folder: no autotune table, the heuristics as before
    plain = package.package(RAW_SAMPLE, "h100", tmp_path / "plain")
    assert (
        "autotune.parquet" not in plain["files"]
        and "autotune" not in read_dataset_folder(tmp_path / "plain", "h100").info
    )
    assert plain["files"]["heuristics.parquet"]["rows"] == manifest["files"]["heuristics.parquet"]["rows"] - 2


def _copy(tmp_path) -> Path:
    folder = tmp_path / "autotune"
    shutil.copytree(SAMPLE, folder)
    return folder


def _refused(folder, packed, match):
    tables, env = packed
    with pytest.raises(KbenchInputError, match=match):
        autotune_tables(folder, env, tables["problems"]["problem_id"], tables["runtimes"])


def test_another_gpu_or_software_is_refused(tmp_path, packed):
    for field, value, shown in (
        ("gpu", "NVIDIA H200", "NVIDIA H200"),
        ("cudnn_backend", "9.20.0", "9.20.0"),
        ("sm_count", 114, "114"),
        ("torch", None, "(not recorded)"),
    ):
        folder = _copy(tmp_path / field)
        env = json.loads((folder / "env.jsonl").read_text())
        env[field] = value
        (folder / "env.jsonl").write_text(json.dumps(env) + "\n")
        _refused(
            folder,
            packed,
            rf"env.jsonl: {field} is {shown.replace('(', '[(]').replace(')', '[)]')} in an "
            r"autotune run, .* in the dataset's runs",
        )


def test_bad_folders_are_refused_with_the_file_and_the_fix(tmp_path, packed):
    folder = _copy(tmp_path / "flag")
    env = json.loads((folder / "env.jsonl").read_text())
    (folder / "env.jsonl").write_text(json.dumps({**env, "torch_cudnn_benchmark": False}) + "\n")
    _refused(folder, packed, "without torch.backends.cudnn.benchmark = True")
    folder = _copy(tmp_path / "limits")
    with (folder / "env.jsonl").open("a") as fh:
        fh.write(json.dumps({**env, "torch_cudnn_benchmark_limit": 0}) + "\n")
    _refused(folder, packed, "runs with benchmark_limit 0, 10; a dataset's pytorch_autotune is one setting")
    folder = _copy(tmp_path / "noenv")
    (folder / "env.jsonl").unlink()
    _refused(folder, packed, r"env.jsonl: no run's environment .* copy it from the run")
    folder = _copy(tmp_path / "twice")
    lines = (folder / "autotune.jsonl").read_text().splitlines()
    (folder / "autotune-0-of-2.jsonl").write_text(lines[0] + "\n")
    _refused(folder, packed, r"autotune.jsonl: line 1 records .*W_g1152 again \(first at autotune-0-of-2.jsonl:1\)")
    folder = _copy(tmp_path / "junk")
    (folder / "autotune.jsonl").write_text('{"status": "ok"}\n')
    _refused(folder, packed, "line 1 is no autotune record")
    empty = tmp_path / "empty"
    empty.mkdir()
    _refused(empty, packed, "no autotune records")


def test_gzipped_records_and_torn_lines_read_the_same(tmp_path, packed):
    import gzip

    folder = _copy(tmp_path / "gz")
    plain = folder / "autotune.jsonl"
    (folder / "autotune.jsonl.gz").write_bytes(gzip.compress(plain.read_bytes() + b'{"key": "to'))
    plain.unlink()
    records, env = load_autotune(folder)
    assert len(records) == 6 and env["torch_cudnn_benchmark_limit"].tolist() == [10]


def test_package_command_refuses_a_missing_folder(tmp_path, capsys):
    from kbench.cli import main

    rc = main(
        [
            "collect",
            "package",
            str(RAW_SAMPLE),
            "--name",
            "h100",
            "--out",
            str(tmp_path / "o"),
            "--autotune",
            str(tmp_path / "nowhere"),
        ]
    )
    assert rc == 2 and "--autotune" in capsys.readouterr().err and not (tmp_path / "o").exists()
