"""The MX-dot GEMV (input quantized to MXINT8 in the kernel, sums in integers) equals the MX dot product
of the codec's quantized input and weight, ``mx_matmul``, bit for bit, on each x86 vector ISA this
machine has; through ``lower`` and ``edgekit compile --activations mxint8`` too."""

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from edgekit.cli import main
from edgekit.compilers import mx_dot_gemv as md
from edgekit.compilers import row_tile_gemv as rt
from edgekit.compilers.build import run
from edgekit.compilers.importer import import_torch
from edgekit.compilers.lower import ACTIVATIONS, lower
from edgekit.compilers.pipeline import compile_for_cpu
from edgekit.compilers.plan import make_plan
from edgekit.compilers.tir_decode import needs_scale_specials
from edgekit.simulators import FORMATS, dequantize, get_format, quantize
from edgekit.simulators.mxdot import mx_matmul
from edgekit.simulators.reference import unpack_codes

from .models import seeded
from .test_compiled_models import assert_float32_close
from .test_row_tile_gemv import HOST, ISAS, needs_x86, run_gemv

TAKEN = [name for name, fmt in FORMATS.items() if md.applies(fmt, rt.tile_height("avx512"), fmt.block_size, "avx512")]


def mx_dot_gemv(q, x: np.ndarray, isa: str) -> np.ndarray:
    return run_gemv(md.gemv_kernel, md.tile_codes, q, x, isa)


def reference(x: np.ndarray, q) -> np.ndarray:
    with np.errstate(over="ignore"):  # the extreme-scale cases overflow to Inf on purpose
        return mx_matmul(quantize(x, md.activation_format(q.format)), q)


def assert_same_bits(y: np.ndarray, expected: np.ndarray):
    same = (y.view(np.uint32) == expected.view(np.uint32)) | (np.isnan(y) & np.isnan(expected))
    assert same.all(), f"{np.count_nonzero(~same)} of {y.size} differ: {y[~same][:4]} against {expected[~same][:4]}"


def test_the_formats_it_takes():
    assert sorted(TAKEN) == sorted(md.formats_taken()) == ["mxfp4", "mxfp6_e2m3", "mxint4", "nvfp4"]
    # E2M1 * 2 in [-12, 12] offset by 12; INT4 codes * 4 in [-8, 7] offset by 8; then as many products summed
    # in int16 as cannot overflow
    assert md.weight_bytes(FORMATS["mxfp4"]) == (1, 12, 5)
    assert md.weight_bytes(FORMATS["mxint4"]) == (2, 8, 8)
    # E2M3 magnitudes * 8 up to 60, unbiased: the code's sign negates the input byte instead
    assert md.weight_bytes(FORMATS["mxfp6_e2m3"]) == (3, 0, 2)
    assert md.weight_bytes(FORMATS["mxfp6_e3m2"]) is None and md.weight_bytes(FORMATS["mxfp8_e4m3"]) is None
    assert md.activation_format(FORMATS["nvfp4"]).block_size == 16
    assert md.activation_format(FORMATS["mxfp4"]) == get_format("mxint8")


@needs_x86
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", TAKEN)
def test_equals_the_mx_dot_product(name, isa):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((128, 512)).astype(np.float32) * 0.05
    x = rng.standard_normal((1, 512)).astype(np.float32)
    x[0, :64] = np.round(x[0, :64] * 128) / 128 + 1 / 256  # halfway between input codes: round half to even
    x[0, 0] = 1.5  # the block's scale 2^0, its codes sixty-fourths
    x[0, 64:96] = 0.0
    q = quantize(w, name, axis=-1)
    y = mx_dot_gemv(q, x, isa)
    assert_same_bits(y, reference(x, q))
    float_product = x.astype(np.float64) @ dequantize(q).astype(np.float64).T
    assert not np.array_equal(y, float_product.astype(np.float32))  # the input is rounded: its own numerics
    assert np.abs(y - float_product).max() < 0.02 * np.abs(float_product).max()


@needs_x86
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", TAKEN)
def test_extreme_scales_and_specials(name, isa):
    """Rows and input blocks scaled from 2^-140 to 2^125: block values that overflow to Inf (and meet one of
    the other sign: NaN), that round to FP32 subnormals; Inf and NaN inputs (a NaN block)."""
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((64, 512)) * 2.0 ** rng.integers(-140, 120, size=(64, 1))).astype(np.float32)
    x = (rng.standard_normal((1, 512)) * 2.0 ** rng.integers(-140, 125, size=32).repeat(16)).astype(np.float32)
    x[0, 300:316] = 1e-45
    x[0, 400] = 3.4e38
    q = quantize(w, name, axis=-1)
    assert q.format.scale.element is not None or needs_scale_specials(q.format.scale, q.scales)  # E8M0 code 0 here
    expected = reference(x, q)
    assert np.isinf(expected).any() and np.isnan(expected).any()
    assert_same_bits(mx_dot_gemv(q, x, isa), expected)
    tiny = (rng.standard_normal((64, 512)) * 2.0**-70).astype(np.float32)
    q = quantize(tiny, name, axis=-1)
    assert not needs_scale_specials(q.format.scale, q.scales)  # the kernel without the scale's special cases
    small = (rng.standard_normal((1, 512)) * 2.0**-62).astype(np.float32)
    expected = reference(small, q)
    assert ((expected != 0) & (np.abs(expected) < np.finfo(np.float32).tiny)).any()  # FP32 subnormal results
    assert_same_bits(mx_dot_gemv(q, small, isa), expected)
    x[0, 3], x[0, 70] = np.inf, np.nan
    assert_same_bits(mx_dot_gemv(quantize(w, name, axis=-1), x, isa), reference(x, quantize(w, name, axis=-1)))


