"""gaviz's version, read from the installed package's metadata: pyproject.toml is its one source."""

from importlib import metadata

try:
    __version__ = metadata.version("gaviz")
except metadata.PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
