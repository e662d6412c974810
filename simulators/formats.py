"""The one table of number formats.

Every element type, scale type and block format is described here once, as data.
Codecs, kernels, lookup tables and reports derive what they need from these rows
(value tables, kernel constants, bits per element); adding a format is adding a row.

Element types follow the OCP Microscaling Formats (MX) v1.0 specification; NVFP4
follows NVIDIA's definition (E2M1 elements, an E4M3 scale per 16 elements and one
FP32 scale per tensor).

Beside the block formats sits a vector-quantizer kind, LiftQuant (``LIFTQUANT_FORMATS``):
each chunk of ``d`` weights is ``M @ c`` with ``M`` a fixed ``d x D`` matrix and ``c`` in
{-1, +1}^D, so a row of the table is (D, d) and its code costs D/d bits per weight.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

SCALE_RULES = ("floor", "ceil", "rceil")
"""How a block's shared E8M0 scale is chosen from its largest magnitude ``amax``.

floor: ``2^(floor(log2 amax) - emax_elem)``, the OCP MX v1.0 rule (values above the
       largest element normal saturate).
ceil:  ``2^(ceil(log2 amax) - emax_elem)``; never saturates, loses up to one bit.
rceil: ``2^ceil(log2(amax * fp32(1/max_normal)))``, the rounding-up rule of cuBLAS and
       Blackwell's ``cvt.rp.ue8m0``; the scaled amax lands at or just below max normal.
"""


def code_group(bits: int) -> tuple[int, int]:
    """(codes, bytes) of the smallest whole-byte group of ``bits``-bit codes: (1, 1) for 8 bits,
    (2, 1) for 4, (4, 3) for 6. A group is a little-endian word, its first code in the lowest bits."""
    codes = 8 // math.gcd(8, bits)
    return codes, codes * bits // 8


@dataclass(frozen=True)
class ElementType:
    """One element encoding: a sign-magnitude float (ExMy) or a two's complement int."""

    name: str
    kind: str  # "float" or "int"
    bits: int
    ebits: int = 0
    mbits: int = 0
    bias: int = 0
    nan: str = "none"  # float: "none", "all-ones" (S.1111.111 is NaN), or "ieee"
    inf: bool = False  # IEEE infinities (exponent all ones, mantissa zero)
    frac_bits: int = 0  # int: implicit scale 2^-frac_bits
    symmetric: bool = True  # int: range [-(2^(b-1)-1), 2^(b-1)-1]; else -2^(b-1) too

    def __post_init__(self):
        if self.kind not in ("float", "int"):
            raise ValueError(f"kind must be 'float' or 'int', got {self.kind!r}")
        if self.kind == "float" and 1 + self.ebits + self.mbits != self.bits:
            raise ValueError(f"{self.name}: 1 + ebits + mbits must equal bits")

    # ---- derived description -------------------------------------------------
    @property
    def emin(self) -> int:
        """Exponent of the smallest normal (float types)."""
        return 1 - self.bias

    @property
    def max_magnitude_code(self) -> int:
        """Magnitude code of the largest finite value (sign bit clear)."""
        if self.kind == "int":
            return self.int_max
        top = (1 << (self.bits - 1)) - 1
        if self.nan == "all-ones":
            return top - 1
        if self.nan == "ieee" or self.inf:
            return ((1 << self.ebits) - 2) << self.mbits | ((1 << self.mbits) - 1)
        return top

    @property
    def int_max(self) -> int:
        return (1 << (self.bits - 1)) - 1

    @property
    def int_min(self) -> int:
        return -self.int_max if self.symmetric else -(1 << (self.bits - 1))

    @property
    def max_normal(self) -> float:
        return float(self.magnitudes[self.max_magnitude_code])

    @property
    def min_subnormal(self) -> float:
        return float(self.magnitudes[1])

    @property
    def min_normal(self) -> float:
        if self.kind == "int":
            return self.min_subnormal
        return 2.0**self.emin

    @property
    def emax(self) -> int:
        """``floor(log2(max_normal))``: the ``emax_elem`` of the OCP scale rule."""
        return math.floor(math.log2(self.max_normal))

    @property
    def has_nan(self) -> bool:
        return self.nan != "none"

    @cached_property
    def magnitudes(self) -> np.ndarray:
        """Value of every magnitude code 0 .. 2^(bits-1)-1, as float64 (NaN/Inf kept)."""
        codes = np.arange(1 << (self.bits - 1))
        if self.kind == "int":
            return codes.astype(np.float64) / 2.0**self.frac_bits
        exp = codes >> self.mbits
        man = codes & ((1 << self.mbits) - 1)
        sub = exp == 0
        with np.errstate(over="ignore"):
            vals = np.where(
                sub,
                man * 2.0 ** (self.emin - self.mbits),
                (1.0 + man / 2.0**self.mbits) * 2.0 ** (exp.astype(np.float64) - self.bias),
            )
        top_exp = exp == (1 << self.ebits) - 1
        if self.nan == "all-ones":
            vals[codes == codes[-1]] = np.nan
        elif self.nan == "ieee":
            vals[top_exp & (man != 0)] = np.nan
            if self.inf:
                vals[top_exp & (man == 0)] = np.inf
        return vals

    @cached_property
    def values(self) -> np.ndarray:
        """Value of every code 0 .. 2^bits - 1 (float64), the decode table."""
        half = 1 << (self.bits - 1)
        if self.kind == "int":
            k = np.arange(1 << self.bits)
            k = np.where(k >= half, k - (1 << self.bits), k)
            return k.astype(np.float64) / 2.0**self.frac_bits
        return np.concatenate([self.magnitudes, -self.magnitudes])

    def kernel_constants(self) -> tuple:
        """Integer constants of the Numba codec, derived from this row.

        The codec rounds every type as a float on its FP32 bit pattern: normals by
        integer round-half-even on the mantissa, subnormals by adding
        ``2^(emin - mbits + 23)`` so the FPU's rounding lands on the grid. An INT type
        is the float with one exponent bit whose subnormals are its grid k * 2^-frac_bits
        (emin = bits - 1 - frac_bits); only its sign encoding (two's complement) and
        its per-sign limits differ.
        """
        if self.kind == "int":
            mbits, emin = self.bits - 1, self.bits - 1 - self.frac_bits
            max_neg = -self.int_min
        else:
            mbits, emin = self.mbits, self.emin
            max_neg = self.max_magnitude_code
        shift = 23 - mbits
        return (
            int(self.kind == "int"),
            self.bits,
            self.emax,
            self.max_magnitude_code,
            max_neg,
            (emin + 127) << 23,  # FP32 bits of the smallest normal, 2^emin
            (emin - mbits + 23 + 127) << 23,  # FP32 bits of the subnormal rounding constant
            shift,
            (1 << (shift - 1)) - 1,
            (126 + emin) << 23,  # FP32 bias minus this type's bias, at the exponent field
        )


