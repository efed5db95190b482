"""The layers of kbench and its baselines, lowest first: a module may import its own layer or a lower one.

This table is the one definition of the architecture: ``tests/test_architecture.py`` checks
every import against it (module-level and function-level), and ``docs/architecture.md``
explains it. A module belongs to the layer of the longest prefix below that matches its
name. Besides the layer order, the test requires: no import cycles, no core module
(anything under ``kbench``) importing ``kbench_baselines``, and no module importing the
``__init__`` of a package it belongs to (import from the module that defines the name).

``python tests/test_architecture.py [ROOT]`` prints the import graph's cycles and upward edges.
"""

from __future__ import annotations

#: (layer, what it is, module prefixes), lowest layer first
LAYERS: list[tuple[str, str, tuple[str, ...]]] = [
    ("foundation", "errors, the version, safe output writing, the identifier rule of names that become "
                   "paths and escaping for each medium: imported by everything, import nothing of kbench "
                   "above this layer",
     ("kbench.errors", "kbench.version", "kbench.output_files", "kbench.identifiers", "kbench.escaping")),
    ("sources", "raw files and measurements -> tables: problem keys, split assignment, the find-db, "
                "perf-db and PACT converters, the cuDNN collector (measurement, its studies of the "
                "measurement, the label re-timing rounds) and its packager, and the dataset folder "
                "format they write",
     ("kbench.problem", "kbench.splits", "kbench.dataset_files", "kbench.sources",
      "kbench.tuning.grammar", "kbench.tuning.perfdb", "kbench.tuning.dataset", "kbench.repeatability",
      "kbench.collect", "kbench.collect.studies", "kbench.collect.label_retiming")),
    ("data model", "the registry, building and loading datasets (local or from the Hub), data cards",
     ("kbench.registry", "kbench.build", "kbench.hub_download", "kbench.dataset", "kbench.cards",
      "kbench.transfer_task")),
    ("metrics/evaluate", "scoring rankings and tuning predictions, typed result records",
     ("kbench.metrics", "kbench.long_form", "kbench.environment", "kbench.records", "kbench.tuning.metrics", "kbench.prediction_files",
      "kbench.evaluate", "kbench.tuning", "kbench.selection_metrics", "kbench.network_time")),
    ("baselines", "the reference methods, one module each, behind one interface",
     ("kbench_baselines",)),
    ("application", "what users run: the CLI, the leaderboard (runner, submit, site, rescore), publishing "
                    "to the Hub, re-timing an entry on the GPU, label re-timing of a shipped dataset, "
                    "``python -m kbench.collect``, and the package facade ``kbench``",
     ("kbench", "kbench.layers", "kbench.hub", "kbench.leaderboard", "kbench.cli", "kbench.gpu_check",
      "kbench.collect.__main__", "kbench.collect.label_retiming.shipped")),
]

LAYER_NAMES = [name for name, _, _ in LAYERS]


def layer_of(module: str) -> int | None:
    """Index in :data:`LAYERS` of ``module`` (longest matching prefix), or None when no prefix matches."""
    best, best_len = None, -1
    for i, (_, _, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = i, len(prefix)
    return best
