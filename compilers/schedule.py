"""Stage 5, schedule: the decode kernels get their loop schedules before the build.

The kernels are opaque to operator fusion (:mod:`.kernel_schedules` marks them), so what
this stage gives them reaches the binary; ``tvm.compile`` (stage 6) legalizes, fuses and,
on CUDA, schedules every other operator.
"""

from __future__ import annotations

import tvm
from tvm import tirx

from .kernel_schedules import GENERIC_CUDA, KERNEL_ATTR, gpu_schedule, schedule_cpu_kernel, vector_isa
from .liftquant_kernels import GEMV_ATTR, specialize_cpu_gemv


def schedule(mod, device: str, target=None):
    """Schedule the decode kernels: vector CPU schedules, or dlight's GPU rules on CUDA.

    The kernels are opaque to operator fusion, so these schedules reach the binary;
    ``tvm.compile`` legalizes, fuses and (on CUDA) schedules every other operator.
    """
    kernels = {gv: func for gv, func in mod.functions_items()
               if isinstance(func, tirx.PrimFunc) and func.attrs and KERNEL_ATTR in func.attrs}
    if device == "cpu":
        for gv, func in kernels.items():
            mod[gv] = schedule_cpu_kernel(func)
        if vector_isa(target) is not None:  # LiftQuant GEMVs were lowered before the target was known
            for gv, func in list(mod.functions_items()):
                if isinstance(func, tirx.PrimFunc) and func.attrs and GEMV_ATTR in func.attrs:
                    mod[gv] = specialize_cpu_gemv(func, target)
        return mod
    target = tvm.target.Target(target if target is not None else GENERIC_CUDA)
    for gv, func in kernels.items():
        mod[gv] = gpu_schedule(func, target).with_attr("tirx.is_scheduled", True)
    return mod
