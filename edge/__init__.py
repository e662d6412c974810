"""edgekit: which number format fits my model on that device, and what does it cost."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("edgekit")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"
