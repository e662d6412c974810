"""LiftQuant kernels: the bit-exact decode, the input rotation and the fused decode-GEMV.

They read a :class:`~edgekit.simulators.liftquant.LiftQuantTensor` as stored: the packed
codes of :mod:`edgekit.simulators.liftquant_layout` (one little-endian bitstream per
row), float16 row scales, E4M3 group-scale codes, float16 input multipliers, the
rotation's signs as bits and its dense factor in float32. Bits are read with integer
operations (``(codes[n, t >> 3] >> (t & 7)) & 1``), so one kernel serves LLVM and CUDA.

* :func:`decode_kernel`: ``W'`` (N, K_pad), computed by exactly the float32 operations
  of the Numba decoder, in the same order: it must equal it bit for bit. Its sums add
  selected values and its one product feeds no sum, so no FMA contraction (nvcc's
  default) can change a bit on CUDA either.
* :func:`rotate_kernel`: ``x' = pad(H (x * m))``: input multipliers, the signs, the
  dense factor ``Q_q`` and a fast Walsh-Hadamard transform of order p in log2(p)
  butterfly stages (no p x p matrix is stored).
* :func:`gemv_kernel`: ``Y = X' W'^T`` for a batch of rotated rows, without decoded
  weights. The lifted activation ``z[a, j*D + i] = sum_k M[k, i] x'[a, j*d + k]`` lies
  along the row's bitstream (bit t of every row multiplies z[t]), and with ``c = 2B - 1``
  ``y[a, n] = row_scale[n] * sum_g group_scale[n, g] * (2 * sum_{t in g} B[n, t] z[a, t] - zsum[a, g])``,
  where ``zsum`` is shared by every row: a set bit selects its ``z``, nothing is multiplied.

Codes come in the simulators' ``packed`` layout or ``bytes_major`` (the same bytes
transposed, :func:`transpose_codes`). :func:`schedule_cpu` vectorizes ``bytes_major``
over 16 rows: one load gives a byte of each, and each bit is a mask test and a masked
add of one broadcast ``z`` (AVX-512: ``vptestmb`` and a masked move/add). On CUDA the
GEMV gets dlight's rules through ``build.gpu_schedule``, the rotation :func:`schedule_rotate_gpu`. :func:`emit_layer` puts a layer's two
kernels into a Relax module; ``lower`` uses it for LiftQuant plan entries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import s_tir, te, tirx

from edgekit.simulators.formats import LiftQuantFormat
from edgekit.simulators.liftquant import LiftQuantTensor
from edgekit.simulators.liftquant_layout import row_bytes

from .build import gpu_schedule
from .schedules import add_kernel
from .tir_decode import scale_value, u32

BYTE_BITS = 8
ROWS_PER_TASK = 4


def _bit(codes, n, t):
    """Bit ``t`` of row ``n``'s bitstream, as uint32 0 or 1."""
    byte = tirx.Cast("uint32", codes[n, t >> 3])
    return (byte >> tirx.Cast("uint32", t & 7)) & u32(1)


def _group_bits(fmt: LiftQuantFormat, chunks: int, group_size: int | None) -> int:
    """Bits of one group of a row (the whole padded row without groups); a whole number of bytes."""
    if group_size is None:
        return row_bytes(chunks, fmt.lifted) * BYTE_BITS
    bits = group_size // fmt.chunk * fmt.lifted
    if bits % BYTE_BITS:
        raise ValueError(f"the fused kernel reads whole bytes per group: group_size={group_size} gives "
                         f"{bits} code bits per group at {fmt.label}; pick a group_size whose "
                         f"{group_size // fmt.chunk} x {fmt.lifted} bits are a multiple of 8, or no group scales")
    return bits


