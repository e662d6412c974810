"""Named arrangements of packed codes, and exact repacks between them.

``packed`` is the codecs' own layout (see ``codec``): within a row, blocks follow one
another and each group of ``bytes_per_group`` bytes holds ``codes_per_group`` codes,
lowest bits first (FP4/INT4: element 2t in byte t's low nibble, 2t+1 in its high
nibble; FP6: four codes in three bytes).

The other layouts serve vector units: 16 neighbouring elements come from 16 consecutive
bytes at one shift, so a decode needs no per-lane select. Same bytes, same scales.

``nibble_halves`` (4-bit codes): in every group of 32 elements of a row, byte ``t``
holds element ``t`` in its low nibble and element ``t + 16`` in its high nibble.

``six_bit_planes`` (6-bit codes): every group of 64 elements is 48 bytes: 32 bytes of
low nibbles, arranged as ``nibble_halves`` over its two 32-element halves, then 16 bytes
whose byte ``t`` holds the top two bits of elements ``t``, ``t + 16``, ``t + 32`` and
``t + 48``, lowest first.

A layout other than ``packed`` applies to rows whose block-padded length is a whole
number of its groups.
"""

from __future__ import annotations

import numpy as np

from .formats import BlockFormat
from .reference import pack_codes, unpack_codes

PACKED = "packed"
NIBBLE_HALVES = "nibble_halves"
SIX_BIT_PLANES = "six_bit_planes"
LAYOUTS = (PACKED, NIBBLE_HALVES, SIX_BIT_PLANES)
LANES = 16  # neighbouring elements per byte vector
GROUP_ELEMENTS = {NIBBLE_HALVES: 2 * LANES, SIX_BIT_PLANES: 4 * LANES}
VECTOR_LAYOUT = {4: NIBBLE_HALVES, 6: SIX_BIT_PLANES}  # code bits -> layout


def layouts_for(fmt: BlockFormat) -> tuple[str, ...]:
    """The layouts ``fmt``'s codes can take."""
    vector = VECTOR_LAYOUT.get(fmt.element.bits)
    return (PACKED, vector) if vector else (PACKED,)


def check_layout(fmt: BlockFormat, layout: str) -> str:
    allowed = layouts_for(fmt)
    if layout not in allowed:
        raise ValueError(f"layout {layout!r} does not apply to {fmt.name} ({fmt.element.bits}-bit codes); "
                         f"allowed: {', '.join(allowed)}")
    return layout


def layout_applies(fmt: BlockFormat, layout: str, row_elements: int) -> bool:
    """Whether rows of ``row_elements`` elements (before block padding) can take ``layout``."""
    if layout not in layouts_for(fmt):
        return False
    padded = -(-row_elements // fmt.block_size) * fmt.block_size
    return layout == PACKED or padded % GROUP_ELEMENTS[layout] == 0


def _group_bytes(fmt: BlockFormat, layout: str, row_bytes: int) -> int:
    group = GROUP_ELEMENTS[layout]
    group_bytes = group * fmt.element.bits // 8
    if row_bytes % group_bytes:
        raise ValueError(f"{layout} needs rows of whole {group}-element groups ({group_bytes} bytes of "
                         f"{fmt.name} codes); these rows have {row_bytes} bytes")
    return group_bytes


def _element_groups(codes: np.ndarray, fmt: BlockFormat, layout: str) -> np.ndarray:
    """Rows of packed bytes as element codes, shaped (..., groups, group elements)."""
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    _group_bytes(fmt, layout, codes.shape[-1])
    elements = unpack_codes(codes, fmt.element.bits)
    return elements.reshape(*codes.shape[:-1], -1, GROUP_ELEMENTS[layout])


def _halves(low: np.ndarray) -> np.ndarray:
    """(..., 2 * LANES) nibbles -> (..., LANES) bytes: element t low, t + LANES high."""
    return low[..., :LANES] | (low[..., LANES:] << 4)


def _unhalves(data: np.ndarray) -> np.ndarray:
    return np.concatenate([data & 0x0F, data >> 4], axis=-1)


def to_layout(codes: np.ndarray, fmt: BlockFormat, layout: str) -> np.ndarray:
    """Rows of ``packed`` codes rearranged into ``layout`` (a new array of the same shape)."""
    check_layout(fmt, layout)
    if layout == PACKED:
        return np.array(codes, dtype=np.uint8)
    groups = _element_groups(codes, fmt, layout)
    if layout == NIBBLE_HALVES:
        out = _halves(groups)
    else:
        low = groups & 0x0F
        top = (groups >> 4).reshape(*groups.shape[:-1], 4, LANES).astype(np.uint8)
        crumbs = top[..., 0, :] | (top[..., 1, :] << 2) | (top[..., 2, :] << 4) | (top[..., 3, :] << 6)
        out = np.concatenate([_halves(low[..., :32]), _halves(low[..., 32:]), crumbs], axis=-1)
    return out.reshape(np.shape(codes))


def from_layout(codes: np.ndarray, fmt: BlockFormat, layout: str) -> np.ndarray:
    """Rows in ``layout`` back into the codecs' ``packed`` layout (a new array)."""
    check_layout(fmt, layout)
    data = np.ascontiguousarray(codes, dtype=np.uint8)
    if layout == PACKED:
        return data.copy()
    groups = data.reshape(*data.shape[:-1], -1, _group_bytes(fmt, layout, data.shape[-1]))
    if layout == NIBBLE_HALVES:
        elements = _unhalves(groups)
    else:
        low = np.concatenate([_unhalves(groups[..., :16]), _unhalves(groups[..., 16:32])], axis=-1)
        crumbs = groups[..., 32:]
        top = np.concatenate([(crumbs >> shift) & 3 for shift in (0, 2, 4, 6)], axis=-1)
        elements = low | (top << 4)
    return pack_codes(elements.reshape(*data.shape[:-1], -1), fmt.element.bits)
