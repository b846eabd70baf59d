"""The package version (one definition: the top-level package and the kernel cache read it)."""

__version__ = "0.1.0"
