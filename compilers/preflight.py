"""Stage 3, preflight: what a target cannot run or build, found before any compile work."""

from __future__ import annotations

import shutil

from edgekit.targets import host_arch

from .importer import ImportedModel
from .lower import DEVICES
from .plan import BASELINES

VM_CALL_OPS = ("relax.call_tir", "relax.call_dps_packed", "relax.call_pure_packed", "relax.shape_of")  # run by the VM


class PreflightError(ValueError):
    """The target cannot run this model as planned; ``problems`` lists why."""

    def __init__(self, problems: list[str]):
        super().__init__("preflight failed:\n  - " + "\n  - ".join(problems))
        self.problems = problems


def check_quantizes(plan: dict[str, str], fmt: str, label: str, skipped: dict[str, str]) -> None:
    """A plan that quantizes nothing is an error unless it asks for float: the user would get a float build
    or file under a quantized name. ``skipped``: the weights left in float, and why."""
    if plan or fmt in BASELINES:
        return
    why = "; ".join(f"{name}: {reason}" for name, reason in list(skipped.items())[:5])
    raise ValueError(f"{label} has no MatMul/Gemm/Conv weight edgekit can quantize (weights are float "
                     f"initializers read by those ops){'; left in float: ' + why if why else ''}. "
                     f"To build it in float, pass --format fp32")


def preflight(imported: ImportedModel, plan: dict[str, str], target) -> list[str]:
    """What this target cannot run or build, before any compile work; empty when all is well."""
    import tvm

    problems = []
    if target.device not in DEVICES:
        problems.append(f"device kind {target.device!r}: edgekit lowers decode kernels for "
                        f"{', '.join(DEVICES)} targets only (formats {', '.join(sorted(set(plan.values())))})")
    ops = set()

    def collect(expr):
        if isinstance(expr, tvm.relax.Call) and isinstance(expr.op, tvm.ir.Op):
            ops.add(expr.op.name)

    tvm.relax.analysis.post_order_visit(imported.mod["main"], collect)
    for op in sorted(ops):
        if op not in VM_CALL_OPS and tvm.ir.Op.get(op).get_attr("FLegalize") is None:
            problems.append(f"op {op} has no TVM lowering for {target.device}")
    if target.arch is not None and target.arch != host_arch():
        compiler = target.cross_compiler
        if compiler is None:
            problems.append(f"target {target.name} runs on {target.arch}; it names no cross compiler")
        elif shutil.which(compiler) is None:
            problems.append(f"cross compiler {compiler} for {target.arch} is not on PATH "
                            "(Debian: apt-get install gcc-aarch64-linux-gnu)")
    return problems
