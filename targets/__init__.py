"""Named hardware targets as data files, and their loader."""

from .registry import HardwareTarget, load_target, runs_here, target_names, tvm_target

__all__ = ["HardwareTarget", "load_target", "runs_here", "target_names", "tvm_target"]
