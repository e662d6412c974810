"""A seeded synthetic world of coloured shapes: images, captions, per-pixel masks and boxes.

Shared by the vision methods of the zoo (the tiny CLIP and PhaseAlign). A scene is a
low-saturation textured background with 1 to ``max_objects`` flat-coloured shapes of
several sizes and positions, painted in order so later shapes occlude earlier ones. Each
object has a *visible* mask (its own pixels minus those covered by later objects), a box
around that visible mask, and a ``colour shape`` label; the caption names every object, left to right.

Colour-shape combinations are split in two: ``HELD_OUT`` pairs (one per colour and one per
shape, so every word still occurs in training) never appear in ``base`` scenes; ``novel``
scenes contain only them. Open-vocabulary methods train on ``base`` and are scored on
``novel``. Rendering is a pure function of (seed, index, size, split).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SIZES = (32, 64)
SPLITS = ("base", "novel")
SHAPES = ("circle", "square", "triangle", "star", "diamond", "cross")
COLOURS = {
    "red": (0.90, 0.10, 0.10), "green": (0.10, 0.75, 0.15), "blue": (0.15, 0.25, 0.95),
    "yellow": (0.95, 0.85, 0.10), "magenta": (0.85, 0.15, 0.80), "cyan": (0.10, 0.80, 0.85),
}
# A Latin pattern: each colour and each shape is held out in exactly one combination.
HELD_OUT = (("red", "star"), ("green", "circle"), ("blue", "triangle"), ("yellow", "square"),
            ("magenta", "cross"), ("cyan", "diamond"))
ALL_COMBOS = tuple((c, s) for c in COLOURS for s in SHAPES)
BASE_COMBOS = tuple(p for p in ALL_COMBOS if p not in HELD_OUT)
MIN_VISIBLE = 0.4  # an object keeps at least this fraction of its own pixels visible


@dataclass(frozen=True)
class Scene:
    image: np.ndarray  # (3, size, size) float32 in [0, 1]
    masks: np.ndarray  # (objects, size, size) bool, visible pixels of each object
    boxes: np.ndarray  # (objects, 4) int64 x0, y0, x1, y1 (x1, y1 exclusive) around each visible mask
    labels: tuple[tuple[str, str], ...]  # (colour, shape) of each object, in painting order
    caption: str


def label_name(label: tuple[str, str]) -> str:
    return f"{label[0]} {label[1]}"


def caption_of(labels) -> str:
    return " and ".join(f"a {label_name(lab)}" for lab in labels)


def _check(size: int, split: str) -> None:
    if size not in SIZES:
        raise ValueError(f"size={size!r} is not rendered; allowed: {', '.join(map(str, SIZES))}")
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is unknown; allowed: {', '.join(SPLITS)}")


def shape_mask(shape: str, cx: float, cy: float, radius: float, size: int) -> np.ndarray:
    """(size, size) bool: pixel centres inside ``shape`` centred at (cx, cy) with circumradius ``radius``."""
    if shape not in SHAPES:
        raise ValueError(f"shape={shape!r} is unknown; allowed: {', '.join(SHAPES)}")
    y, x = np.mgrid[0:size, 0:size] + 0.5
    dx, dy = (x - cx) / radius, (y - cy) / radius
    if shape == "circle":
        return dx * dx + dy * dy <= 1.0
    if shape == "square":
        return (np.abs(dx) <= 0.75) & (np.abs(dy) <= 0.75)
    if shape == "diamond":
        return np.abs(dx) + np.abs(dy) <= 1.0
    if shape == "cross":
        return ((np.abs(dx) <= 0.3) & (np.abs(dy) <= 1.0)) | ((np.abs(dy) <= 0.3) & (np.abs(dx) <= 1.0))
    if shape == "triangle":  # equilateral, apex up at dy = -1, base at dy = 0.5
        return (dy <= 0.5) & (np.abs(dx) <= (dy + 1.0) / np.sqrt(3.0))
    # star: five points, inner radius 0.45 of the outer, as a polar-angle test
    angle = np.arctan2(dx, -dy)  # 0 at the top point
    r = np.hypot(dx, dy)
    sector = np.abs(((angle + np.pi / 5) % (2 * np.pi / 5)) - np.pi / 5) / (np.pi / 5)  # 0 at a point, 1 between
    return r <= 1.0 - 0.55 * sector


def _background(rng: np.random.Generator, size: int) -> np.ndarray:
    """Low-saturation grey with a smooth gradient and pixel noise: never close to an object colour."""
    grey = rng.uniform(0.3, 0.6)
    tint = rng.uniform(-0.04, 0.04, size=3)
    ramp = np.linspace(-1, 1, size)
    gx, gy = rng.uniform(-0.08, 0.08, size=2)
    base = grey + tint[:, None, None] + gx * ramp[None, None, :] + gy * ramp[None, :, None]
    return np.clip(base + rng.normal(0, 0.03, size=(3, size, size)), 0, 1).astype(np.float32)


def render_scene(seed: int, index: int, size: int = 32, split: str = "base", max_objects: int = 3) -> Scene:
    """Scene ``index`` of the stream ``seed``: a pure function of its arguments."""
    _check(size, split)
    if not 1 <= max_objects <= 4:
        raise ValueError(f"max_objects={max_objects!r} must be between 1 and 4")
    combos = BASE_COMBOS if split == "base" else HELD_OUT
    rng = np.random.default_rng([seed, index, size, SPLITS.index(split)])
    n = int(rng.integers(1, max_objects + 1))
    while True:  # redraw placements until every object stays mostly visible
        chosen = rng.choice(len(combos), size=n, replace=False)
        labels = tuple(combos[i] for i in chosen)
        radii = rng.uniform(0.14, 0.26, size=n) * size
        centres = [rng.uniform(r, size - r, size=2) for r in radii]
        full = np.stack([shape_mask(lab[1], cx, cy, r, size) for lab, (cx, cy), r in zip(labels, centres, radii)])
        visible = full.copy()
        for i in range(n):
            visible[i] &= ~full[i + 1:].any(axis=0)
        if all(visible[i].sum() >= MIN_VISIBLE * full[i].sum() and visible[i].any() for i in range(n)):
            break
    image = _background(rng, size)
    for lab, mask in zip(labels, full):
        image[:, mask] = np.asarray(COLOURS[lab[0]], dtype=np.float32)[:, None]
    boxes = mask_boxes(visible)
    # the caption reads left to right (by box centre), an order the image shows, unlike painting order
    order = np.argsort(boxes[:, 0] + boxes[:, 2], kind="stable")
    return Scene(image, visible, boxes, labels, caption_of([labels[i] for i in order]))


def mask_boxes(masks: np.ndarray) -> np.ndarray:
    """(n, 4) x0, y0, x1, y1 (exclusive) around each non-empty mask of ``masks`` (n, H, W)."""
    boxes = np.zeros((len(masks), 4), dtype=np.int64)
    for i, m in enumerate(masks):
        if not m.any():
            raise ValueError(f"mask {i} is empty; a box needs at least one pixel")
        ys, xs = np.nonzero(m)
        boxes[i] = xs.min(), ys.min(), xs.max() + 1, ys.max() + 1
    return boxes


def scenes(seed: int, count: int, size: int = 32, split: str = "base", max_objects: int = 3, start: int = 0) -> list[Scene]:
    return [render_scene(seed, start + i, size, split, max_objects) for i in range(count)]


def label_map(scene: Scene, classes) -> np.ndarray:
    """(H, W) int64: 1 + index in ``classes`` of the object at each pixel, 0 for background."""
    names = [label_name(c) if isinstance(c, tuple) else c for c in classes]
    out = np.zeros(scene.masks.shape[1:], dtype=np.int64)
    for lab, m in zip(scene.labels, scene.masks):
        if label_name(lab) not in names:
            raise ValueError(f"class {label_name(lab)!r} of the scene is not among classes {names}")
        out[m] = 1 + names.index(label_name(lab))
    return out
