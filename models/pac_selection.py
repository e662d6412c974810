"""A selection threshold with a PAC guarantee on the false discovery rate.

An item (a generated program) is selected when its score is at least a threshold t. Its false
discovery rate is FDR(t) = P(wrong | score >= t). On a calibration set, for each t of a grid
fixed in advance, the wrong items among the n(t) selected are Binomial(n(t), FDR(t)), so the
Clopper-Pearson upper bound at level delta / |grid| holds for every t of the grid at once with
probability at least 1 - delta (a union bound over the search). The chosen threshold is the
lowest (selecting the most) whose bound is at most epsilon; with probability at least
1 - delta over the calibration draw, its FDR is at most epsilon. When no threshold qualifies,
nothing is selected (``inf``).
"""

from __future__ import annotations

import numpy as np
from scipy.stats import beta

DEFAULT_GRID = tuple(np.round(np.linspace(0.0, 1.0, 21), 10))


def clopper_pearson_upper(errors: int, n: int, alpha: float) -> float:
    """One-sided upper confidence bound (level 1 - alpha) on a binomial rate from ``errors`` of ``n``."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    if n < 0 or not 0 <= errors <= n:
        raise ValueError(f"need 0 <= errors <= n, got errors={errors}, n={n}")
    if n == 0 or errors == n:
        return 1.0
    return float(beta.ppf(1.0 - alpha, errors + 1, n - errors))


def _check_inputs(scores, correct, epsilon, delta) -> tuple[np.ndarray, np.ndarray]:
    scores, correct = np.asarray(scores, dtype=float), np.asarray(correct, dtype=bool)
    if scores.shape != correct.shape or scores.ndim != 1:
        raise ValueError(f"scores and correct must be 1-D of one length, got {scores.shape} and {correct.shape}")
    if not 0 < epsilon < 1:
        raise ValueError(f"epsilon (the target FDR) must lie in (0, 1), got {epsilon}")
    if not 0 < delta < 1:
        raise ValueError(f"delta (the failure probability) must lie in (0, 1), got {delta}")
    return scores, correct


def pac_threshold(scores, correct, epsilon: float, delta: float, grid=DEFAULT_GRID) -> float:
    """The lowest grid threshold whose Clopper-Pearson bound (level delta / len(grid)) on the
    FDR of the calibration items it selects is at most ``epsilon``; ``inf`` when none is."""
    scores, correct = _check_inputs(scores, correct, epsilon, delta)
    alpha = delta / len(grid)
    for t in sorted(grid):
        chosen = scores >= t
        if clopper_pearson_upper(int((~correct[chosen]).sum()), int(chosen.sum()), alpha) <= epsilon:
            return float(t)
    return float("inf")


def empirical_threshold(scores, correct, epsilon: float, grid=DEFAULT_GRID) -> float:
    """The baseline without a bound: the lowest grid threshold whose calibration FDR is at most ``epsilon``."""
    scores, correct = _check_inputs(scores, correct, epsilon, 0.5)
    for t in sorted(grid):
        chosen = scores >= t
        if chosen.any() and (~correct[chosen]).mean() <= epsilon:
            return float(t)
    return float("inf")


def selection_outcome(scores, correct, threshold: float) -> dict:
    """FDR (0 when nothing is selected), selection rate and the share of correct items kept."""
    scores, correct = np.asarray(scores, dtype=float), np.asarray(correct, dtype=bool)
    chosen = scores >= threshold
    n = int(chosen.sum())
    return {"fdr": float((~correct[chosen]).sum() / n) if n else 0.0,
            "selection_rate": n / len(scores),
            "recall": float(correct[chosen].sum() / max(1, correct.sum()))}
