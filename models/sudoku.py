"""Sudoku: a solver, generators of solved grids and of puzzles with a unique solution.

Grids are ``(n, n)`` integer arrays, ``n`` = 4 (2x2 boxes) or 9 (3x3 boxes); 0 marks an
empty cell, 1..n the digits. The solver is an exact backtracking search over bitmasks
that always branches on the empty cell with the fewest candidates; it counts solutions
up to a limit, which is how a puzzle's uniqueness is checked. Puzzles are made by
deleting the cells of a solved grid one at a time in a seeded random order, skipping any
deletion that would admit a second solution.
"""

from __future__ import annotations

from functools import cache

import numpy as np

SIZES = (4, 9)
# holes (deleted cells) per difficulty level; 4x4 puzzles with a unique solution keep >= 4 clues
LEVELS = {4: {"easy": 6, "medium": 9, "hard": 11}, 9: {"easy": 36, "medium": 46, "hard": 52}}
LEVEL_NAMES = tuple(dict.fromkeys(level for levels in LEVELS.values() for level in levels))


def box_size(n: int) -> int:
    if n not in SIZES:
        raise ValueError(f"sudoku size n={n!r} is not supported; allowed: {', '.join(map(str, SIZES))}")
    return round(n ** 0.5)


def holes_for(n: int, level: str) -> int:
    box_size(n)
    if level not in LEVELS[n]:
        raise ValueError(f"difficulty level {level!r} is unknown; allowed: {', '.join(LEVELS[n])}")
    return LEVELS[n][level]


def units(n: int) -> list[np.ndarray]:
    """The 3n units (rows, columns, boxes), each as an array of flat cell indices."""
    b = box_size(n)
    idx = np.arange(n * n).reshape(n, n)
    boxes = [idx[r:r + b, c:c + b].ravel() for r in range(0, n, b) for c in range(0, n, b)]
    return [idx[i] for i in range(n)] + [idx[:, i] for i in range(n)] + boxes


