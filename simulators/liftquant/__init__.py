"""LiftQuant for one weight matrix: incoherence, scales, codes, and the exact bits they take.

A torch ``Linear`` weight ``W`` (N outputs, K inputs) is coded along K, the reduction axis:

1. input multipliers ``m`` (K, float16; optional, from activation statistics): ``W / m``
   column-wise, so ``W x = (W / m)(x * m)``;
2. incoherence rotation ``H`` of the input axis (:mod:`.incoherence`): each row of
   ``W_r`` is ``H`` applied to the row of ``W / m``, so ``W_r = (W / m) H^T``;
3. zero-padding of K to ``K_pad = C * d`` when d does not divide K (reported as ``padding``);
4. a scale per row (float16) and optionally one per group of ``group_size`` weights along
   the row (E4M3, relative to the row scale), so that chunks are about N(0, 1);
5. codes of the chunks ``W_r / scale`` by the codebook's search (:mod:`.liftquant_search`),
   then least-squares scales for those codes. (Searching again with the fitted scales
   gained under 0.01 dB on Gaussian and Student-t weights at twice the cost: one round.)

The kernel contract: ``y = W_hat x = W'(H (x * m))``, with ``W'`` the decoded rotated
weights of :mod:`.liftquant_layout` and ``H (x * m)`` zero-padded to K_pad.

Storage, counted exactly in :attr:`LiftQuantTensor.nbytes`: the packed codes, 2 bytes per
row scale, 1 byte per group scale, 2 bytes per input multiplier, and the rotation's
signs (K bits) and dense factor (float32). The codebook M (d x D float32) is shared by
every layer of a configuration and counted once per model (:func:`codebook_bytes`).
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import ml_dtypes
import numpy as np

from edgekit.simulators.formats import LiftQuantFormat, get_liftquant_format
from edgekit.simulators.incoherence import Incoherence
from edgekit.utils.files import atomic_write
from edgekit.utils.recent import RecentResults

from .codebooks import Codebook, default_search, load_codebook
from .layout import chunks_per_row, decode, pack_codes, row_bytes, unpack_codes
from .search import DEFAULT_STARTS, check_search

SCALE_ROUNDS = 1  # encode, then fit the scales to the codes
# A model's evaluation and its builds for several targets encode the same weights in one
# process; the encoding is deterministic, so they share it instead of searching again.
_recent: RecentResults[LiftQuantTensor] = RecentResults(256)
ML_DTYPES = {"e4m3": ml_dtypes.float8_e4m3fn}  # group-scale element types the encoder can round to


def group_scale_codes(fmt: LiftQuantFormat, values: np.ndarray) -> np.ndarray:
    """Relative group scales -> codes of ``fmt.group_scale`` (E4M3: nearest even, saturating)."""
    elem = fmt.group_scale.element
    top = elem.max_normal
    clipped = np.clip(np.asarray(values, np.float32), -top, top)
    return clipped.astype(ML_DTYPES[elem.name]).view(np.uint8)


def group_scale_values(fmt: LiftQuantFormat, codes: np.ndarray) -> np.ndarray:
    return fmt.group_scale.values.astype(np.float32)[np.asarray(codes, np.uint8)]


def check_group_size(group_size, chunk: int) -> int | None:
    if group_size is None:
        return None
    if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)) or group_size < chunk \
            or group_size % chunk:
        raise ValueError(f"group_size must be None or a positive multiple of the chunk size d={chunk}, "
                         f"got {group_size!r}")
    return int(group_size)


def codebook_bytes(fmt: LiftQuantFormat) -> int:
    """Bytes of a configuration's M (float32), stored once per model."""
    return 4 * fmt.chunk * fmt.lifted


