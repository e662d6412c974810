"""DC-LA: proximal Langevin sampling from exp(-f - r1 + r2) with r1 and r2 convex.

A difference-of-convex prior (l1 - l2, capped l1) has no useful proximal map of its own,
so DC-LA takes the Moreau envelopes of r1 and r2 separately and moves the concave part
-r2 into the smooth term. One step, on many chains at once:

    X <- X - g*grad f(X) + g*grad M_{l2*r2}(X) - g*grad M_{l1*r1}(X) + sqrt(2g)*noise,
    grad M_{l*r}(x) = (x - prox_{l*r}(x)) / l.

Baselines on the same step budget: sub-gradient Langevin on f + r1 - r2, and MYULA that
smooths r1 and ignores r2 (so it samples exp(-f - r1), the wrong target). Targets: a
Gaussian likelihood in 1-2 dimensions, whose density is known exactly by quadrature on a
grid, and a 64-pixel deconvolution.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.stats import wasserstein_distance

from .config_fields import bounded, checked

METHODS = ("dcla", "myula_r1", "subgradient")
PRIORS = ("l1_minus_l2", "capped_l1")
TARGETS = ("toy", "deconvolution")


# -- penalties: value, proximal map, a sub-gradient -----------------------------------------

@dataclass(frozen=True)
class Penalty:
    """A penalty r(x) on the rows of an array (one row per chain). ``prox(x, t)`` is
    prox_{t*r}(x); only convex penalties have one here. A difference-of-convex penalty
    names its convex parts ``dc = (r1, r2)``, r = r1 - r2."""

    name: str
    value: Callable[[np.ndarray], np.ndarray]
    subgradient: Callable[[np.ndarray], np.ndarray]
    prox: Callable[[np.ndarray, float], np.ndarray] | None = None
    dc: tuple[Penalty, Penalty] | None = None

    @property
    def convex(self) -> bool:
        return self.prox is not None


def l1(weight: float) -> Penalty:
    """weight * ||x||_1; its prox is soft thresholding."""
    return Penalty(f"{weight:g}*l1", lambda x: weight * np.abs(x).sum(-1), lambda x: weight * np.sign(x),
                   lambda x, t: np.sign(x) * np.maximum(np.abs(x) - t * weight, 0.0))


def l2_norm(weight: float) -> Penalty:
    """weight * ||x||_2 (not squared); its prox shrinks the whole vector towards 0 (block soft thresholding)."""
    def norm(x):
        return np.linalg.norm(x, axis=-1, keepdims=True)

    def subgradient(x):
        n = norm(x)
        return weight * np.divide(x, n, out=np.zeros_like(x), where=n > 0)

    def prox(x, t):
        n = norm(x)
        return x * np.maximum(1.0 - t * weight / np.maximum(n, 1e-300), 0.0)

    return Penalty(f"{weight:g}*l2", lambda x: weight * norm(x)[..., 0], subgradient, prox)


def excess(weight: float, cap: float) -> Penalty:
    """weight * sum_i max(|x_i| - cap, 0): convex, and l1 minus it is the capped l1."""
    def prox(x, t):
        a, s = np.abs(x), np.sign(x)
        return np.where(a <= cap, x, np.where(a <= cap + t * weight, s * cap, x - s * t * weight))

    return Penalty(f"{weight:g}*excess({cap:g})", lambda x: weight * np.maximum(np.abs(x) - cap, 0.0).sum(-1),
                   lambda x: weight * np.sign(x) * (np.abs(x) > cap), prox)


def difference(r1: Penalty, r2: Penalty, name: str) -> Penalty:
    """r1 - r2 (non-convex in general): no prox, its convex parts kept for DC-LA."""
    return Penalty(name, lambda x: r1.value(x) - r2.value(x), lambda x: r1.subgradient(x) - r2.subgradient(x),
                   dc=(r1, r2))


def l1_minus_l2(weight: float, alpha: float) -> Penalty:
    """weight * (||x||_1 - alpha*||x||_2); alpha < 1 keeps exp(-r) normalizable."""
    return difference(l1(weight), l2_norm(alpha * weight), f"{weight:g}*(l1-{alpha:g}*l2)")


def capped_l1(weight: float, cap: float) -> Penalty:
    """weight * sum_i min(|x_i|, cap) = weight*||x||_1 - weight*sum_i max(|x_i| - cap, 0)."""
    return difference(l1(weight), excess(weight, cap), f"{weight:g}*capped_l1({cap:g})")


def require_convex(penalty: Penalty, parameter: str) -> Penalty:
    if not penalty.convex:
        parts = f" (split it: {parameter}={penalty.dc[0].name}, and its other part {penalty.dc[1].name})" \
            if penalty.dc else ""
        raise ValueError(f"{parameter} must be a convex penalty with a proximal map (l1, l2_norm, excess), "
                         f"got the non-convex {penalty.name!r}{parts}")
    return penalty


def moreau_gradient(penalty: Penalty, x: np.ndarray, smoothing: float) -> np.ndarray:
    """grad M_{l*r}(x) = (x - prox_{l*r}(x)) / l, for convex r."""
    return (x - penalty.prox(x, smoothing)) / smoothing


def moreau_value(penalty: Penalty, x: np.ndarray, smoothing: float) -> np.ndarray:
    """M_{l*r}(x) = min_p r(p) + ||x - p||^2 / (2l), attained at p = prox_{l*r}(x)."""
    p = penalty.prox(x, smoothing)
    return penalty.value(p) + ((x - p) ** 2).sum(-1) / (2 * smoothing)


# -- posteriors -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Posterior:
    """exp(-||y - A x||^2 / (2 sigma^2) - prior(x)), prior = r1 - r2 with r1, r2 convex."""

    A: np.ndarray
    y: np.ndarray
    sigma: float
    prior: Penalty

    def __post_init__(self):
        if self.A.ndim != 2 or self.A.shape[0] != self.y.shape[0]:
            raise ValueError(f"A must be a matrix with as many rows as y has entries, got A {self.A.shape}, "
                             f"y {self.y.shape}")
        if self.prior.dc is None:
            raise ValueError(f"prior must be a difference of convex penalties (l1_minus_l2, capped_l1), "
                             f"got {self.prior.name!r}")
        for penalty, parameter in zip(self.prior.dc, ("r1", "r2")):
            require_convex(penalty, parameter)

    @property
    def dim(self) -> int:
        return self.A.shape[1]

    def grad_f(self, x: np.ndarray) -> np.ndarray:
        return (x @ self.A.T - self.y) @ self.A / self.sigma**2

    def potential(self, x: np.ndarray) -> np.ndarray:
        """-log density up to a constant, on rows of x."""
        return ((x @ self.A.T - self.y) ** 2).sum(-1) / (2 * self.sigma**2) + self.prior.value(x)

    @property
    def lipschitz_f(self) -> float:
        return float(np.linalg.norm(self.A, 2) ** 2 / self.sigma**2)


def drift(method: str, posterior: Posterior, smoothing: float) -> Callable[[np.ndarray], np.ndarray]:
    """The gradient each sampler steps against (the step is X - g*drift(X) + noise)."""
    r1, r2 = posterior.prior.dc
    if method == "dcla":
        return lambda x: posterior.grad_f(x) + moreau_gradient(r1, x, smoothing) - moreau_gradient(r2, x, smoothing)
    if method == "myula_r1":
        return lambda x: posterior.grad_f(x) + moreau_gradient(r1, x, smoothing)
    if method == "subgradient":
        return lambda x: posterior.grad_f(x) + posterior.prior.subgradient(x)
    raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")


def langevin(grad: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, step: float, n_steps: int,
             rng: np.random.Generator, burn_in: int = 0) -> np.ndarray:
    """Unadjusted Langevin on the rows of ``x0`` (one chain each): (n_steps - burn_in, chains, d) samples."""
    if not step > 0:
        raise ValueError(f"step must be > 0, got {step}")
    if not 0 <= burn_in < n_steps:
        raise ValueError(f"burn_in must be in [0, n_steps), got {burn_in} with n_steps={n_steps}")
    x = np.array(x0, dtype=np.float64)
    out = np.empty((n_steps - burn_in, *x.shape))
    scale = np.sqrt(2 * step)
    for k in range(n_steps):
        x = x - step * grad(x) + scale * rng.standard_normal(x.shape)
        if k >= burn_in:
            out[k - burn_in] = x
    return out


def sample(method: str, posterior: Posterior, *, step: float, smoothing: float, n_steps: int, chains: int,
           seed: int, burn_in: int | None = None) -> tuple[np.ndarray, float]:
    """(samples (kept steps, chains, d), seconds) of one sampler, chains started at 0."""
    if not smoothing > 0:
        raise ValueError(f"smoothing must be > 0, got {smoothing}")
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    out = langevin(drift(method, posterior, smoothing), np.zeros((chains, posterior.dim)), step, n_steps, rng,
                   n_steps // 4 if burn_in is None else burn_in)
    return out, time.perf_counter() - start


# -- exact density by quadrature, and the metrics -------------------------------------------

@dataclass(frozen=True)
class Quadrature:
    """The posterior's marginals on a grid, each normalized: ``marginals[i]`` over ``axis``."""

    axis: np.ndarray
    marginals: np.ndarray  # (d, len(axis)), rows sum to 1


