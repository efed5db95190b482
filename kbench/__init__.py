"""kbench: an open dataset and benchmark suite for learned GPU kernel selection.

>>> import kbench
>>> ds = kbench.load("mi100")           # offline, from data shipped in the package
>>> parts = ds.split("random")           # {"train": ids, "valid": ids, "test": ids}
>>> tr = kbench.transfer("mi100", "mi300x", k=100)   # cross-device transfer task (docs/transfer.md)
"""

from kbench.dataset import Dataset, list_datasets, load
from kbench.transfer_task import Transfer, transfer
from kbench.version import __version__


def __getattr__(name):
    # Evaluator is imported lazily so `import kbench; kbench.load(...)` stays light, and free of pydantic
    # (kbench.evaluate's records need it): every `import kbench.x` runs this file, the GPU machines' too.
    if name == "Evaluator":
        from kbench.evaluate import Evaluator
        return Evaluator
    raise AttributeError(f"module 'kbench' has no attribute {name!r}")


__all__ = ["Dataset", "Evaluator", "Transfer", "load", "list_datasets", "transfer", "__version__"]