def _placeholders(fmt: LiftQuantFormat, rows: int, chunks: int, group_size: int | None):
    codes = te.placeholder((rows, row_bytes(chunks, fmt.lifted)), "uint8", name="codes")
    matrix = te.placeholder((fmt.chunk, fmt.lifted), "float32", name="matrix")
    row_scale = te.placeholder((rows,), fmt.row_scale, name="row_scale")
    groups = None
    if group_size is not None:
        groups = te.placeholder((rows, -(-chunks * fmt.chunk // group_size)), "uint8", name="group_scale")
    return codes, matrix, row_scale, groups


def decode_kernel(fmt: LiftQuantFormat, rows: int, chunks: int, group_size: int | None = None):
    """``W'`` (rows, chunks * d) float32 from packed codes: the Numba decoder's arithmetic, in its order.

    ``acc = +0.0; acc = acc + (M[k, i] if B[n, j, i] else -M[k, i])`` for i = 0 .. D-1, then
    ``acc * (row_scale * group_scale)`` with the scale product in float32.
    """
    d, D = fmt.chunk, fmt.lifted
    codes, matrix, row_scale, groups = _placeholders(fmt, rows, chunks, group_size)
    i = te.reduce_axis((0, D), name="i")
    acc = te.compute((rows, chunks * d), lambda n, col: te.sum(tirx.Select(
        _bit(codes, n, (col // d) * D + i) == u32(1), matrix[col % d, i], -matrix[col % d, i]), axis=i), name="acc")

    def scaled(n, col):
        scale = tirx.Cast("float32", row_scale[n])
        if groups is not None:
            scale = scale * scale_value(fmt.group_scale, groups[n, col // group_size])
        return acc[n, col] * scale

    out = te.compute((rows, chunks * d), scaled, name="decode")
    return te.create_prim_func([codes, matrix, row_scale, *([groups] if groups is not None else []), out])


def rotate_kernel(width: int, padded: int, power: int, input_scales: bool, batch: int = 1):
    """``x' = pad(H (x * m))`` for ``batch`` activation rows of ``width``; see the module docstring.

    Inputs: x (batch, width) float32, [m (width,) float16], sign bits (ceil(width / 8),) uint8
    (bit k set: sign -1), the factor (q, q) float32 (q = width / power; 1 x 1 when absent).
    """
    q = width // power
    x = te.placeholder((batch, width), "float32", name="x")
    m = te.placeholder((width,), "float16", name="input_scale") if input_scales else None
    sign_bits = te.placeholder((-(-width // BYTE_BITS),), "uint8", name="sign_bits")
    factor = te.placeholder((q, q), "float32", name="factor")

    def signed(a, r, c):
        k = r * power + c
        v = x[a, k] * tirx.Cast("float32", m[k]) if m is not None else x[a, k]
        negative = (tirx.Cast("uint32", sign_bits[k >> 3]) >> tirx.Cast("uint32", k & 7)) & u32(1)
        return tirx.Select(negative == u32(1), -v, v)

    grid = te.compute((batch, q, power), signed, name="signed")
    if q > 1:
        b = te.reduce_axis((0, q), name="b")
        grid = te.compute((batch, q, power), lambda a, r, c: te.sum(factor[r, b] * grid[a, b, c], axis=b),
                          name="factor_mul")
    h = 1
    while h < power:
        grid = _butterfly(grid, batch, q, power, h)
        h *= 2
    norm = np.float32(1.0 / math.sqrt(power))
    out = te.compute((batch, padded), lambda a, k: tirx.Select(
        k < width, grid[a, tirx.min(k, width - 1) // power, tirx.min(k, width - 1) % power] * norm,
        tirx.const(0.0, "float32")), name="rotated")
    return te.create_prim_func([x, *([m] if m is not None else []), sign_bits, factor, out])


def _butterfly(grid, batch: int, q: int, power: int, h: int):
    """One Walsh-Hadamard stage: (a, b) -> (a + b, a - b) for the pairs at distance h (partner ``c ^ h``)."""
    def stage(a, r, c):
        partner = grid[a, r, c ^ h]
        return tirx.Select((c & h) == 0, grid[a, r, c] + partner, partner - grid[a, r, c])

    return te.compute((batch, q, power), stage, name=f"wht{h}")


def _lift(matrix, xr, fmt: LiftQuantFormat, chunks: int, length: int):
    """``z[a, t] = sum_k M[k, t % D] x'[a, (t // D) * d + k]`` for t < chunks * D, zero up to ``length``."""
    d, D = fmt.chunk, fmt.lifted
    k = te.reduce_axis((0, d), name="k")
    last = chunks * d - 1  # a clamped index, so the unselected side of the Select reads in bounds

    def lift(a, t):
        inside = matrix[k, t % D] * xr[a, tirx.min((t // D) * d + k, last)]
        return te.sum(tirx.Select(t < chunks * D, inside, tirx.const(0.0, "float32")), axis=k)

    return te.compute((xr.shape[0], length), lift, name="lift")


def _zsum(z, n_groups: int, group_bits: int):
    """``zsum[g]``: the lifted values of group g summed, shared by every row."""
    r = te.reduce_axis((0, group_bits), name="r")
    return te.compute((z.shape[0], n_groups), lambda a, g: te.sum(z[a, g * group_bits + r], axis=r), name="zsum")


def _combine(ones, zsum, row_scale, groups, fmt: LiftQuantFormat, rows: int, n_groups: int):
    """``y[a, n] = row_scale[n] * sum_g group_scale[n, g] * (2 * ones[a, n, g] - zsum[a, g])``."""
    g = te.reduce_axis((0, n_groups), name="g")
    batch = ones.shape[0]

    def combine(a, n):
        term = np.float32(2.0) * ones[a, n, g] - zsum[a, g]
        if groups is not None:
            term = term * scale_value(fmt.group_scale, groups[n, g])
        return te.sum(term, axis=g)

    acc = te.compute((batch, rows), combine, name="combine")
    return te.compute((batch, rows), lambda a, n: acc[a, n] * tirx.Cast("float32", row_scale[n]), name="gemv")


PACKED = "packed"  # the simulators' (N, row_bytes): a row's bitstream contiguous
BYTES_MAJOR = "bytes_major"  # (row_bytes, N): byte b of every row contiguous, for row-vector kernels
LAYOUTS = (PACKED, BYTES_MAJOR)


def gemv_kernel(fmt: LiftQuantFormat, rows: int, chunks: int, group_size: int | None = None,
                layout: str = PACKED, batch: int = 1):
    """``y`` (batch, rows) = ``x' W'^T`` from packed codes and rotated, padded activations ``x'`` (batch, chunks * d).

    ``ones[n, g] = sum_{t in g} B[n, t] z[t]`` is a reduction over (byte, bit in byte) in
    which a set bit selects ``z[t]``. ``layout``: ``packed`` (the simulators' bytes) or
    ``bytes_major`` (the same bytes transposed, :func:`transpose_codes`), where a
    vector of rows reads one byte each from one contiguous load.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    _, matrix, row_scale, groups = _placeholders(fmt, rows, chunks, group_size)
    total_bytes = row_bytes(chunks, fmt.lifted)
    if layout == PACKED:
        codes = te.placeholder((rows, total_bytes), "uint8", name="codes")
    else:
        codes = te.placeholder((total_bytes, rows), "uint8", name="codes_t")
    xr = te.placeholder((batch, chunks * fmt.chunk), "float32", name="x_rotated")
    group_bits = _group_bits(fmt, chunks, group_size)
    group_bytes = group_bits // BYTE_BITS
    n_groups = -(-total_bytes // group_bytes) if group_size is None else groups.shape[1]
    z = _lift(matrix, xr, fmt, chunks, n_groups * group_bits)
    zsum = _zsum(z, n_groups, group_bits)
    b = te.reduce_axis((0, group_bytes), name="b")
    u = te.reduce_axis((0, BYTE_BITS), name="u")

    def dot(a, n, g):
        # a last group may run past the row's bytes: the clamped byte is read, but z is zero there
        byte = g * group_bytes + b
        clamped = tirx.min(byte, total_bytes - 1)
        code = codes[n, clamped] if layout == PACKED else codes[clamped, n]
        bit = (tirx.Cast("uint32", code) >> tirx.Cast("uint32", u)) & u32(1)
        return te.sum(tirx.Select(bit != u32(0), z[a, byte * BYTE_BITS + u], tirx.const(0.0, "float32")),
                      axis=[b, u])

    ones = te.compute((batch, rows, n_groups), dot, name="ones")
    y = _combine(ones, zsum, row_scale, groups, fmt, rows, n_groups)
    inputs = [xr, codes, matrix, row_scale, *([groups] if groups is not None else [])]
    return te.create_prim_func([*inputs, y])


def transpose_codes(codes: np.ndarray) -> np.ndarray:
    """The ``bytes_major`` layout: byte b of every row contiguous, (row_bytes, N).

    The same bytes as the simulators' (N, row_bytes) layout, transposed: its own inverse.
    """
    return np.ascontiguousarray(np.asarray(codes, np.uint8).T)


ROW_LANES = 16  # rows per vector in the bytes_major schedule (AVX-512: 16 float32 lanes)
ROW_VECTORS = 8  # vectors of rows that share each byte's lifted values


def schedule_cpu(func, layout: str = PACKED, parallel: bool = True):
    """CPU schedule of :func:`gemv_kernel`.

    ``packed``: row groups in parallel, the 8 bits of a byte as vector lanes (the byte
    reduction factored over its bit lanes with ``rfactor``). ``bytes_major``: a vector of
    16 rows reads one byte each from one load; each bit is a masked add of the same
    lifted value into 16 row sums, several vectors of rows per byte so the adds overlap.
    The O(rows) combination runs after them.
    """
    sch = s_tir.Schedule(func)
    ones = sch.get_sblock("ones")
    if layout == BYTES_MAJOR:
        a, n, g, b, u = sch.get_loops(ones)
        tile, vec, lanes = sch.split(n, [None, ROW_VECTORS, ROW_LANES])
        sch.reorder(tile, a, g, b, u, vec, lanes)
        sch.vectorize(lanes)  # vectorize and parallel before decompose_reduction: their checks want the init
        sch.unroll(vec)
        if parallel:
            sch.parallel(tile)
        sch.decompose_reduction(ones, b)
        return sch.mod["main"]
    *_, u = sch.get_loops(ones)
    partial = sch.rfactor(u, 3)
    loops = {sch.get(loop).loop_var.name: loop for loop in sch.get_loops(partial)}
    rows_outer, rows_inner = sch.split(loops["n"], [None, ROWS_PER_TASK])
    sch.reorder(rows_outer, rows_inner, loops["a"], loops["g"], loops["b"], loops["u"])
    sch.vectorize(loops["u"])
    sch.reverse_compute_at(ones, rows_inner)
    if parallel:
        sch.parallel(rows_outer)
    return sch.mod["main"]


GPU_THREADS = 256


def schedule_rotate_gpu(func, threads: int = GPU_THREADS):
    """CUDA schedule of :func:`rotate_kernel`: every stage's elements over blocks of ``threads`` threads.

    dlight's rules try to inline the butterfly stages into one another, and each stage
    reads its input twice, so their analysis grows as 2^log2(p) (minutes at p = 256):
    the stages stay separate here, one launch each, as they are on the CPU.
    """
    sch = s_tir.Schedule(func)
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        spatial = sum(1 for v in sch.get(block).iter_vars if v.iter_type == tirx.IterVar.DataPar)
        fused = sch.fuse(*sch.get_loops(block)[:spatial])
        outer, inner = sch.split(fused, [None, threads])
        sch.bind(outer, "blockIdx.x")
        sch.bind(inner, "threadIdx.x")
    return sch.mod["main"]


@dataclass(frozen=True)
class LayerKernels:
    """One LiftQuant layer as two kernels and their constant inputs: rotate(x, *rotate_args), gemv(x', *gemv_args)."""

    rotate: object  # tirx.PrimFunc
    rotate_args: list  # NumPy arrays after x: [input multipliers], sign bits, factor
    gemv: object  # tirx.PrimFunc
    gemv_args: list  # NumPy arrays after x': codes in ``layout``, matrix, row scales, [group scale codes]
    layout: str
    rows: int
    width: int
    padded: int


def layer_kernels(q: LiftQuantTensor, layout: str = PACKED, batch: int = 1) -> LayerKernels:
    """The unscheduled kernels of ``Y = X W_hat^T`` (X: batch rows) for a stored tensor, and their inputs."""
    if q.rotation is None:
        raise ValueError("the LiftQuant kernels take rotated tensors (quantize(..., rotate=True))")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    rows, width = q.shape
    rot = q.rotation
    padded = q.chunks * q.format.chunk
    sign_bits = np.packbits(rot.signs < 0, bitorder="little")
    factor = rot.factor.astype(np.float32) if rot.factor_size > 1 else np.ones((1, 1), np.float32)
    rotate_args = ([q.input_scales.astype(np.float16)] if q.input_scales is not None else []) + [sign_bits, factor]
    codes = q.codes if layout == PACKED else transpose_codes(q.codes)
    gemv_args = [codes, q.codebook.matrix, q.row_scales.astype(q.format.row_scale)]
    if q.group_scales is not None:
        gemv_args.append(q.group_scales)
    return LayerKernels(rotate_kernel(width, padded, rot.power, q.input_scales is not None, batch), rotate_args,
                        gemv_kernel(q.format, rows, q.chunks, q.group_size, layout, batch), gemv_args, layout,
                        rows, width, padded)


def layer_module(q: LiftQuantTensor, device: str = "cpu", target=None):
    """A Relax module whose ``main(x (1, K)) -> (1, N)`` computes ``x @ W_hat.T`` from the stored tensor.

    ``lower`` builds the same two calls into a model with :func:`emit_layer`.
    """
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, q.shape[1]), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(emit_layer(bb, x, q, device, target, "liftquant"))
        bb.emit_func_output(out)
    return bb.get()


def emit_layer(bb, x, q: LiftQuantTensor, device: str, target=None, name: str = "liftquant"):
    """Emit ``x @ W_hat.T`` for a (batch, K) Relax tensor ``x`` into ``bb``: two ``call_tir``, constants bound.

    On ``cpu`` the GEMV reads the ``bytes_major`` layout and carries its CPU schedule; on
    ``cuda`` it reads the simulators' bytes, the GEMV gets dlight's rules
    (``build.gpu_schedule``) for ``target`` (default: a generic CUDA target) and the
    rotation :func:`schedule_rotate_gpu`.
    """
    from tvm import relax

    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be cpu or cuda, got {device!r}")
    batch = int(x.ty.shape[0])
    layout = BYTES_MAJOR if device == "cpu" else PACKED
    k = layer_kernels(q, layout, batch)
    if device == "cpu":
        rotate, gemv = k.rotate, schedule_cpu(k.gemv, layout)
    else:
        target = tvm.target.Target(target) if target is not None else tvm.target.Target({"kind": "cuda"})
        rotate, gemv = schedule_rotate_gpu(k.rotate), gpu_schedule(k.gemv, target)
    # opaque to operator fusion, so the schedules reach the binary
    rotate_gv = add_kernel(bb, rotate, f"{name}_rotate", {"tirx.is_scheduled": device == "cuda"})
    gemv_gv = add_kernel(bb, gemv, f"{name}_gemv", {"tirx.is_scheduled": True})
    xr = bb.emit(relax.call_tir(rotate_gv, [x, *map(relax.const, k.rotate_args)],
                                relax.TensorType((batch, k.padded), "float32")))
    return relax.call_tir(gemv_gv, [xr, *map(relax.const, k.gemv_args)], relax.TensorType((batch, k.rows), "float32"))