@dataclass(frozen=True)
class ScaleType:
    """A block scale encoding: E8M0 (a bare power of two) or an E4M3 float."""

    name: str
    bits: int
    element: ElementType | None = None  # E4M3-style scales reuse an element row

    @cached_property
    def values(self) -> np.ndarray:
        """Value of every scale code (float64)."""
        if self.element is not None:
            return self.element.values
        with np.errstate(over="ignore"):
            vals = 2.0 ** (np.arange(256, dtype=np.float64) - 127)
        vals[255] = np.nan
        return vals


@dataclass(frozen=True)
class BlockFormat:
    """A block-scaled format: elements, one scale per block, optionally a tensor scale."""

    name: str
    element: ElementType
    scale: ScaleType
    block_size: int
    tensor_scale: bool = False
    description: str = ""

    @property
    def codes_per_group(self) -> int:
        """Codes that fill whole bytes: 2 for 4-bit, 4 for 6-bit, 1 for 8-bit."""
        return code_group(self.element.bits)[0]

    @property
    def bytes_per_group(self) -> int:
        return code_group(self.element.bits)[1]

    @property
    def bytes_per_block(self) -> int:
        return self.block_size // self.codes_per_group * self.bytes_per_group

    @property
    def bits_per_element(self) -> float:
        """Storage bits per element, the block scale included (tensor scale excluded)."""
        return self.element.bits + self.scale.bits / self.block_size

    @property
    def scale_kind(self) -> int:
        """Kernel switch: 0 E8M0 scales, 1 E4M3 scales under an FP32 tensor scale."""
        return 1 if self.tensor_scale else 0

    def check_block_size(self, block_size: int) -> int:
        if (
            isinstance(block_size, bool)
            or not isinstance(block_size, (int, np.integer))
            or block_size < 1
            or block_size % self.codes_per_group
        ):
            raise ValueError(
                f"block_size must be a positive multiple of {self.codes_per_group} for "
                f"{self.name} ({self.element.bits}-bit codes pack {self.codes_per_group} "
                f"per {self.bytes_per_group} byte(s)), got {block_size!r}"
            )
        return int(block_size)

    def with_block_size(self, block_size: int) -> BlockFormat:
        return dataclasses.replace(self, block_size=self.check_block_size(block_size))

    def with_int_range(self, symmetric: bool) -> BlockFormat:
        """The same format with INT elements clipped symmetrically or to -2^(b-1)."""
        if self.element.kind != "int":
            raise ValueError(f"with_int_range applies to INT formats, not {self.name}")
        elem = dataclasses.replace(self.element, symmetric=symmetric)
        suffix = "" if symmetric else "_asym"
        return dataclasses.replace(self, element=elem, name=self.name.split("_asym")[0] + suffix)


