"""LiftQuant projection matrices M: trained on N(0, 1) samples, shipped as small files, loaded by format.

Each configuration of :data:`.formats.LIFTQUANT_FORMATS` has ``data/<name>.npz``
beside this module: ``matrix`` (d x D, float32) and ``metadata`` (JSON: seed, restarts,
steps, method, and the mean squared error per dimension it reaches on fresh N(0, 1) data).

Training (``python -m edgekit.simulators.liftquant.codebooks [CONFIG ...]``), per restart:

1. Adam on the soft-min of the squared distance to the lattice points,
   ``-(1/T) log sum_c exp(-T ||x - M c||^2)`` with T = 10, on fresh Gaussian batches.
   Where 2^D <= ``FULL_SOFTMIN_POINTS`` the sum runs over every lattice point. Beyond that
   it runs over the points that dominate it (at T = 10 the others weigh next to nothing),
   as found by :func:`training_search`:
   up to D = 16 the exact nearest code and its D one-bit flips; above, as the paper does
   for large D, the fast search's candidates ``sign(A^-1 [x; p])``, its ``TRAIN_STARTS``
   best distinct ones plus the code the local search reaches from them. M thus learns to
   serve its own encoder.
2. Lloyd refinement: assign a sample to its codes with that search, solve the
   least-squares ``M = X^T C (C^T C)^-1``, keep it while the held-out error falls.

The restart with the lowest held-out error is kept. Torch is imported only for training.

The metadata also holds what each search reaches on fresh N(0, 1) chunks
(:func:`measure_searches`), and from that the configuration's default search above
D = 16: ``slices`` where its error is within ``SLICES_TOLERANCE`` of exact's, else
``fast+local``. ``--remeasure`` refreshes those fields of the shipped files after a search
changes, without training again.
"""

from __future__ import annotations

import io
import json
import math
import time
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path

import numpy as np

from edgekit.simulators.formats import LIFTQUANT_FORMATS, LiftQuantFormat, get_liftquant_format
from edgekit.utils.files import atomic_write

from .search import (
    DEFAULT_STARTS,
    EXACT_MAX_LIFTED,
    SearchTables,
    code_errors,
    fast_candidates,
    local_refine,
    search_codes,
    signs_of,
)

CODEBOOK_DIR = Path(__file__).resolve().parent / "data"
TEMPERATURE = 10.0
FULL_SOFTMIN_POINTS = 1 << 12
TRAIN_STARTS = 8
EXACT_DEFAULT_MAX = 16  # up to 2^16 codes per chunk the exact search is cheap enough to be the default
FAST_MAX_FREE = 14  # above, the fast search's 2^(D - d) candidates per chunk are too slow for whole models
SLICES_TOLERANCE = 0.02  # slices is the default where its Gaussian error is at most 2% above exact's


@dataclass(frozen=True)
class Codebook:
    """A trained projection ``matrix`` M (d x D, float32) of one LiftQuant configuration."""

    format: LiftQuantFormat
    matrix: np.ndarray
    metadata: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        shape = (self.format.chunk, self.format.lifted)
        m = np.ascontiguousarray(self.matrix, np.float32)
        if m.shape != shape or not np.isfinite(m).all():
            raise ValueError(f"{self.format.name}: matrix must be a finite {shape} array, got shape {m.shape}")
        m.setflags(write=False)
        object.__setattr__(self, "matrix", m)

    @cached_property
    def tables(self) -> SearchTables:
        return SearchTables(self.matrix)

    @property
    def default_search(self) -> str:
        """See :func:`default_search`."""
        return default_search(self.format)

    def encode(self, chunks, search: str = "fast+local", starts: int = DEFAULT_STARTS) -> tuple[np.ndarray, np.ndarray]:
        """(codes uint32 (n,), squared errors (n,)) for chunks (n, d)."""
        return search_codes(chunks, self.tables, search, starts)

    def decode(self, masks) -> np.ndarray:
        """Lattice points ``M c`` (n, d), float64."""
        return signs_of(masks, self.format.lifted).astype(np.float64) @ self.matrix.T.astype(np.float64)


