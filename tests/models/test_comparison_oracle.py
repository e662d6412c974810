import math

import numpy as np
import pytest
import torch
from scipy.stats import binom

from edgekit.models import comparison_oracle as co
from edgekit.models.registry import make_config
from edgekit.models.studies import get_study

torch.set_num_threads(1)


def test_oracle_counts_every_comparison_and_reads_the_slope_sign_exactly_on_a_quadratic():
    problem = co.quadratic(5, 0)
    oracle = co.ComparisonOracle(problem.f)
    g = problem.grad(problem.x)
    rng = np.random.default_rng(0)
    for _ in range(50):
        u = rng.standard_normal(5)
        assert co.slope_positive(oracle, problem.x, u, delta=0.3) == (g @ u > 0)  # exact at any delta
    assert oracle.queries == 50


@pytest.mark.parametrize("n", [2, 7, 33])
@pytest.mark.parametrize("epsilon", [0.3, 0.02])
def test_estimator_is_within_epsilon_with_exactly_the_stated_queries(n, epsilon):
    for seed in range(3):
        problem = co.quadratic(n, seed)
        oracle = co.ComparisonOracle(problem.f)
        estimate = co.estimate_gradient(oracle, problem.x, epsilon)
        assert oracle.queries == co.estimator_queries(n, epsilon)
        assert np.linalg.norm(estimate - problem.direction) <= epsilon
        assert abs(np.linalg.norm(estimate) - 1) < 1e-12


def test_estimator_query_count_formula():
    # n signs + (n-1) matches + (n-1) * ceil(log2(sqrt(n-1)/eps)) bisection steps
    assert co.estimator_queries(17, 0.01) == 17 + 16 * (1 + math.ceil(math.log2(4 / 0.01)))
    assert co.estimator_queries(64, 0.01) - co.estimator_queries(64, 0.02) == 63  # one more step per halving


def test_estimator_on_a_gradient_with_one_dominant_and_zero_coordinates():
    g = np.array([0.0, -5.0, 0.0, 1e-3, 2.0])
    problem = co.quadratic(5, 1, gradient=g)
    estimate = co.estimate_gradient(co.ComparisonOracle(problem.f), problem.x, 0.01)
    assert np.linalg.norm(estimate - g / np.linalg.norm(g)) <= 0.01


def test_tester_plan_errors_are_the_exact_binomial_tails_and_do_not_grow_with_precision():
    plans = [co.tester_plan(eps, 0.05) for eps in (0.3, 0.1, 0.01, 0.001)]
    for plan in plans:
        assert plan.error_close == pytest.approx(binom.sf(plan.threshold, plan.queries, plan.p_close))
        assert plan.error_far == pytest.approx(binom.cdf(plan.threshold, plan.queries, plan.p_far))
        assert max(plan.error_close, plan.error_far) <= 0.05
    assert max(p.queries for p in plans) <= 40 and plans[-1].queries == plans[-2].queries


def test_positive_probability_matches_simulation():
    rng = np.random.default_rng(0)
    v, w = np.eye(8)[0], np.eye(8)[3]
    theta, c = 0.2, 0.05
    g = math.cos(theta) * v + math.sin(theta) * w
    z = rng.standard_normal((200_000, 8))
    z -= np.outer(z @ v, v)
    hits = ((-c * v + z) @ g > 0).mean()
    assert abs(hits - co.positive_probability(theta, c)) < 3e-3


def test_tester_error_rates_at_the_boundaries_stay_within_the_plan():
    epsilon, n, trials = 0.1, 16, 300
    plan = co.tester_plan(epsilon, 0.05)
    rng = np.random.default_rng(1)
    wrong = {"close": 0, "far": 0}
    for t in range(trials):
        problem = co.quadratic(n, t)
        truth = problem.direction
        for case, distance in (("close", epsilon), ("far", 2 * epsilon)):
            v = co.rotate_towards_random(truth, distance, rng)
            oracle = co.ComparisonOracle(problem.f)
            said_close = co.gradient_is_close(oracle, problem.x, v, epsilon, rng=rng)
            assert oracle.queries == plan.queries
            wrong[case] += said_close != (case == "close")
    # 300 trials at error <= 0.05: more than 30 wrong has probability < 1e-4
    assert wrong["close"] <= 30 and wrong["far"] <= 30
    assert wrong["close"] + wrong["far"] > 0  # it is a randomized test, not a look at the truth


@pytest.mark.parametrize("name", co.BASELINES)
def test_baselines_use_their_budget_and_finite_differences_are_exact_with_n_plus_one(name):
    problem = co.quadratic(6, 0)
    calls = []

    def f(x):
        calls.append(1)
        return problem.f(x)

    guess = co.baseline_estimate(name, f, problem.x, 7, rng=np.random.default_rng(0))
    assert len(calls) == (7 if name != "two_point" else 6) * (2 if name == "sign_average" else 1)
    if name == "finite_difference":
        assert np.linalg.norm(guess - problem.direction) < 5e-3  # forward differences: O(delta) error


def test_quantized_net_gradient_is_of_the_mxfp4_model():
    problem = co.quantized_net(0)
    rng = np.random.default_rng(0)
    u = rng.standard_normal(64)
    h = 1e-5
    numeric = (problem.f(problem.x + h * u) - problem.f(problem.x - h * u)) / (2 * h)
    assert numeric == pytest.approx(problem.grad(problem.x) @ u, rel=1e-5)
    estimate = co.estimate_gradient(co.ComparisonOracle(problem.f), problem.x, 0.05)
    assert np.linalg.norm(estimate - problem.direction) <= 0.05


def test_bad_input():
    problem = co.quadratic(4, 0)
    oracle = co.ComparisonOracle(problem.f)
    for bad in (0.0, 1.0, -0.5, 2.0):
        with pytest.raises(ValueError, match=r"epsilon must be in \(0, 1\)"):
            co.estimate_gradient(oracle, problem.x, bad)
        with pytest.raises(ValueError, match=r"epsilon must be in \(0, 1\)"):
            co.gradient_is_close(oracle, problem.x, np.ones(4), bad, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"v must have the shape of x, \(4,\)"):
        co.gradient_is_close(oracle, problem.x, np.ones(5), 0.1, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="baseline must be one of"):
        co.baseline_estimate("adam", problem.f, problem.x, 10, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="'function' of ComparisonOracleConfig must be one of quadratic, logistic, quantized_net"):
        make_config(get_study("comparison_oracle"), {"function": "rosenbrock"})
    with pytest.raises(ValueError, match=r"'epsilon' of ComparisonOracleConfig must be a number in \(0, 1\), got 1.5"):
        make_config(get_study("comparison_oracle"), {"epsilon": "1.5"})


def test_study_entry():
    entry = get_study("comparison_oracle")
    result = entry.evaluate(make_config(entry, tiny=True))
    assert result["estimator_queries"] == result["estimator_bound"]
    assert result[entry.metric] <= result["epsilon"]
    assert result["tester_says_close_on_truth"] == 1 and result["tester_says_close_on_far"] == 0
