"""The GPU machines run ``python -m kbench.collect`` (and ``python -m kbench.gpu_check.labels_command``) and the collector with what their image holds:
PyTorch, numpy, pandas and pyarrow, but not pydantic. Every entry point a device call uses must
therefore parse and import without it (a module-level import of the leaderboard store once broke
every collecting call on the device before it timed anything)."""

import subprocess
import sys

import pytest

from kbench.sources.dataset_files import REPO_ROOT

# sys.modules[name] = None makes `import name` raise ImportError, as on the device
BLOCK = "import sys; sys.modules['pydantic'] = None; "


@pytest.mark.parametrize("module, argv", [("kbench.collect", ["cudnn", "--help"]), ("kbench.collect", ["merge", "--help"]),
                                          ("kbench.collect", ["compact", "--help"]),
                                          ("kbench.gpu_check.labels_command", ["--help"])])
def test_collect_cli_parses_without_pydantic(module, argv):
    code = BLOCK + f"sys.argv = [{module!r}] + {argv!r}; import runpy; runpy.run_module({module!r}, run_name='__main__')"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_collector_modules_import_without_pydantic():
    code = BLOCK + ("import kbench.collect.measure.cudnn, kbench.collect.studies.scaling, kbench.collect.measure.gpu_turn, "
                    "kbench.gpu_check.command, kbench.gpu_check.plan, kbench.gpu_check.timing, kbench.gpu_check.live")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_every_module_of_the_collector_package_imports_without_pydantic_or_rich():
    """Every module of the collector's package ``kbench.collect.measure.cudnn`` imports in a fresh process with
    neither pydantic nor rich importable: its modules use the standard library, numpy and pandas, and
    torch and the cuDNN frontend only inside the collector's methods."""
    import pkgutil

    import kbench.collect.measure.cudnn as package
    names = sorted(m.name for m in pkgutil.iter_modules(package.__path__))
    assert {"collector", "plans", "problems", "run", "timing"} <= set(names)
    for name in names:
        code = (BLOCK + "sys.modules['rich'] = None; "
                + f"import kbench.collect.measure.cudnn.{name}")
        done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True)
        assert done.returncode == 0, (name, done.stderr)
