"""Gradient testing and estimation with a comparison oracle, every query counted.

The oracle answers one question: is f(b) > f(a)? Asked at a +- delta*u it gives the sign
of the directional slope <grad f(x), u> (exactly for a quadratic, where
f(x + d u) - f(x - d u) = 2d <grad f, u>; up to O(delta^3) otherwise). With g the
normalized gradient:

* the tester decides whether ||g - v|| <= epsilon or >= 2*epsilon for a unit vector v
  with a number of queries that depends on neither n nor epsilon. Each query asks the sign
  of <g, -c v + z>, z a standard Gaussian orthogonal to v: with theta the angle between g
  and v it is positive with probability Phi(-c cot theta), at most Phi(-a) when close and
  at least about Phi(-a/2) when far once c = a tan(theta_close). Counting positives
  against a threshold separates the two with an error set by k queries alone
  (:func:`tester_plan` gives the smallest k for a requested error, exactly, from the
  binomial law);
* the estimator returns an epsilon-estimate of g with n + (n-1)(1 + ceil(log2(sqrt(n-1)/epsilon)))
  queries: the sign of every coordinate (n), the coordinate of largest |g_i| by a
  tournament (n-1), then each other ratio g_j/|g_i| in [-1, 1] by bisection to
  epsilon/(2 sqrt(n-1)), which bounds the error of the normalized vector by epsilon.

Baselines at equal queries: forward finite differences and the two-point random-direction
estimator (both read function values, which the comparison oracle does not give), and
the comparison-based average of sign(<g, u>) u over random directions u.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.stats import norm

from .config_fields import bounded, checked

FUNCTIONS = ("quadratic", "logistic", "quantized_net")
BASELINES = ("finite_difference", "two_point", "sign_average")


class ComparisonOracle:
    """Answers ``f(b) > f(a)`` and counts every question in ``queries``."""

    def __init__(self, f: Callable[[np.ndarray], float]):
        self.f, self.queries = f, 0

    def greater(self, a: np.ndarray, b: np.ndarray) -> bool:
        self.queries += 1
        return bool(self.f(b) > self.f(a))


class ValueOracle:
    """Returns f(x), counting calls: what finite differences and two-point estimators need."""

    def __init__(self, f: Callable[[np.ndarray], float]):
        self.f, self.queries = f, 0

    def __call__(self, x: np.ndarray) -> float:
        self.queries += 1
        return float(self.f(x))


def slope_positive(oracle: ComparisonOracle, x: np.ndarray, u: np.ndarray, delta: float) -> bool:
    """One query: is <grad f(x), u> > 0? (compares f(x - delta u) with f(x + delta u))."""
    return oracle.greater(x - delta * u, x + delta * u)


def check_epsilon(epsilon: float) -> float:
    if not 0 < epsilon < 1:
        raise ValueError(f"epsilon must be in (0, 1), got {epsilon}")
    return float(epsilon)


def _unit(v: np.ndarray, x: np.ndarray, name: str) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    if v.shape != x.shape:
        raise ValueError(f"{name} must have the shape of x, {x.shape}, got {v.shape}")
    length = np.linalg.norm(v)
    if not length > 0:
        raise ValueError(f"{name} must be a non-zero vector")
    return v / length


# -- the tester -----------------------------------------------------------------------------

@dataclass(frozen=True)
class TesterPlan:
    queries: int  # k
    threshold: int  # answer "close" when at most this many slopes are positive
    c: float  # weight of -v in each query direction
    p_close: float  # largest chance of a positive slope when ||g - v|| <= epsilon
    p_far: float  # smallest chance when ||g - v|| >= 2 epsilon
    error_close: float  # exact worst-case chance of answering "far" when close
    error_far: float  # ... and of answering "close" when far


def angle_of_distance(distance: float) -> float:
    """The angle between unit vectors at Euclidean distance ``distance``."""
    return 2.0 * math.asin(min(distance / 2.0, 1.0))


def positive_probability(theta: float, c: float) -> float:
    """P(<g, -c v + z> > 0) for unit g at angle theta from v, z standard Gaussian orthogonal to v."""
    if theta <= 0:
        return 0.0
    return float(norm.sf(c * math.cos(theta) / math.sin(theta))) if theta < math.pi else 1.0


def binomial_cdf(max_trials: int, p: float) -> np.ndarray:
    """P(Binomial(k, p) <= m) for k = 1..max_trials (rows) and m = 0..max_trials (columns), by the
    recursion pmf_k(m) = (1-p) pmf_{k-1}(m) + p pmf_{k-1}(m-1): scipy per (k, p) call is too slow here."""
    pmf = np.zeros((max_trials + 1, max_trials + 1))
    pmf[0, 0] = 1.0
    for k in range(1, max_trials + 1):
        pmf[k] = (1 - p) * pmf[k - 1]
        pmf[k, 1:] += p * pmf[k - 1, :-1]
    return np.minimum(np.cumsum(pmf[1:], axis=1), 1.0)


@lru_cache(maxsize=256)
def tester_plan(epsilon: float, error: float = 0.05, max_queries: int = 200) -> TesterPlan:
    """The fewest queries k (with c and threshold) whose exact worst-case errors are both <= ``error``."""
    check_epsilon(epsilon)
    if not 0 < error < 0.5:
        raise ValueError(f"error must be in (0, 0.5), got {error}")
    theta_close, theta_far = angle_of_distance(epsilon), angle_of_distance(2 * epsilon)
    best = None
    k, m = np.arange(1, max_queries + 1)[:, None], np.arange(max_queries + 1)[None, :]
    for a in np.arange(0.5, 4.01, 0.1):
        c = a * math.tan(theta_close)
        p_close, p_far = positive_probability(theta_close, c), positive_probability(theta_far, c)
        error_close, error_far = 1.0 - binomial_cdf(max_queries, p_close), binomial_cdf(max_queries, p_far)
        ok = (error_close <= error) & (error_far <= error) & (m <= k)
        rows = np.flatnonzero(ok.any(1))
        if rows.size and (best is None or k[rows[0], 0] < best.queries):
            i = rows[0]
            t = int(np.flatnonzero(ok[i])[0])
            best = TesterPlan(int(k[i, 0]), t, float(c), p_close, p_far, float(error_close[i, t]),
                              float(error_far[i, t]))
    if best is None:
        raise ValueError(f"no tester within {max_queries} queries reaches error {error} at epsilon {epsilon}")
    return best


def gradient_is_close(oracle: ComparisonOracle, x: np.ndarray, v: np.ndarray, epsilon: float, *,
                  rng: np.random.Generator, delta: float = 1e-4, error: float = 0.05) -> bool:
    """True ("close"): the normalized gradient at x is within epsilon of unit ``v``; False: 2*epsilon-far.
    Uses exactly ``tester_plan(epsilon, error).queries`` queries; each answer is wrong with
    probability at most ``error`` (exactly, for a quadratic f)."""
    x = np.asarray(x, dtype=np.float64)
    v = _unit(v, x, "v")
    plan = tester_plan(check_epsilon(epsilon), error)
    positives = 0
    for _ in range(plan.queries):
        z = rng.standard_normal(x.shape)
        z -= (z @ v) * v
        positives += slope_positive(oracle, x, -plan.c * v + z, delta)
    return positives <= plan.threshold


# -- the estimator --------------------------------------------------------------------------

def estimator_queries(n: int, epsilon: float) -> int:
    """Queries :func:`estimate_gradient` makes: n signs, n-1 tournament matches, n-1 bisections."""
    return n + (n - 1) * (1 + bisection_steps(n, epsilon)) if n > 1 else 1


def bisection_steps(n: int, epsilon: float) -> int:
    return max(0, math.ceil(math.log2(math.sqrt(n - 1) / epsilon))) if n > 1 else 0


def estimate_gradient(oracle: ComparisonOracle, x: np.ndarray, epsilon: float, *, delta: float = 1e-4) -> np.ndarray:
    """A unit vector within ``epsilon`` of grad f(x)/||grad f(x)|| (exactly, for a quadratic f)."""
    x = np.asarray(x, dtype=np.float64)
    check_epsilon(epsilon)
    n = x.size
    eye = np.eye(n)
    signs = np.array([1.0 if slope_positive(oracle, x, eye[i], delta) else -1.0 for i in range(n)])
    top = 0
    for j in range(1, n):  # |g_j| > |g_top| ?
        if slope_positive(oracle, x, signs[j] * eye[j] - signs[top] * eye[top], delta):
            top = j
    ratio = np.zeros(n)
    ratio[top] = signs[top]
    steps = bisection_steps(n, epsilon)
    for j in range(n):
        if j == top:
            continue
        lo, hi = 0.0, 1.0  # |g_j| / |g_top|
        for _ in range(steps):
            mid = 0.5 * (lo + hi)  # |g_j| > mid * |g_top| ?
            if slope_positive(oracle, x, signs[j] * eye[j] - mid * signs[top] * eye[top], delta):
                lo = mid
            else:
                hi = mid
        ratio[j] = signs[j] * 0.5 * (lo + hi)
    return ratio / np.linalg.norm(ratio)


# -- baselines at a query budget ------------------------------------------------------------

def baseline_estimate(name: str, f: Callable[[np.ndarray], float], x: np.ndarray, queries: int, *,
                      rng: np.random.Generator, delta: float = 1e-4) -> np.ndarray:
    """A normalized gradient estimate from ``queries`` oracle calls (values, or comparisons for sign_average)."""
    x = np.asarray(x, dtype=np.float64)
    n = x.size
    if queries < 2:
        raise ValueError(f"queries must be >= 2, got {queries}")
    if name == "finite_difference":  # f(x) once, then forward differences on as many coordinates as fit
        value = ValueOracle(f)
        f0, g = value(x), np.zeros(n)
        for i in range(min(n, queries - 1)):
            e = np.zeros(n)
            e[i] = delta
            g[i] = (value(x + e) - f0) / delta
    elif name == "two_point":  # mean of (f(x + d u) - f(x - d u)) / (2d) u over queries // 2 directions
        value, g = ValueOracle(f), np.zeros(n)
        for _ in range(queries // 2):
            u = rng.standard_normal(n)
            g += (value(x + delta * u) - value(x - delta * u)) / (2 * delta) * u
    elif name == "sign_average":  # mean of sign(<grad f, u>) u over one comparison per direction
        oracle, g = ComparisonOracle(f), np.zeros(n)
        for _ in range(queries):
            u = rng.standard_normal(n)
            g += (1.0 if slope_positive(oracle, x, u, delta) else -1.0) * u
    else:
        raise ValueError(f"baseline must be one of {', '.join(BASELINES)}, got {name!r}")
    length = np.linalg.norm(g)
    return g / length if length > 0 else g


# -- the functions --------------------------------------------------------------------------

@dataclass(frozen=True)
class Problem:
    """f, its exact gradient, and the point x where both are asked."""

    f: Callable[[np.ndarray], float]
    grad: Callable[[np.ndarray], np.ndarray]
    x: np.ndarray

    @property
    def direction(self) -> np.ndarray:
        g = self.grad(self.x)
        return g / np.linalg.norm(g)


def quadratic(n: int, seed: int, gradient: np.ndarray | None = None) -> Problem:
    """f(x) = x'Hx/2 - b'x with H SPD (condition number about 100), at a random x; ``gradient``
    sets grad f(x) by the choice of b."""
    rng = np.random.default_rng([seed, 3])
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    H = (q * np.logspace(0, 2, n)) @ q.T
    x = rng.standard_normal(n)
    b = H @ x - (rng.standard_normal(n) if gradient is None else np.asarray(gradient, dtype=np.float64))
    return Problem(lambda z: 0.5 * z @ H @ z - b @ z, lambda z: H @ z - b, x)


def logistic(seed: int) -> Problem:
    """Mean logistic loss of a linear even/odd classifier on scikit-learn's digits (64 weights) at a random w."""
    from .digits import load_digits_split

    features, labels, _, _ = load_digits_split()
    X, y = features.astype(np.float64), np.where(labels % 2 == 0, 1.0, -1.0)
    w = np.random.default_rng([seed, 5]).normal(scale=0.1, size=X.shape[1])

    def f(z):
        return float(np.logaddexp(0.0, -y * (X @ z)).mean())

    def grad(z):
        return -(X * (y / (1.0 + np.exp(y * (X @ z))))[:, None]).mean(0)

    return Problem(f, grad, w)


