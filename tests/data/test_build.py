"""Rebuilding from the raw files reproduces the shipped datasets byte for byte."""

import json

import pytest

import kbench
from kbench.data.build import PACKAGE_DATA, build_dataset


@pytest.mark.parametrize("name", ["mi300x", "mi300x-tuning"])
def test_rebuild_reproduces_shipped_files(name, raw_data, tmp_path):
    manifest = build_dataset(name, raw_data, tmp_path)
    shipped = json.loads((PACKAGE_DATA / name / "manifest.json").read_text())
    assert manifest["checksum"] == shipped["checksum"]
    assert {f: m["sha256"] for f, m in manifest["files"].items()} == \
        {f: m["sha256"] for f, m in shipped["files"].items()}
    rebuilt = kbench.load(str(tmp_path / name))
    assert rebuilt.split("random")["test"].tolist() == kbench.load(name).split("random")["test"].tolist()
