"""PhaseAlign: training-free open-vocabulary segmentation by complex phase alignment, on the tiny CLIP.

Dense patch embeddings come from the tiny CLIP's ViT with the last block's query-key
attention removed (MaskCLIP's trick: each patch token passes through the value and output
projections only, so it stays in the joint space). Then, per patch p and class prompt c:

- **complex phase alignment**: the embedding's two halves are the real and imaginary parts
  of ``embed / 2`` complex numbers v (patch) and t (text); the score is the phase agreement
  ``sum_k w_k cos(arg v_k - arg t_k) / sum_k w_k`` with magnitude gate ``w_k = (|v_k| |t_k|)^gamma``
  (gamma = 1 is the plain real inner product over the magnitudes; smaller gamma lets
  components with weak magnitude vote on phase alone, larger gamma keeps the strong ones);
- **multi-scale local contrast normalisation** of each class map on the patch grid,
  ``mean_s (S - mean_s(S)) / (std_s(S) + eps)`` over box windows of size s;
- **attention propagation**: the class maps are smoothed ``hops`` times by the last ViT
  block's patch-to-patch self-attention (averaged over heads, rows renormalised).

The baseline (``cosine``) is MaskCLIP: cosine similarity of the same dense embeddings with
the prompts. Maps are upsampled bilinearly to pixels; a pixel is background when its best
class score is below a threshold, and otherwise takes the arg-max class among all 36
colour-shape prompts. Every method's knobs (dense read-out, gamma, hops, threshold) are
chosen on validation ``base`` scenes; the test split is ``novel`` scenes (held-out
combinations only), scored once.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import torch
from scipy.ndimage import binary_dilation, uniform_filter
from torch.nn import functional as F

from . import shape_scenes, tiny_clip
from .config_fields import bounded, checked

DENSE = ("value", "value_residual")
METHODS = {  # name -> (score, local contrast normalisation, attention propagation)
    "cosine": ("cosine", False, False),  # MaskCLIP
    "cosine_lcn_prop": ("cosine", True, True),
    "phase": ("phase", False, False),
    "phase_lcn": ("phase", True, False),
    "phasealign": ("phase", True, True),
}
GAMMAS = (0.5, 1.0, 2.0)
HOPS = (1, 2)
LCN_SCALES = (3, 5)


@dataclass(frozen=True)
@checked
class PhaseAlignConfig:
    clip_steps: int = bounded(1200, low=1)  # the tiny CLIP this segments with (trained once per seed, cached)
    image_size: int = bounded(32, choices=shape_scenes.SIZES)
    val_scenes: int = bounded(60, low=1)
    test_scenes: int = bounded(150, low=1)
    # background thresholds tried: quantiles of the validation best-class scores
    thresholds: int = bounded(9, low=1)
    seed: int = bounded(0, low=0)

    @classmethod
    def tiny(cls, **overrides) -> PhaseAlignConfig:
        return cls(**{"clip_steps": 250, "val_scenes": 12, "test_scenes": 12, "thresholds": 3, **overrides})

    def clip_config(self) -> tiny_clip.TinyCLIPConfig:
        base = tiny_clip.TinyCLIPConfig.tiny if self.clip_steps < 500 else tiny_clip.TinyCLIPConfig
        return base(steps=self.clip_steps, image_size=self.image_size, seed=self.seed)


# -- dense features ---------------------------------------------------------------------------

def dense_features(model: tiny_clip.TinyCLIP, images: torch.Tensor, readout: str = "value"):
    """(patch embeddings (B, N, embed), patch-to-patch attention (B, N, N)) from the last ViT block.

    ``value``: MaskCLIP's read-out, the last block's value path alone (out(v) -> ln_post -> proj);
    ``value_residual``: the same with the block's residual stream and MLP kept."""
    if readout not in DENSE:
        raise ValueError(f"readout={readout!r} is unknown; allowed: {', '.join(DENSE)}")
    with torch.no_grad():
        x = model.tokens_in(images)
        for block in model.blocks[:-1]:
            x = block(x)
        last = model.blocks[-1]
        _, attn, v = last.attend(x)
        y = last.out(v)
        if readout == "value_residual":
            y = x + y
            y = y + last.mlp(last.ln2(y))
        feats = model.image_proj(model.ln_post(y))[:, 1:]
        a = attn.mean(dim=1)[:, 1:, 1:]
        return feats, a / a.sum(dim=-1, keepdim=True)


