"""kbench: an open dataset and benchmark suite for learned GPU kernel selection.

>>> import kbench
>>> ds = kbench.load("mi100")           # offline, from data shipped in the package
>>> parts = ds.split("random")           # {"train": ids, "valid": ids, "test": ids}
"""

__version__ = "0.1.0"

from kbench.dataset import Dataset, list_datasets, load  # noqa: E402

__all__ = ["Dataset", "load", "list_datasets", "__version__"]
