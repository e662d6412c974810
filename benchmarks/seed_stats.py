"""Summaries over training seeds shared by the benchmark scripts (imported from their folder)."""

from __future__ import annotations

import numpy as np
from scipy import stats


def interval(values) -> dict:
    """Mean, sample standard deviation and 95% t-interval half-width over seeds, with the values."""
    values = np.asarray(values, dtype=float)
    sd = float(values.std(ddof=1)) if len(values) > 1 else 0.0
    half = float(stats.t.ppf(0.975, len(values) - 1) * sd / np.sqrt(len(values))) if len(values) > 1 else 0.0
    return {"mean": float(values.mean()), "std": sd, "ci95": half, "values": values.tolist()}


def mean_ci(values) -> dict:
    """Mean and normal-approximation 95% half-width (1.96 standard errors) over seeds, with the values."""
    values = np.asarray(values, dtype=float)
    half = 1.96 * values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else 0.0
    return {"mean": float(values.mean()), "ci95": float(half), "per_seed": values.tolist()}


def paired_difference(a, b) -> dict:
    """``a - b`` over paired runs (same seed, same task): its t-interval, the paired t-test's p and how
    many pairs have ``a`` below ``b``."""
    diff = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    p = float(stats.ttest_1samp(diff, 0.0).pvalue) if len(diff) > 1 and np.std(diff) > 0 else 1.0
    return {**interval(diff), "p": p, "below": int(np.sum(diff < 0)), "pairs": len(diff)}
