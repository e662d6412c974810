"""Stage 6, build: ``tvm.compile`` of a scheduled module, and running what it built."""

from __future__ import annotations

import tvm
from tvm import relax


def build(mod, target):
    """``tvm.compile`` for a ``tvm.target.Target``; returns the Relax executable."""
    return tvm.compile(mod, target=target)


def run(executable, inputs, device=None) -> list:
    """Run a built model's ``main`` on NumPy inputs; its outputs as NumPy arrays."""
    device = device or tvm.cpu()
    vm = relax.VirtualMachine(executable, device)
    out = vm["main"](*[tvm.runtime.tensor(x, device) for x in inputs])
    return [out.numpy()] if hasattr(out, "numpy") else [item.numpy() for item in out]
