"""An ml_dtypes-based oracle for block quantization, independent of edgekit's codecs.

Scales come from ``np.log2``; elements are cast by ml_dtypes (saturating casts are
clamped first, as ml_dtypes' FP8 casts overflow to NaN/Inf); INT codes by ``np.rint``.
"""

import ml_dtypes
import numpy as np

ML_TYPES = {
    "e4m3": ml_dtypes.float8_e4m3fn,
    "e5m2": ml_dtypes.float8_e5m2,
    "e3m2": ml_dtypes.float6_e3m2fn,
    "e2m3": ml_dtypes.float6_e2m3fn,
    "e2m1": ml_dtypes.float4_e2m1fn,
}


def element_codes(v: np.ndarray, elem) -> np.ndarray:
    """Codes of float32 values ``v`` already divided by their block scale."""
    mask = (1 << elem.bits) - 1
    if elem.kind == "float":
        clamped = np.clip(v, -elem.max_normal, elem.max_normal).astype(np.float32)
        return clamped.astype(ML_TYPES[elem.name]).view(np.uint8) & mask
    k = np.clip(np.rint(v.astype(np.float64) * 2.0**elem.frac_bits), elem.int_min, elem.int_max)
    if elem.bits == 4:
        return k.astype(np.int8).astype(ml_dtypes.int4).view(np.uint8) & mask
    return k.astype(np.int8).view(np.uint8)


def quantize(x: np.ndarray, fmt, rule: str = "floor"):
    """(element codes, scale codes, tensor scale) of float32 ``x`` (rows, n), blocks along n.

    ``n`` must be a multiple of the block size. Codes come back unpacked, one per element.
    """
    rows, n = x.shape
    B = fmt.block_size
    blk = x.reshape(rows, n // B, B)
    finite = np.isfinite(blk).all(axis=-1)
    amax = np.where(finite, np.abs(np.where(np.isfinite(blk), blk, 0)).max(axis=-1), 0).astype(np.float64)
    elem = fmt.element
    tensor_scale = None
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if fmt.tensor_scale:
            g = float(np.abs(x[np.isfinite(x)]).max())
            tensor_scale = np.float32(1.0) if g == 0 else max(np.float32(g) / np.float32(2688.0), np.float32(2.0**-126))
            target = (amax.astype(np.float32) / np.float32(6.0)) / tensor_scale
            scode = np.clip(target, 0, 448).astype(ml_dtypes.float8_e4m3fn)
            decode_scale = scode.astype(np.float32) * tensor_scale
            inv = np.float32(1.0) / decode_scale
            inv = np.where(np.isfinite(inv), inv, 0).astype(np.float32)
            v = blk * inv[..., None]
            scale_codes = np.where(finite, scode.view(np.uint8), 0x7F)
        else:
            if rule == "rceil":
                d = (amax.astype(np.float32) * np.float32(1.0 / elem.max_normal)).astype(np.float64)
                e = np.ceil(np.log2(d))
            elif rule == "ceil":
                e = np.ceil(np.log2(amax)) - elem.emax
            else:
                e = np.floor(np.log2(amax)) - elem.emax
            e = np.clip(np.where(np.isfinite(e), e, -127), -127, 127)
            v = (blk / np.exp2(e)[..., None]).astype(np.float32)
            scale_codes = np.where(finite, (e + 127).astype(np.uint8), 0xFF)
        codes = np.where(finite[..., None], element_codes(np.where(np.isfinite(v), v, 0), elem), 0)
    return codes.reshape(rows, n).astype(np.uint8), scale_codes.astype(np.uint8), tensor_scale
