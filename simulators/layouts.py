"""Named arrangements of packed codes, and exact repacks between them.

``packed`` is the codecs' own layout (see ``codec``): within a row, blocks follow one
another and each group of ``bytes_per_group`` bytes holds ``codes_per_group`` codes,
lowest bits first (FP4/INT4: element 2t in byte t's low nibble, 2t+1 in its high
nibble).

``nibble_halves`` serves vector units that decode 4-bit codes: in every group of 32
elements of a row, byte ``t`` holds element ``t`` in its low nibble and element
``t + 16`` in its high nibble, so one 16-byte load yields two vectors of 16 neighbouring
elements with a mask or a shift, and no per-lane nibble select. Same bytes, same
scales; it applies to rows whose (block-padded) length is a multiple of 32.
"""

from __future__ import annotations

import numpy as np

from .formats import BlockFormat

PACKED = "packed"
NIBBLE_HALVES = "nibble_halves"
LAYOUTS = (PACKED, NIBBLE_HALVES)
HALVES_GROUP = 32  # elements per nibble_halves group: 16 bytes


def layouts_for(fmt: BlockFormat) -> tuple[str, ...]:
    """The layouts ``fmt``'s codes can take."""
    return LAYOUTS if fmt.element.bits == 4 else (PACKED,)


def layout_applies(fmt: BlockFormat, layout: str, row_elements: int) -> bool:
    """Whether rows of ``row_elements`` elements (before block padding) can take ``layout``."""
    if layout not in layouts_for(fmt):
        return False
    padded = -(-row_elements // fmt.block_size) * fmt.block_size
    return layout == PACKED or padded % HALVES_GROUP == 0


def check_layout(fmt: BlockFormat, layout: str) -> str:
    allowed = layouts_for(fmt)
    if layout not in allowed:
        raise ValueError(f"layout {layout!r} does not apply to {fmt.name} ({fmt.element.bits}-bit codes); "
                         f"allowed: {', '.join(allowed)}")
    return layout


def _nibble_groups(codes: np.ndarray, fmt: BlockFormat) -> np.ndarray:
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    half = HALVES_GROUP // 2
    if codes.shape[-1] % half:
        raise ValueError(f"{NIBBLE_HALVES} needs rows of whole {HALVES_GROUP}-element groups ({half} bytes of "
                         f"{fmt.name} codes); these rows have {codes.shape[-1]} bytes")
    return codes.reshape(*codes.shape[:-1], -1, half)


def to_layout(codes: np.ndarray, fmt: BlockFormat, layout: str) -> np.ndarray:
    """Rows of ``packed`` codes rearranged into ``layout`` (a new array)."""
    check_layout(fmt, layout)
    if layout == PACKED:
        return np.array(codes, dtype=np.uint8)
    groups = _nibble_groups(codes, fmt)
    nibbles = np.stack([groups & 0x0F, groups >> 4], axis=-1).reshape(*groups.shape[:-1], 2, -1)
    return (nibbles[..., 0, :] | (nibbles[..., 1, :] << 4)).reshape(codes.shape)


def from_layout(codes: np.ndarray, fmt: BlockFormat, layout: str) -> np.ndarray:
    """Rows in ``layout`` back into the codecs' ``packed`` layout (a new array)."""
    check_layout(fmt, layout)
    if layout == PACKED:
        return np.array(codes, dtype=np.uint8)
    groups = _nibble_groups(codes, fmt)
    elements = np.concatenate([groups & 0x0F, groups >> 4], axis=-1)
    pairs = elements.reshape(*groups.shape[:-1], -1, 2)
    return (pairs[..., 0] | (pairs[..., 1] << 4)).reshape(codes.shape)