def training_search(fmt: LiftQuantFormat) -> str:
    """The search training assigns codes with: exact up to D = 16, else fast+local."""
    return "exact" if fmt.lifted <= EXACT_DEFAULT_MAX else "fast+local"


def default_search(fmt: LiftQuantFormat) -> str:
    """The search :func:`.liftquant.quantize` uses unless told: exact up to D = 16; above, the one the
    shipped codebook's measurements chose (:func:`measure_searches`)."""
    if fmt.lifted <= EXACT_DEFAULT_MAX:
        return "exact"
    return load_codebook(fmt).metadata["default_search"]


def mse_key(search: str) -> str:
    """The metadata field of a search's Gaussian error: ``mse_fast_local`` for fast+local."""
    return "mse_" + search.replace("+", "_")


def gaussian_error(fmt: LiftQuantFormat) -> float:
    """The N(0, 1) MSE per dimension the configuration's default search reaches (shipped metadata)."""
    return load_codebook(fmt).metadata[mse_key(default_search(fmt))]


def format_for_bits(bits: float) -> LiftQuantFormat:
    """The configuration whose codes cost ``bits`` per weight (D/d) with the lowest Gaussian error.

    Only configurations the default search encodes at model scale are candidates: exact or
    slices, or fast+local with at most ``FAST_MAX_FREE`` free signs (2^14 fast-search
    candidates per chunk).
    """
    matches = [f for f in LIFTQUANT_FORMATS.values() if math.isclose(f.code_bits_per_weight, bits, rel_tol=1e-9)
               and (default_search(f) != "fast+local" or f.free_dims <= FAST_MAX_FREE)]
    if not matches:
        offered = sorted({round(f.code_bits_per_weight, 4) for f in LIFTQUANT_FORMATS.values()})
        raise ValueError(f"no LiftQuant configuration codes {bits:g} bits per weight; offered: "
                         f"{', '.join(f'{b:g}' for b in offered)} (D/d), or name one such as liftquant_24to10")
    return min(matches, key=gaussian_error)


def parse_liftquant(spec: str) -> LiftQuantFormat:
    """``liftquant:2.4`` (bits: :func:`format_for_bits`), ``liftquant:24to10`` or ``liftquant_24to10``."""
    text = spec.strip().lower()
    head, sep, tail = text.partition(":")
    if not sep:
        return get_liftquant_format(text)
    if head != "liftquant" or not tail:
        raise ValueError(f"{spec!r}: write liftquant:BITS (e.g. liftquant:2.4) or liftquant:DtoD (e.g. liftquant:24to10)")
    try:
        bits = float(tail)
    except ValueError:
        return get_liftquant_format(tail)
    return format_for_bits(bits)


def codebook_path(fmt: LiftQuantFormat, directory: str | Path | None = None) -> Path:
    return Path(directory or CODEBOOK_DIR) / f"{fmt.name}.npz"


@cache
def _load(name: str) -> Codebook:
    return read_codebook(get_liftquant_format(name), codebook_path(get_liftquant_format(name)))


def load_codebook(spec: str | LiftQuantFormat) -> Codebook:
    """The shipped codebook of a configuration (``liftquant_24to10`` or ``24to10``)."""
    return _load(get_liftquant_format(spec).name)


def read_codebook(fmt: LiftQuantFormat, path: str | Path) -> Codebook:
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no codebook file for {fmt.name} at {path}; train it with "
                         f"`python -m edgekit.simulators.liftquant.codebooks {fmt.label}`")
    with np.load(path, allow_pickle=False) as data:
        return Codebook(fmt, data["matrix"], json.loads(str(data["metadata"])))


def write_codebook(codebook: Codebook, directory: str | Path | None = None) -> Path:
    buf = io.BytesIO()
    np.savez(buf, matrix=codebook.matrix, metadata=np.array(json.dumps(codebook.metadata, sort_keys=True)))
    return atomic_write(codebook_path(codebook.format, directory), buf.getvalue())


