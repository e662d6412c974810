"""``edgekit demo``: every format on a built-in tensor and on a small trained model."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from edgekit.simulators import dequantize, quantize, quantize_dequantize
from edgekit.simulators import weight_formats as wf
from edgekit.simulators.metrics import qsnr, qsnr_over
from edgekit.utils.output import markdown_table

from .format_table import format_rows
from .qsnr_study import synthetic_tensors


def tensor_rows(formats: list[str], seed: int) -> list[dict]:
    """QSNR of each format at its own block size on the built-in tensors (256 x 1024)."""
    tensors = synthetic_tensors(seed, (256, 1024))
    rows = []
    for name in formats:
        row = {"format": name}
        for tname in ("gaussian", "outlier-channels"):
            x = tensors[tname]
            row[f"{tname} QSNR dB"] = qsnr(x, quantize_dequantize(x, name))
        rows.append(row)
    return rows


def model_rows(formats: list[str], seed: int, log: Callable[[str], None]) -> list[dict]:
    """Test accuracy, weight QSNR and packed size of the digits MLP in each format."""
    from edgekit.models.digits import DigitsConfig, evaluate
    from edgekit.models.registry import train
    from edgekit.models.weights import quantizable_weights, quantized_copy

    config = DigitsConfig(seed=seed)
    log("training the digits MLP on scikit-learn's digits (a few seconds, cached) ...")
    model = train("digits", config).model
    weights = [w.detach().numpy() for w in quantizable_weights(model).values()]
    n_weights = sum(w.size for w in weights)
    reference = wf.resolve(wf.REFERENCE)
    rows = [{"format": reference.name, "bits/weight": reference.bits_per_weight(),
             "weight bytes": n_weights * reference.element_bits // 8,
             "weight QSNR dB": float("inf"), "test accuracy": evaluate(model, config)["accuracy"]}]
    for name in formats:
        log(f"  {name}")
        packed = [quantize(np.ascontiguousarray(w), name, axis=1) for w in weights]
        nbytes = sum(q.nbytes for q in packed)
        rows.append({
            "format": name,
            "bits/weight": 8 * nbytes / n_weights,
            "weight bytes": nbytes,
            "weight QSNR dB": qsnr_over((w, dequantize(q)) for w, q in zip(weights, packed)),
            "test accuracy": evaluate(quantized_copy(model, name), config)["accuracy"],
        })
    return rows


def run_demo(formats: list[str], seed: int = 0, log: Callable[[str], None] = lambda msg: None) -> dict[str, list[dict]]:
    return {"formats": format_rows(), "tensor_qsnr": tensor_rows(formats, seed),
            "model": model_rows(formats, seed, log)}


def render_demo(sections: dict[str, list[dict]]) -> str:
    return "\n\n".join([
        "### Formats\n\n" + markdown_table(sections["formats"]),
        "### Built-in tensors (256 x 1024, blocks of consecutive elements in each row)\n\n" + markdown_table(sections["tensor_qsnr"]),
        "### Digits MLP (sklearn digits, 64-256-256-10), weights quantized along input channels\n\n"
        + markdown_table(sections["model"]),
    ])