def test_six_bit_planes_hold_every_code_bit_where_the_kernel_reads_it():
    """Each group of 16 codes: two words of low nibbles, then the top magnitude bit of quarter q's byte-t code at
    bit 7 - q of byte t, and its sign at bit 3 - q."""
    fmt = FORMATS["mxfp6_e2m3"]
    q = quantize(np.random.default_rng(2).standard_normal((3, 64)).astype(np.float32), fmt, axis=-1)
    words = md.plane_bytes(q.codes, fmt).view("<u4").reshape(3, -1, 3)
    assert md.plane_bytes(q.codes, fmt).nbytes == q.codes.nbytes
    codes = unpack_codes(q.codes, 6).reshape(3, -1, 16)
    for i in range(16):
        low = (words[..., i // 8] >> (4 * (i % 8))) & 0xF
        quarter, byte = 2 * (i // 8) + i % 2, (i % 8) // 2
        top = (words[..., 2] >> (8 * byte + 7 - quarter)) & 1
        sign = (words[..., 2] >> (8 * byte + 3 - quarter)) & 1
        assert np.array_equal(low | top << 4 | sign << 5, codes[..., i])


def test_bad_formats_shapes_and_activations_are_named():
    with pytest.raises(ValueError, match="4-bit weights whose values.*are small integers.*got mxfp8_e4m3"):
        md.gemv_kernel(FORMATS["mxfp8_e4m3"], 64, 64, "avx2")
    with pytest.raises(ValueError, match="multiple of 32 rows"):
        md.gemv_kernel(FORMATS["mxfp4"], 48, 64, "avx2")
    model = seeded(lambda: torch.nn.Linear(64, 64))
    imported = import_torch(model, (torch.randn(1, 64),))
    with pytest.raises(ValueError, match="activations must be one of float32, mxint8, got 'int8'"):
        lower(imported, make_plan(model, "mxfp4"), "cpu", target=HOST, activations="int8")
    with pytest.raises(ValueError, match="no layer of this build can quantize its input"):  # MXINT8 weights
        lower(imported, make_plan(imported.layers, "mxint8"), "cpu", target=HOST, activations="mxint8")


def test_the_cli_offers_what_lower_takes():
    for command in ("compile", "bench"):
        option = next(p for p in main.commands[command].params if p.name == "activations")
        assert tuple(option.type.choices) == ACTIVATIONS


@needs_x86
@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp6_e2m3"])
def test_lower_quantizes_the_inputs_of_the_gemvs_that_take_it(fmt):
    """A 128 -> 64 -> 10 MLP at batch 1: the 64-row layer multiplies MXINT8 inputs, bit-exact against
    ``mx_matmul``; the 10-row head keeps its float input."""
    model = seeded(lambda: torch.nn.Sequential(torch.nn.Linear(128, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)))
    x = torch.randn(1, 128, generator=torch.Generator().manual_seed(1))
    executable, lowered = compile_for_cpu(import_torch(model, (x,)), make_plan(model, fmt), HOST, "mxint8")
    assert {layer: r.activations for layer, r in lowered.layers.items()} == {"0": "mxint8", "2": "float32"}
    assert lowered.layers["0"].layout == ("row_tile_planes" if fmt == "mxfp6_e2m3" else rt.LAYOUT)
    first = quantize(model[0].weight.detach().numpy(), fmt, axis=-1)
    hidden = np.maximum(reference(x.numpy(), first) + model[0].bias.detach().numpy(), 0)
    head = dequantize(quantize(model[2].weight.detach().numpy(), fmt, axis=-1))
    expected = hidden.astype(np.float64) @ head.T.astype(np.float64) + model[2].bias.detach().numpy()
    assert_float32_close(run(executable, [x.numpy()])[0], expected.astype(np.float32))


@needs_x86
def test_compile_a_user_onnx_file_with_mxint8_inputs(tmp_path):
    from edgekit.compilers.runtime import load

    from .user_models import export_onnx

    path = export_onnx("linear", tmp_path)
    build = tmp_path / "build"
    cli = CliRunner()
    result = cli.invoke(main, ["compile", str(path), "--format", "nvfp4", "--max-batch", "1", "--activations", "mxint8",
                               "-o", str(build)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "1 of 1 layers quantize their input to mxint8" in result.output
    manifest = json.loads((build / "manifest.json").read_text())
    assert manifest["activations"] == "mxint8"
    assert [layer["activations"] for layer in manifest["layers"].values()] == ["mxint8"]
    import onnx
    from onnx import numpy_helper

    [weight] = [numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer]
    rows = np.ascontiguousarray(weight if weight.shape == (128, 256) else weight.T)
    x = np.random.default_rng(3).standard_normal((1, 256)).astype(np.float32)
    assert_same_bits(load(build)(x)[0], reference(x, quantize(rows, "nvfp4", axis=-1)))
    # where no layer can take it: a clear error, and no build
    result = cli.invoke(main, ["compile", str(path), "--format", "mxint8", "--max-batch", "1", "--activations", "mxint8",
                               "-o", str(tmp_path / "none")])
    assert result.exit_code == 1 and "no layer of this build can quantize its input" in result.output
    assert not (tmp_path / "none").exists()
