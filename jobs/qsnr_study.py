"""The INT-vs-FP study: QSNR of every format across block sizes and tensor families.

Following the fine-grained INT-vs-FP comparison (Chen et al., 2025): FP formats lead
at coarse granularity, where a block's crest factor is large; INT formats catch up
and pass them as blocks shrink. The study measures this on synthetic families
(Gaussian, Laplace, Student-t, outlier channels) and on the weights of a trained
model, with and without a 32x32 Hadamard rotation, and shows the gradient bias that
symmetric INT clipping removes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import ml_dtypes
import numpy as np

from edgekit.simulators import get_format, quantize_dequantize
from edgekit.simulators import weight_formats as wf
from edgekit.simulators.metrics import qsnr_over
from edgekit.simulators.rotation import rotate_blocks

BLOCK_SIZES = ("tensor", 256, 128, 64, 32, 16)
DEFAULT_SHAPE = (512, 1024)
ROTATION_SIZE = 32


def synthetic_tensors(seed: int = 0, shape: tuple[int, int] = DEFAULT_SHAPE) -> dict[str, np.ndarray]:
    """Seeded float32 tensors; blocks run along the last axis (channels)."""
    rng = np.random.default_rng(seed)
    outliers = rng.standard_normal(shape)
    channels = rng.choice(shape[1], size=max(1, shape[1] // 100), replace=False)
    outliers[:, channels] *= 30.0  # 1% of channels 30x larger, as in LLM activations
    return {
        "gaussian": rng.standard_normal(shape).astype(np.float32),
        "laplace": rng.laplace(size=shape).astype(np.float32),
        "student-t(3)": rng.standard_t(3, size=shape).astype(np.float32),
        "outlier-channels": outliers.astype(np.float32),
    }


def model_weights(seed: int = 0) -> list[np.ndarray]:
    """Linear weights (out, in) of the digits MLP, trained here on real data."""
    from edgekit.models.digits import DigitsConfig
    from edgekit.models.registry import train
    from edgekit.models.weights import quantizable_weights

    model = train("digits", DigitsConfig(seed=seed)).model
    return [w.detach().numpy().copy() for w in quantizable_weights(model).values()]


def study_formats() -> list[str]:
    """Every block format of the table, plus the asymmetrically clipped INT variants."""
    return wf.names("block") + [f"{name}_asym" for name in wf.names("block", lambda r: r.element_kind == "int")]


def int_fp_pairs() -> list[tuple[str, str]]:
    """Each MX INT format beside the first MX FP format of its element width (table order)."""
    pairs = []
    for int_row in wf.weight_formats("block", lambda r: r.is_mx and r.element_kind == "int"):
        fp = wf.names("block", lambda r: r.is_mx and r.element_kind == "float" and r.element_bits == int_row.element_bits)
        if fp:
            pairs.append((int_row.name, fp[0]))
    return pairs


def block_qsnr(tensors: list[np.ndarray], fmt_name: str, block, rotate: bool) -> float:
    """QSNR over a list of tensors (their errors and energies summed), each blocked along axis -1.

    ``block="tensor"`` quantizes each tensor as one block with one scale. A rotation is
    orthogonal, so the error measured in the rotated basis is the error in the original.
    """
    fmt = get_format(fmt_name)
    pairs = []
    for x in tensors:
        if rotate:
            x = rotate_blocks(x, ROTATION_SIZE, axis=-1)
        x = np.ascontiguousarray(x)
        if block == "tensor":
            flat = x.reshape(-1)
            size = math.ceil(flat.size / fmt.codes_per_group) * fmt.codes_per_group
            xq = quantize_dequantize(flat, fmt, block_size=size).reshape(x.shape)
        else:
            xq = quantize_dequantize(x, fmt, block_size=block)
        pairs.append((x, xq))
    return qsnr_over(pairs)


def run_sweep(tensors: dict[str, list[np.ndarray]], formats: Iterable[str], blocks: Iterable,
              rotations: Iterable[bool], progress: Callable = lambda it, total: it) -> list[dict]:
    """One row per (tensor, rotation, block, format): the measured QSNR in dB."""
    jobs = [(t, r, b, f) for t in tensors for r in rotations for b in blocks for f in formats]
    rows = []
    for name, rotate, block, fmt_name in progress(jobs, len(jobs)):
        fmt = get_format(fmt_name)
        rows.append({
            "tensor": name,
            "rotation": "hadamard32" if rotate else "none",
            "block": block,
            "format": fmt_name,
            "kind": fmt.element.kind,
            "bits": fmt.element.bits,
            "clipping": ("symmetric" if fmt.element.symmetric else "asymmetric") if fmt.element.kind == "int" else "",
            "qsnr_db": round(block_qsnr(tensors[name], fmt_name, block, rotate), 3),
        })
    return rows


def crossovers(rows: list[dict], pairs: list[tuple[str, str]] | None = None) -> list[dict]:
    """Per tensor and rotation: the coarsest block at which INT matches or beats FP, per (INT, FP) pair
    (default: :func:`int_fp_pairs`)."""
    pairs = int_fp_pairs() if pairs is None else pairs
    out = []
    keys = sorted({(r["tensor"], r["rotation"]) for r in rows}, key=str)
    for tensor, rotation in keys:
        table = {(r["block"], r["format"]): r["qsnr_db"] for r in rows if (r["tensor"], r["rotation"]) == (tensor, rotation)}
        blocks = [b for b in BLOCK_SIZES if any(k[0] == b for k in table)]
        for int_fmt, fp_fmt in pairs:
            wins = [b for b in blocks if (b, int_fmt) in table and table[(b, int_fmt)] >= table.get((b, fp_fmt), math.inf)]
            out.append({
                "tensor": tensor, "rotation": rotation, "int": int_fmt, "fp": fp_fmt,
                "fp_ahead_at_tensor_level": table.get(("tensor", fp_fmt), -math.inf) > table.get(("tensor", int_fmt), math.inf),
                "int_ahead_from_block": wins[0] if wins else None,
            })
    return out


def bf16_scale_quantize(x: np.ndarray, qmin: int, qmax: int = 127, block: int = 32) -> np.ndarray:
    """INT quantization with a BF16 block scale ``amax / qmax`` and BF16 arithmetic, as in BF16 training.

    ``x / s`` is rounded to BF16 before rounding to an integer, so the block's largest
    element can land on ``qmax + 1``: a range of [-128, 127] keeps it on the negative
    side and clips it on the positive one, which biases the error.
    """
    b = x.astype(np.float32).reshape(-1, block)
    s = (np.abs(b).max(axis=1, keepdims=True) / np.float32(qmax)).astype(ml_dtypes.bfloat16).astype(np.float32)
    s = np.where(s == 0, np.float32(1.0), s)
    y = (b / s).astype(ml_dtypes.bfloat16).astype(np.float32)
    return (np.clip(np.rint(y), qmin, qmax) * s).reshape(x.shape)


def clipping_bias(seed: int = 0, size: int = 1 << 20) -> list[dict]:
    """Mean of Q(x) - x for INT8 with ranges [-128, 127] and [-127, 127], on BF16 Gaussian data.

    Measured with BF16 block scales (``bf16_scale_quantize``) and with MXINT8's E8M0
    scales. A nonzero mean is a bias that accumulates in gradients.
    """
    x = np.random.default_rng(seed).standard_normal(size).astype(ml_dtypes.bfloat16)
    xf = x.astype(np.float32).astype(np.float64)
    rows = []
    for qmin, clip in ((-128, "asymmetric [-128, 127]"), (-127, "symmetric [-127, 127]")):
        err = {
            "bf16": bf16_scale_quantize(x, qmin) - xf,
            "e8m0": quantize_dequantize(x, "mxint8" if qmin == -127 else "mxint8_asym") - xf,
        }
        for scale, e in err.items():
            rows.append({
                "scale": scale, "clipping": clip,
                "mean_error": float(e.mean()),
                "mean_abs_error": float(np.abs(e).mean()),
                "bias_over_mean_abs": float(e.mean() / np.abs(e).mean()),
            })
    return rows
