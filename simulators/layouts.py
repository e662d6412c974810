"""Named arrangements of packed codes, and exact repacks between them.

``packed`` is the codecs' own layout (see ``codec``): within a row, blocks follow one
another and each group of ``bytes_per_group`` bytes holds ``codes_per_group`` codes,
lowest bits first (FP4/INT4: element 2t in byte t's low nibble, 2t+1 in its high
nibble).

``block_halves`` serves vector units that decode 4-bit codes: byte ``t`` of a block
holds element ``t`` in its low nibble and element ``t + B/2`` in its high nibble, so
one vector load of bytes yields two vectors of neighbouring elements with a mask or a
shift, and no per-lane nibble select. Same bytes per block, same scales.
"""

from __future__ import annotations

import numpy as np

from .formats import BlockFormat

PACKED = "packed"
BLOCK_HALVES = "block_halves"
LAYOUTS = (PACKED, BLOCK_HALVES)


def layouts_for(fmt: BlockFormat) -> tuple[str, ...]:
    """The layouts ``fmt``'s codes can take."""
    return LAYOUTS if fmt.element.bits == 4 else (PACKED,)


def check_layout(fmt: BlockFormat, layout: str) -> str:
    allowed = layouts_for(fmt)
    if layout not in allowed:
        raise ValueError(f"layout {layout!r} does not apply to {fmt.name} ({fmt.element.bits}-bit codes); "
                         f"allowed: {', '.join(allowed)}")
    return layout


def _nibble_blocks(codes: np.ndarray, fmt: BlockFormat) -> np.ndarray:
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    half = fmt.block_size // 2
    if codes.shape[-1] % half:
        raise ValueError(f"rows of {codes.shape[-1]} bytes are not whole {fmt.name} blocks of {half} bytes")
    return codes.reshape(*codes.shape[:-1], -1, half)


def to_layout(codes: np.ndarray, fmt: BlockFormat, layout: str) -> np.ndarray:
    """Rows of ``packed`` codes rearranged into ``layout`` (a new array)."""
    check_layout(fmt, layout)
    if layout == PACKED:
        return np.array(codes, dtype=np.uint8)
    blocks = _nibble_blocks(codes, fmt)
    nibbles = np.stack([blocks & 0x0F, blocks >> 4], axis=-1).reshape(*blocks.shape[:-1], 2, -1)
    return (nibbles[..., 0, :] | (nibbles[..., 1, :] << 4)).reshape(codes.shape)


def from_layout(codes: np.ndarray, fmt: BlockFormat, layout: str) -> np.ndarray:
    """Rows in ``layout`` back into the codecs' ``packed`` layout (a new array)."""
    check_layout(fmt, layout)
    if layout == PACKED:
        return np.array(codes, dtype=np.uint8)
    blocks = _nibble_blocks(codes, fmt)
    elements = np.concatenate([blocks & 0x0F, blocks >> 4], axis=-1)
    pairs = elements.reshape(*blocks.shape[:-1], -1, 2)
    return (pairs[..., 0] | (pairs[..., 1] << 4)).reshape(codes.shape)
