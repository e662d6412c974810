"""The batch-1 row-tile GEMV equals x @ dequantize(W).T for every format it takes, on each x86 vector ISA
this machine has; its element decode equals the simulators' table code for code."""

import numpy as np
import pytest
import torch
import tvm
from tvm import te

from edgekit.compilers import row_tile_gemv as rt
from edgekit.compilers.build import run
from edgekit.compilers.importer import import_torch
from edgekit.compilers.kernel_schedules import vector_isa
from edgekit.compilers.pipeline import compile_for_cpu
from edgekit.compilers.plan import make_plan
from edgekit.compilers.tir_decode import element_value_top, needs_scale_specials
from edgekit.simulators import FORMATS, QuantizedTensor, dequantize, quantize
from edgekit.simulators.reference import pack_codes
from edgekit.targets import tvm_target

from .models import seeded
from .test_compiled_models import assert_float32_close, simulated

HOST = tvm_target("host")
HOST_ISA = vector_isa(HOST)
ISAS = [isa for isa in ("avx2", "avx512") if HOST_ISA == "avx512" or HOST_ISA == isa]
ISA_TARGETS = {"avx512": {"kind": "llvm", "mcpu": "skylake-avx512"}, "avx2": {"kind": "llvm", "mcpu": "haswell"}}
TILED = [name for name, fmt in FORMATS.items() if rt.applies(fmt, rt.tile_height("avx512"), fmt.block_size, "avx512")]
ROWS = rt.tile_height("avx512")  # a whole number of tiles on each ISA
needs_x86 = pytest.mark.skipif(not ISAS, reason="the row-tile GEMV needs an x86 CPU with AVX2 and FMA")


def run_gemv(gemv_kernel, tiles, q: QuantizedTensor, x: np.ndarray, isa: str) -> np.ndarray:
    """``gemv_kernel`` over ``tiles``' layout of ``q``'s codes and scales, as ``lower`` builds it: without the
    scale decode's special cases where no scale code needs them."""
    n, k = q.shape
    codes, scales = tiles(q.codes, q.scales, q.format, isa)
    kernel = gemv_kernel(q.format, n, k, isa, q.tensor_scale, needs_scale_specials(q.format.scale, scales))
    lib = tvm.compile(tvm.IRModule({"main": kernel}), target=tvm.target.Target(ISA_TARGETS[isa]))
    args = [tvm.runtime.tensor(a) for a in (x, codes, scales, np.zeros((1, n), np.float32))]
    lib["main"](*args)
    return args[-1].numpy()


def gemv(q: QuantizedTensor, x: np.ndarray, isa: str) -> np.ndarray:
    return run_gemv(rt.gemv_kernel, rt.tile_rows, q, x, isa)


def test_the_formats_it_takes():
    assert {"mxfp4", "mxint4", "nvfp4", "mxint8", "mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2"} <= set(TILED)
    # 6-bit codes come in groups of three words, sixteen codes, two of them straddling a word boundary;
    # 8-bit integer codes and E5M2's (float16's top byte) one at a time
    formats = ("mxfp4", "mxfp6_e2m3", "mxfp8_e4m3", "mxint8", "mxfp8_e5m2")
    assert [(rt.unit_bits(FORMATS[f]), rt.group_units(FORMATS[f]), rt.codes_per_group(FORMATS[f])) for f in formats] == [
        (32, 1, 8), (32, 3, 16), (32, 1, 4), (8, 1, 1), (8, 1, 1)]


@needs_x86
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", TILED)
def test_quantized_weight(name, isa):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((128, 256)).astype(np.float32) * 0.05
    x = rng.standard_normal((1, 256)).astype(np.float32)
    q = quantize(w, name, axis=-1)
    expected = (x.astype(np.float64) @ dequantize(q).astype(np.float64).T).astype(np.float32)
    assert_float32_close(gemv(q, x, isa), expected)


