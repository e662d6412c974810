"""The one table of weight formats: every name ``--format`` accepts resolves here.

A weight format is one of three families: ``float`` (fp32, fp16, bf16: the weight stored as
a float dtype), ``block`` (the block-scaled formats of :mod:`.formats`, with the
``name@BLOCK`` and ``name_asym`` variants) and ``liftquant`` (the LiftQuant
configurations, also written ``liftquant:BITS`` or ``liftquant:DtoD``). Each row says
its family, its bits per weight and its report label; consumers ask the row (its
``family``, its ``block`` or ``liftquant`` description) instead of testing names.
A row registered with :func:`register` is seen by every consumer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes  # noqa: F401 (gives NumPy the bfloat16 dtype of the bf16 row)
import numpy as np

from .formats import ALIASES, E8M0, FORMATS, LIFTQUANT_FORMATS, BlockFormat, LiftQuantFormat, get_format

FAMILIES = ("float", "block", "liftquant")
REFERENCE = "fp32"  # the float format every other one is scored against
MX_BLOCK = 32  # the OCP MX block size


@dataclass(frozen=True)
class WeightFormat:
    """One weight format: its canonical name, family and storage description."""

    name: str
    family: str
    block: BlockFormat | None = None  # family "block"
    liftquant: LiftQuantFormat | None = None  # family "liftquant"
    dtype: str | None = None  # family "float": the NumPy dtype name
    description: str = ""

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {', '.join(FAMILIES)}, got {self.family!r}")
        needed = {"float": "dtype", "block": "block", "liftquant": "liftquant"}[self.family]
        if getattr(self, needed) is None:
            raise ValueError(f"weight format {self.name!r} of family {self.family!r} needs {needed}")

    @property
    def is_float(self) -> bool:
        return self.family == "float"

    @property
    def element_bits(self) -> int:
        """Bits of one stored element: the dtype's, the block element's, or 1 per LiftQuant sign."""
        if self.family == "float":
            return 8 * np.dtype(self.dtype).itemsize
        if self.family == "block":
            return self.block.element.bits
        return 1

    @property
    def element_kind(self) -> str:
        """``float`` or ``int`` elements (a float dtype's, a block element's), ``sign`` for LiftQuant's codes."""
        if self.family == "float":
            return "float"
        return self.block.element.kind if self.family == "block" else "sign"

    @property
    def is_mx(self) -> bool:
        """An OCP MX format: blocks of 32 elements sharing an E8M0 scale, no tensor scale."""
        return (self.family == "block" and self.block.scale == E8M0 and self.block.block_size == MX_BLOCK
                and not self.block.tensor_scale)

    @property
    def label(self) -> str:
        """The name reports print."""
        return self.name

    def bits_per_weight(self, shape: tuple[int, ...] | None = None) -> float:
        """Stored bits per weight, scales included.

        Without ``shape``: the nominal figure (elements plus block scales; LiftQuant's code
        bits D/d). With the ``(rows, columns)`` shape of a weight quantized along its rows:
        the exact figure of the codecs, padding and per-row/per-tensor scales included.
        """
        if self.family == "float":
            return float(self.element_bits)
        if shape is None:
            return self.block.bits_per_element if self.family == "block" else self.liftquant.code_bits_per_weight
        numel = int(np.prod(shape))
        if self.family == "block":
            from .codec import quantize

            return 8.0 * quantize(np.zeros(shape, np.float32), self.block, axis=1).nbytes / numel
        from . import liftquant

        return 8.0 * liftquant.layer_nbytes(self.liftquant, tuple(shape)) / numel


def _float(name: str, dtype: str) -> WeightFormat:
    return WeightFormat(name, "float", dtype=dtype, description=f"{dtype} weights (no quantization)")


def _block(fmt: BlockFormat, name: str | None = None) -> WeightFormat:
    return WeightFormat(name or fmt.name, "block", block=fmt, description=fmt.description)


def _lift(fmt: LiftQuantFormat) -> WeightFormat:
    return WeightFormat(fmt.name, "liftquant", liftquant=fmt, description=fmt.description)


_ROWS: dict[str, WeightFormat] = {
    **{r.name: r for r in (_float("fp32", "float32"), _float("fp16", "float16"), _float("bf16", "bfloat16"))},
    **{name: _block(f) for name, f in FORMATS.items()},
    **{name: _lift(f) for name, f in LIFTQUANT_FORMATS.items()},
}
_ALIASES: dict[str, str] = dict(ALIASES)
_BUILT_IN = frozenset(_ROWS)


