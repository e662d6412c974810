import math

import numpy as np
import pytest

from edgekit.simulators.formats import LIFTQUANT_FORMATS, get_liftquant_format
from edgekit.simulators.incoherence import Incoherence
from edgekit.simulators.liftquant import (
    awq_input_scales,
    codebook_bytes,
    group_scale_values,
    layer_nbytes,
    load_tensors,
    quantize,
    save_tensors,
    total_bits_per_weight,
)
from edgekit.simulators.metrics import qsnr

FMT = "liftquant_16to8"


def weight(rows=48, cols=96, seed=0):
    return (np.random.default_rng(seed).standard_normal((rows, cols)) * 0.05).astype(np.float32)


def test_table_rows():
    fmt = get_liftquant_format("24to10")
    assert fmt is LIFTQUANT_FORMATS["liftquant_24to10"]
    assert (fmt.lifted, fmt.chunk, fmt.code_bits_per_weight, fmt.free_dims) == (24, 10, 2.4, 14)
    bits = [f.code_bits_per_weight for f in LIFTQUANT_FORMATS.values()]
    assert min(bits) == 1.25 and max(bits) == 4.0 and bits == sorted(bits)
    for name in ("16to8", "20to8", "24to8", "24to10", "30to14", "32to16", "4to2", "6to4", "8to4", "10to8", "12to8"):
        assert f"liftquant_{name}" in LIFTQUANT_FORMATS


@pytest.mark.parametrize("kwargs", [{}, {"group_size": 32}, {"input_scales": np.linspace(0.5, 2, 96)},
                                    {"rotate": False}])
def test_bits_are_accounted_exactly(kwargs):
    w = weight()
    q = quantize(w, FMT, **kwargs)
    rows, cols = w.shape
    chunks = math.ceil(cols / 8)
    expected = rows * 4 * math.ceil(chunks * 16 / 32)  # codes: whole 32-bit words per row
    expected += 2 * rows  # fp16 row scales
    if "group_size" in kwargs:
        expected += rows * math.ceil(cols / kwargs["group_size"])  # one E4M3 byte per group
    if "input_scales" in kwargs:
        expected += 2 * cols  # fp16 input multipliers
    if kwargs.get("rotate", True):
        expected += Incoherence(cols).side_bytes  # 96 = 32 * 3: signs (12 bytes) and a 3x3 fp32 factor (36)
        assert Incoherence(cols).side_bytes == 12 + 36
    assert q.nbytes == expected == layer_nbytes(get_liftquant_format(FMT), w.shape, group_size=kwargs.get("group_size"),
                                                input_scales="input_scales" in kwargs,
                                                rotate=kwargs.get("rotate", True))
    assert q.bits_per_weight == 8 * expected / w.size
    assert total_bits_per_weight([q]) == 8 * (expected + codebook_bytes(q.format)) / w.size


def test_the_kernel_contract_holds():
    """y = W_hat x equals W'(H (x * m)), with H (x * m) zero-padded to K_pad."""
    w = weight(20, 100)  # 100 = 12 * 8 + 4: padded
    m = np.exp(np.random.default_rng(1).standard_normal(100) * 0.3)
    q = quantize(w, FMT, input_scales=m, group_size=16)
    assert q.padding == 4 and q.chunks == 13
    x = np.random.default_rng(2).standard_normal(100)
    lifted_x = np.zeros(q.chunks * 8)
    lifted_x[:100] = q.rotation.apply(x * q.input_scales.astype(np.float64))
    np.testing.assert_allclose(q.rotated_weights().astype(np.float64) @ lifted_x,
                               q.dequantize().astype(np.float64) @ x, rtol=1e-5, atol=1e-6)


def test_quality_on_gaussian_weights_matches_the_codebook():
    w = weight(64, 256, seed=3)
    q = quantize(w, FMT)
    mse = ((q.dequantize().astype(np.float64) - w) ** 2).mean() / (w.astype(np.float64) ** 2).mean()
    metadata = q.codebook.metadata
    assert mse == pytest.approx(metadata["mse_exact"], rel=0.08)  # least-squares scales: about the codebook's MSE


def test_rotation_spreads_an_outlier_column():
    w = weight(64, 128, seed=4)
    w[:, 7] *= 30
    assert qsnr(w, quantize(w, FMT).dequantize()) > qsnr(w, quantize(w, FMT, rotate=False).dequantize()) + 3


