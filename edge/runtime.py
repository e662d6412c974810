"""``edgekit.runtime``: run a build with TVM's runtime alone (see :mod:`edgekit.compilers.runtime`)."""

from edgekit.compilers.runtime import LoadedBuild, load

__all__ = ["LoadedBuild", "load"]