def layer_nbytes(fmt: LiftQuantFormat, shape: tuple[int, int], *, group_size: int | None = None,
                 input_scales: bool = False, rotate: bool = True) -> int:
    """Stored bytes of an (N, K) weight in ``fmt``: what :attr:`LiftQuantTensor.nbytes` will be."""
    rows, width = shape
    chunks = chunks_per_row(width, fmt.chunk)
    groups = -(-chunks * fmt.chunk // group_size) if group_size else 0
    side = Incoherence(width).side_bytes if rotate else 0
    row_scale, group_scale = np.dtype(fmt.row_scale).itemsize, fmt.group_scale.bits // 8
    input_scale = np.dtype(fmt.input_scale).itemsize * width if input_scales else 0
    return rows * (row_bytes(chunks, fmt.lifted) + row_scale + groups * group_scale) + input_scale + side


@dataclass(frozen=True)
class LiftQuantTensor:
    """A weight (N, K) in LiftQuant: packed codes and every scale, as stored."""

    format: LiftQuantFormat
    shape: tuple[int, int]
    codes: np.ndarray  # uint8 (N, row_bytes)
    row_scales: np.ndarray  # format.row_scale (float16) (N,)
    group_size: int | None = None
    group_scales: np.ndarray | None = None  # codes of format.group_scale (N, groups), relative to the row scale
    input_scales: np.ndarray | None = None  # format.input_scale (float16) (K,): the kernel multiplies x by these
    rotation: Incoherence | None = None

    @property
    def chunks(self) -> int:
        return chunks_per_row(self.shape[1], self.format.chunk)

    @property
    def padding(self) -> int:
        """Zero columns appended to K so that d divides it."""
        return self.chunks * self.format.chunk - self.shape[1]

    @property
    def numel(self) -> int:
        return self.shape[0] * self.shape[1]

    @property
    def byte_counts(self) -> dict[str, int]:
        return {
            "codes": self.codes.nbytes,
            "row_scales": self.row_scales.nbytes,
            "group_scales": 0 if self.group_scales is None else self.group_scales.nbytes,
            "input_scales": 0 if self.input_scales is None else self.input_scales.nbytes,
            "rotation": 0 if self.rotation is None else self.rotation.side_bytes,
        }

    @property
    def nbytes(self) -> int:
        return sum(self.byte_counts.values())

    @property
    def bits_per_weight(self) -> float:
        """Stored bits per weight: codes, every scale and the rotation's side data."""
        return 8.0 * self.nbytes / self.numel

    @cached_property
    def codebook(self) -> Codebook:
        return load_codebook(self.format)

    def masks(self) -> np.ndarray:
        """Chunk sign masks (N, C) uint32."""
        return unpack_codes(self.codes, self.format.lifted, self.chunks)

    def rotated_weights(self) -> np.ndarray:
        """``W'`` (N, K_pad) float32 in the rotated basis: the bit-exact decode a kernel computes."""
        group = None if self.group_scales is None else group_scale_values(self.format, self.group_scales)
        return decode(self.codes, self.codebook.matrix, self.chunks, self.row_scales.astype(np.float32), group,
                      self.group_size)

    def dequantize(self) -> np.ndarray:
        """``W_hat`` (N, K) float32 in the original basis: rotation undone, input multipliers divided out."""
        w = self.rotated_weights()[:, : self.shape[1]].astype(np.float64)
        if self.rotation is not None:
            w = self.rotation.invert(w, axis=1)  # each row of W_r is H w_s: H^T undoes it
        if self.input_scales is not None:
            w = w * self.input_scales.astype(np.float64)
        return w.astype(np.float32)


def check_weight(w) -> np.ndarray:
    if type(w).__module__.startswith("torch"):
        w = w.detach().cpu().float().numpy()
    w = np.asarray(w)
    if w.ndim != 2 or 0 in w.shape:
        raise ValueError(f"w must be a non-empty 2-d weight (outputs, inputs), got shape {w.shape}")
    if w.dtype.kind != "f":
        raise ValueError(f"w must be a float array, got dtype {w.dtype}")
    if not np.isfinite(w).all():
        bad = np.argwhere(~np.isfinite(w))[0]
        raise ValueError(f"w holds non-finite values (first at row {bad[0]}, column {bad[1]}); "
                         "LiftQuant encodes finite weights only")
    return w.astype(np.float64)


def check_input_scales(fmt: LiftQuantFormat, input_scales, width: int) -> np.ndarray | None:
    if input_scales is None:
        return None
    with np.errstate(over="ignore"):
        m = np.asarray(input_scales, np.float64).astype(fmt.input_scale)
    if m.shape != (width,) or not np.isfinite(m.astype(np.float64)).all() or (m <= 0).any():
        raise ValueError(f"input_scales must be {width} positive values that fit {fmt.input_scale}, "
                         f"got shape {np.shape(input_scales)}")
    return m


def to_rotated(w: np.ndarray, input_scales: np.ndarray | None, rotation: Incoherence | None) -> np.ndarray:
    """``W_r = (W / m) H^T`` (float64), each row rotated by H: the basis the codes live in."""
    if input_scales is not None:
        w = w / input_scales.astype(np.float64)
    return rotation.apply(w, axis=1) if rotation is not None else w


def group_index(chunks: int, chunk: int, group_size: int | None) -> np.ndarray:
    """Group of every padded column (K_pad,)."""
    cols = np.arange(chunks * chunk)
    return cols // group_size if group_size else np.zeros_like(cols)


def round_row_scales(fmt: LiftQuantFormat, s: np.ndarray) -> np.ndarray:
    """Row scales as stored (``fmt.row_scale``, float16); a scale past its range is refused."""
    top = float(np.finfo(fmt.row_scale).max)
    if (np.abs(s) > top).any():
        raise ValueError(f"a row scale of {np.abs(s).max():.3g} exceeds {fmt.row_scale}'s {top:.0f}: "
                         "scale the weights down")
    return s.astype(fmt.row_scale)


def fit_scales(fmt: LiftQuantFormat, target: np.ndarray, unit: np.ndarray, groups: np.ndarray, n_groups: int,
               group_rel: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Least-squares (row scales, group scale codes) making ``scale * unit`` closest to ``target``.

    ``unit``: decoded codes at scale 1 (N, K_pad). With groups, the group factors are
    fitted given the row scale, then the row scale given the rounded group factors.
    """
    def ls(num, den):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)

    if group_rel is None:
        return round_row_scales(fmt, ls((target * unit).sum(1), (unit * unit).sum(1))), None
    row = ls((target * unit * group_rel[:, groups]).sum(1), ((unit * group_rel[:, groups]) ** 2).sum(1))
    tu = np.zeros((target.shape[0], n_groups))
    uu = np.zeros_like(tu)
    np.add.at(tu.T, groups, (target * unit).T)
    np.add.at(uu.T, groups, (unit * unit).T)
    rel = ls(tu, uu * row[:, None]) if (row > 0).any() else group_rel
    codes = group_scale_codes(fmt, rel)
    rel_q = group_scale_values(fmt, codes).astype(np.float64)
    row = ls((target * unit * rel_q[:, groups]).sum(1), ((unit * rel_q[:, groups]) ** 2).sum(1))
    return round_row_scales(fmt, row), codes


def quantize(w, format: str | LiftQuantFormat = "liftquant_24to10", *, input_scales=None,
             group_size: int | None = None, rotate: bool = True, seed: int = 0, search: str | None = None,
             starts: int = DEFAULT_STARTS) -> LiftQuantTensor:
    """LiftQuant codes and scales of a weight ``w`` (N outputs, K inputs); see the module docstring.

    input_scales: the activation multipliers ``m`` (K,), or None. group_size: weights per
    E4M3 group scale along a row (a multiple of d), or None for row scales only.
    rotate/seed: the incoherence rotation. search: ``exact``, ``fast``, ``fast+local`` (with
    ``starts`` starting codes) or ``slices``; default: the configuration's
    (:func:`.liftquant_codebooks.default_search`: exact up to D = 16, above it slices where the
    shipped measurements put slices within 2% of exact, else fast+local).
    The last few encodings are kept: the same weight and arguments return the same
    (read-only) tensor without searching again.
    """
    fmt = get_liftquant_format(format)
    w = check_weight(w)
    group_size = check_group_size(group_size, fmt.chunk)
    search = check_search(search or default_search(fmt), fmt.lifted)
    m = check_input_scales(fmt, input_scales, w.shape[1])
    key = (fmt.name, w.shape, hashlib.sha256(w.tobytes()).hexdigest(), None if m is None else m.tobytes(),
           group_size, rotate, seed, search, starts)
    return _recent.get(key, lambda: _encode(fmt, w, m, group_size, rotate, seed, search, starts))


def _encode(fmt: LiftQuantFormat, w: np.ndarray, m: np.ndarray | None, group_size: int | None, rotate: bool,
            seed: int, search: str, starts: int) -> LiftQuantTensor:
    rows, width = w.shape
    rotation = Incoherence(width, seed) if rotate else None
    codebook = load_codebook(fmt)
    d, D = fmt.chunk, fmt.lifted
    chunks = chunks_per_row(width, d)
    target = np.zeros((rows, chunks * d))
    target[:, :width] = to_rotated(w, m, rotation)
    groups = group_index(chunks, d, group_size)
    n_groups = int(groups[-1]) + 1
    real = np.zeros(chunks * d)
    real[:width] = 1.0
    row = round_row_scales(fmt, np.sqrt((target**2).sum(1) / width))
    group_codes = None
    if group_size:  # start each group at its RMS relative to the row's
        energy = np.zeros((rows, n_groups))
        np.add.at(energy.T, groups, (target**2).T)
        rms = np.sqrt(energy / np.bincount(groups, weights=real, minlength=n_groups))
        row64 = row.astype(np.float64)[:, None]
        group_codes = group_scale_codes(fmt, np.where(row64 > 0, rms / np.where(row64 > 0, row64, 1.0), 0.0))
    for _ in range(SCALE_ROUNDS):
        rel = None if group_codes is None else group_scale_values(fmt, group_codes).astype(np.float64)
        scale = row.astype(np.float64)[:, None] * (rel[:, groups] if rel is not None else 1.0)
        unit_target = np.where(scale > 0, target / np.where(scale > 0, scale, 1.0), 0.0)
        masks, _ = codebook.encode(unit_target.reshape(-1, d).astype(np.float32), search, starts)
        unit = codebook.decode(masks).reshape(rows, chunks * d)
        row, group_codes = fit_scales(fmt, target, unit, groups, n_groups, rel)
    return LiftQuantTensor(fmt, (rows, width), pack_codes(masks.reshape(rows, chunks), D), row, group_size,
                           group_codes, m, rotation)


def awq_input_scales(activation_rms, alpha: float) -> np.ndarray:
    """Input multipliers ``m_k = (a_k / geomean(a))^-alpha`` from per-channel activation RMS ``a``.

    Channels with large activations get small multipliers, which makes their weight
    columns larger and so coded more precisely (AWQ's rule); alpha = 0 gives all ones.
    """
    a = np.asarray(activation_rms, np.float64)
    if a.ndim != 1 or not np.isfinite(a).all() or (a < 0).any():
        raise ValueError("activation_rms must be a 1-d array of finite non-negative values")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
    a = np.maximum(a, a.max() * 1e-4 if a.max() > 0 else 1.0)
    return (a / np.exp(np.log(a).mean())) ** -alpha


def output_error(w, w_hat, gram: np.ndarray) -> np.ndarray:
    """Per-row output error ``(W - W_hat) G (W - W_hat)^T`` on the diagonal, G = E[x x^T] (K, K)."""
    delta = np.asarray(w, np.float64) - np.asarray(w_hat, np.float64)
    return np.einsum("nk,kj,nj->n", delta, np.asarray(gram, np.float64), delta)


def total_bits_per_weight(tensors, formats_in_model=None) -> float:
    """Bits per weight of several tensors together, each configuration's codebook counted once."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("tensors must not be empty")
    used = {t.format.name: t.format for t in tensors} if formats_in_model is None else formats_in_model
    total = sum(t.nbytes for t in tensors) + sum(codebook_bytes(f) for f in used.values())
    return 8.0 * total / sum(t.numel for t in tensors)


def save_tensors(path, tensors: dict[str, LiftQuantTensor]) -> Path:
    """Write LiftQuant tensors by layer name to one ``.npz`` (arrays as stored, a JSON index)."""
    arrays, index = {}, {}
    for i, (name, t) in enumerate(tensors.items()):
        key = f"t{i}"
        arrays[f"{key}.codes"], arrays[f"{key}.row_scales"] = t.codes, t.row_scales
        for field in ("group_scales", "input_scales"):
            if getattr(t, field) is not None:
                arrays[f"{key}.{field}"] = getattr(t, field)
        index[name] = {"key": key, "format": t.format.name, "shape": list(t.shape), "group_size": t.group_size,
                       "rotation_seed": None if t.rotation is None else t.rotation.seed}
    buf = io.BytesIO()
    np.savez(buf, index=np.array(json.dumps(index)), **arrays)
    return atomic_write(path, buf.getvalue())


def load_tensors(path) -> dict[str, LiftQuantTensor]:
    """The tensors :func:`save_tensors` wrote."""
    with np.load(path, allow_pickle=False) as data:
        index = json.loads(str(data["index"]))
        out = {}
        for name, meta in index.items():
            key = meta["key"]
            def get(field, key=key):
                return data[f"{key}.{field}"] if f"{key}.{field}" in data.files else None
            width = meta["shape"][1]
            out[name] = LiftQuantTensor(get_liftquant_format(meta["format"]), tuple(meta["shape"]), get("codes"),
                                        get("row_scales"), meta["group_size"], get("group_scales"),
                                        get("input_scales"),
                                        None if meta["rotation_seed"] is None else Incoherence(width, meta["rotation_seed"]))
    return out