@needs_x86
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", TILED)
def test_every_code_byte(name, isa):
    """Random codes (every code; NaN and Inf codes in the second half of the rows only) and finite scales."""
    fmt = FORMATS[name]
    rng = np.random.default_rng(1)
    template = quantize(np.ones((ROWS, 4 * fmt.block_size), np.float32), fmt, axis=-1)
    elements = rng.integers(0, 1 << fmt.element.bits, template.shape)
    special = ~np.isfinite(fmt.element.values[elements])
    special[ROWS // 2:] = False
    elements[special] = 0
    codes = pack_codes(elements.astype(np.uint8), fmt.element.bits)
    finite = [s for s in range(256) if np.isfinite(fmt.scale.values[s]) and 2.0**-8 <= fmt.scale.values[s] <= 2.0**8]
    scales = rng.choice(finite, template.scales.shape).astype(np.uint8)
    q = QuantizedTensor(fmt, template.shape, template.axis, codes, scales, template.tensor_scale)
    x = rng.standard_normal((1, q.shape[1])).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        expected = (x.astype(np.float64) @ dequantize(q).astype(np.float64).T).astype(np.float32)
    actual = gemv(q, x, isa)
    assert np.array_equal(np.isnan(actual), np.isnan(expected))
    infinite = np.isinf(expected)
    assert np.array_equal(actual[infinite], expected[infinite])
    assert np.isfinite(expected[0, :ROWS // 2]).all()
    assert_float32_close(actual[np.isfinite(expected)], expected[np.isfinite(expected)])


@pytest.mark.parametrize("nan_codes", [True, False])
@pytest.mark.parametrize("name", [n for n in TILED if FORMATS[n].element.bits == 8])
def test_top_of_word_decode_is_the_table(name, nan_codes):
    """element_value_top on every code, with arbitrary bits below it, gives the decode table's bits
    (without ``nan_codes``, on every code that is not NaN)."""
    elem = FORMATS[name].element
    codes = np.arange(1 << elem.bits, dtype=np.uint32)
    noise = np.random.default_rng(2).integers(0, 1 << (32 - elem.bits), codes.size, dtype=np.uint32)
    words = ((codes << np.uint32(32 - elem.bits)) | noise).view(np.int32)
    inp = te.placeholder((codes.size,), "int32", name="top")
    out = te.compute(inp.shape, lambda i: element_value_top(elem, inp[i], nan_codes), name="value")
    lib = tvm.compile(te.create_prim_func([inp, out]), target="llvm")
    result = tvm.runtime.tensor(np.zeros(codes.size, np.float32))
    lib(tvm.runtime.tensor(words), result)
    expected = elem.values.astype(np.float32)
    nan = np.isnan(expected)
    if nan_codes or elem.inf:
        assert np.array_equal(np.isnan(result.numpy()), nan)
    assert np.array_equal(result.numpy().view(np.uint32)[~nan], expected.view(np.uint32)[~nan])


@pytest.mark.parametrize("isa", ["avx512", "avx2"])
def test_blocks_with_nan_codes_take_the_scales_nan(isa):
    """tile_rows gives a block holding a NaN code the scale's NaN code, and leaves every other scale and
    every code as the codec wrote them, in tiles of the ISA's height; formats without NaN codes keep their scales."""
    fmt = FORMATS["mxfp8_e4m3"]
    q = quantize(np.random.default_rng(3).standard_normal((ROWS, 4 * fmt.block_size)).astype(np.float32),
                 fmt, axis=-1)
    codes = q.codes.copy()
    codes[5, fmt.block_size + 7] = 0xFF  # E4M3's negative NaN, in block 1 of row 5
    tiled_codes, tiled_scales = rt.tile_rows(codes, q.scales, fmt, isa)
    assert tiled_codes.shape == (ROWS // rt.tile_height(isa), 4 * fmt.block_size // 4, rt.tile_height(isa))
    assert rt.scale_nan_code(fmt) == 255
    expected = q.scales.copy()
    expected[5, 1] = 255
    assert np.array_equal(tiled_scales.transpose(0, 2, 1).reshape(expected.shape), expected)
    assert np.array_equal(np.ascontiguousarray(tiled_codes.transpose(0, 2, 1)).view(np.uint8).reshape(codes.shape), codes)
    assert all(rt.scale_nan_code(FORMATS[name]) is None for name in ("mxfp4", "mxint8", "mxfp6_e2m3", "nvfp4"))


def test_scale_specials_are_needed_only_for_codes_their_placement_gets_wrong():
    e8m0 = FORMATS["mxfp4"].scale
    assert not needs_scale_specials(e8m0, np.array([1, 127, 254], np.uint8))
    assert needs_scale_specials(e8m0, np.array([0, 127], np.uint8))  # 2^-127, an FP32 subnormal
    assert needs_scale_specials(e8m0, np.array([255], np.uint8))  # NaN
    e4m3 = FORMATS["nvfp4"].scale  # an element-typed scale: placed under FP32's fields, times 2^120
    assert not needs_scale_specials(e4m3, np.array([0, 1, 56, 126], np.uint8))  # zero, a subnormal, 1.0, 448
    assert needs_scale_specials(e4m3, np.array([127], np.uint8))  # NaN
    assert needs_scale_specials(e4m3, np.array([128 + 56], np.uint8))  # -1.0: the sign bit


def test_only_e5m2_decodes_as_float16():
    """E5M2 codes are float16's top byte (NaN and Inf included), so its kernel converts them as float16."""
    assert [name for name in TILED if rt.half_prefix(FORMATS[name].element)] == ["mxfp8_e5m2"]


def test_e4m3_decodes_two_codes_per_16_bit_shift():
    """E4M3 (no Inf; its NaN carried by the E8M0 scale) places codes under bfloat16's fields, two per shift."""
    assert {isa: rt._Decoder(FORMATS["mxfp8_e4m3"], isa).mode for isa in ("avx2", "avx512")} == {
        "avx2": "halves", "avx512": "halves"}
    assert rt._Decoder(FORMATS["mxfp8_e5m2"], "avx2").mode == "half"  # Inf codes: converted as float16


def test_int8_tables():
    def table(name):
        return rt.int8_table(FORMATS[name].element.values)

    assert table("mxfp4") == ([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], 1)
    assert table("mxint4")[0][8] == -8
    assert table("mxint8") is None  # 256 codes: no 32-entry table
    # E2M3's 32 magnitudes are eighths up to 7.5; E3M2's sixteenths up to 28 do not fit int8
    assert rt.int8_table(rt.magnitudes(FORMATS["mxfp6_e2m3"].element)) == ([m if m < 8 else (8 + m % 8) << (m // 8 - 1)
                                                                            for m in range(32)], 3)
    assert rt.int8_table(rt.magnitudes(FORMATS["mxfp6_e3m2"].element)) is None


def test_bad_shapes_and_isa_are_named():
    fmt = FORMATS["mxfp4"]
    with pytest.raises(ValueError, match="isa must be one of avx512, avx2"):
        rt.gemv_kernel(fmt, 64, 64, "neon")
    with pytest.raises(ValueError, match="multiple of 32 rows"):
        rt.gemv_kernel(fmt, 48, 64, "avx2")
    with pytest.raises(ValueError, match="row_tiles needs a multiple of 64 rows"):
        rt.tile_rows(np.zeros((96, 16), np.uint8), np.zeros((96, 1), np.uint8), fmt, "avx512")
    with pytest.raises(ValueError, match="isa must be one of avx512, avx2"):
        rt.tile_rows(np.zeros((64, 16), np.uint8), np.zeros((64, 1), np.uint8), fmt, "sse2")


def test_targets_without_the_vector_units_take_no_tiles():
    assert vector_isa(None) is None
    assert vector_isa({"kind": "llvm"}) is None  # a generic x86-64: SSE2 only
    assert vector_isa({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72"}) is None
    assert vector_isa({"kind": "llvm", "mcpu": "haswell"}) == "avx2"
    assert vector_isa({"kind": "llvm", "mcpu": "skylake-avx512"}) == "avx512"


@needs_x86
@pytest.mark.parametrize("fmt", ["mxfp4", "nvfp4", "mxint8", "mxfp6_e2m3"])
def test_compile_for_this_cpu_takes_tiles_at_batch_one(fmt):
    """A 128 -> 64 -> 10 MLP at batch 1: the 64-row layer takes the row-tile GEMV, the 10-row head the
    dense kernel, and the model equals PyTorch on the simulated weights; at batch 2 no layer takes it."""
    model = seeded(lambda: torch.nn.Sequential(torch.nn.Linear(128, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)))
    plan = make_plan(model, fmt)
    for batch, layout in ((1, rt.LAYOUT), (2, None)):
        x = torch.randn(batch, 128, generator=torch.Generator().manual_seed(batch))
        executable, lowered = compile_for_cpu(import_torch(model, (x,)), plan, HOST)
        layouts = {layer: record.layout for layer, record in lowered.layers.items()}
        assert (layouts["0"] == rt.LAYOUT) == (layout == rt.LAYOUT), layouts
        assert layouts["2"] != rt.LAYOUT
        with torch.no_grad():
            assert_float32_close(run(executable, [x.numpy()])[0], simulated(model, fmt)(x).numpy())
