"""The layers of kbench and its baselines, lowest first: a module may import its own layer or a lower one.

The folders are the layers: each layer below is a list of folders (or, in the application layer, a
few single modules beside the folders), and a module's layer is the layer of the folder it lies in.
``tests/test_architecture.py`` checks every import against this table (module-level and
function-level), checks that every folder of ``kbench/`` sits in exactly one layer, and
``docs/architecture.md`` explains it. Besides the layer order, the test requires: no import cycles,
no core module (anything under ``kbench`` below the baselines) importing ``kbench_baselines``, and
no module importing the ``__init__`` of a package it belongs to (import from the module that
defines the name).

``python tests/test_architecture.py [ROOT]`` prints the import graph's cycles and upward edges.
"""

from __future__ import annotations

#: (layer, what it is, folders and modules as paths in the repository), lowest layer first
LAYERS: list[tuple[str, str, tuple[str, ...]]] = [
    ("core", "errors, the version, safe output writing and the data cards' templates and their renderer: "
             "imported by everything, import nothing of kbench above this layer",
     ("kbench/core",)),
    ("sources", "raw files -> tables: problem keys, split assignment, the find-db, perf-db and PACT "
                "converters, the solver grammars, test-retest statistics, and the dataset folder format "
                "they write",
     ("kbench/sources",)),
    ("collect", "the cuDNN collector, one job per folder: measurement (the collector itself, the corpus), "
                "the raw-folder store, packaging a raw folder into a dataset, the collector's label "
                "re-timing, and its studies of the measurement",
     ("kbench/collect",)),
    ("data", "the registry, building and loading datasets (local or from the Hub), data cards, "
             "the transfer task",
     ("kbench/data",)),
    ("scoring", "scoring rankings and tuning predictions, the Evaluator, typed result records",
     ("kbench/scoring",)),
    ("baselines", "the reference methods, one module each, behind one interface",
     ("baselines",)),
    ("application", "what users run: the CLI, the leaderboard (runner, submit, site, rescore), publishing "
                    "to the Hub, the trained selector, re-timing a shipped dataset or a board entry on the "
                    "GPU (``gpu_check``), a user's model (``model``: its trace, report, plan cache, the cached "
                    "plans in PyTorch and its step time), and the package facades ``kbench`` and ``kbench.torch``",
     ("kbench/__init__.py", "kbench/layers.py", "kbench/hub.py", "kbench/selector.py", "kbench/selector_inputs.py",
      "kbench/selector_device.py", "kbench/torch.py",
      "kbench/cli", "kbench/leaderboard", "kbench/gpu_check", "kbench/model")),
]

LAYER_NAMES = [name for name, _, _ in LAYERS]

#: import name -> folder: the baselines install as ``kbench_baselines`` from the folder ``baselines/``
PACKAGES = {"kbench": "kbench", "kbench_baselines": "baselines"}


def place_of(module: str) -> str | None:
    """The folder (or, for a top-level module of ``kbench``, the file) that decides ``module``'s layer."""
    parts = module.split(".")
    if parts[0] not in PACKAGES:
        return None
    root = PACKAGES[parts[0]]
    if root != "kbench":
        return root
    if len(parts) == 1:
        return "kbench/__init__.py"
    return f"kbench/{parts[1]}"


def layer_of(module: str) -> int | None:
    """Index in :data:`LAYERS` of ``module`` (by its folder), or None when it is not one of ours."""
    place = place_of(module)
    for i, (_, _, places) in enumerate(LAYERS):
        if place in places or f"{place}.py" in places:
            return i
    return None
