"""Nearest-code search for LiftQuant: which D signs ``c`` make ``M @ c`` closest to a chunk ``x``.

Three searches, all Numba, parallel over chunks:

* ``exact``: every one of the 2^D sign vectors (offered up to D = 24).
* ``fast``: complete M to a square matrix ``A = [M; N]`` with an orthonormal basis N of
  its null space, invert it, and for every ``p`` in {-1, +1}^(D-d) (the free
  coordinates) take ``c = sign(A^-1 [x; p])``; keep the closest. The ``p`` run in
  Gray-code order, so each candidate's pre-sign vector is an O(D) update of the last.
* ``fast+local``: ``fast``, keeping its K best distinct codes; from each, a block descent
  (re-optimize two groups of 8 signs at a time exactly, the others fixed, cycling over the
  pairs of groups until none lowers the error), then 1-bit-flip steepest descent in float64;
  keep the best result. With at most two groups (D <= 16) one block move is the exact search;
  with three (17 <= D <= 24) the ``slices`` code is one more start (each of the two
  searches finds codes the other misses).
* ``slices`` (up to D = 24): the exact search over the codes whose value in one group of 8
  signs is among that group's ``SLICES_PER_GROUP`` most likely values, for each group in
  turn. A group's values are ranked by the Gaussian density, at ``x - T_g[m]``, of what the
  other groups add (``M c`` over their columns, covariance ``M_o M_o^T`` for random signs):
  where that density is high the other 2^16 codes lie thick around the chunk. Values whose
  ranking distance exceeds the group's smallest by more than ``SLICE_SPREAD`` are skipped.
  Each slice is one block move (exact over the other two groups), so the search costs at
  most 3 x SLICES_PER_GROUP block moves a chunk and needs no fast-search enumeration.

Evaluating a candidate costs O(1) table reads instead of O(dD) arithmetic: the D signs
split into groups of 8, ``T_g[m] = M[:, group g] @ signs(m)`` for the 256 patterns ``m``
of a group, and ``||x - M c||^2 = ||x||^2 + sum_g (||T_g||^2 - 2 x.T_g)[m_g]
+ sum_{g<h} 2 T_g[m_g].T_h[m_h]``: a per-chunk table of 256 entries per group plus
chunk-independent 256 x 256 tables per pair of groups. Errors found this way are float32;
the returned errors are recomputed from the codes in float64. A block move over groups
(a, b) skips the patterns of a whose residual outside the span of b's columns already
exceeds the best error (a lower bound, non-zero where b has fewer columns than d).

Codes are bit masks, one ``uint32`` per chunk: bit ``i`` set means ``c_i = +1``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros

from edgekit.utils.parallel import parallel_map

GROUP_BITS = 8
EXACT_MAX_LIFTED = 24  # 2^24 codes per chunk is the most the exact search enumerates (three groups)
SEARCHES = ("exact", "fast", "fast+local", "slices")
TILE = 64  # chunks that share one pass over the fast search's candidates
DEFAULT_STARTS = 8  # fast+local descends from the 8 best distinct fast candidates
MAX_STARTS = 64
SLICES_PER_GROUP = 10  # at most 30 block moves a chunk at D = 24; with the spread below +1.7% over exact at 24to10
SLICE_SPREAD = np.float32(5.0)  # skip values e^(5/2) ~ 12x less likely than the group's best (a few % faster)
FASTMATH = {"nnan", "ninf", "nsz"}  # lets LLVM vectorize min-reductions; sums keep their order


@dataclass(frozen=True)
class SearchTables:
    """The matrices and lookup tables the kernels read, derived once from ``M`` (d x D)."""

    matrix: np.ndarray  # M, (d, D) float32

    @property
    def lifted(self) -> int:
        return self.matrix.shape[1]

    @cached_property
    def lift(self) -> tuple[np.ndarray, np.ndarray]:
        """(P (D, d), Q^T (D - d, D)) with ``A^-1 = [P | Q]``: the pre-sign vector is ``P x + Q p``."""
        m = self.matrix.astype(np.float64)
        d = m.shape[0]
        null = np.linalg.svd(m)[2][d:]  # orthonormal rows spanning the null space of M
        inverse = np.linalg.inv(np.vstack([m, null]))
        return np.ascontiguousarray(inverse[:, :d], np.float32), np.ascontiguousarray(inverse[:, d:].T, np.float32)

    @cached_property
    def groups(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(T (G, 256, d), ||T||^2 (G, 256), cross (G, G, 256, 256), sizes (G,)): the group tables.

        ``cross[g, h] = 2 T_g T_h^T`` for g != h (the diagonal is unused); ``sizes[g]`` is the
        number of patterns of group g (256, or fewer for a short last group).
        """
        m = self.matrix.astype(np.float64)
        d, D = m.shape
        G = math.ceil(D / GROUP_BITS)
        patterns = np.arange(1 << GROUP_BITS)
        tabs = np.zeros((G, 1 << GROUP_BITS, d))
        sizes = np.zeros(G, np.int64)
        for g in range(G):
            cols = m[:, g * GROUP_BITS: (g + 1) * GROUP_BITS]
            width = cols.shape[1]
            sizes[g] = 1 << width
            signs = ((patterns[: sizes[g], None] >> np.arange(width)) & 1) * 2.0 - 1.0
            tabs[g, : sizes[g]] = signs @ cols.T
        cross = np.zeros((G, G, 1 << GROUP_BITS, 1 << GROUP_BITS))
        for g in range(G):
            for h in range(g + 1, G):
                cross[g, h] = 2.0 * tabs[g] @ tabs[h].T
                cross[h, g] = cross[g, h].T
        return (tabs.astype(np.float32), (tabs**2).sum(-1).astype(np.float32), cross.astype(np.float32), sizes)

    @cached_property
    def transposed(self) -> np.ndarray:
        """T as (G, d, 256), so that the linear terms of one group vectorize over its patterns."""
        return np.ascontiguousarray(self.groups[0].transpose(0, 2, 1))

    @cached_property
    def bounds(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(U (G, d, R), U_b^T T_a as (G, G, R, 256), dims (G,), C (G, 8, d), C_b T_a as (G, G, 8, 256)):
        U_b is an orthonormal basis of the complement of the span of group b's columns
        (``dims[b]`` of its R columns are used), C_b those columns as rows (zero past a short
        group's last)."""
        m = self.matrix.astype(np.float64)
        tabs, _, _, sizes = self.groups
        d, G = m.shape[0], tabs.shape[0]
        dims = np.array([d - min(d, int(np.log2(sizes[g]))) for g in range(G)], np.int64)
        R = max(1, int(dims.max()))
        bases = np.zeros((G, d, R))
        for g in range(G):
            u = np.linalg.svd(m[:, g * GROUP_BITS: (g + 1) * GROUP_BITS])[0]
            bases[g, :, : dims[g]] = u[:, d - dims[g]:]
        proj = np.einsum("amk,bkr->abrm", tabs.astype(np.float64), bases)
        cols = np.zeros((G, GROUP_BITS, d))
        for g in range(G):
            block = m[:, g * GROUP_BITS: (g + 1) * GROUP_BITS].T
            cols[g, : block.shape[0]] = block
        reach = np.einsum("amk,bik->abim", tabs.astype(np.float64), cols)
        return (bases.astype(np.float32), np.ascontiguousarray(proj, np.float32), dims, cols.astype(np.float32),
                np.ascontiguousarray(reach, np.float32))

    @cached_property
    def slice_ranking(self) -> tuple[np.ndarray, np.ndarray]:
        """(W (G, d, d), W T_g as (G, d, 256)): W whitens the other groups' spread, so that
        ``||W x - W T_g[m]||^2`` ranks the values m of group g (lower is more likely)."""
        m = self.matrix.astype(np.float64)
        tabs = self.groups[0].astype(np.float64)
        d, D = m.shape
        G = tabs.shape[0]
        whiten = np.zeros((G, d, d))
        ranked = np.zeros((G, d, 1 << GROUP_BITS))
        for g in range(G):
            other = np.ones(D, bool)
            other[g * GROUP_BITS: (g + 1) * GROUP_BITS] = False
            whiten[g] = np.linalg.inv(np.linalg.cholesky(m[:, other] @ m[:, other].T))
            ranked[g] = whiten[g] @ tabs[g].T
        return whiten.astype(np.float32), ranked.astype(np.float32)

    @cached_property
    def column_norms(self) -> np.ndarray:
        """||M[:, i]||^2 for the local search, float64."""
        return (self.matrix.astype(np.float64) ** 2).sum(axis=0)


def gray_flips(bits: int) -> np.ndarray:
    """``flips[t]`` = the coordinate whose sign changes between Gray codes t - 1 and t (t >= 1)."""
    t = np.arange(1 << bits, dtype=np.int64)
    t[0] = 1  # unused slot
    return (np.log2(t & -t) + 0.5).astype(np.uint8)


@njit(inline="always")
def linear_terms(x, c, tabs, norms, sizes, lin, row):
    """``lin[row, g, m] = ||T_g[m]||^2 - 2 x_c . T_g[m]``; returns ``||x_c||^2`` (float32)."""
    d = x.shape[1]
    for g in range(tabs.shape[0]):
        for m in range(sizes[g]):
            acc = np.float32(0.0)
            for k in range(d):
                acc += tabs[g, m, k] * x[c, k]
            lin[row, g, m] = norms[g, m] - np.float32(2.0) * acc
    x2 = np.float32(0.0)
    for k in range(d):
        x2 += x[c, k] * x[c, k]
    return x2


@njit(inline="always")
def table_error(x2, lin, row, cross, mask, G):
    """Squared error of the code ``mask`` from the group tables (float32), for ``G`` groups."""
    m0 = mask & 255
    e = x2 + lin[row, 0, m0]
    if G > 1:
        m1 = (mask >> 8) & 255
        e += lin[row, 1, m1] + cross[0, 1, m0, m1]
        if G > 2:
            m2 = (mask >> 16) & 255
            e += lin[row, 2, m2] + cross[0, 2, m0, m2] + cross[1, 2, m1, m2]
            if G > 3:
                m3 = (mask >> 24) & 255
                e += lin[row, 3, m3] + cross[0, 3, m0, m3] + cross[1, 3, m1, m3] + cross[2, 3, m2, m3]
    return e


@njit(inline="always")
def keep_best(x2, lin, cross, masks, top_err, top_mask, tile, G):
    """Each lane keeps ``masks[lane]`` among its K best distinct codes (sorted, best first) if it earns a place.

    ``G`` is a literal at each call site, so the table sum has no branches inside the lane loop.
    """
    K = top_err.shape[1]
    for lane in range(tile):
        mask = masks[lane]
        e = table_error(x2[lane], lin, lane, cross, mask, G)
        if e < top_err[lane, K - 1]:
            insert_distinct(top_err, top_mask, lane, e, mask)


@njit(inline="never")
def insert_distinct(top_err, top_mask, lane, e, mask):
    """Insert (e, mask) into lane's sorted list unless the code is already there."""
    K = top_err.shape[1]
    for k in range(K):
        if top_mask[lane, k] == mask and top_err[lane, k] != np.inf:
            return
    k = K - 1
    while k > 0 and top_err[lane, k - 1] > e:
        top_err[lane, k] = top_err[lane, k - 1]
        top_mask[lane, k] = top_mask[lane, k - 1]
        k -= 1
    top_err[lane, k] = e
    top_mask[lane, k] = mask


@njit(nogil=True, cache=True, fastmath=FASTMATH)
def fast_tiles(x, p_lift, q_lift_t, tabs, norms, cross, sizes, flips, tile, t0, t1, out_masks):
    """Fast search for tiles ``t0 .. t1`` of ``tile`` chunks each; ``out_masks[i]`` gets chunk i's K best codes.

    The chunks of a tile share the Gray-code walk over ``p``: ``w = Q p`` is updated once
    per candidate and each chunk compares it with its own thresholds ``-P x``. ``tile``
    is a runtime value on purpose: LLVM vectorizes the lane loops (with a run-time
    alias check) only when it cannot unroll them completely.
    """
    n, d = x.shape
    F, D = q_lift_t.shape
    G = tabs.shape[0]
    lin = np.empty((tile, G, 256), np.float32)
    thr = np.empty((D, tile), np.float32)
    masks = np.empty(tile, np.int32)
    x2 = np.empty(tile, np.float32)
    K = out_masks.shape[1]
    top_err = np.empty((tile, K), np.float32)
    top_mask = np.empty((tile, K), np.int32)
    w = np.empty(D, np.float64)
    p = np.empty(F, np.float64)
    for tt in range(t0, t1):
        base = tt * tile
        count = min(tile, n - base)
        for lane in range(tile):
            c = base + min(lane, count - 1)  # idle lanes repeat the last chunk
            x2[lane] = linear_terms(x, c, tabs, norms, sizes, lin, lane)
            for i in range(D):
                a = 0.0
                for k in range(d):
                    a += np.float64(p_lift[i, k]) * x[c, k]
                thr[i, lane] = -a
            for k in range(K):
                top_err[lane, k] = np.inf
                top_mask[lane, k] = 0
        for i in range(D):  # start at p = -1
            s = 0.0
            for j in range(F):
                s -= q_lift_t[j, i]
            w[i] = s
        for j in range(F):
            p[j] = -1.0
        for t in range(1 << F):
            if t:
                j = np.int64(flips[t])
                pj = -p[j]
                p[j] = pj
                delta = 2.0 * pj
                for i in range(D):
                    w[i] += delta * q_lift_t[j, i]
            for lane in range(tile):
                masks[lane] = 0
            for i in range(D):
                wi = np.float32(w[i])
                bit = np.int32(1) << np.int32(i)
                for lane in range(tile):
                    masks[lane] = masks[lane] | (bit if thr[i, lane] <= wi else np.int32(0))
            if G == 1:
                keep_best(x2, lin, cross, masks, top_err, top_mask, tile, 1)
            elif G == 2:
                keep_best(x2, lin, cross, masks, top_err, top_mask, tile, 2)
            elif G == 3:
                keep_best(x2, lin, cross, masks, top_err, top_mask, tile, 3)
            else:
                keep_best(x2, lin, cross, masks, top_err, top_mask, tile, 4)
        for lane in range(count):
            for k in range(K):  # fewer distinct codes than K: repeat the best
                out_masks[base + lane, k] = np.uint32(top_mask[lane, k if top_err[lane, k] != np.inf else 0])


@njit(inline="always")
def row_error(e_prefix, lin, cross, m0, m1, m, G):
    """Error of the code whose first groups are (m0[, m1]) and whose last group is m."""
    if G == 2:
        return e_prefix + lin[0, 1, m] + cross[0, 1, m0, m]
    return e_prefix + lin[0, 2, m] + cross[0, 2, m0, m] + cross[1, 2, m1, m]


@njit(inline="always")
def scan_last_group(e_prefix, lin, cross, m0, m1, last, best, best_mask, prefix, G):
    """(best, best_mask) after the codes that vary the last group behind a fixed prefix.

    Whether any of them beats ``best`` is a vectorized or-reduction; only then is the
    row searched for its first minimum (a float min-reduction would not vectorize).
    """
    hit = False
    for m in range(last):
        hit |= row_error(e_prefix, lin, cross, m0, m1, m, G) < best
    if hit:
        for m in range(last):
            e = row_error(e_prefix, lin, cross, m0, m1, m, G)
            if e < best:
                best, best_mask = e, prefix | (m << (GROUP_BITS * (G - 1)))
    return best, best_mask


@njit(nogil=True, cache=True, fastmath=FASTMATH)
def exact_chunks(x, tabs, norms, cross, sizes, i0, i1, out_masks):
    """Exact search for chunks ``i0 .. i1``: every code, as nested loops over its groups (G <= 3)."""
    G = tabs.shape[0]
    lin = np.empty((1, G, 256), np.float32)
    last = sizes[G - 1]
    for c in range(i0, i1):
        x2 = linear_terms(x, c, tabs, norms, sizes, lin, 0)
        best = np.float32(np.inf)
        best_mask = 0
        if G == 1:
            for m0 in range(last):
                e = x2 + lin[0, 0, m0]
                if e < best:
                    best, best_mask = e, m0
        elif G == 2:
            for m0 in range(sizes[0]):
                best, best_mask = scan_last_group(x2 + lin[0, 0, m0], lin, cross, m0, 0, last, best, best_mask,
                                                  m0, 2)
        else:
            for m0 in range(sizes[0]):
                e0 = x2 + lin[0, 0, m0]
                for m1 in range(sizes[1]):
                    best, best_mask = scan_last_group(e0 + lin[0, 1, m1] + cross[0, 1, m0, m1], lin, cross, m0, m1,
                                                      last, best, best_mask, m0 | (m1 << GROUP_BITS), 3)
        out_masks[c] = np.uint32(best_mask)


@njit(inline="always")
def group_terms(y, tabs_t, norms, g, n, out):
    """``out[m] = ||T_g[m]||^2 - 2 y . T_g[m]`` for the n patterns of group g, vectorized over m."""
    for m in range(n):
        out[m] = norms[g, m]
    for k in range(y.shape[0]):
        yk = np.float32(2.0) * y[k]
        for m in range(n):
            out[m] -= tabs_t[g, k, m] * yk


@njit(inline="always")
def span_coordinates(y, bounds, b, uy, ym):
    """``uy = U_b^T y`` (the part of ``y`` outside the span of group b's columns, in its basis) and
    ``ym = C_b y`` (y against each of those columns): what :func:`scan_pair` bounds rows with."""
    bases, _, dims, cols_t, _ = bounds
    for j in range(dims[b]):
        acc = np.float32(0.0)
        for k in range(y.shape[0]):
            acc += bases[b, k, j] * y[k]
        uy[j] = acc
    for i in range(GROUP_BITS):
        acc = np.float32(0.0)
        for k in range(y.shape[0]):
            acc += cols_t[b, i, k] * y[k]
        ym[i] = acc


@njit(inline="always")
def scan_pair(e0, a, b, cross, sizes, bounds, ua, ub, best, rb, uy, ym):
    """(error, m_a, m_b) of the best patterns of groups a != b for the residual ``y`` (``e0 = ||y||^2``,
    ``ua``, ``ub`` its :func:`group_terms`, ``uy``, ``ym`` its :func:`span_coordinates`) that beats
    ``best``; m_a = -1 if none does.

    Row m_a, residual ``z = y - T_a[m_a]``, is skipped when a lower bound on its errors is
    ``>= best``: the part of z outside the span of group b's columns, plus how far z's part
    inside the span (length L) lies beyond what any ``T_b = sum_i +-M_i`` reaches along it,
    ``L - sum_i |z . M_i| / L``. About 1 row in 25 passes, so the rows are found from bit words
    rather than by a branch per row (the mispredictions cost more than the bounds). A row is
    searched for its minimum only when an or-reduction (which vectorizes) says it holds an
    improvement. ``rb``: scratch.
    """
    _, proj_t, dims, _, reach_t = bounds
    na, nb = sizes[a], sizes[b]
    for m in range(na):
        rb[m] = np.float32(0.0)
    for j in range(dims[b]):
        uj = uy[j]
        for m in range(na):
            t = uj - proj_t[a, b, j, m]
            rb[m] += t * t
    for m in range(na):  # one pass: the loop over a group's 8 columns unrolls, so this loop vectorizes
        reach = np.float32(0.0)
        for i in range(GROUP_BITS):
            reach += abs(ym[i] - reach_t[a, b, i, m])
        par = max(e0 + ua[m] - rb[m], np.float32(1e-30))
        over = max(par - reach, np.float32(0.0))
        rb[m] += over * over / par
    best_a, best_b = -1, -1
    for w in range((na + 63) // 64):  # rows that pass the bound as 64-bit words (vectorized), then set bit by set bit
        rows = np.uint64(0)
        for i in range(64):
            rows |= np.uint64(rb[64 * w + i] < best) << np.uint64(i)
        if na < 64 * (w + 1):
            rows &= (np.uint64(1) << np.uint64(na - 64 * w)) - np.uint64(1)
        while rows:
            ma = 64 * w + trailing_zeros(rows)
            rows &= rows - np.uint64(1)
            if rb[ma] >= best:  # best has improved since the word was taken
                continue
            t = best - e0 - ua[ma]
            hit = False
            for mb in range(nb):
                hit |= ub[mb] + cross[a, b, ma, mb] < t
            if hit:
                for mb in range(nb):
                    e = e0 + ua[ma] + (ub[mb] + cross[a, b, ma, mb])
                    if e < best:
                        best, best_a, best_b = e, ma, mb
    return best, best_a, best_b


@njit(inline="always")
def mask_error(x, m, t, mask, r):
    """||x_t - M c||^2 of the code ``mask``, in float64 (``r`` is scratch of length d)."""
    d, D = m.shape
    e = 0.0
    for k in range(d):
        acc = np.float64(x[t, k])
        for i in range(D):
            acc -= m[k, i] if (mask >> np.uint32(i)) & np.uint32(1) else -m[k, i]
        r[k] = acc
        e += acc * acc
    return e


@njit(nogil=True, cache=True, fastmath=FASTMATH)
def block_descent(x, m, tabs, tabs_t, norms, cross, sizes, bounds, i0, i1, masks):
    """Block descent from ``masks[i]`` for chunks ``i0 .. i1``, in place.

    Each move re-optimizes two groups of signs exactly (one group when there is only one),
    the others fixed; a move is taken only if it lowers the float64 error, so the descent
    ends, and it ends when no pair of groups offers a lower error.
    """
    d = x.shape[1]
    G = tabs.shape[0]
    pairs = max(1, G * (G - 1) // 2)
    ua = np.empty(256, np.float32)
    ub = np.empty(256, np.float32)
    rb = np.empty(256, np.float32)
    uy = np.empty(d, np.float32)
    ym = np.empty(GROUP_BITS, np.float32)
    y = np.empty(d, np.float32)
    r = np.empty(d, np.float64)
    for t in range(i0, i1):
        mask = masks[t]
        if G == 1:
            for k in range(d):
                y[k] = x[t, k]
            group_terms(y, tabs_t, norms, 0, sizes[0], ua)
            best = np.float32(np.inf)
            for p in range(sizes[0]):
                if ua[p] < best:
                    best, mask = ua[p], np.uint32(p)
            masks[t] = mask
            continue
        cur = mask_error(x, m, t, mask, r)
        a, b, stale = 0, 1, 0
        while stale < pairs:
            shift_a, shift_b = np.uint32(GROUP_BITS * a), np.uint32(GROUP_BITS * b)
            ma, mb = (mask >> shift_a) & np.uint32(255), (mask >> shift_b) & np.uint32(255)
            e0 = np.float32(0.0)
            for k in range(d):
                acc = x[t, k]
                for g in range(G):
                    if g != a and g != b:
                        acc -= tabs[g, (mask >> np.uint32(GROUP_BITS * g)) & np.uint32(255), k]
                y[k] = acc
                e0 += acc * acc
            group_terms(y, tabs_t, norms, a, sizes[a], ua)
            group_terms(y, tabs_t, norms, b, sizes[b], ub)
            here = e0 + ua[ma] + (ub[mb] + cross[a, b, ma, mb])
            stale += 1
            span_coordinates(y, bounds, b, uy, ym)
            _, na, nb = scan_pair(e0, a, b, cross, sizes, bounds, ua, ub, here, rb, uy, ym)
            if na >= 0:
                moved = (mask & ~((np.uint32(255) << shift_a) | (np.uint32(255) << shift_b))
                         | (np.uint32(na) << shift_a) | (np.uint32(nb) << shift_b))
                e = mask_error(x, m, t, moved, r)
                if e < cur:
                    mask, cur, stale = moved, e, 0
            b += 1
            if b == G:
                a += 1
                b = a + 1
                if b == G:
                    a, b = 0, 1
        masks[t] = mask


@njit(nogil=True, cache=True, fastmath=FASTMATH)
def slice_chunks(x, tabs, tabs_t, norms, cross, sizes, bounds, whiten, ranked_t, k, spread, i0, i1, out_masks):
    """The ``slices`` search for chunks ``i0 .. i1`` of a three-group codebook (17 <= D <= 24): the ``k``
    most likely values of each group, less those whose ranking distance exceeds the group's
    smallest by more than ``spread``."""
    d = x.shape[1]
    G = tabs.shape[0]
    ua = np.empty(256, np.float32)
    ub = np.empty(256, np.float32)
    rb = np.empty(256, np.float32)
    uy = np.empty(d, np.float32)
    ym = np.empty(GROUP_BITS, np.float32)
    ux = np.empty((G, d), np.float32)
    cx = np.empty((G, GROUP_BITS), np.float32)
    q = np.empty(256, np.float32)
    y = np.empty(d, np.float32)
    wx = np.empty(d, np.float32)
    top_q = np.empty(k, np.float32)
    order = np.empty((G, k), np.int64)
    lin = np.empty((G, 256), np.float32)
    for t in range(i0, i1):
        for s in range(G):
            for i in range(d):
                acc = np.float32(0.0)
                for j in range(d):
                    acc += whiten[s, i, j] * x[t, j]
                wx[i] = acc
            for m in range(sizes[s]):
                q[m] = np.float32(0.0)
            for i in range(d):
                for m in range(sizes[s]):
                    v = wx[i] - ranked_t[s, i, m]
                    q[m] += v * v
            for r in range(k):  # the k lowest, by insertion (a short group has fewer: -1 marks the rest)
                top_q[r] = np.float32(np.inf)
                order[s, r] = -1
            for m in range(sizes[s]):
                v = q[m]
                if v < top_q[k - 1]:
                    r = k - 1
                    while r > 0 and top_q[r - 1] > v:
                        top_q[r] = top_q[r - 1]
                        order[s, r] = order[s, r - 1]
                        r -= 1
                    top_q[r] = v
                    order[s, r] = m
            for r in range(1, k):
                if top_q[r] > top_q[0] + spread:
                    order[s, r] = -1
        for i in range(d):
            y[i] = x[t, i]
        for g in range(G):
            group_terms(y, tabs_t, norms, g, sizes[g], lin[g])
            span_coordinates(y, bounds, g, ux[g], cx[g])
        _, proj_t, dims, _, reach_t = bounds
        best = np.float32(0.0)  # start the bound at the code of every group's most likely value
        mask = np.uint32(0)
        for i in range(d):
            acc = x[t, i]
            for s in range(G):
                acc -= tabs[s, order[s, 0], i]
            best += acc * acc
        for s in range(G):
            mask |= np.uint32(order[s, 0]) << np.uint32(GROUP_BITS * s)
        for r in range(k):  # most likely slices of every group first, so that the bound tightens early
            for s in range(G):
                ms = order[s, r]
                if ms < 0:
                    continue
                a = 1 if s == 0 else 0
                b = 3 - s - a
                e0 = np.float32(0.0)
                for i in range(d):
                    y[i] = x[t, i] - tabs[s, ms, i]
                    e0 += y[i] * y[i]
                for m in range(sizes[a]):  # the terms of y = x - T_s[ms], from the chunk's and the cross tables
                    ua[m] = lin[a, m] + cross[s, a, ms, m]
                for m in range(sizes[b]):
                    ub[m] = lin[b, m] + cross[s, b, ms, m]
                for j in range(dims[b]):  # and its span coordinates, from the chunk's and the bound tables
                    uy[j] = ux[b, j] - proj_t[s, b, j, ms]
                for i in range(GROUP_BITS):
                    ym[i] = cx[b, i] - reach_t[s, b, i, ms]
                best, na, nb = scan_pair(e0, a, b, cross, sizes, bounds, ua, ub, best, rb, uy, ym)
                if na >= 0:
                    mask = ((np.uint32(ms) << np.uint32(GROUP_BITS * s)) | (np.uint32(na) << np.uint32(GROUP_BITS * a))
                            | (np.uint32(nb) << np.uint32(GROUP_BITS * b)))
        out_masks[t] = mask


@njit(nogil=True, cache=True)
def local_search(x, m, col_norms, i0, i1, masks, out_err):
    """1-bit-flip steepest descent from ``masks[i]`` for chunks ``i0 .. i1``, in float64.

    Flipping ``c_j`` changes the error by ``4 c_j (M[:, j] . r) + 4 ||M[:, j]||^2`` with
    ``r = x - M c``; each pass takes the most negative change, until none is negative.
    """
    d, D = m.shape
    r = np.empty(d, np.float64)
    c = np.empty(D, np.float64)
    for t in range(i0, i1):
        mask = masks[t]
        for i in range(D):
            c[i] = 1.0 if (mask >> np.uint32(i)) & np.uint32(1) else -1.0
        for k in range(d):
            acc = np.float64(x[t, k])
            for i in range(D):
                acc -= m[k, i] * c[i]
            r[k] = acc
        while True:  # every accepted flip lowers the error, so the descent ends
            best_gain, best_j = -1e-12, -1
            for j in range(D):
                dot = 0.0
                for k in range(d):
                    dot += m[k, j] * r[k]
                gain = 4.0 * c[j] * dot + 4.0 * col_norms[j]
                if gain < best_gain:
                    best_gain, best_j = gain, j
            if best_j < 0:
                break
            c[best_j] = -c[best_j]
            for k in range(d):
                r[k] -= 2.0 * c[best_j] * m[k, best_j]
            mask ^= np.uint32(1) << np.uint32(best_j)
        masks[t] = mask
        e = 0.0
        for k in range(d):
            e += r[k] * r[k]
        out_err[t] = e


def check_chunks(x, d: int) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[1] != d:
        raise ValueError(f"x must be a 2-d array of chunks with {d} columns (the codebook's d), got shape {x.shape}")
    if x.dtype.kind != "f":
        raise ValueError(f"x must be a float array, got dtype {x.dtype}")
    x = np.ascontiguousarray(x, np.float32)
    if not np.isfinite(x).all():
        raise ValueError("x holds NaN or Inf values; LiftQuant encodes finite weights only")
    return x


def check_search(search: str, lifted: int) -> str:
    if search not in SEARCHES:
        raise ValueError(f"search must be one of {', '.join(SEARCHES)}, got {search!r}")
    if search in ("exact", "slices") and lifted > EXACT_MAX_LIFTED:
        raise ValueError(f"search={search!r} works on at most three groups of 8 signs and is offered up to "
                         f"D = {EXACT_MAX_LIFTED}; this codebook has D = {lifted}: use 'fast' or 'fast+local'")
    return search


def fast_candidates(x, tables: SearchTables, starts: int) -> np.ndarray:
    """The ``starts`` best distinct codes (n, starts) the fast search finds per chunk, best first."""
    d, D = tables.matrix.shape
    x = check_chunks(x, d)
    if isinstance(starts, bool) or not isinstance(starts, (int, np.integer)) or not 1 <= starts <= MAX_STARTS:
        raise ValueError(f"starts must be an integer in [1, {MAX_STARTS}], got {starts!r}")
    masks = np.zeros((x.shape[0], int(starts)), np.uint32)
    tabs, norms, cross, sizes = tables.groups
    p_lift, q_lift_t = tables.lift
    flips = gray_flips(D - d)
    parallel_map(math.ceil(x.shape[0] / TILE), lambda t0, t1: fast_tiles(
        x, p_lift, q_lift_t, tabs, norms, cross, sizes, flips, TILE, t0, t1, masks), 1)
    return masks


def local_refine(x, tables: SearchTables, masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, squared errors) after the block descent, then the 1-bit-flip descent, from each of
    ``masks`` (n, K): the best of the K."""
    x = check_chunks(x, tables.matrix.shape[0])
    tabs, norms, cross, sizes = tables.groups
    if tabs.shape[0] <= 2:  # one block move is the exact search: every start ends at the same code
        masks = masks[:, :1]
    n, K = masks.shape
    flat = np.ascontiguousarray(masks, np.uint32).reshape(-1).copy()
    err = np.zeros(flat.size, np.float64)
    starts = np.repeat(x, K, axis=0) if K > 1 else x

    def refine(i0, i1):
        block_descent(starts, tables.matrix, tabs, tables.transposed, norms, cross, sizes, tables.bounds, i0, i1,
                      flat)
        local_search(starts, tables.matrix, tables.column_norms, i0, i1, flat, err)

    parallel_map(flat.size, refine, 64)
    pick = err.reshape(n, K).argmin(axis=1)
    rows = np.arange(n)
    return flat.reshape(n, K)[rows, pick], err.reshape(n, K)[rows, pick]


def slice_codes(x, tables: SearchTables) -> np.ndarray:
    """Codes (n,) of the ``slices`` search; with at most two groups one block move from any code is exact."""
    tabs, norms, cross, sizes = tables.groups
    masks = np.zeros(x.shape[0], np.uint32)
    if tabs.shape[0] <= 2:
        parallel_map(x.shape[0], lambda i0, i1: block_descent(
            x, tables.matrix, tabs, tables.transposed, norms, cross, sizes, tables.bounds, i0, i1, masks), 64)
        return masks
    whiten, ranked_t = tables.slice_ranking
    parallel_map(x.shape[0], lambda i0, i1: slice_chunks(
        x, tabs, tables.transposed, norms, cross, sizes, tables.bounds, whiten, ranked_t, SLICES_PER_GROUP,
        SLICE_SPREAD, i0, i1, masks), 16)
    return masks


def search_codes(x, tables: SearchTables, search: str = "fast+local",
                 starts: int = DEFAULT_STARTS) -> tuple[np.ndarray, np.ndarray]:
    """(sign masks uint32 (n,), squared errors float64 (n,)) of the codes ``search`` finds for chunks ``x`` (n, d).

    ``starts``: for fast+local, how many of the fast search's best distinct codes the
    local search starts from (the best result is kept).
    """
    m = tables.matrix
    check_search(search, m.shape[1])
    x = check_chunks(x, m.shape[0])
    if search == "exact":
        masks = np.zeros(x.shape[0], np.uint32)
        tabs, norms, cross, sizes = tables.groups
        parallel_map(x.shape[0], lambda i0, i1: exact_chunks(x, tabs, norms, cross, sizes, i0, i1, masks), 1)
    elif search == "slices":
        masks = slice_codes(x, tables)
    else:
        candidates = fast_candidates(x, tables, 1 if search == "fast" else starts)
        if search == "fast+local":
            if tables.groups[0].shape[0] == 3:  # the two searches miss different chunks: start from both
                candidates = np.concatenate([candidates, slice_codes(x, tables)[:, None]], axis=1)
            return local_refine(x, tables, candidates)
        masks = candidates[:, 0].copy()
    return masks, code_errors(x, m, masks)


def signs_of(masks: np.ndarray, lifted: int) -> np.ndarray:
    """Sign vectors (n, D) float32 in {-1, +1} of bit masks (n,)."""
    bits = (np.asarray(masks, np.uint32)[:, None] >> np.arange(lifted, dtype=np.uint32)) & 1
    return bits.astype(np.float32) * 2 - 1


def code_errors(x: np.ndarray, matrix: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """||x - M c||^2 per chunk, in float64."""
    m = np.asarray(matrix, np.float64)
    points = signs_of(masks, m.shape[1]).astype(np.float64) @ m.T
    return ((np.asarray(x, np.float64) - points) ** 2).sum(axis=1)
