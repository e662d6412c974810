"""Named hardware targets as data files, and their loader."""

from .registry import HardwareTarget, host_arch, load_target, runs_here, target_names, tvm_target

__all__ = ["HardwareTarget", "host_arch", "load_target", "runs_here", "target_names", "tvm_target"]