def quantized_net(seed: int, format: str = "mxfp4", hidden: int = 32) -> Problem:
    """Cross-entropy of the digits MLP with ``format`` weights, as a function of one test image's
    64 pixels (float64 activations, so the quantized weights are the only approximation)."""
    import torch

    from . import registry
    from .digits import DigitsConfig, load_digits_split
    from .weights import quantized_copy

    config = DigitsConfig.tiny(hidden=hidden, seed=seed)
    model = quantized_copy(registry.train("digits", config, cache_dir=False).model, format).double().eval()
    _, _, x_test, y_test = load_digits_split(config.test_fraction, config.seed)
    label = torch.tensor([int(y_test[0])])

    def loss(z):
        return torch.nn.functional.cross_entropy(model(z[None]), label)

    def f(z):
        with torch.no_grad():
            return float(loss(torch.from_numpy(np.asarray(z, dtype=np.float64))))

    def grad(z):
        t = torch.tensor(z, dtype=torch.float64, requires_grad=True)
        loss(t).backward()
        return t.grad.numpy()

    return Problem(f, grad, x_test[0].astype(np.float64))


def make_problem(function: str, n: int, seed: int) -> Problem:
    if function == "quadratic":
        return quadratic(n, seed)
    if function == "logistic":
        return logistic(seed)
    if function == "quantized_net":
        return quantized_net(seed)
    raise ValueError(f"function must be one of {', '.join(FUNCTIONS)}, got {function!r}")