def smoothed_potential(posterior: Posterior, smoothing: float) -> Callable[[np.ndarray], np.ndarray]:
    """f + M_{l*r1} - M_{l*r2}: what DC-LA samples as its step goes to 0 (its drift is this gradient)."""
    r1, r2 = posterior.prior.dc
    return lambda x: (((x @ posterior.A.T - posterior.y) ** 2).sum(-1) / (2 * posterior.sigma**2)
                      + moreau_value(r1, x, smoothing) - moreau_value(r2, x, smoothing))


def quadrature(posterior: Posterior, half_width: float = 8.0, points: int = 801,
               potential: Callable[[np.ndarray], np.ndarray] | None = None) -> Quadrature:
    """Marginal densities of a 1-2 dimensional posterior (or of exp(-``potential``)) on a regular
    grid: exact up to the grid."""
    if posterior.dim not in (1, 2):
        raise ValueError(f"quadrature needs a 1- or 2-dimensional posterior, got dimension {posterior.dim}")
    axis = np.linspace(-half_width, half_width, points)
    mesh = np.stack(np.meshgrid(*[axis] * posterior.dim, indexing="ij"), -1)
    logp = -(potential or posterior.potential)(mesh.reshape(-1, posterior.dim)).reshape(mesh.shape[:-1])
    p = np.exp(logp - logp.max())
    p /= p.sum()
    marginals = [p] if posterior.dim == 1 else [p.sum(1), p.sum(0)]
    if max(m[0] + m[-1] for m in marginals) > 1e-6:
        raise ValueError(f"half_width {half_width} cuts off posterior mass: widen the grid")
    return Quadrature(axis, np.stack(marginals))


