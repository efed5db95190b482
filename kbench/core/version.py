"""kbench's version, in a module of its own so that any module can import it without the package."""

__version__ = "0.2.0"
