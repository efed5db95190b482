"""``import baselines`` (the old import name) warns once and hands back the ``kbench_baselines`` modules.

Each case runs in a fresh interpreter: from the repository root the folder ``baselines/`` itself is
on ``sys.path``; from elsewhere the installed shim (``baselines/_legacy``) answers.
"""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = """
import warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import baselines
    import baselines.xgb
    from baselines.base import BASELINES
import kbench_baselines, kbench_baselines.xgb, kbench_baselines.base
deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning) and "kbench_baselines" in str(w.message)]
assert len(deprecations) == 1, [str(w.message) for w in caught]
assert deprecations[0].filename == "<string>", deprecations[0].filename  # the user's import line, not the shim
assert baselines is kbench_baselines and baselines.xgb is kbench_baselines.xgb
assert BASELINES is kbench_baselines.base.BASELINES and "oracle" in BASELINES
print("ok")
"""


@pytest.mark.parametrize("cwd", ["root", "elsewhere"])
def test_old_name_warns_and_is_the_same_package(cwd, tmp_path):
    run = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO if cwd == "root" else tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr


def test_new_name_imports_without_a_warning():
    run = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c",
                          "import kbench_baselines, kbench_baselines.xgb; print(kbench_baselines.__name__)"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "kbench_baselines", run.stderr