def cosine_scores(feats: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
    """(B, N, C) cosine similarity of patch embeddings (B, N, D) with class embeddings (C, D)."""
    return F.normalize(feats, dim=-1) @ F.normalize(text, dim=-1).T


def as_complex(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.complex(x[..., :half], x[..., half:])


def phase_scores(feats: torch.Tensor, text: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """(B, N, C) magnitude-gated phase agreement sum_k w_k cos(dphi_k) / sum_k w_k, w_k = (|v_k||t_k|)^gamma."""
    if gamma < 0:
        raise ValueError(f"gamma={gamma} must be >= 0")
    v, t = as_complex(feats)[:, :, None, :], as_complex(text)[None, None, :, :]
    w = (v.abs() * t.abs()).clamp_min(1e-12) ** gamma
    agree = torch.cos(torch.angle(v) - torch.angle(t))
    return (w * agree).sum(-1) / w.sum(-1)


def local_contrast(maps: np.ndarray, scales=LCN_SCALES, eps: float = 1e-3) -> np.ndarray:
    """Multi-scale local contrast normalisation of (B, C, g, g) maps over box windows of each scale."""
    out = np.zeros_like(maps)
    for s in scales:
        size = (1, 1, s, s)
        mean = uniform_filter(maps, size, mode="reflect")
        var = np.maximum(uniform_filter(maps * maps, size, mode="reflect") - mean * mean, 0.0)
        out += (maps - mean) / (np.sqrt(var) + eps)
    return out / len(scales)


def propagate(scores: torch.Tensor, attn: torch.Tensor, hops: int) -> torch.Tensor:
    """Scores (B, N, C) smoothed ``hops`` times by row-stochastic attention (B, N, N)."""
    for _ in range(hops):
        scores = attn @ scores
    return scores


def class_maps(feats, attn, text, score: str, lcn: bool, hops: int, gamma: float, image_size: int) -> np.ndarray:
    """(B, C, H, W) class scores at pixel resolution."""
    s = phase_scores(feats, text, gamma) if score == "phase" else cosine_scores(feats, text)
    s = propagate(s, attn, hops)
    g = round(s.shape[1] ** 0.5)
    maps = s.transpose(1, 2).reshape(len(s), -1, g, g).numpy().astype(np.float64)
    if lcn:
        maps = local_contrast(maps)
    return F.interpolate(torch.from_numpy(maps), size=(image_size, image_size), mode="bilinear",
                         align_corners=False).numpy()


def segment(maps: np.ndarray, threshold: float) -> np.ndarray:
    """(B, H, W) labels: 0 where the best class score is below ``threshold``, else 1 + arg-max class."""
    return np.where(maps.max(axis=1) >= threshold, 1 + maps.argmax(axis=1), 0)


# -- metrics ------------------------------------------------------------------------------------

def mean_iou(pred: np.ndarray, truth: np.ndarray) -> float:
    """IoU per class over the whole set, averaged over the classes that occur in ``truth`` (background too)."""
    if pred.shape != truth.shape:
        raise ValueError(f"prediction shape {pred.shape} does not match the ground truth's {truth.shape}")
    ious = [np.logical_and(pred == c, truth == c).sum() / np.logical_or(pred == c, truth == c).sum()
            for c in np.unique(truth)]
    return float(np.mean(ious))


def boundaries(labels: np.ndarray) -> np.ndarray:
    """(H, W) bool: pixels whose label differs from a right or lower neighbour's (either side)."""
    edge = np.zeros(labels.shape, dtype=bool)
    dx, dy = labels[:, 1:] != labels[:, :-1], labels[1:] != labels[:-1]
    edge[:, 1:] |= dx
    edge[:, :-1] |= dx
    edge[1:] |= dy
    edge[:-1] |= dy
    return edge


def boundary_f(pred: np.ndarray, truth: np.ndarray, tolerance: int = 1) -> float:
    """Mean over images of the boundary F score with a match tolerance of ``tolerance`` pixels."""
    if pred.shape != truth.shape:
        raise ValueError(f"prediction shape {pred.shape} does not match the ground truth's {truth.shape}")
    scores = []
    for p, t in zip(pred, truth):
        bp, bt = boundaries(p), boundaries(t)
        if not bp.any() or not bt.any():
            scores.append(float(bp.any() == bt.any()))
            continue
        struct = np.ones((2 * tolerance + 1,) * 2, dtype=bool)
        precision = (bp & binary_dilation(bt, struct)).sum() / bp.sum()
        recall = (bt & binary_dilation(bp, struct)).sum() / bt.sum()
        scores.append(0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall))
    return float(np.mean(scores))


# -- the study ------------------------------------------------------------------------------------

def scene_set(config: PhaseAlignConfig, split: str, count: int, stream: int):
    sc = shape_scenes.scenes(stream, count, config.image_size, split)
    images = torch.from_numpy(np.stack([s.image for s in sc]))
    truth = np.stack([shape_scenes.label_map(s, shape_scenes.ALL_COMBOS) for s in sc])
    return images, truth


def tune_and_test(model, config: PhaseAlignConfig, method: str) -> dict:
    """Choose ``method``'s knobs on validation base scenes by mIoU, then score the novel test scenes once."""
    score, lcn, prop = METHODS[method]
    text = model.encode_text(tiny_clip.tokenize([f"a {shape_scenes.label_name(c)}" for c in shape_scenes.ALL_COMBOS]))
    stream = 1000 * config.seed + 500
    val = scene_set(config, "base", config.val_scenes, stream + 1)
    test = scene_set(config, "novel", config.test_scenes, stream + 2)
    grid = itertools.product(DENSE, GAMMAS if score == "phase" else (1.0,), HOPS if prop else (0,))
    best = None
    with torch.no_grad():
        text = text.detach()
        for readout, gamma, hops in grid:
            feats, attn = dense_features(model, val[0], readout)
            maps = class_maps(feats, attn, text, score, lcn, hops, gamma, config.image_size)
            top = maps.max(axis=1)
            for q in np.linspace(0.1, 0.9, config.thresholds):
                threshold = float(np.quantile(top, q))
                miou = mean_iou(segment(maps, threshold), val[1])
                if best is None or miou > best[0]:
                    best = (miou, {"readout": readout, "gamma": gamma, "hops": hops, "threshold": threshold})
        knobs = best[1]
        feats, attn = dense_features(model, test[0], knobs["readout"])
        maps = class_maps(feats, attn, text, score, lcn, knobs["hops"], knobs["gamma"], config.image_size)
    pred = segment(maps, knobs["threshold"])
    return {"val_miou": best[0], "residual_readout": int(knobs.pop("readout") == "value_residual"), **knobs, "miou": mean_iou(pred, test[1]), "boundary_f": boundary_f(pred, test[1])}


def evaluate(config: PhaseAlignConfig | None = None, model=None) -> dict:
    """mIoU and boundary F on held-out combinations for every method in ``METHODS`` (same model,
    knobs chosen on validation); ``model`` defaults to the tiny CLIP trained (or cached) for the config."""
    config = config or PhaseAlignConfig()
    if model is None:
        from . import registry

        model = registry.train("tiny_clip", config.clip_config()).model
    model.eval()
    out = {}
    for method in METHODS:
        r = tune_and_test(model, config, method)
        out.update({f"{k}_{method}": v for k, v in r.items()})
    return out
