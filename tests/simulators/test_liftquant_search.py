import itertools

import numpy as np
import pytest

from edgekit.simulators.liftquant.codebooks import load_codebook
from edgekit.simulators.liftquant.search import (
    SearchTables,
    code_errors,
    fast_candidates,
    gray_flips,
    local_refine,
    search_codes,
    signs_of,
)

# (D, d): one, two and three groups of 8 signs, short last groups included
SHAPES = [(4, 2), (10, 4), (12, 8), (16, 8), (18, 8)]


def random_codebook(D, d, seed=0):
    return (np.random.default_rng(seed).standard_normal((d, D)) * 0.4).astype(np.float32)


def brute_force(x, m):
    """Squared distance to the nearest of all 2^D lattice points, float64."""
    codes = np.array(list(itertools.product([-1.0, 1.0], repeat=m.shape[1])))
    points = codes @ m.astype(np.float64).T
    return np.array([((xi - points) ** 2).sum(1).min() for xi in x.astype(np.float64)])


@pytest.mark.parametrize("D, d", SHAPES)
def test_exact_search_is_exact(D, d):
    m = random_codebook(D, d)
    x = np.random.default_rng(1).standard_normal((200 if D <= 16 else 40, d)).astype(np.float32)
    masks, err = search_codes(x, SearchTables(m), "exact")
    np.testing.assert_allclose(err, brute_force(x, m), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(err, code_errors(x, m, masks), rtol=1e-12)


@pytest.mark.parametrize("D, d", SHAPES)
def test_fast_search_is_the_papers_enumeration(D, d):
    """c = sign(A^-1 [x; p]) over every p in {-1, +1}^(D-d), A = [M; null-space basis]: the best of them."""
    m = random_codebook(D, d, seed=2)
    x = np.random.default_rng(3).standard_normal((150, d)).astype(np.float32)
    md = m.astype(np.float64)
    null = np.linalg.svd(md)[2][d:]
    inverse = np.linalg.inv(np.vstack([md, null]))
    ps = np.array(list(itertools.product([-1.0, 1.0], repeat=D - d)))
    expected = []
    for xi in x.astype(np.float64):
        lifted = np.hstack([np.broadcast_to(xi, (len(ps), d)), ps]) @ inverse.T
        c = np.where(lifted >= 0, 1.0, -1.0)
        expected.append(((xi - c @ md.T) ** 2).sum(1).min())
    _, err = search_codes(x, SearchTables(m), "fast")
    np.testing.assert_allclose(err, expected, rtol=1e-4, atol=1e-6)


def test_fast_candidates_are_distinct_and_sorted():
    m = random_codebook(18, 8, seed=4)
    tables = SearchTables(m)
    x = np.random.default_rng(5).standard_normal((40, 8)).astype(np.float32)
    cands = fast_candidates(x, tables, 6)
    assert cands.shape == (40, 6)
    for row, xi in zip(cands, x):
        assert len(set(row.tolist())) == 6
        errs = code_errors(np.repeat(xi[None], 6, 0), m, row)
        assert np.all(np.diff(errs) >= -1e-5)


def test_local_search_ends_at_a_one_flip_minimum_never_worse_than_its_start():
    m = random_codebook(16, 8, seed=6)
    tables = SearchTables(m)
    x = np.random.default_rng(7).standard_normal((300, 8)).astype(np.float32)
    start = np.random.default_rng(8).integers(0, 1 << 16, (300, 1)).astype(np.uint32)
    masks, err = local_refine(x, tables, start)
    assert np.all(err <= code_errors(x, m, start[:, 0]) + 1e-9)
    for bit in range(16):
        flipped = code_errors(x, m, masks ^ np.uint32(1 << bit))
        assert np.all(flipped >= err - 1e-9)


@pytest.mark.parametrize("D, d", [(12, 8), (16, 8), (18, 8)])
def test_fast_plus_local_is_never_worse_than_fast(D, d):
    m = random_codebook(D, d, seed=9)
    x = np.random.default_rng(10).standard_normal((300, d)).astype(np.float32)
    tables = SearchTables(m)
    assert np.all(search_codes(x, tables, "fast+local")[1] <= search_codes(x, tables, "fast")[1] + 1e-9)


def test_gray_code_flips_visit_every_code_once():
    flips = gray_flips(6)
    code, seen = 0, {0}
    for t in range(1, 64):
        code ^= 1 << int(flips[t])
        seen.add(code)
    assert seen == set(range(64))


def test_signs_follow_the_bit_order():
    np.testing.assert_array_equal(signs_of(np.array([0b101], np.uint32), 4), [[1, -1, 1, -1]])


def test_bad_input():
    tables = SearchTables(random_codebook(26, 8))
    x = np.zeros((3, 8), np.float32)
    with pytest.raises(ValueError, match="search must be one of"):
        search_codes(x, tables, "greedy")
    with pytest.raises(ValueError, match="up to D = 24"):
        search_codes(x, tables, "exact")
    with pytest.raises(ValueError, match="up to D = 24"):
        search_codes(x, tables, "slices")
    with pytest.raises(ValueError, match="8 columns"):
        search_codes(np.zeros((3, 5), np.float32), tables, "fast")
    with pytest.raises(ValueError, match="NaN or Inf"):
        search_codes(np.full((3, 8), np.nan, np.float32), tables, "fast")
    with pytest.raises(ValueError, match="starts must be"):
        search_codes(x, tables, "fast+local", starts=0)


@pytest.mark.parametrize(("search", "D", "d"), [
    *(("fast+local", D, d) for D, d in [(4, 2), (10, 4), (12, 8), (16, 8)]),
    *(("slices", D, d) for D, d in [(4, 2), (12, 8), (16, 8), (18, 8)]),
])
def test_searches_that_cover_every_code_are_exact(search, D, d):
    """Up to 16 signs (two groups of 8) one block move is the exact search; slices also at D = 18,
    whose 2-sign group has 4 values, all among its slices."""
    m = random_codebook(D, d, seed=11)
    x = np.random.default_rng(12).standard_normal((200, d)).astype(np.float32)
    tables = SearchTables(m)
    np.testing.assert_allclose(search_codes(x, tables, search)[1], search_codes(x, tables, "exact")[1],
                               rtol=1e-5, atol=1e-6)


def test_block_descent_ends_where_no_pair_of_groups_improves():
    """Three groups (D = 24): changing any two groups of 8 signs at once does not lower the error."""
    m = random_codebook(24, 10, seed=13)
    x = np.random.default_rng(14).standard_normal((3, 10)).astype(np.float32)
    masks, err = search_codes(x, SearchTables(m), "fast+local")
    patterns = np.arange(1 << 16, dtype=np.uint32)
    for keep in range(3):
        free = [g for g in range(3) if g != keep]
        spread = ((patterns & 255) << np.uint32(8 * free[0])) | ((patterns >> 8) << np.uint32(8 * free[1]))
        kept = masks & np.uint32(255 << (8 * keep))
        for xi, k, e in zip(x, kept, err):
            assert code_errors(np.broadcast_to(xi, (spread.size, 10)), m, k | spread).min() >= e * (1 - 1e-5)


def test_slices_and_fast_plus_local_within_two_percent_of_exact_at_24to10():
    """The shipped 24to10 codebook (three full groups): slices visit 36 of the 768 slices a chunk."""
    codebook = load_codebook("liftquant_24to10")
    x = np.random.default_rng(17).standard_normal((256, 10)).astype(np.float32)
    exact = codebook.encode(x, "exact")[1].mean()
    masks, err = codebook.encode(x, "slices")
    np.testing.assert_allclose(err, code_errors(x, codebook.matrix, masks), rtol=1e-12)
    assert err.mean() <= exact * 1.02
    assert codebook.encode(x, "fast+local")[1].mean() <= exact * 1.02
