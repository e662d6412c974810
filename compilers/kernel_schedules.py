"""The schedule rules of the decode kernels (applied by stage 5, :mod:`.schedule`): fast CPU loops, dlight on GPUs.

CPU dense (GEMV at batch 1, GEMM otherwise): the reduction over a block's elements is
split into vector lanes and factored out (``rfactor``), so each lane accumulates its
own partial sum; rows are split into groups of four, the groups run in parallel, and
the batch loop sits inside the lane loop so every decoded vector of weights is used
for all batch rows before it is dropped. Codes are read contiguously, which is what
the ``nibble_halves`` and ``six_bit_planes`` layouts are for.
"""

from __future__ import annotations

import functools
import math

import tvm
import tvm_ffi
from tvm import s_tir

from edgekit.simulators.formats import code_group
from edgekit.simulators.layouts import LANES, PACKED

# TVM's own default CUDA target, with the arch given: a bare {"kind": "cuda"} makes TVM query the
# (absent) GPU and warn "Unable to detect CUDA version" on every target it parses; the
# arch is TVM's default, so schedules are unchanged.
GENERIC_CUDA = {"kind": "cuda", "arch": "sm_50"}

KERNEL_ATTR = "edgekit.kernel"  # "dense" or "conv2d": which CPU schedule applies
OPAQUE = 8  # TVM's kOpaque op pattern: FuseOps leaves the kernel alone, so its schedule stays
ROWS_PER_TASK = 4
PARALLEL_MIN_WEIGHTS = 1 << 13  # below this a thread pool launch costs more than it saves


VECTOR_LANES = {"avx512": 16, "avx2": 8}  # float32 lanes of a vector register of each x86 ISA


def vector_isa(target) -> str | None:
    """``"avx512"`` or ``"avx2"`` for an LLVM x86 target with those features (AVX2 with FMA), else None."""
    if target is None:
        return None
    target = tvm.target.Target(target)
    if target.kind.name != "llvm":
        return None
    has = tvm.target.codegen.target_has_features
    if has("avx512f", target):
        return "avx512"
    if has("avx2", target) and has("fma", target):
        return "avx2"
    return None


def add_kernel(bb, func, name: str, attrs: dict | None = None):
    """Add a decode kernel to a Relax BlockBuilder, opaque to fusion; its GlobalVar.

    The kernel loses the ``main`` symbol it was made with, so the BlockBuilder merges
    structurally equal kernels (layers of one shape and format) and the binary holds each once.
    """
    func = func.without_attr("global_symbol").with_attr({"op_pattern": OPAQUE, **(attrs or {})})
    return bb.add_func(func, name)


def dense_lanes(block_size: int, layout: str, code_bits: int) -> int:
    """Vector lanes over a block's elements: 16 for the vector layouts, up to 32 for whole bytes."""
    if layout != PACKED:
        return math.gcd(block_size, LANES)
    codes, nbytes = code_group(code_bits)
    if codes > 1 and nbytes > 1:  # codes straddle bytes (6-bit: four in three): lanes of one byte group
        return min(block_size, codes)
    return next(lanes for lanes in (32, 16, 8, 4, 2, 1) if block_size % lanes == 0)


def schedule_dense_cpu(func, lanes: int, parallel: bool = True):
    """The CPU schedule of ``decode_kernels.dense_kernel``; ``parallel`` spreads row groups over threads."""
    sch = s_tir.Schedule(func)
    dense = sch.get_sblock("dense")
    _, _, _, j = sch.get_loops(dense)
    _, j_lane = sch.split(j, [None, lanes])
    partial = sch.rfactor(j_lane, 2)
    loops = {sch.get(loop).loop_var.name: loop for loop in sch.get_loops(partial)}
    rows_outer, rows_inner = sch.split(loops["o"], [None, ROWS_PER_TASK])
    sch.reorder(rows_outer, rows_inner, loops["b"], loops["j_0"], loops["i"], loops["j_1"])
    if parallel:
        sch.parallel(rows_outer)
    sch.vectorize(loops["j_1"])
    sch.reverse_compute_at(dense, rows_inner)
    return sch.mod["main"]


def schedule_conv2d_cpu(func):
    """Output channels in parallel, the output row's pixels innermost."""
    sch = s_tir.Schedule(func)
    conv = sch.get_sblock("conv2d")
    n, o, y, x, c, ry, rx = sch.get_loops(conv)
    sch.reorder(n, o, y, c, ry, rx, x)
    sch.parallel(sch.fuse(n, o))
    sch.compute_inline(sch.get_sblock("pad"))
    return sch.mod["main"]


def schedule_cpu_kernel(func):
    """One decode kernel from ``lower`` with its CPU schedule, marked as scheduled."""
    if func.attrs[KERNEL_ATTR] == "dense":
        func = schedule_dense_cpu(func, int(func.attrs["edgekit.lanes"]), bool(func.attrs["edgekit.parallel"]))
    else:
        func = schedule_conv2d_cpu(func)
    return func.with_attr("tirx.is_scheduled", True)


def per_structure(schedule_fn):
    """``schedule_fn(func, *args)`` run once per structurally equal ``func`` and ``args`` (TVM objects
    such as targets are compared by structure too): a model's layers share a few shapes, and
    dlight takes a fraction of a second per kernel. The last 256 results are kept."""

    @functools.lru_cache(maxsize=256)
    def keyed(*keys):
        return schedule_fn(*(k.key if isinstance(k, tvm_ffi.StructuralKey) else k for k in keys))

    @functools.wraps(schedule_fn)
    def cached(*args):
        return keyed(*(tvm_ffi.StructuralKey(a) if isinstance(a, tvm_ffi.Object) else a for a in args))

    return cached


@per_structure
def gpu_schedule(func, target):
    """The first of dlight's GPU rules that applies to ``func``; its fallback rule otherwise.

    Some rules' analyses reject reads that span several bytes (FP6 code groups), so a rule
    that raises counts as one that does not apply.
    """
    from tvm.s_tir import dlight as dl

    for rule in (dl.gpu.GEMV(), dl.gpu.Matmul(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(),
                 dl.gpu.Fallback()):
        try:
            with target:
                sch = rule.apply(func, target, False)
        except (AssertionError, tvm.error.InternalError, ValueError):
            continue
        if sch is not None:
            return (sch[0] if isinstance(sch, list) else sch).mod["main"]
    shapes = [list(func.buffer_map[p].shape) for p in func.params if p in func.buffer_map]
    raise ValueError(f"no GPU schedule applies to the kernel with buffers of shapes {shapes}")