def marginal_w1(samples: np.ndarray, exact: Quadrature) -> float:
    """Mean over coordinates of the 1-Wasserstein distance between the samples' and the exact marginal."""
    flat = samples.reshape(-1, samples.shape[-1])
    return float(np.mean([wasserstein_distance(flat[:, i], exact.axis, v_weights=exact.marginals[i])
                          for i in range(flat.shape[1])]))


def interval_mass(samples: np.ndarray, exact: Quadrature, level: float = 0.9) -> np.ndarray:
    """The exact posterior mass of each coordinate's central ``level`` interval from the samples
    (``level`` for an exact sampler): credible-interval coverage under the true posterior."""
    flat = samples.reshape(-1, samples.shape[-1])
    lo, hi = np.quantile(flat, [(1 - level) / 2, (1 + level) / 2], axis=0)
    cdf = np.cumsum(exact.marginals, axis=1)
    return np.array([np.interp(hi[i], exact.axis, cdf[i]) - np.interp(lo[i], exact.axis, cdf[i])
                     for i in range(flat.shape[1])])


def effective_sample_size(samples: np.ndarray) -> np.ndarray:
    """ESS of each coordinate over all chains (steps, chains, d): Geyer's initial positive sequence
    on the chain-averaged autocorrelation."""
    n = samples.shape[0]
    centred = samples - samples.mean(0)
    spectrum = np.fft.rfft(centred, n=2 * n, axis=0)
    acov = np.fft.irfft(spectrum * np.conj(spectrum), axis=0)[:n].mean(1) / n  # (lags, d)
    rho = acov / np.maximum(acov[0], 1e-300)
    ess = np.empty(rho.shape[1])
    for j in range(rho.shape[1]):
        pairs = rho[: 2 * (n // 2), j].reshape(-1, 2).sum(1)
        stop = np.argmax(pairs <= 0) if (pairs <= 0).any() else len(pairs)
        tau = -1.0 + 2.0 * pairs[:stop].sum()
        ess[j] = samples.shape[1] * n / max(tau, 1.0)
    return ess


# -- the targets ----------------------------------------------------------------------------

def toy_posterior(seed: int, penalty: str = "l1_minus_l2") -> Posterior:
    """A 2-dimensional Gaussian likelihood with correlated design, y drawn at ``seed``, under
    2*(l1 - 0.8*l2) or a capped l1 (2 * min(|x_i|, 1))."""
    A = np.array([[1.0, 0.6], [0.2, 0.9]])
    prior = dc_prior(penalty, 2.0, cap=1.0)
    rng = np.random.default_rng([seed, 7])
    x = rng.laplace(scale=0.8, size=2)
    sigma = 0.6
    return Posterior(A, A @ x + sigma * rng.standard_normal(2), sigma, prior)


def dc_prior(name: str, weight: float, alpha: float = 0.8, cap: float = 1.0) -> Penalty:
    """weight*(l1 - alpha*l2) or weight*capped_l1(cap), by name."""
    if name == "l1_minus_l2":
        return l1_minus_l2(weight, alpha)
    if name == "capped_l1":
        return capped_l1(weight, cap)
    raise ValueError(f"penalty must be one of {', '.join(PRIORS)}, got {name!r}")


def deconvolution(seed: int, penalty: str = "l1_minus_l2", pixels: int = 64, width: float = 1.5,
                  sigma: float = 0.05, spikes: int = 6) -> tuple[Posterior, np.ndarray]:
    """(posterior, true signal): a ``pixels``-long sparse spike train blurred by a Gaussian
    kernel of ``width`` pixels (circular) with noise ``sigma``; prior 8*(l1 - 0.8*l2) or 8*capped_l1(0.5)."""
    idx = np.arange(pixels)
    gap = np.minimum(np.abs(idx[:, None] - idx[None, :]), pixels - np.abs(idx[:, None] - idx[None, :]))
    A = np.exp(-0.5 * (gap / width) ** 2)
    A /= A.sum(1, keepdims=True)
    rng = np.random.default_rng([seed, 11])
    truth = np.zeros(pixels)
    truth[rng.choice(pixels, spikes, replace=False)] = rng.choice([-1.0, 1.0], spikes) * rng.uniform(0.5, 1.5, spikes)
    prior = dc_prior(penalty, 8.0, cap=0.5)
    return Posterior(A, A @ truth + sigma * rng.standard_normal(pixels), sigma, prior), truth


# -- the study entry (edgekit study dcla) ---------------------------------------------------

@dataclass(frozen=True)
@checked
class DCLAConfig:
    # toy (2-d, exact by quadrature) or deconvolution (64 pixels)
    target: str = bounded("toy", choices=TARGETS)
    penalty: str = bounded("l1_minus_l2", choices=PRIORS)  # or capped_l1
    step: float = bounded(0.02, low=0, low_open=True)
    smoothing: float = bounded(0.05, low=0, low_open=True)
    n_steps: int = bounded(4000, low=1)
    chains: int = bounded(200, low=1)
    seed: int = bounded(0, low=0)

    @classmethod
    def tiny(cls, **overrides) -> DCLAConfig:
        return cls(**{"n_steps": 600, "chains": 50, **overrides})


def evaluate(config: DCLAConfig | None = None) -> dict:
    """Each sampler at the config's step and smoothing, same budget: on ``toy``, W1 to the
    quadrature density and the exact mass of its 90% intervals; on ``deconvolution``, the
    posterior mean's error and how often the 90% intervals hold the true pixel; ESS per second."""
    config = config or DCLAConfig()
    out = {}
    if config.target == "toy":
        posterior = toy_posterior(config.seed, config.penalty)
        exact = quadrature(posterior)
    else:
        posterior, truth = deconvolution(config.seed, config.penalty)
    for method in METHODS:
        samples, seconds = sample(method, posterior, step=config.step, smoothing=config.smoothing,
                                  n_steps=config.n_steps, chains=config.chains, seed=config.seed)
        if config.target == "toy":
            out[f"w1_{method}"] = marginal_w1(samples, exact)
            out[f"coverage90_{method}"] = float(interval_mass(samples, exact).mean())
        else:
            flat = samples.reshape(-1, posterior.dim)
            lo, hi = np.quantile(flat, [0.05, 0.95], axis=0)
            out[f"mse_{method}"] = float(((flat.mean(0) - truth) ** 2).mean())
            out[f"coverage90_{method}"] = float(((lo <= truth) & (truth <= hi)).mean())
        out[f"ess_per_s_{method}"] = float(effective_sample_size(samples).min() / seconds)
    return out
