import numpy as np
import pytest

from edgekit.models import dcla
from edgekit.models.registry import make_config
from edgekit.models.studies import get_study


def brute_prox(penalty, x, t, half=4.0, n=801):
    """argmin_p r(p) + (x - p)^2 / (2t) on a grid, for a 1-d x (a check of the closed forms)."""
    grid = np.linspace(-half, half, n)[:, None]
    return grid[np.argmin(penalty.value(grid) + ((grid - x) ** 2)[:, 0] / (2 * t)), 0]


@pytest.mark.parametrize("penalty", [dcla.l1(1.5), dcla.l2_norm(0.7), dcla.excess(2.0, 0.5)])
def test_prox_closed_forms_minimize_the_moreau_objective(penalty):
    for x in np.linspace(-3, 3, 13):
        got = penalty.prox(np.array([[x]]), 0.4)[0, 0]
        assert abs(got - brute_prox(penalty, x, 0.4)) <= 0.01


def test_l2_norm_prox_shrinks_the_whole_vector():
    x = np.array([[3.0, 4.0], [0.3, 0.4]])
    np.testing.assert_allclose(dcla.l2_norm(1.0).prox(x, 1.0), [[2.4, 3.2], [0.0, 0.0]])


def test_dcla_drift_is_the_gradient_of_the_smoothed_potential():
    posterior = dcla.toy_posterior(0)
    smooth, grad = dcla.smoothed_potential(posterior, 0.1), dcla.drift("dcla", posterior, 0.1)
    x = np.random.default_rng(0).normal(size=(6, 2))
    h = 1e-6
    numeric = np.stack([(smooth(x + h * e) - smooth(x - h * e)) / (2 * h) for e in np.eye(2)], -1)
    np.testing.assert_allclose(grad(x), numeric, atol=1e-5)


def test_smoothed_potential_tends_to_the_dc_potential():
    posterior = dcla.toy_posterior(0, "capped_l1")
    x = np.random.default_rng(1).normal(size=(20, 2))
    gap = [np.abs(dcla.smoothed_potential(posterior, s)(x) - posterior.potential(x)).max() for s in (0.1, 0.01)]
    assert gap[1] < gap[0] / 5 and gap[1] < 0.05


def test_dcla_matches_the_quadrature_density_and_myula_on_r1_does_not():
    posterior = dcla.toy_posterior(1)
    exact = dcla.quadrature(posterior)
    w1 = {}
    for method in ("dcla", "myula_r1"):
        samples, _ = dcla.sample(method, posterior, step=0.01, smoothing=0.01, n_steps=2000, chains=200, seed=0)
        w1[method] = dcla.marginal_w1(samples, exact)
        mass = dcla.interval_mass(samples, exact)
        if method == "dcla":
            np.testing.assert_allclose(mass, 0.9, atol=0.02)
    assert w1["dcla"] < 0.03 and w1["myula_r1"] > 0.1


def test_quadrature_marginals_and_w1_metric():
    posterior = dcla.Posterior(np.eye(1), np.array([0.5]), 1.0, dcla.l1_minus_l2(1e-9, 0.5))  # ~ N(0.5, 1)
    exact = dcla.quadrature(posterior, half_width=8.0, points=1601)
    mean = (exact.axis * exact.marginals[0]).sum()
    assert abs(mean - 0.5) < 1e-6
    draws = np.random.default_rng(0).normal(0.5, 1.0, size=(20000, 1, 1))
    assert dcla.marginal_w1(draws, exact) < 0.02
    assert dcla.marginal_w1(draws + 0.3, exact) > 0.28


def test_effective_sample_size_of_independent_and_correlated_chains():
    rng = np.random.default_rng(0)
    white = rng.normal(size=(4000, 4, 1))
    assert 0.8 * 16000 < dcla.effective_sample_size(white)[0] <= 16000
    ar = np.zeros((4000, 4, 1))
    for t in range(1, 4000):
        ar[t] = 0.9 * ar[t - 1] + rng.normal(size=(4, 1))
    # AR(1) with rho 0.9: ESS = N (1 - rho) / (1 + rho) = 16000 / 19
    assert 0.6 * 16000 / 19 < dcla.effective_sample_size(ar)[0] < 1.4 * 16000 / 19


def test_non_convex_penalty_is_refused_where_a_convex_one_is_required():
    with pytest.raises(ValueError, match="r1 must be a convex penalty.*capped_l1"):
        dcla.require_convex(dcla.capped_l1(1.0, 0.5), "r1")
    with pytest.raises(ValueError, match="r2 must be a convex penalty"):
        dcla.Posterior(np.eye(2), np.zeros(2), 1.0,
                       dcla.difference(dcla.l1(1.0), dcla.l1_minus_l2(1.0, 0.5), "l1 - (l1 - l2)"))
    with pytest.raises(ValueError, match="prior must be a difference"):
        dcla.Posterior(np.eye(2), np.zeros(2), 1.0, dcla.l1(1.0))


def test_bad_input_names_the_parameter():
    posterior = dcla.toy_posterior(0)
    with pytest.raises(ValueError, match="method must be one of dcla, myula_r1, subgradient"):
        dcla.drift("mala", posterior, 0.1)
    with pytest.raises(ValueError, match="step must be > 0"):
        dcla.sample("dcla", posterior, step=0.0, smoothing=0.1, n_steps=10, chains=2, seed=0)
    with pytest.raises(ValueError, match="smoothing must be > 0"):
        dcla.sample("dcla", posterior, step=0.1, smoothing=-1, n_steps=10, chains=2, seed=0)
    with pytest.raises(ValueError, match="A must be a matrix"):
        dcla.Posterior(np.eye(2), np.zeros(3), 1.0, dcla.l1_minus_l2(1.0, 0.5))
    with pytest.raises(ValueError, match="'penalty' of DCLAConfig must be one of l1_minus_l2, capped_l1"):
        make_config(get_study("dcla"), {"penalty": "l0"})


def test_study_entry_evaluates_deterministically():
    entry = get_study("dcla")
    config = make_config(entry, {"target": "deconvolution", "n_steps": "300", "chains": "8", "step": "0.001"},
                         tiny=True)
    a, b = entry.evaluate(config), entry.evaluate(config)
    assert {k: v for k, v in a.items() if "per_s" not in k} == {k: v for k, v in b.items() if "per_s" not in k}
    assert set(a) >= {"mse_dcla", "coverage90_dcla", "ess_per_s_subgradient"}
    assert entry.metric in entry.evaluate(make_config(entry, tiny=True))