# ---- the table ---------------------------------------------------------------
E4M3 = ElementType("e4m3", "float", 8, ebits=4, mbits=3, bias=7, nan="all-ones")
E5M2 = ElementType("e5m2", "float", 8, ebits=5, mbits=2, bias=15, nan="ieee", inf=True)
E3M2 = ElementType("e3m2", "float", 6, ebits=3, mbits=2, bias=3)
E2M3 = ElementType("e2m3", "float", 6, ebits=2, mbits=3, bias=1)
E2M1 = ElementType("e2m1", "float", 4, ebits=2, mbits=1, bias=1)
INT8 = ElementType("int8", "int", 8, frac_bits=6)
INT4 = ElementType("int4", "int", 4, frac_bits=2)

ELEMENTS: dict[str, ElementType] = {e.name: e for e in (E4M3, E5M2, E3M2, E2M3, E2M1, INT8, INT4)}

E8M0 = ScaleType("e8m0", 8)
E4M3_SCALE = ScaleType("e4m3", 8, element=E4M3)

FORMATS: dict[str, BlockFormat] = {
    f.name: f
    for f in (
        BlockFormat("mxfp8_e4m3", E4M3, E8M0, 32, description="OCP MXFP8, E4M3 elements"),
        BlockFormat("mxfp8_e5m2", E5M2, E8M0, 32, description="OCP MXFP8, E5M2 elements"),
        BlockFormat("mxfp6_e3m2", E3M2, E8M0, 32, description="OCP MXFP6, E3M2 elements"),
        BlockFormat("mxfp6_e2m3", E2M3, E8M0, 32, description="OCP MXFP6, E2M3 elements"),
        BlockFormat("mxfp4", E2M1, E8M0, 32, description="OCP MXFP4, E2M1 elements"),
        BlockFormat("mxint8", INT8, E8M0, 32, description="OCP MXINT8, k/64 for k in [-127, 127]"),
        BlockFormat("mxint4", INT4, E8M0, 32, description="MXINT4, k/4 for k in [-7, 7]"),
        BlockFormat(
            "nvfp4",
            E2M1,
            E4M3_SCALE,
            16,
            tensor_scale=True,
            description="NVIDIA NVFP4: E2M1, E4M3 scale per 16, FP32 per tensor",
        ),
    )
}

ALIASES = {"mxfp8": "mxfp8_e4m3", "mxfp6": "mxfp6_e2m3"}


def format_names() -> list[str]:
    return list(FORMATS) + list(ALIASES)


def get_format(spec: str | BlockFormat) -> BlockFormat:
    """Look a format up by name (``mxfp4``, ``mxint8``, ``nvfp4``, ``mxfp8`` ...).

    A block size other than the format's own is written ``name@block`` (``mxint8@64``);
    ``name_asym`` clips INT elements to [-2^(b-1), 2^(b-1)-1] instead of symmetrically.
    """
    if isinstance(spec, BlockFormat):
        return spec
    if not isinstance(spec, str):
        raise ValueError(f"format must be a format name (str), got {type(spec).__name__}")  # noqa: TRY004 (callers report ValueErrors)
    text = spec.strip().lower()
    name, _, block = text.partition("@")
    asym = name.endswith("_asym")
    base = ALIASES.get(name.removesuffix("_asym"), name.removesuffix("_asym"))
    if base not in FORMATS:
        raise ValueError(f"unknown format {spec!r}; allowed: {', '.join(format_names())}")
    fmt = FORMATS[base]
    if asym:
        if fmt.element.kind != "int":
            ints = ", ".join(n for n, f in FORMATS.items() if f.element.kind == "int")
            raise ValueError(f"format {spec!r}: '_asym' applies only to INT formats ({ints})")
        fmt = fmt.with_int_range(symmetric=False)
    if block:
        if not block.isdigit():
            raise ValueError(f"format {spec!r}: block size after '@' must be an integer")
        fmt = fmt.with_block_size(int(block))
    return fmt


