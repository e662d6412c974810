"""LiftQuant kernels: the bit-exact decode, the input rotation and the fused decode-GEMV.

They read a :class:`~edgekit.simulators.liftquant.LiftQuantTensor` as stored: the packed
codes of :mod:`edgekit.simulators.liftquant.layout` (one little-endian bitstream per
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
add of one broadcast ``z`` (AVX-512: ``vptestmb`` and a masked move/add). On AVX-512
targets :func:`cpu_gemv` reads each nibble instead: per call, a 16-entry table of partial
sums per 4 lifted values (shared by all rows), and per 16 rows and byte two ``vpermps``
lookups and two adds, about a third of the bit form's instructions. On CUDA the
GEMV gets dlight's rules through ``build.gpu_schedule``, the rotation :func:`schedule_rotate_gpu`. :func:`emit_layer` puts a layer's two
kernels into a Relax module; ``lower`` uses it for LiftQuant plan entries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import s_tir, te, tirx

from edgekit.simulators.formats import LiftQuantFormat, get_liftquant_format
from edgekit.simulators.liftquant import LiftQuantTensor
from edgekit.simulators.liftquant.layout import row_bytes

from .kernel_schedules import GENERIC_CUDA, VECTOR_LANES, add_kernel, gpu_schedule, per_structure, vector_isa
from .tir_decode import i32, scale_value, u32

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
    """``z[a, t] = sum_k M[k, t % D] x'[a, (t // D) * d + k]`` for t < chunks * D, zero up to ``length``.

    Computed per chunk (``lift[a, j, i]``, D contiguous sums: vector lanes) and then laid flat.
    """
    d, D = fmt.chunk, fmt.lifted
    k = te.reduce_axis((0, d), name="k")
    lift = te.compute((xr.shape[0], chunks, D), lambda a, j, i: te.sum(matrix[k, i] * xr[a, j * d + k], axis=k),
                      name="lift")
    last = chunks * D - 1  # a clamped index, so the unselected side of the Select reads in bounds
    return te.compute((xr.shape[0], length), lambda a, t: tirx.Select(
        t < chunks * D, lift[a, tirx.min(t, last) // D, tirx.min(t, last) % D], tirx.const(0.0, "float32")),
        name="lifted")


def _schedule_lift(sch):
    """The lift's D sums of a chunk as vector lanes, the reduction over d outside them."""
    block = sch.get_sblock("lift")
    *_, i, k = sch.get_loops(block)
    sch.reorder(k, i)
    sch.vectorize(i)  # before decompose_reduction, as in schedule_cpu
    sch.decompose_reduction(block, k)


def _zsum(z, n_groups: int, group_bits: int):
    """``zsum[g]``: the lifted values of group g summed, shared by every row."""
    r = te.reduce_axis((0, group_bits), name="r")
    return te.compute((z.shape[0], n_groups), lambda a, g: te.sum(z[a, g * group_bits + r], axis=r), name="zsum")


def _combine(ones, zsum, row_scale, groups, fmt: LiftQuantFormat, rows: int, n_groups: int, batch: int):
    """``y[a, n] = row_scale[n] * sum_g group_scale[n, g] * (2 * ones(a, n, g) - zsum[a, g])``."""
    g = te.reduce_axis((0, n_groups), name="g")

    def combine(a, n):
        term = np.float32(2.0) * ones(a, n, g) - zsum[a, g]
        if groups is not None:
            term = term * scale_value(fmt.group_scale, groups[n, g])
        return te.sum(term, axis=g)

    acc = te.compute((batch, rows), combine, name="combine")
    return te.compute((batch, rows), lambda a, n: acc[a, n] * tirx.Cast("float32", row_scale[n]), name="gemv")


NIBBLE_BITS = 4
TABLE_SIZE = 1 << NIBBLE_BITS


