"""One LiftQuant configuration per layer, chosen by a knapsack over sensitivity and bytes.

Each layer offers options (a configuration, its exact stored bytes, and a cost: how much
the model's error grows when that layer takes it). :func:`choose` picks one option per
layer minimizing the summed cost with the total bytes inside a window
``[low, high]``: a multiple-choice knapsack, solved exactly by dynamic programming over
bytes counted in units of ``(high / resolution)`` (every option's bytes rounded up, so
the true total never exceeds ``high``).

Codebooks are stored once per configuration used. :func:`choose` solves with the options
restricted to a set of configurations whose codebooks it reserves: first all of them, then
the set that solution used, until the two agree. When the budget cannot even hold every
codebook (tiny models), it tries each configuration alone and each pair, and keeps the
cheapest solution.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

RESOLUTION = 20000  # byte units over the budget: rounding costs at most layers / RESOLUTION of it
TOLERANCE = 0.01  # the achieved total lands within 1% below what was asked


@dataclass(frozen=True)
class Option:
    """One way to store a layer: ``format`` (a configuration name), its ``nbytes`` and ``cost``."""

    format: str
    nbytes: int
    cost: float


@dataclass(frozen=True)
class Choice:
    """The chosen option per layer, and the totals."""

    layers: dict[str, Option]
    nbytes: int  # layers plus the codebooks used
    codebook_nbytes: int
    cost: float


def _solve(options: Mapping[str, Sequence[Option]], low: float, high: float,
           resolution: int) -> dict[str, Option] | None:
    unit = high / resolution
    names = list(options)
    cost = np.full(resolution + 1, np.inf)
    cost[0] = 0.0
    picks = np.zeros((len(names), resolution + 1), np.int16)
    for li, name in enumerate(names):
        best = np.full(resolution + 1, np.inf)
        pick = np.zeros(resolution + 1, np.int16)
        for oi, opt in enumerate(options[name]):
            w = math.ceil(opt.nbytes / unit - 1e-9)
            if w > resolution:
                continue
            shifted = np.full(resolution + 1, np.inf)
            shifted[w:] = cost[: resolution + 1 - w] + opt.cost
            better = shifted < best
            best[better] = shifted[better]
            pick[better] = oi
        cost, picks[li] = best, pick
    window = np.arange(resolution + 1) * unit >= low + unit * len(names)  # units over-count by < 1 per layer
    candidates = np.where(window & np.isfinite(cost))[0]
    if not len(candidates):
        return None
    b = int(candidates[np.argmin(cost[candidates])])
    chosen = {}
    for li in range(len(names) - 1, -1, -1):
        opt = options[names[li]][picks[li, b]]
        chosen[names[li]] = opt
        b -= math.ceil(opt.nbytes / unit - 1e-9)
    return {name: chosen[name] for name in names}


def choose(options: Mapping[str, Sequence[Option]], budget: float, codebook_nbytes: Mapping[str, int], *,
           tolerance: float = TOLERANCE, resolution: int = RESOLUTION) -> Choice:
    """Options per layer whose bytes plus codebooks land in ``[budget * (1 - tolerance), budget]``.

    ``codebook_nbytes``: bytes of each configuration's shared codebook. Raises ValueError
    when no combination fits under ``budget`` or none reaches the window's lower end.
    """
    if not options or any(not opts for opts in options.values()):
        raise ValueError("options must give at least one option for every layer")
    smallest = sum(min(o.nbytes for o in opts) for opts in options.values())
    largest = sum(max(o.nbytes for o in opts) for opts in options.values())
    if budget < smallest:
        raise ValueError(f"the budget of {budget:.0f} bytes is smaller than the smallest encoding of these layers "
                         f"({smallest} bytes plus codebooks)")
    low = budget * (1 - tolerance)

    def restricted(formats: frozenset) -> Choice | None:
        reserve = sum(codebook_nbytes[f] for f in formats)
        subset = {name: [o for o in opts if o.format in formats] for name, opts in options.items()}
        if budget <= reserve or any(not opts for opts in subset.values()):
            return None
        chosen = _solve(subset, low - reserve, budget - reserve, resolution)
        if chosen is None:
            return None
        used = {o.format for o in chosen.values()}
        books = sum(codebook_nbytes[f] for f in used)
        total = sum(o.nbytes for o in chosen.values()) + books
        return Choice(chosen, total, books, sum(o.cost for o in chosen.values()))

    every = frozenset(o.format for opts in options.values() for o in opts)
    formats, solution = every, None
    while formats:
        solution = restricted(formats)
        if solution is None:
            break
        used = frozenset(o.format for o in solution.layers.values())
        if used == formats or low <= solution.nbytes <= budget:
            return solution
        formats = used  # fewer codebooks than reserved for: free their bytes and solve again
    small = [frozenset((a,)) for a in sorted(every)] + [frozenset((a, b)) for a in sorted(every) for b in sorted(every)
                                                        if a < b]
    found = [c for c in map(restricted, small) if c is not None and low <= c.nbytes <= budget]
    if found:
        return min(found, key=lambda c: c.cost)
    raise ValueError(f"no combination of options lands within {tolerance:.0%} below {budget:.0f} bytes; "
                     f"these layers take {smallest} to {largest} bytes plus up to "
                     f"{sum(codebook_nbytes.values())} bytes of codebooks")
