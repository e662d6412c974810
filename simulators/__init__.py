"""Bit-exact simulators of hardware number formats.

One table of formats (:mod:`.formats`) drives the Numba codecs (:mod:`.codec`), the
NumPy reference path (:mod:`.reference`) and the MX dot product (:mod:`.mxdot`).
"""

from .codec import QuantizedTensor, dequantize, quantize, quantize_dequantize
from .formats import (
    ELEMENTS,
    FORMATS,
    SCALE_RULES,
    BlockFormat,
    ElementType,
    ScaleType,
    format_names,
    get_format,
)

__all__ = [
    "ELEMENTS",
    "FORMATS",
    "SCALE_RULES",
    "BlockFormat",
    "ElementType",
    "QuantizedTensor",
    "ScaleType",
    "dequantize",
    "format_names",
    "get_format",
    "quantize",
    "quantize_dequantize",
]