def _nibble_tables(z):
    """``lut[a, p, m] = sum_{i: bit i of m set} z[a, 4p + i]``: the 16 partial sums of each nibble of
    lifted values, built once per call and shared by every row (T-MAC's table lookup)."""
    def entry(a, p, m):
        terms = [tirx.Select((m >> i) & 1 == 1, z[a, p * NIBBLE_BITS + i], tirx.const(0.0, "float32"))
                 for i in range(NIBBLE_BITS)]
        return (terms[0] + terms[1]) + (terms[2] + terms[3])

    return te.compute((z.shape[0], z.shape[1] // NIBBLE_BITS, TABLE_SIZE), entry, name="lut")


# rows of one parallel task of the table GEMV: each byte position is 512 contiguous bytes (the
# bytes_major rows are 4 KB apart, too far for the hardware prefetcher), and the task's sums stay in L1
TABLE_ROW_BLOCK = 512
TABLE_PREFETCH = 4  # byte positions ahead that the table GEMV prefetches
CACHE_LINE = 64


def _table_sums(lut, codes, out, group_bytes: int, total_bytes: int, isa: str):
    """``out[a, g, n] = sum_{bytes b of group g} lut[a, 2b, low nibble] + lut[a, 2b + 1, high nibble]``.

    For a vector of rows at once: the bytes_major load gives a byte of each, and each nibble
    indexes its 16-entry table held in registers (LLVM has no portable variable permute, and a
    gather is several times slower): one ``vpermps`` of the whole table on AVX-512; on AVX2,
    whose ``vpermps`` holds 8 entries, one of each half and a ``vblendvps`` on the nibble's
    top bit. Returns the TIR statement.
    """
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    lanes = VECTOR_LANES[isa]
    batch, n_groups, rows = (int(v) for v in out.shape)
    block = math.gcd(rows, TABLE_ROW_BLOCK)
    f32 = f"float32x{lanes}"
    zero = tirx.Broadcast(tirx.const(0.0, "float32"), lanes)

    def table(a, position):
        if isa == "avx512":
            return lut.vload([a, position, 0], f32)
        return lut.vload([a, position, 0], f32), lut.vload([a, position, lanes], f32)

    def lookup(values, index):  # the nibble in the low 4 bits; the permutes read only those
        if isa == "avx512":
            return tirx.call_llvm_pure_intrin(f32, "llvm.x86.avx512.permvar.sf.512", values, index)
        low, high = (tirx.call_llvm_pure_intrin(f32, "llvm.x86.avx2.permps", half, index) for half in values)
        top = tirx.reinterpret(f32, index << i32(32 - NIBBLE_BITS, lanes))  # the nibble's bit 3 as the sign
        return tirx.call_llvm_pure_intrin(f32, "llvm.x86.avx.blendv.ps.256", low, high, top)

    with IRBuilder() as ib, T.parallel(0, rows // block) as tile, T.serial(0, batch) as a, \
            T.serial(0, n_groups) as g:
        with T.serial(0, block // lanes) as v:
            T.buffer_store(out, zero, [a, g, tirx.Ramp(tile * block + v * lanes, 1, lanes)])
        with T.serial(0, group_bytes) as b:
            byte = g * group_bytes + b
            low, high = table(a, 2 * byte), table(a, 2 * byte + 1)
            ahead = tirx.min(byte + TABLE_PREFETCH, total_bytes - 1)
            for line in range(0, block, CACHE_LINE):  # read, keep in all levels, data
                T.evaluate(tirx.call_llvm_intrin("void", "llvm.prefetch.p0", tirx.address_of(
                    codes[ahead, tile * block + line]), *(tirx.const(v, "int32") for v in (0, 3, 1))))
            with T.serial(0, block // lanes) as v:
                n = tile * block + v * lanes
                # a last group may run past the row's bytes: its tables are zero there
                code = codes.vload([tirx.min(byte, total_bytes - 1), n], f"uint8x{lanes}")
                index = tirx.Cast(f"int32x{lanes}", code)
                T.buffer_store(out, out.vload([a, g, n], f32) + (lookup(low, index) + lookup(
                    high, index >> i32(NIBBLE_BITS, lanes))), [a, g, tirx.Ramp(n, 1, lanes)])
    return ib.get()


PACKED = "packed"  # the simulators' (N, row_bytes): a row's bitstream contiguous
BYTES_MAJOR = "bytes_major"  # (row_bytes, N): byte b of every row contiguous, for row-vector kernels
LAYOUTS = (PACKED, BYTES_MAJOR)


def gemv_kernel(fmt: LiftQuantFormat, rows: int, chunks: int, group_size: int | None = None,
                layout: str = PACKED, batch: int = 1, tables: str | None = None):
    """``y`` (batch, rows) = ``x' W'^T`` from packed codes and rotated, padded activations ``x'`` (batch, chunks * d).

    ``ones[n, g] = sum_{t in g} B[n, t] z[t]`` is a reduction over (byte, bit in byte) in
    which a set bit selects ``z[t]``. ``layout``: ``packed`` (the simulators' bytes) or
    ``bytes_major`` (the same bytes transposed, :func:`transpose_codes`), where a
    vector of rows reads one byte each from one contiguous load.

    ``tables`` (an x86 ISA of :data:`VECTOR_LANES`; ``bytes_major``, rows a multiple of its lanes):
    ``ones`` by nibble tables instead, :func:`_nibble_tables` and :func:`_table_sums`; x86 code,
    already scheduled.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if tables is not None and tables not in VECTOR_LANES:
        raise ValueError(f"tables must be None or one of {', '.join(VECTOR_LANES)}, got {tables!r}")
    if tables and (layout != BYTES_MAJOR or rows % VECTOR_LANES[tables]):
        raise ValueError(f"tables={tables!r} takes layout='bytes_major' and rows a multiple of "
                         f"{VECTOR_LANES[tables]}, got layout={layout!r}, rows={rows}")
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
    if tables:
        lut = _nibble_tables(z)
        sums = te.extern((batch, n_groups, rows), [lut, codes], lambda ins, outs: _table_sums(
            *ins, *outs, group_bytes, total_bytes, tables), name="ones", dtype="float32")
        y = _combine(lambda a, n, g: sums[a, g, n], zsum, row_scale, groups, fmt, rows, n_groups, batch)
        inputs = [xr, codes, matrix, row_scale, *([groups] if groups is not None else [])]
        return te.create_prim_func([*inputs, y])
    b = te.reduce_axis((0, group_bytes), name="b")
    u = te.reduce_axis((0, BYTE_BITS), name="u")

    def dot(a, n, g):
        # a last group may run past the row's bytes: the clamped byte is read, but z is zero there
        byte = g * group_bytes + b
        clamped = tirx.min(byte, total_bytes - 1)
        code = codes[n, clamped] if layout == PACKED else codes[clamped, n]
        bit = code & (tirx.const(1, "uint8") << tirx.Cast("uint8", u))  # byte-wide: one vptestmb per 16 rows
        return te.sum(tirx.Select(bit != tirx.const(0, "uint8"), z[a, byte * BYTE_BITS + u],
                                  tirx.const(0.0, "float32")), axis=[b, u])

    ones = te.compute((batch, rows, n_groups), dot, name="ones")
    y = _combine(lambda a, n, g: ones[a, n, g], zsum, row_scale, groups, fmt, rows, n_groups, batch)
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
    The O(rows) combination runs after them. A kernel made with ``tables`` has its table
    sums scheduled already: its lift and tables are vectorized here.
    """
    sch = s_tir.Schedule(func)
    _schedule_lift(sch)
    if _has_block(sch, "lut"):  # the table kernel: its table sums come scheduled
        *_, m = sch.get_loops(sch.get_sblock("lut"))
        sch.vectorize(m)
        return sch.mod["main"]
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


def _has_block(sch, name: str) -> bool:
    return any(sch.get(b).name_hint == name for b in sch.get_child_blocks(sch.get_sblock("root")))


GEMV_ATTR = "edgekit.liftquant_gemv"  # a CPU GEMV's [format, rows, chunks, group size or 0, batch]


def cpu_gemv(fmt: LiftQuantFormat, rows: int, chunks: int, group_size: int | None, batch: int, target=None):
    """The scheduled ``bytes_major`` GEMV for a CPU ``target``: nibble tables on x86 with AVX-512 or
    AVX2 (rows a multiple of the vector's lanes), bit selects elsewhere (any target, or None when it
    is not known yet)."""
    isa = vector_isa(target)
    tables = isa if isa in VECTOR_LANES and rows % VECTOR_LANES[isa] == 0 else None
    func = schedule_cpu(gemv_kernel(fmt, rows, chunks, group_size, BYTES_MAJOR, batch, tables), BYTES_MAJOR)
    return func.with_attr(GEMV_ATTR, [fmt.name, rows, chunks, group_size or 0, batch])


def specialize_cpu_gemv(func, target):
    """``func`` (a :func:`cpu_gemv`, its attributes kept) rebuilt for ``target``: the same inputs and output."""
    name, rows, chunks, group_size, batch = func.attrs[GEMV_ATTR]
    fmt = get_liftquant_format(str(name))
    new = cpu_gemv(fmt, int(rows), int(chunks), int(group_size) or None, int(batch), target)
    return new.without_attr("global_symbol").with_attr({k: v for k, v in func.attrs.items() if k != "global_symbol"})


GPU_THREADS = 256


@per_structure
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
    """A Relax module whose ``main(x (1, K)) -> (1, N)`` computes ``x @ W_hat.T`` from the stored tensor
    (kernels for ``target``, see :func:`emit_layer`).

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

    On ``cpu`` the GEMV reads the ``bytes_major`` layout and carries its CPU schedule
    (:func:`cpu_gemv` for ``target``; ``build.schedule`` specializes it later when
    ``target`` is not known here); on ``cuda`` it reads the simulators' bytes, the GEMV gets dlight's rules
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
        rotate, gemv = k.rotate, cpu_gemv(q.format, k.rows, q.chunks, q.group_size, batch, target)
    else:
        target = tvm.target.Target(target if target is not None else GENERIC_CUDA)
        rotate, gemv = schedule_rotate_gpu(k.rotate), gpu_schedule(k.gemv, target)
    # opaque to operator fusion, so the schedules reach the binary
    rotate_gv = add_kernel(bb, rotate, f"{name}_rotate", {"tirx.is_scheduled": device == "cuda"})
    gemv_gv = add_kernel(bb, gemv, f"{name}_gemv", {"tirx.is_scheduled": True})
    xr = bb.emit(relax.call_tir(rotate_gv, [x, *map(relax.const, k.rotate_args)],
                                relax.TensorType((batch, k.padded), "float32")))
    return relax.call_tir(gemv_gv, [xr, *map(relax.const, k.gemv_args)], relax.TensorType((batch, k.rows), "float32"))
