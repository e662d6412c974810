import itertools

import numpy as np
import pytest

from edgekit.simulators.liftquant.budget import Option, choose

CONFIGS = {"a": 2.0, "b": 2.4, "c": 3.0, "e": 4.0}
BOOKS = {"a": 512, "b": 960, "c": 768, "e": 256}


def layer_options(sizes, seed=0):
    rng = np.random.default_rng(seed)
    return {f"layer{i}": [Option(f, int(n * bits / 8), float(rng.uniform(0.5, 2) * n * 4.0 ** -bits))
                          for f, bits in CONFIGS.items()] for i, n in enumerate(sizes)}


@pytest.mark.parametrize("bits", [2.05, 2.4, 2.77, 3.3, 3.95])
def test_lands_within_one_percent_below_the_request(bits):
    sizes = np.random.default_rng(1).integers(20_000, 400_000, 29)
    options = layer_options(sizes)
    budget = bits * sizes.sum() / 8
    choice = choose(options, budget, BOOKS)
    assert 0.99 * budget <= choice.nbytes <= budget
    used = {o.format for o in choice.layers.values()}
    assert choice.nbytes == sum(o.nbytes for o in choice.layers.values()) + sum(BOOKS[f] for f in used)


def test_matches_brute_force_on_a_small_instance():
    options = layer_options([3000, 5000, 8000, 13000], seed=2)
    budget = 2.6 * 29000 / 8
    choice = choose(options, budget, BOOKS)
    best = None
    for combo in itertools.product(*options.values()):
        used = {o.format for o in combo}
        total = sum(o.nbytes for o in combo) + sum(BOOKS[f] for f in used)
        if 0.99 * budget <= total <= budget:
            cost = sum(o.cost for o in combo)
            best = cost if best is None else min(best, cost)
    assert choice.cost == pytest.approx(best, rel=1e-9)


def test_a_ceiling_takes_the_best_that_fits():
    options = layer_options([10000, 20000])
    choice = choose(options, 10**9, BOOKS, tolerance=1.0)
    assert {o.format for o in choice.layers.values()} == {"e"}


def test_bad_input():
    options = layer_options([10000, 20000])
    with pytest.raises(ValueError, match="smaller than the smallest encoding"):
        choose(options, 1000, BOOKS)
    with pytest.raises(ValueError, match="lands within 1%"):
        choose(options, 10**7, BOOKS)  # more than the largest encoding: nothing within 1% below
    with pytest.raises(ValueError, match="at least one option"):
        choose({"x": []}, 1000, BOOKS)
