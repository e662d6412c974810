import numpy as np
import pytest

from edgekit.simulators.liftquant.layout import (
    chunks_per_row,
    decode,
    decode_reference,
    pack_codes,
    row_bytes,
    unpack_codes,
)

CASES = [(24, 10, 4093), (16, 8, 64), (5, 4, 9), (32, 16, 100), (30, 14, 70)]


def random_masks(rows, chunks, D, seed=0):
    return np.random.default_rng(seed).integers(0, 1 << D, (rows, chunks), dtype=np.uint64).astype(np.uint32)


@pytest.mark.parametrize("D, d, K", CASES)
def test_pack_unpack_round_trip(D, d, K):
    chunks = chunks_per_row(K, d)
    masks = random_masks(7, chunks, D)
    codes = pack_codes(masks, D)
    assert codes.shape == (7, row_bytes(chunks, D)) and codes.shape[1] % 4 == 0
    np.testing.assert_array_equal(unpack_codes(codes, D, chunks), masks)


def test_bit_order_is_little_endian_within_a_row():
    """Bit t = j * D + i of a row is bit t % 8 of byte t // 8; padding bits are zero."""
    D, chunks = 5, 3
    masks = np.zeros((1, chunks), np.uint32)
    masks[0, 1] = 1 << 4  # chunk 1, sign 4: t = 9
    codes = pack_codes(masks, D)
    expected = np.zeros(row_bytes(chunks, D), np.uint8)
    expected[1] = 1 << 1
    np.testing.assert_array_equal(codes[0], expected)
    full = pack_codes(np.full((1, chunks), (1 << D) - 1, np.uint32), D)
    np.testing.assert_array_equal(np.unpackbits(full[0], bitorder="little"), [1] * 15 + [0] * 17)


@pytest.mark.parametrize("D, d, K", CASES)
@pytest.mark.parametrize("group", [None, 2])
def test_decoder_is_bit_exact_against_numpy(D, d, K, group):
    rng = np.random.default_rng(D * K)
    chunks = chunks_per_row(K, d)
    rows = 9
    codes = pack_codes(random_masks(rows, chunks, D, seed=1), D)
    matrix = rng.standard_normal((d, D)).astype(np.float32)
    row_scale = (rng.random(rows) * 3).astype(np.float16).astype(np.float32)
    group_size = None if group is None else group * d
    group_scale = None if group is None else rng.random((rows, -(-chunks // group))).astype(np.float32)
    fast = decode(codes, matrix, chunks, row_scale, group_scale, group_size)
    ref = decode_reference(codes, matrix, chunks, row_scale, group_scale, group_size)
    assert fast.shape == (rows, chunks * d)
    np.testing.assert_array_equal(fast.view(np.uint32), ref.view(np.uint32))


def test_decode_matches_the_float64_lattice_point_to_float32_rounding():
    D, d = 8, 4
    matrix = np.random.default_rng(0).standard_normal((d, D)).astype(np.float32)
    masks = random_masks(3, 2, D)
    out = decode(pack_codes(masks, D), matrix, 2, np.ones(3, np.float32))
    signs = ((masks[..., None] >> np.arange(D)) & 1) * 2.0 - 1
    expected = (signs @ matrix.T.astype(np.float64)).reshape(3, -1)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_bad_input():
    codes = pack_codes(random_masks(2, 3, 10), 10)
    matrix = np.zeros((4, 10), np.float32)
    with pytest.raises(ValueError, match="codes must be"):
        decode(codes[:, :-4], matrix, 3, np.ones(2, np.float32))
    with pytest.raises(ValueError, match="row_scale must have shape"):
        decode(codes, matrix, 3, np.ones(3, np.float32))
    with pytest.raises(ValueError, match="group_scale must have shape"):
        decode(codes, matrix, 3, np.ones(2, np.float32), np.ones((2, 5), np.float32), 8)
    with pytest.raises(ValueError, match="codes must be"):
        unpack_codes(codes, 10, 4)