# -- the study entry (edgekit study comparison_oracle) --------------------------------------

@dataclass(frozen=True)
@checked
class ComparisonOracleConfig:
    # quadratic (dimension n), logistic (64), quantized_net (64, MXFP4 digits MLP)
    function: str = bounded("quadratic", choices=FUNCTIONS)
    n: int = bounded(32, low=2)
    epsilon: float = bounded(0.05, low=0, high=1, low_open=True, high_open=True)
    delta: float = bounded(1e-4, low=0, low_open=True)
    seed: int = bounded(0, low=0)

    @classmethod
    def tiny(cls, **overrides) -> ComparisonOracleConfig:
        return cls(**{"n": 8, "epsilon": 0.1, **overrides})


def evaluate(config: ComparisonOracleConfig | None = None) -> dict:
    """The estimator's error and exact query count against its bound, each baseline's error at the
    same number of queries, and the tester's answers on v = the estimate (close) and on a
    vector 3*epsilon away (far)."""
    config = config or ComparisonOracleConfig()
    problem = make_problem(config.function, config.n, config.seed)
    truth, rng = problem.direction, np.random.default_rng(config.seed)
    oracle = ComparisonOracle(problem.f)
    estimate = estimate_gradient(oracle, problem.x, config.epsilon, delta=config.delta)
    out = {"estimator_error": float(np.linalg.norm(estimate - truth)), "estimator_queries": oracle.queries,
           "estimator_bound": estimator_queries(problem.x.size, config.epsilon), "epsilon": config.epsilon}
    for name in BASELINES:
        guess = baseline_estimate(name, problem.f, problem.x, oracle.queries, rng=rng, delta=config.delta)
        out[f"{name}_error"] = float(np.linalg.norm(guess - truth))
    far = rotate_towards_random(truth, 3 * config.epsilon, rng)
    tester = ComparisonOracle(problem.f)
    out["tester_says_close_on_truth"] = int(gradient_is_close(tester, problem.x, truth, config.epsilon, rng=rng,
                                                          delta=config.delta))
    out["tester_says_close_on_far"] = int(gradient_is_close(tester, problem.x, far, config.epsilon, rng=rng,
                                                        delta=config.delta))
    out["tester_queries_per_test"] = tester.queries // 2
    return out


def rotate_towards_random(g: np.ndarray, distance: float, rng: np.random.Generator) -> np.ndarray:
    """A unit vector at Euclidean ``distance`` from unit ``g``, in a random direction orthogonal to it."""
    w = rng.standard_normal(g.shape)
    w -= (w @ g) * g
    w /= np.linalg.norm(w)
    theta = angle_of_distance(distance)
    return math.cos(theta) * g + math.sin(theta) * w
