"""``import baselines``: the package's name until kbench 0.1.x, kept working for one release.

The baselines are installed as ``kbench_baselines`` (a top-level ``baselines`` shadows, or is
shadowed by, any user project's own ``baselines/`` folder). Importing the old name warns and hands
back the very same modules: ``baselines.xgb is kbench_baselines.xgb``, so classes, registries and
pickles are shared, never loaded twice.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

OLD, NEW = "baselines", "kbench_baselines"


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``baselines.X`` as the already importable ``kbench_baselines.X``."""

    def find_spec(self, name, path=None, target=None):
        if name.startswith(OLD + "."):
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec):
        return importlib.import_module(NEW + spec.name[len(OLD):])

    def exec_module(self, module):
        pass  # the module was run once, under its new name


def _importer_stacklevel() -> int:
    """The stack level of the code that wrote ``import baselines`` (past the import machinery and the shims)."""
    frame, level = sys._getframe(2), 2
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith("<frozen importlib"):
            frame = frame.f_back  # warnings.warn skips the import machinery's frames itself
        elif frame.f_globals.get("__name__") in (OLD, __name__):  # the shim's own frames
            frame, level = frame.f_back, level + 1
        else:
            break
    return level


def redirect() -> None:
    """Warn, then make ``baselines`` and every ``baselines.X`` the ``kbench_baselines`` modules."""
    warnings.warn("the 'baselines' package is now 'kbench_baselines' (import kbench_baselines); "
                  "the old name goes in the next release", DeprecationWarning, stacklevel=_importer_stacklevel())
    sys.modules[OLD] = importlib.import_module(NEW)
    if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Alias())