# ---- LiftQuant: a vector-quantizer kind beside the block formats -----------------
MAX_LIFTED_DIM = 32  # codes of one chunk fit a uint32 bit mask; encoders enumerate up to 2^(D - d)
LIFTQUANT_PREFIX = "liftquant_"


@dataclass(frozen=True)
class LiftQuantFormat:
    """A LiftQuant configuration: chunks of ``chunk`` (d) weights coded as ``M @ c``.

    ``M`` is a fixed ``d x lifted`` (d x D) projection trained on N(0, 1) data
    (:mod:`.liftquant_codebooks`); ``c`` is D signs, stored as D bits. The scales around
    the codes are described here too: one per output row (``row_scale``), optionally one
    per group of weights along the row (``group_scale``, relative to the row's), and one
    multiplier per input channel (``input_scale``).
    """

    name: str
    lifted: int  # D
    chunk: int  # d
    description: str = ""
    row_scale: str = "float16"  # NumPy dtype name
    group_scale: ScaleType = field(default_factory=lambda: E4M3_SCALE)
    input_scale: str = "float16"  # NumPy dtype name

    def __post_init__(self):
        for name in ("lifted", "chunk"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be an integer, got {value!r}")  # noqa: TRY004 (callers catch ValueError)
        if not 1 <= self.chunk < self.lifted <= MAX_LIFTED_DIM:
            raise ValueError(f"{self.name}: need 1 <= chunk (d) < lifted (D) <= {MAX_LIFTED_DIM}, "
                             f"got D={self.lifted}, d={self.chunk}")

    @property
    def label(self) -> str:
        """``"24to10"``: D to d."""
        return f"{self.lifted}to{self.chunk}"

    @property
    def code_bits_per_weight(self) -> float:
        """D/d: the bits of the sign codes alone, per weight."""
        return self.lifted / self.chunk

    @property
    def free_dims(self) -> int:
        """D - d: the coordinates the fast search enumerates (2^(D - d) candidates per chunk)."""
        return self.lifted - self.chunk


def _liftquant(lifted: int, chunk: int) -> LiftQuantFormat:
    return LiftQuantFormat(f"{LIFTQUANT_PREFIX}{lifted}to{chunk}", lifted, chunk,
                           description=f"LiftQuant: {chunk} weights = M({chunk}x{lifted}) @ {lifted} signs")


LIFTQUANT_FORMATS: dict[str, LiftQuantFormat] = {
    f.name: f
    for f in sorted((_liftquant(D, d) for D, d in (
        (10, 8), (6, 4), (12, 8), (14, 8), (4, 2), (8, 4), (16, 8), (32, 16), (30, 14), (22, 10), (18, 8),
        (24, 10), (20, 8), (22, 8), (24, 8), (12, 4), (20, 6), (14, 4), (15, 4), (16, 4),
    )), key=lambda f: (f.code_bits_per_weight, f.lifted))
}


def get_liftquant_format(spec: str | LiftQuantFormat) -> LiftQuantFormat:
    """Look a LiftQuant configuration up by name: ``liftquant_24to10`` or ``24to10``."""
    if isinstance(spec, LiftQuantFormat):
        return spec
    if not isinstance(spec, str):
        raise ValueError(  # noqa: TRY004 (the CLI reports ValueErrors)
            f"format must be a LiftQuant configuration name (str), got {type(spec).__name__}")
    text = spec.strip().lower()
    name = text if text.startswith(LIFTQUANT_PREFIX) else LIFTQUANT_PREFIX + text
    if name not in LIFTQUANT_FORMATS:
        raise ValueError(f"unknown LiftQuant configuration {spec!r}; allowed: {', '.join(LIFTQUANT_FORMATS)}")
    return LIFTQUANT_FORMATS[name]