def check_grid(grid, n: int | None = None) -> np.ndarray:
    """``grid`` as an (n, n) int64 array, or a ``ValueError`` saying what is malformed.

    Checks the shape (square, side 4 or 9), the values (0 for empty, 1..n) and that no
    digit repeats in a row, column or box.
    """
    try:
        arr = np.asarray(grid)
    except (TypeError, ValueError) as err:
        raise ValueError(f"grid is not an array of integers: {err}") from None
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
        raise ValueError(f"grid must be a square 2-D array, got shape {arr.shape}")
    side = arr.shape[0]
    box_size(side)
    if n is not None and side != n:
        raise ValueError(f"grid has side {side}, expected {n}")
    if not np.issubdtype(arr.dtype, np.integer) and (
            not np.issubdtype(arr.dtype, np.floating) or not np.all(arr == np.round(arr))):
        raise ValueError(f"grid values must be integers 0..{side}, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.min() < 0 or arr.max() > side:
        raise ValueError(f"grid values must be 0 (empty) or 1..{side}, got values in [{arr.min()}, {arr.max()}]")
    if violations(arr):
        raise ValueError("grid repeats a digit in a row, column or box")
    return arr


def violations(grid) -> int:
    """Constraint violations of a (partly) filled grid: over every row, column and box, the
    filled cells minus the distinct digits among them (0 for a consistent grid)."""
    flat = np.asarray(grid).ravel()
    n = round(len(flat) ** 0.5)
    total = 0
    for unit in units(n):
        values = flat[unit]
        values = values[values > 0]
        total += len(values) - len(np.unique(values))
    return int(total)


@cache
def _peers(n: int) -> tuple[tuple[int, ...], ...]:
    peers = [set() for _ in range(n * n)]
    for unit in units(n):
        for cell in unit:
            peers[cell].update(int(u) for u in unit)
    return tuple(tuple(sorted(p - {i})) for i, p in enumerate(peers))


def _search(cells: list[int], n: int, limit: int, order: np.random.Generator | None) -> list[list[int]]:
    """Depth-first search for up to ``limit`` completions of ``cells`` (flat, 0 = empty)."""
    peers, full = _peers(n), (1 << n) - 1
    found: list[list[int]] = []

    def candidates(i: int) -> int:
        used = 0
        for p in peers[i]:
            if cells[p]:
                used |= 1 << (cells[p] - 1)
        return full & ~used

    def recurse() -> bool:
        best, best_mask, best_count = -1, 0, n + 1
        for i, v in enumerate(cells):
            if v == 0:
                mask = candidates(i)
                count = mask.bit_count()
                if count < best_count:
                    best, best_mask, best_count = i, mask, count
                    if count <= 1:
                        break
        if best < 0:
            found.append(list(cells))
            return len(found) >= limit
        digits = [d + 1 for d in range(n) if best_mask >> d & 1]
        if order is not None:
            order.shuffle(digits)
        for d in digits:
            cells[best] = d
            if recurse():
                return True
        cells[best] = 0
        return False

    recurse()
    return found


def solve(puzzle, limit: int = 2) -> list[np.ndarray]:
    """Up to ``limit`` solutions of ``puzzle`` (each an (n, n) array): none, one, or more."""
    grid = check_grid(puzzle)
    n = grid.shape[0]
    return [np.array(s, dtype=np.int64).reshape(n, n) for s in _search(grid.ravel().tolist(), n, limit, None)]


def unique_solution(puzzle) -> np.ndarray:
    """The one solution of ``puzzle``; a ``ValueError`` when it has none or several."""
    solutions = solve(puzzle, limit=2)
    if not solutions:
        raise ValueError("puzzle has no solution")
    if len(solutions) > 1:
        raise ValueError("puzzle has more than one solution")
    return solutions[0]


def random_solved_grid(n: int, rng: np.random.Generator) -> np.ndarray:
    """A solved grid: the solver run on an empty grid, trying digits in a random order."""
    box_size(n)
    return np.array(_search([0] * (n * n), n, 1, rng)[0], dtype=np.int64).reshape(n, n)


def make_puzzle(solved, holes: int, rng: np.random.Generator) -> np.ndarray:
    """Delete up to ``holes`` cells of ``solved`` so that the puzzle keeps a unique solution.

    Cells are tried in a random order; a deletion that lets a second solution in is undone.
    Returns fewer holes only when no further cell can go.
    """
    grid = check_grid(solved).copy()
    n = grid.shape[0]
    if not 0 <= holes <= n * n:
        raise ValueError(f"holes={holes} must lie in [0, {n * n}]")
    if (grid == 0).any():
        raise ValueError("make_puzzle takes a solved grid (no empty cells)")
    flat, removed = grid.ravel(), 0
    for cell in rng.permutation(n * n):
        if removed == holes:
            break
        digit, flat[cell] = flat[cell], 0
        if len(_search(flat.tolist(), n, 2, None)) == 1:
            removed += 1
        else:
            flat[cell] = digit
    return flat.reshape(n, n)


@cache
def all_grids_4x4() -> np.ndarray:
    """Every solved 4x4 grid (there are 288), sorted, as (288, 4, 4)."""
    return np.array(sorted(_search([0] * 16, 4, 10_000, None)), dtype=np.int64).reshape(-1, 4, 4)


@cache
def grid_splits(n: int, count: int = 0, seed: int = 0) -> dict[str, np.ndarray]:
    """Disjoint ``train``/``val``/``test`` sets of solved grids (60/20/20 per cent).

    4x4: all 288 grids, shuffled by ``seed`` (``count`` ignored). 9x9: ``count`` grids from
    the seeded random generator, duplicates dropped.
    """
    rng = np.random.default_rng([seed, n])
    if n == 4:
        grids = all_grids_4x4()[rng.permutation(288)]
    else:
        box_size(n)
        seen, grids = set(), []
        while len(grids) < count:
            g = random_solved_grid(n, rng)
            if g.tobytes() not in seen:
                seen.add(g.tobytes())
                grids.append(g)
        grids = np.stack(grids)
    a, b = int(0.6 * len(grids)), int(0.8 * len(grids))
    return {"train": grids[:a], "val": grids[a:b], "test": grids[b:]}


@cache
def puzzle_set(n: int, level: str, split: str, count: int, grids: int = 0, seed: int = 0):
    """(puzzles, solutions), each (count, n, n), from the ``split`` grids, cycling through them.

    Every puzzle has a unique solution (checked) and the level's number of holes where
    uniqueness allows it.
    """
    holes = holes_for(n, level)
    pool = grid_splits(n, grids, seed)[split]
    rng = np.random.default_rng([seed, n, holes, ("train", "val", "test").index(split)])
    order = rng.permutation(len(pool))
    solutions = np.stack([pool[order[i % len(pool)]] for i in range(count)])
    puzzles = np.stack([make_puzzle(s, holes, rng) for s in solutions])
    return puzzles, solutions
