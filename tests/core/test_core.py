"""kbench.core: the errors' exit codes, the name hint, JSON objects read with one error, and output paths
that never overwrite an input (by inode) and are written atomically."""

import json
import os

import pytest

from kbench.core.errors import DataIntegrityError, KbenchError, KbenchInputError, read_json_object, suggest
from kbench.core.output_files import atomic_write_text, check_output, check_output_folder
from kbench.core.version import __version__


def test_exit_codes_and_hint():
    assert (KbenchError.exit_code, KbenchInputError.exit_code, DataIntegrityError.exit_code) == (1, 2, 2)
    assert issubclass(KbenchInputError, ValueError)
    assert suggest("mi10", ["mi100", "h100"]) == " Did you mean 'mi100' or 'h100'?"
    assert suggest("zzzz", ["mi100"]) == ""
    assert __version__.count(".") == 2


def test_read_json_object_names_the_file(tmp_path):
    path = tmp_path / "a.json"
    with pytest.raises(KbenchInputError, match="file not found"):
        read_json_object(path)
    path.write_text("[1]")
    with pytest.raises(KbenchInputError, match="expected a JSON object, found list"):
        read_json_object(path)
    path.write_text(json.dumps({"a": 1}))
    assert read_json_object(path) == {"a": 1}


def test_outputs_never_overwrite_an_input(tmp_path):
    src = tmp_path / "in.csv"
    src.write_text("x\n")
    os.link(src, tmp_path / "link.csv")
    with pytest.raises(KbenchInputError, match="is the input file"):
        check_output(tmp_path / "link.csv", [src])
    with pytest.raises(KbenchInputError, match="inside the input folder"):
        check_output(tmp_path / "out.csv", [tmp_path])
    assert check_output(tmp_path / "out.csv", [src]) == tmp_path / "out.csv"
    assert check_output_folder(tmp_path / "new", [src]) == tmp_path / "new"


def test_atomic_write_leaves_no_temporary_file(tmp_path):
    atomic_write_text(tmp_path / "sub" / "f.txt", "hello")
    assert (tmp_path / "sub" / "f.txt").read_text() == "hello"
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["f.txt"]
