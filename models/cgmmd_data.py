"""Conditional data for CGMMD: synthetic conditionals with known truth, and digits restoration.

Each task gives pairs (x, y) drawn from p(x) p(y | x):

- ``bimodal``: x ~ U(-1, 1); y = +-(1 + x/2) with equal odds, plus N(0, 0.1^2). Its
  conditional mean (0) lies between the modes, where no sample is.
- ``heteroscedastic``: x ~ U(-1, 1); y = sin(pi x) + (0.05 + 0.2 (x + 1)) N(0, 1).
- ``ring``: x ~ U(0.5, 1.5) a radius; y = x (cos t, sin t) + N(0, 0.05^2 I), t ~ U(0, 2 pi).
- ``denoise``: y a scikit-learn 8x8 digit (pixels / 16), x = clip(y + N(0, 0.3^2), 0, 1).
- ``superres``: y a digit, x its 4x4 image of 2x2 block means (2x super-resolution).

Synthetic tasks can draw from the true conditional at any x (:func:`true_conditional`);
digits are split by image into train, validation and test (60/20/20).
"""

from __future__ import annotations

from functools import cache

import numpy as np

SYNTHETIC = ("bimodal", "heteroscedastic", "ring")
IMAGES = ("denoise", "superres")
TASKS = SYNTHETIC + IMAGES
DIMS = {"bimodal": (1, 1), "heteroscedastic": (1, 1), "ring": (1, 2), "denoise": (64, 64), "superres": (16, 64)}
X_RANGE = {"bimodal": (-1.0, 1.0), "heteroscedastic": (-1.0, 1.0), "ring": (0.5, 1.5)}
NOISE_STD = 0.3  # denoising
SPLITS = ("train", "val", "test")


def check_task(task: str) -> str:
    if task not in TASKS:
        raise ValueError(f"task {task!r} is unknown; allowed: {', '.join(TASKS)}")
    return task


def check_split(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"split {split!r} is unknown; allowed: {', '.join(SPLITS)}")
    return split


def true_conditional(task: str, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One draw of y | x for each row of ``x`` (n, 1), synthetic tasks only: (n, y_dim)."""
    if task not in SYNTHETIC:
        raise ValueError(f"task {task!r} has no known conditional; synthetic tasks: {', '.join(SYNTHETIC)}")
    x = np.asarray(x, dtype=np.float64).reshape(-1, 1)
    n = len(x)
    if task == "bimodal":
        sign = rng.choice([-1.0, 1.0], size=(n, 1))
        return sign * (1 + x / 2) + 0.1 * rng.standard_normal((n, 1))
    if task == "heteroscedastic":
        return np.sin(np.pi * x) + (0.05 + 0.2 * (x + 1)) * rng.standard_normal((n, 1))
    angle = rng.uniform(0, 2 * np.pi, size=(n, 1))
    return x * np.hstack([np.cos(angle), np.sin(angle)]) + 0.05 * rng.standard_normal((n, 2))


def pool2(images: np.ndarray) -> np.ndarray:
    """(n, 64) 8x8 images -> (n, 16) 4x4 images of 2x2 block means."""
    return images.reshape(-1, 4, 2, 4, 2).mean(axis=(2, 4)).reshape(-1, 16)


@cache
def _digit_split(seed: int) -> dict[str, np.ndarray]:
    from sklearn.datasets import load_digits

    images = (load_digits().data / 16.0).astype(np.float32)
    order = np.random.default_rng([seed, 64]).permutation(len(images))
    a, b = int(0.6 * len(images)), int(0.8 * len(images))
    return {"train": images[order[:a]], "val": images[order[a:b]], "test": images[order[b:]]}


@cache
def dataset(task: str, split: str, size: int = 4000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) float32 pairs of ``split``. Synthetic: ``size`` pairs drawn with a split-specific seed.

    Digits: every image of the split; ``denoise`` gives each image ``max(1, size // n)``
    noise draws (more pairs than images for training), ``superres`` one pair per image.
    """
    check_task(task)
    rng = np.random.default_rng([seed, TASKS.index(task), SPLITS.index(check_split(split))])
    if task in SYNTHETIC:
        low, high = X_RANGE[task]
        x = rng.uniform(low, high, size=(size, 1))
        return x.astype(np.float32), true_conditional(task, x, rng).astype(np.float32)
    images = _digit_split(seed)[split]
    if task == "superres":
        return pool2(images).astype(np.float32), images
    y = np.repeat(images, max(1, size // len(images)), axis=0)
    x = np.clip(y + NOISE_STD * rng.standard_normal(y.shape), 0.0, 1.0)
    return x.astype(np.float32), y