def register(row: WeightFormat, replace: bool = False) -> WeightFormat:
    """Add ``row`` to the table; every consumer (CLI, codecs, lowering, export) then accepts it.

    A block or LiftQuant row is also entered in its codec's table (:data:`.formats.FORMATS`,
    :data:`.formats.LIFTQUANT_FORMATS`) under the row's name, so the codecs look it up by name.
    """
    if row.name in _ROWS and not replace:
        raise ValueError(f"weight format {row.name!r} is already registered")
    if row.family == "block":
        row = dataclasses.replace(row, block=dataclasses.replace(row.block, name=row.name))
        FORMATS[row.name] = row.block
    elif row.family == "liftquant":
        row = dataclasses.replace(row, liftquant=dataclasses.replace(row.liftquant, name=row.name))
        LIFTQUANT_FORMATS[row.name] = row.liftquant
    _ROWS[row.name] = row
    return row


def unregister(name: str) -> None:
    """Remove a row added with :func:`register` (and its codec table entry)."""
    if name in _BUILT_IN:
        raise ValueError(f"weight format {name!r} is built in; only registered rows can be removed")
    _ROWS.pop(name, None)
    FORMATS.pop(name, None)
    LIFTQUANT_FORMATS.pop(name, None)


def weight_format_names(family: str | None = None) -> list[str]:
    """Every fixed name ``--format`` accepts (of one family if given), aliases included."""
    names = [n for n, r in _ROWS.items() if family in (None, r.family)]
    if family in (None, "block"):
        names += list(_ALIASES)
    return names


def weight_formats(family: str | None = None,
                   where: Callable[[WeightFormat], bool] | None = None) -> list[WeightFormat]:
    """The rows of the table, filtered by family and a predicate (``lambda r: r.element_bits == 4``)."""
    if family is not None and family not in FAMILIES:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)}, got {family!r}")
    return [r for r in _ROWS.values() if family in (None, r.family) and (where is None or where(r))]


def names(family: str | None = None, where: Callable[[WeightFormat], bool] | None = None) -> list[str]:
    """Canonical names of the rows a query selects, in table order (``names("block", lambda r: r.is_mx)``)."""
    return [r.name for r in weight_formats(family, where)]


def liftquant_for_bits(*bits: float) -> list[str]:
    """The LiftQuant configuration ``liftquant:B`` picks for each code width ``B``."""
    return [resolve(f"liftquant:{b:g}").name for b in bits]


def _allowed() -> str:
    names = weight_format_names("float") + weight_format_names("block")
    return (f"{', '.join(names)}, liftquant:BITS (e.g. liftquant:2.4) or liftquant_DtoD "
            "(see `edgekit formats`)")


def resolve(spec: str | WeightFormat) -> WeightFormat:
    """The row of a ``--format`` name, or a ValueError naming the allowed names.

    Besides the table's names: ``name@BLOCK`` and ``name_asym`` of a block format, and
    ``liftquant:BITS`` / ``liftquant:DtoD`` picking a LiftQuant configuration.
    """
    if isinstance(spec, WeightFormat):
        return spec
    if not isinstance(spec, str):
        raise ValueError(f"format must be a string; allowed: {_allowed()}")  # noqa: TRY004 (the CLI reports ValueErrors)
    text = spec.strip().lower()
    row = _ROWS.get(_ALIASES.get(text, text))
    if row is not None:
        return row
    if text.startswith("liftquant"):  # the LiftQuant family's own spellings: liftquant:2.4, liftquant:24to10
        from edgekit.simulators.liftquant.codebooks import parse_liftquant

        return _ROWS[parse_liftquant(text).name]
    try:
        fmt = get_format(text)
    except ValueError as err:
        if "unknown format" not in str(err):
            raise
        raise ValueError(f"unknown format {spec!r}; allowed: {_allowed()}") from None
    return _block(fmt, fmt.name + (f"@{fmt.block_size}" if "@" in text else ""))


def canonical_name(spec: str | WeightFormat) -> str:
    """The canonical name of a ``--format`` value (``mxfp8`` -> ``mxfp8_e4m3``)."""
    return resolve(spec).name