def measure_searches(codebook: Codebook, samples: int, seed: int) -> dict:
    """What each search offered at this D reaches on ``samples`` seeded N(0, 1) chunks, and the
    default search above D = 16 that follows.

    ``mse_<search>``: mean squared error per dimension of fast, fast+local, slices (16 < D <= 24,
    where it is not simply exact) and exact (D <= 24; on ``samples // 32`` chunks above D = 20,
    where it enumerates up to 2^24 codes a chunk: ``exact_samples``). ``slices_over_exact``: the
    gap on exact's chunks. ``default_search``: exact up to D = 16; slices where that gap is at
    most ``SLICES_TOLERANCE``; else fast+local.
    """
    fmt = codebook.format
    x = np.random.default_rng(seed).standard_normal((samples, fmt.chunk)).astype(np.float32)
    errors = {search: codebook.encode(x, search)[1] for search in ("fast", "fast+local")}
    out = {mse_key(search): float(err.mean() / fmt.chunk) for search, err in errors.items()}
    default = training_search(fmt)
    if fmt.lifted <= EXACT_MAX_LIFTED:
        n = samples if fmt.lifted <= 20 else max(256, samples // 32)
        exact = codebook.encode(x[:n], "exact")[1]
        out.update(exact_samples=n, mse_exact=float(exact.mean() / fmt.chunk))
        if fmt.lifted > EXACT_DEFAULT_MAX:
            slices = codebook.encode(x, "slices")[1]
            out["mse_slices"] = float(slices.mean() / fmt.chunk)
            out["slices_over_exact"] = float(slices[:n].mean() / exact.mean() - 1)
            if out["slices_over_exact"] <= SLICES_TOLERANCE:
                default = "slices"
    out["default_search"] = default
    return out


def remeasure(codebook: Codebook) -> Codebook:
    """The codebook with its search measurements refreshed on its metadata's evaluation chunks."""
    meta = codebook.metadata
    stale = {mse_key(s) for s in ("fast", "fast+local", "slices", "exact")} | {"exact_samples", "slices_over_exact"}
    kept = {k: v for k, v in meta.items() if k not in stale}
    return Codebook(codebook.format, codebook.matrix,
                    kept | measure_searches(codebook, meta["eval_samples"], meta["eval_seed"]))


# ---- training ----------------------------------------------------------------------


def _full_softmin(fmt: LiftQuantFormat) -> bool:
    return (1 << fmt.lifted) <= FULL_SOFTMIN_POINTS


def _assign(x: np.ndarray, matrix: np.ndarray, search: str) -> np.ndarray:
    return search_codes(x, SearchTables(matrix), search, TRAIN_STARTS)[0]


def _candidates(x: np.ndarray, matrix: np.ndarray, search: str) -> np.ndarray:
    """Sign vectors (n, K, D) the truncated soft-min runs over, found by ``search``."""
    D = matrix.shape[1]
    tables = SearchTables(matrix)
    if search == "exact":
        nearest = search_codes(x, tables, "exact")[0]
        masks = nearest[:, None] ^ np.concatenate([[0], 1 << np.arange(D)]).astype(np.uint32)
    else:
        fast = fast_candidates(x, tables, TRAIN_STARTS)
        masks = np.concatenate([fast, local_refine(x, tables, fast)[0][:, None]], axis=1)
    return signs_of(masks.reshape(-1), D).reshape(x.shape[0], masks.shape[1], D)


def _softmin_adam(fmt: LiftQuantFormat, rng: np.random.Generator, steps: int, batch: int, lr: float) -> np.ndarray:
    import torch

    d, D = fmt.chunk, fmt.lifted
    generator = torch.Generator().manual_seed(int(rng.integers(1 << 31)))
    weights = torch.nn.Parameter(torch.randn(d, D, generator=generator) / math.sqrt(D))
    optimizer = torch.optim.Adam([weights], lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps, eta_min=lr / 10)
    all_codes = torch.from_numpy(signs_of(np.arange(1 << D), D)) if _full_softmin(fmt) else None
    for _ in range(steps):
        x_np = rng.standard_normal((batch, d)).astype(np.float32)
        x = torch.from_numpy(x_np)
        if all_codes is not None:
            points = all_codes @ weights.T  # (2^D, d)
            dist = (x * x).sum(1, keepdim=True) - 2 * x @ points.T + (points * points).sum(1)
        else:
            cands = torch.from_numpy(_candidates(x_np, weights.detach().numpy(), training_search(fmt)))
            dist = ((x[:, None, :] - cands @ weights.T) ** 2).sum(-1)
        loss = (-torch.logsumexp(-TEMPERATURE * dist, dim=1) / TEMPERATURE).mean() / d
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    return weights.detach().numpy().astype(np.float32)


def _lloyd(matrix: np.ndarray, x: np.ndarray, held_out: np.ndarray, rounds: int,
           search: str) -> tuple[np.ndarray, float]:
    """Alternate codes and least-squares M; returns the best (M, held-out MSE per dimension)."""
    d, D = matrix.shape

    def held_out_mse(m):
        return float(code_errors(held_out, m, _assign(held_out, m, search)).mean() / d)

    best, best_mse = matrix, held_out_mse(matrix)
    for _ in range(rounds):
        codes = signs_of(_assign(x, best, search), D).astype(np.float64)
        gram = codes.T @ codes + 1e-9 * len(x) * np.eye(D)
        candidate = np.linalg.solve(gram, codes.T @ x.astype(np.float64)).T.astype(np.float32)
        mse = held_out_mse(candidate)
        if mse >= best_mse:
            break
        improved = mse < best_mse * (1 - 1e-4)
        best, best_mse = candidate, mse
        if not improved:
            break
    return best, best_mse


def train_codebook(spec: str | LiftQuantFormat, *, seed: int = 0, restarts: int = 3, steps: int = 400,
                   batch: int | None = None, lr: float = 0.01, lloyd_rounds: int = 8, lloyd_samples: int = 16384,
                   eval_samples: int = 65536, log=print) -> Codebook:
    """Train M for one configuration (see the module docstring); deterministic for a seed.

    ``batch`` defaults to 512 chunks per Adam step, 256 where the fast search enumerates
    2^14 or more candidates per chunk.
    """
    fmt = get_liftquant_format(spec)
    batch = batch or (512 if fmt.free_dims < 14 else 256)
    rng = np.random.default_rng(seed)
    d = fmt.chunk
    held_out = rng.standard_normal((8192, d)).astype(np.float32)
    best = None
    for restart in range(restarts):
        start = time.perf_counter()
        matrix = _softmin_adam(fmt, rng, steps, batch, lr)
        x = rng.standard_normal((lloyd_samples, d)).astype(np.float32)
        matrix, mse = _lloyd(matrix, x, held_out, lloyd_rounds, training_search(fmt))
        log(f"{fmt.name}: restart {restart + 1}/{restarts}: held-out MSE {mse:.5f} ({time.perf_counter() - start:.0f} s)")
        if best is None or mse < best[1]:
            best = (matrix, mse, restart)
    matrix, _, chosen = best
    codebook = Codebook(fmt, matrix)
    eval_seed = seed + 1_000_003  # data the training never saw
    metadata = {
        "format": fmt.name, "D": fmt.lifted, "d": d, "seed": seed, "restarts": restarts, "chosen_restart": chosen,
        "adam_steps": steps, "batch": batch, "lr": lr, "temperature": TEMPERATURE,
        "softmin_over": "all 2^D points" if _full_softmin(fmt) else
        "the exact nearest code and its D one-bit flips" if training_search(fmt) == "exact" else
        f"the {TRAIN_STARTS} best distinct fast-search candidates and the local-search result",
        "assignments": training_search(fmt),
        "lloyd_rounds": lloyd_rounds, "lloyd_samples": lloyd_samples,
        "eval_samples": eval_samples, "eval_seed": eval_seed,
    }
    return Codebook(fmt, matrix, metadata | measure_searches(codebook, eval_samples, eval_seed))