def test_group_scales_follow_uneven_rows():
    w = weight(32, 128, seed=5)
    w[:, :64] *= 8  # the first half of every row is 8 times louder
    q = quantize(w, FMT, group_size=64, rotate=False)
    rel = group_scale_values(q.format, q.group_scales)
    assert np.all(rel[:, 0] > 4 * rel[:, 1])
    assert qsnr(w, q.dequantize()) > qsnr(w, quantize(w, FMT, rotate=False).dequantize()) + 1


def test_non_power_of_two_width_rotates_with_a_kronecker_factor():
    rot = Incoherence(96, seed=3)
    assert (rot.power, rot.factor_size) == (32, 3)
    x = np.random.default_rng(0).standard_normal((4, 96))
    np.testing.assert_allclose(rot.invert(rot.apply(x)), x, atol=1e-12)
    np.testing.assert_allclose((rot.apply(x) ** 2).sum(), (x**2).sum())


@pytest.mark.parametrize("size", [1, 2, 64, 4096])
def test_power_of_two_width_is_signs_then_hadamard(size):
    """No factor is stored for these widths, so the rotation is exactly H_p diag(s)."""
    from edgekit.simulators.rotation import hadamard

    rot = Incoherence(size, seed=0)
    x = np.random.default_rng(size).standard_normal(size)
    np.testing.assert_allclose(rot.apply(x), hadamard(size) @ (rot.signs * x), atol=1e-12)


def test_save_and_load_round_trip(tmp_path):
    tensors = {"a": quantize(weight(), FMT, group_size=32, input_scales=np.ones(96)), "b": quantize(weight(8, 17), FMT)}
    loaded = load_tensors(save_tensors(tmp_path / "codes.npz", tensors))
    for name, t in tensors.items():
        np.testing.assert_array_equal(loaded[name].dequantize(), t.dequantize())
        assert loaded[name].nbytes == t.nbytes


def test_awq_scales():
    m = awq_input_scales(np.array([1.0, 4.0, 0.25]), 0.5)
    np.testing.assert_allclose(m, [1.0, 0.5, 2.0])
    np.testing.assert_array_equal(awq_input_scales(np.array([1.0, 3.0]), 0.0), [1.0, 1.0])


def test_bad_input():
    w = weight()
    with pytest.raises(ValueError, match="non-finite values .*row 2, column 3"):
        bad = w.copy()
        bad[2, 3] = np.inf
        quantize(bad, FMT)
    with pytest.raises(ValueError, match="2-d weight"):
        quantize(w[0], FMT)
    with pytest.raises(ValueError, match="multiple of the chunk size d=8"):
        quantize(w, FMT, group_size=12)
    with pytest.raises(ValueError, match="input_scales must be 96 positive"):
        quantize(w, FMT, input_scales=np.ones(5))
    with pytest.raises(ValueError, match="unknown LiftQuant configuration"):
        quantize(w, "liftquant_3to1")
    with pytest.raises(ValueError, match="exceeds float16"):
        quantize(w * 1e7, FMT)  # row RMS about 5e5
    with pytest.raises(ValueError, match="alpha must be in"):
        awq_input_scales(np.ones(3), 2.0)


def test_an_encoding_is_reused_only_for_the_same_weight_and_arguments():
    w = np.random.default_rng(3).standard_normal((16, 40)).astype(np.float32)
    first = quantize(w, "liftquant_8to4")
    assert quantize(w.copy(), "liftquant_8to4") is first
    assert quantize(w, "liftquant_8to4", seed=1) is not first
    assert quantize(w, "liftquant_6to4") is not first
    changed = w.copy()
    changed[5, 7] += 1.0
    again = quantize(changed, "liftquant_8to4")
    assert again is not first and not np.array_equal(again.dequantize(), first.dequantize())


def test_recent_results_keep_the_last_few_by_key():
    from edgekit.utils.recent import RecentResults

    calls = []
    recent = RecentResults(2)

    def compute(value):
        calls.append(value)
        return value * 10

    assert [recent.get(k, lambda k=k: compute(k)) for k in (1, 2, 1, 3, 1, 2)] == [10, 20, 10, 30, 10, 20]
    assert calls == [1, 2, 3, 2]  # 2 was the least recently used when 3 came in
