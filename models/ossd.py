"""OSSD: an open-vocabulary one-stage detector with semantic and spatial distillation, on 64x64 shape scenes.

The detector is FCOS-style: a small CNN to a stride-4 grid, and per grid location a box
(distances to the four sides), a class-agnostic location-quality logit (centerness) and a
region embedding in the tiny CLIP's joint space. Class logits are
``scale * cos(embedding, text(class)) + bias`` against the frozen tiny CLIP's text embeddings of
all 36 ``colour shape`` names (a buffer of the network, so the exported detector scores every
class), but only the 30 base classes are trained (sigmoid focal loss over base columns).

Parts, each switchable for the ablation:

- **semantic distillation**: the region embedding pooled over each object's positive locations
  is pulled (L1 on unit vectors, as ViLD) to the tiny CLIP's global image embedding of that
  object's crop;
- **spatial distillation**: the backbone feature map is pulled (mean squared error) to that of a
  detector trained on base classes alone (the ``base`` variant of the same seed);
- **quality head**: a novel class's score is ``p ** alpha * q ** (1 - alpha)`` with ``q`` the
  class-agnostic quality, ``alpha`` chosen on validation scenes; base classes keep ``p``.

Scoring is AP50 (COCO-style, 101-point interpolated) on held-out-combination scenes (novel) and
on base scenes, with the whole 36-name vocabulary in both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from . import shape_scenes, tiny_clip
from .config_fields import bounded, checked
from .training import TrainSpec

IMAGE_SIZE = 64
STRIDE = 4
GRID = IMAGE_SIZE // STRIDE
CLASSES = tuple(shape_scenes.label_name(c) for c in shape_scenes.ALL_COMBOS)
NOVEL = tuple(shape_scenes.label_name(c) for c in shape_scenes.HELD_OUT)
BASE_INDEX = torch.tensor([i for i, c in enumerate(CLASSES) if c not in NOVEL])
NOVEL_MASK = torch.tensor([c in NOVEL for c in CLASSES])
VARIANTS = {  # name -> (semantic, spatial, quality)
    "base": (False, False, False),
    "semantic": (True, False, False),
    "spatial": (False, True, False),
    "quality": (False, False, True),
    "full": (True, True, True),
}
ALPHAS = (0.2, 0.35, 0.5, 0.65, 0.8, 1.0)
TRAIN_STREAM, VAL_STREAM, TEST_STREAM = 0, 1, 2


@dataclass(frozen=True)
@checked
class OSSDConfig:
    variant: str = bounded("full", choices=tuple(VARIANTS))
    clip_steps: int = bounded(1200, low=1)  # the tiny CLIP (32x32) distilled from and read for text embeddings
    width: int = bounded(48, low=8)
    steps: int = bounded(300, low=1)
    batch: int = bounded(24, low=1)
    lr: float = bounded(3e-3, low=0, low_open=True)
    semantic_weight: float = bounded(1.0, low=0)
    spatial_weight: float = bounded(1.0, low=0)
    max_objects: int = bounded(3, low=1)
    val_scenes: int = bounded(80, low=1)
    test_scenes: int = bounded(150, low=1)
    seed: int = bounded(0, low=0)

    @classmethod
    def tiny(cls, **overrides) -> OSSDConfig:
        return cls(**{"clip_steps": 250, "width": 16, "steps": 20, "batch": 6, "val_scenes": 8, "test_scenes": 8,
                      **overrides})

    @property
    def parts(self) -> tuple[bool, bool, bool]:
        return VARIANTS[self.variant]

    def clip_config(self) -> tiny_clip.TinyCLIPConfig:
        base = tiny_clip.TinyCLIPConfig.tiny if self.clip_steps < 500 else tiny_clip.TinyCLIPConfig
        return base(steps=self.clip_steps, image_size=32, seed=self.seed)

    def teacher_config(self) -> OSSDConfig:
        # the base variant uses no distillation weight: the defaults keep one teacher per seed in the cache
        return replace(self, variant="base", semantic_weight=OSSDConfig.semantic_weight,
                       spatial_weight=OSSDConfig.spatial_weight)


def check_images(images: torch.Tensor) -> None:
    if not isinstance(images, torch.Tensor) or images.ndim != 4 or images.shape[1:] != (3, IMAGE_SIZE, IMAGE_SIZE):
        shape = tuple(images.shape) if hasattr(images, "shape") else type(images).__name__
        raise ValueError(f"images must have shape (batch, 3, {IMAGE_SIZE}, {IMAGE_SIZE}); got {shape}")


class OSSD(nn.Module):
    def __init__(self, config: OSSDConfig, embed: int):
        super().__init__()
        w = config.width
        conv = lambda i, o, s=1: nn.Sequential(nn.Conv2d(i, o, 3, s, 1), nn.GroupNorm(4, o), nn.ReLU())
        self.backbone = nn.Sequential(conv(3, w // 2, 2), conv(w // 2, w, 2), conv(w, w), conv(w, w))
        self.tower = nn.Sequential(conv(w, w), conv(w, w))
        self.embed = nn.Conv2d(w, embed, 1)
        self.box = nn.Conv2d(w, 4, 3, padding=1)
        self.quality = nn.Conv2d(w, 1, 3, padding=1)
        self.register_buffer("text", torch.zeros(len(CLASSES), embed))  # filled from the tiny CLIP before training
        self.logit_scale = nn.Parameter(torch.tensor(10.0))
        self.logit_bias = nn.Parameter(torch.tensor(-4.0))  # a low prior: most locations are background
        centres = (torch.arange(GRID, dtype=torch.float32) + 0.5) * STRIDE
        self.register_buffer("centres", torch.stack(torch.meshgrid(centres, centres, indexing="xy")))  # (2, g, g) x, y

    def features(self, images: torch.Tensor) -> torch.Tensor:
        check_images(images)
        return self.backbone(images)

    def heads(self, feats: torch.Tensor):
        """(class logits (B, 36, g, g), boxes x0 y0 x1 y1 (B, 4, g, g), quality logits (B, 1, g, g), embeddings)."""
        t = self.tower(feats)
        emb = F.normalize(self.embed(t), dim=1)
        logits = self.logit_scale * torch.einsum("bdhw,cd->bchw", emb, self.text) + self.logit_bias
        dist = F.softplus(self.box(t)) * 2 * STRIDE
        x, y = self.centres[0], self.centres[1]
        boxes = torch.stack([x - dist[:, 0], y - dist[:, 1], x + dist[:, 2], y + dist[:, 3]], dim=1)
        return logits, boxes, self.quality(t), emb

    def forward(self, images: torch.Tensor):
        logits, boxes, quality, _ = self.heads(self.features(images))
        return logits, boxes, quality


def build(config: OSSDConfig) -> OSSD:
    return OSSD(config, config.clip_config().embed)


# -- inputs ---------------------------------------------------------------------------------------

def class_text(clip: tiny_clip.TinyCLIP, names) -> torch.Tensor:
    """(len(names), embed) text embeddings of ``a {name}``; a name the text encoder cannot read raises."""
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"class name {name!r} is empty; a class needs at least one word")
    with torch.no_grad():
        return clip.encode_text(tiny_clip.tokenize([f"a {n}" for n in names]))


def scene_targets(image: np.ndarray, masks: np.ndarray, labels, caption: str):
    """(boxes (n, 4) float, class indices (n,)) of one scene from its visible masks and labels, checked."""
    if image.shape != (3, IMAGE_SIZE, IMAGE_SIZE):
        raise ValueError(f"image must have shape (3, {IMAGE_SIZE}, {IMAGE_SIZE}); got {image.shape}")
    if masks.ndim != 3 or masks.shape[1:] != image.shape[1:]:
        raise ValueError(f"masks of shape {masks.shape} do not match the image {image.shape}: need (objects, "
                         f"{IMAGE_SIZE}, {IMAGE_SIZE})")
    if len(masks) != len(labels):
        raise ValueError(f"{len(masks)} masks but {len(labels)} labels")
    if not caption.strip():
        raise ValueError("caption is empty; a scene needs a caption naming its objects")
    names = [shape_scenes.label_name(lab) for lab in labels]
    unknown = [n for n in names if n not in CLASSES]
    if unknown:
        raise ValueError(f"class {unknown[0]!r} is unknown; classes are colour shape pairs such as {CLASSES[0]!r}")
    return shape_scenes.mask_boxes(masks).astype(np.float32), np.array([CLASSES.index(n) for n in names])


def scene_batch(seed: int, start: int, count: int, split: str, max_objects: int):
    """(images (count, 3, 64, 64), [(boxes, classes)] per scene)."""
    sc = shape_scenes.scenes(seed, count, IMAGE_SIZE, split, max_objects, start)
    return (torch.from_numpy(np.stack([s.image for s in sc])),
            [scene_targets(s.image, s.masks, s.labels, s.caption) for s in sc])


def stream(config: OSSDConfig, which: int) -> int:
    return 1000 * config.seed + 100 + which  # apart from the tiny CLIP's streams of the same seed


# -- losses ---------------------------------------------------------------------------------------

def assign(boxes: np.ndarray) -> np.ndarray:
    """(g, g) index of the object each location is positive for (its centre inside the box, the smallest
    box on overlap), -1 for background."""
    centres = (np.arange(GRID) + 0.5) * STRIDE
    out = np.full((GRID, GRID), -1)
    area = np.full((GRID, GRID), np.inf)
    for i, (x0, y0, x1, y1) in enumerate(boxes):
        inside = ((centres[None, :] > x0) & (centres[None, :] < x1) & (centres[:, None] > y0) & (centres[:, None] < y1))
        a = (x1 - x0) * (y1 - y0)
        take = inside & (a < area)
        out[take], area[take] = i, a
    return out


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise IoU of boxes (..., 4) x0 y0 x1 y1."""
    inter = ((torch.minimum(a[..., 2], b[..., 2]) - torch.maximum(a[..., 0], b[..., 0])).clamp_min(0)
             * (torch.minimum(a[..., 3], b[..., 3]) - torch.maximum(a[..., 1], b[..., 1])).clamp_min(0))
    area = lambda x: (x[..., 2] - x[..., 0]).clamp_min(0) * (x[..., 3] - x[..., 1]).clamp_min(0)
    return inter / (area(a) + area(b) - inter).clamp_min(1e-6)


def centerness(centres: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """FCOS centerness of points (n, 2) in their boxes (n, 4): the quality target."""
    lr = torch.stack([centres[:, 0] - boxes[:, 0], boxes[:, 2] - centres[:, 0]], 1).clamp_min(1e-6)
    tb = torch.stack([centres[:, 1] - boxes[:, 1], boxes[:, 3] - centres[:, 1]], 1).clamp_min(1e-6)
    return torch.sqrt(lr.min(1).values / lr.max(1).values * tb.min(1).values / tb.max(1).values)


def semantic_distillation(region: torch.Tensor, crop: torch.Tensor) -> torch.Tensor:
    """Mean L1 distance between unit region embeddings (n, D) and the CLIP crop embeddings (n, D)."""
    return (F.normalize(region, dim=-1) - F.normalize(crop, dim=-1)).abs().sum(-1).mean()


def spatial_distillation(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Mean squared difference of the student's and the base teacher's feature maps."""
    return F.mse_loss(student, teacher)


def crops(images: torch.Tensor, targets, size: int = 32, margin: float = 0.15) -> torch.Tensor:
    """Every object's box, widened by ``margin`` of its side on each side, cut out and resized to ``size``."""
    out = []
    for image, (boxes, _) in zip(images, targets):
        for x0, y0, x1, y1 in boxes:
            mx, my = margin * (x1 - x0), margin * (y1 - y0)
            xa, ya = int(max(0, x0 - mx)), int(max(0, y0 - my))
            xb, yb = int(min(IMAGE_SIZE, np.ceil(x1 + mx))), int(min(IMAGE_SIZE, np.ceil(y1 + my)))
            out.append(F.interpolate(image[None, :, ya:yb, xa:xb], size=(size, size), mode="bilinear",
                                     align_corners=False)[0])
    return torch.stack(out)


def detection_losses(model: OSSD, images, targets, teacher: OSSD | None, clip: tiny_clip.TinyCLIP | None,
                     quality: bool) -> dict[str, torch.Tensor]:
    feats = model.features(images)
    logits, boxes, q, emb = model.heads(feats)
    owner = torch.from_numpy(np.stack([assign(b) for b, _ in targets]))  # (B, g, g)
    gt_box = torch.zeros(*owner.shape, 4)
    gt_cls = torch.zeros(len(images), len(CLASSES), GRID, GRID)
    for i, (b, c) in enumerate(targets):
        pos = owner[i] >= 0
        gt_box[i][pos] = torch.from_numpy(b)[owner[i][pos]]
        gt_cls[i, torch.from_numpy(c)[owner[i][pos]], pos] = 1.0
    pos = owner >= 0
    n = max(1, int(pos.sum()))
    base_logits, base_gt = logits[:, BASE_INDEX], gt_cls[:, BASE_INDEX]
    losses = {"classification": sigmoid_focal(base_logits, base_gt) / n}
    pred_box = boxes.permute(0, 2, 3, 1)[pos]
    losses["box"] = (-torch.log(box_iou(pred_box, gt_box[pos]).clamp_min(1e-6))).mean()
    if quality:
        centres = model.centres.permute(1, 2, 0).expand(len(images), -1, -1, -1)[pos]
        losses["quality"] = F.binary_cross_entropy_with_logits(q[:, 0][pos], centerness(centres, gt_box[pos]))
    if clip is not None:
        # one region embedding per object: its positive locations' embeddings averaged
        flat = emb.permute(0, 2, 3, 1)
        regions = [flat[i][owner[i] == k].mean(0) for i, (b, _) in enumerate(targets) for k in range(len(b))
                   if (owner[i] == k).any()]
        kept = [bool((owner[i] == k).any()) for i, (b, _) in enumerate(targets) for k in range(len(b))]
        with torch.no_grad():
            target = clip.encode_image(crops(images, targets))[torch.tensor(kept)]
        losses["semantic"] = semantic_distillation(torch.stack(regions), target)
    if teacher is not None:
        with torch.no_grad():
            reference = teacher.features(images)
        losses["spatial"] = spatial_distillation(feats, reference)
    return losses


def sigmoid_focal(logits: torch.Tensor, targets: torch.Tensor, alpha: float = 0.25, gamma: float = 2.0):
    """Summed sigmoid focal loss (RetinaNet)."""
    p = torch.sigmoid(logits)
    ce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
    pt = p * targets + (1 - p) * (1 - targets)
    return ((alpha * targets + (1 - alpha) * (1 - targets)) * (1 - pt) ** gamma * ce).sum()


def frozen_parts(config: OSSDConfig, zoo_train: Callable):
    """(tiny CLIP, base-class teacher or None), both trained by ``zoo_train(name, config)`` (the zoo's
    ``registry.train``, handed in by the registry so that this module does not import it) and frozen."""
    clip = zoo_train("tiny_clip", config.clip_config()).model.eval().requires_grad_(False)
    teacher = None
    if config.parts[1]:
        teacher = zoo_train("ossd", config.teacher_config()).model.eval().requires_grad_(False)
    return clip, teacher


def train_spec(config: OSSDConfig, zoo_train: Callable) -> TrainSpec:
    """AdamW on focal classification over base classes, IoU box loss, plus each part the variant switches on;
    every step renders fresh base scenes (no held-out combination is ever seen). ``zoo_train`` trains the
    frozen tiny CLIP and teacher through the zoo's cache."""
    semantic, spatial, quality = config.parts
    state = {}

    def loss(model, rng, step):
        if not state:
            state["clip"], state["teacher"] = frozen_parts(config, zoo_train)
            with torch.no_grad():
                model.text.copy_(class_text(state["clip"], CLASSES))
        images, targets = scene_batch(stream(config, TRAIN_STREAM), step * config.batch, config.batch, "base",
                                      config.max_objects)
        parts = detection_losses(model, images, targets, state["teacher"] if spatial else None,
                                 state["clip"] if semantic else None, quality)
        weights = {"semantic": config.semantic_weight, "spatial": config.spatial_weight}
        return sum(weights.get(k, 1.0) * v for k, v in parts.items())

    warm = max(1, config.steps // 20)
    return TrainSpec(config.steps, lambda m: torch.optim.AdamW(m.parameters(), lr=config.lr, weight_decay=1e-4),
                     loss, lr=lambda s: config.lr * min(1.0, (s + 1) / warm) * 0.5 * (1 + np.cos(np.pi * s / config.steps)),
                     grad_clip=5.0)


# -- detection and AP50 ---------------------------------------------------------------------------

def combine(p: torch.Tensor, q: torch.Tensor, alpha: float) -> torch.Tensor:
    """Class scores (B, C, ...) with novel classes' replaced by ``p ** alpha * q ** (1 - alpha)``; base kept."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha={alpha} must be in [0, 1]")
    mixed = p.clamp_min(1e-12) ** alpha * q.clamp_min(1e-12) ** (1 - alpha)
    shape = [1, len(NOVEL_MASK)] + [1] * (p.ndim - 2)
    return torch.where(NOVEL_MASK.view(shape), mixed, p)


def nms(boxes: np.ndarray, scores: np.ndarray, iou: float = 0.5) -> list[int]:
    """Indices kept by greedy non-maximum suppression, best first."""
    order, keep = list(np.argsort(-scores, kind="stable")), []
    while order:
        i = order.pop(0)
        keep.append(i)
        if order:
            ious = box_iou(torch.from_numpy(boxes[[i] * len(order)]), torch.from_numpy(boxes[order])).numpy()
            order = [j for j, o in zip(order, ious) if o <= iou]
    return keep


def detect(model: OSSD, images: torch.Tensor, alpha: float = 1.0, quality: bool = True, top: int = 50,
           min_score: float = 0.01):
    """Per image a list of (box (4,), class index, score) after class-wise NMS."""
    with torch.no_grad():
        logits, boxes, q = model.eval()(images)
    p = torch.sigmoid(logits)
    scores = combine(p, torch.sigmoid(q), alpha) if quality else p
    out = []
    for s, b in zip(scores.flatten(2).numpy(), boxes.flatten(2).numpy()):
        flat = np.argsort(-s, axis=None, kind="stable")[:top]
        cls, loc = np.unravel_index(flat, s.shape)
        dets = []
        for c in np.unique(cls[s[cls, loc] >= min_score]):
            sel = loc[(cls == c) & (s[cls, loc] >= min_score)]
            cb, cs = b[:, sel].T.astype(np.float32), s[c, sel]
            dets += [(cb[k], int(c), float(cs[k])) for k in nms(cb, cs)]
        out.append(dets)
    return out


def ap50(detections, ground_truth, classes, iou: float = 0.5) -> float:
    """COCO-style AP at IoU ``iou``, averaged over the ``classes`` that have ground truth: per class,
    detections of all images by descending score, each matched to the best-overlapping unmatched ground
    truth of its image (a match needs IoU >= ``iou``), precision made monotone, read at 101 recall points.

    ``detections``: per image a list of (box, class, score); ``ground_truth``: per image (boxes, classes)."""
    if len(detections) != len(ground_truth):
        raise ValueError(f"{len(detections)} images of detections but {len(ground_truth)} of ground truth")
    aps = []
    for c in classes:
        gts = [b[k == c] for b, k in ground_truth]
        total = sum(len(g) for g in gts)
        if total == 0:
            continue
        dets = sorted(((s, i, b) for i, d in enumerate(detections) for b, k, s in d if k == c),
                      key=lambda t: -t[0])
        used = [np.zeros(len(g), bool) for g in gts]
        tp = np.zeros(len(dets))
        for n, (_, i, b) in enumerate(dets):
            if len(gts[i]) == 0:
                continue
            ious = box_iou(torch.as_tensor(np.asarray(b, np.float32))[None].expand(len(gts[i]), 4),
                           torch.as_tensor(gts[i], dtype=torch.float32)).numpy()
            ious[used[i]] = -1.0
            j = int(ious.argmax())
            if ious[j] >= iou:
                used[i][j], tp[n] = True, 1.0
        ctp = np.cumsum(tp)
        recall = ctp / total
        precision = ctp / np.arange(1, len(dets) + 1) if len(dets) else np.zeros(0)
        precision = np.maximum.accumulate(precision[::-1])[::-1] if len(dets) else precision
        points = np.linspace(0, 1, 101)
        idx = np.searchsorted(recall, points, side="left")
        aps.append(float(np.mean([precision[k] if k < len(precision) else 0.0 for k in idx])))
    return float(np.mean(aps)) if aps else float("nan")


def score(model: OSSD, config: OSSDConfig, split: str, which: int, count: int, alpha: float) -> float:
    images, targets = scene_batch(stream(config, which), 0, count, split, config.max_objects)
    classes = NOVEL if split == "novel" else [c for c in CLASSES if c not in NOVEL]
    return ap50(detect(model, images, alpha, config.parts[2]), targets, [CLASSES.index(c) for c in classes])


def evaluate(model: nn.Module, config: OSSDConfig | None = None) -> dict:
    """AP50 on held-out-combination test scenes (``novel_ap50``, the headline) and on base test scenes, with
    the quality weight ``alpha`` chosen on validation novel scenes (1.0, class score alone, without the head);
    ``validation_novel_ap50`` is the validation score at that ``alpha``, what other choices are made by."""
    config = config or OSSDConfig()
    alphas = ALPHAS if config.parts[2] else (1.0,)
    validation = {a: score(model, config, "novel", VAL_STREAM, config.val_scenes, a) for a in alphas}
    alpha = max(alphas, key=validation.get)
    return {"novel_ap50": score(model, config, "novel", TEST_STREAM, config.test_scenes, alpha),
            "base_ap50": score(model, config, "base", TEST_STREAM, config.test_scenes, alpha), "alpha": alpha,
            "validation_novel_ap50": validation[alpha]}


def example_inputs(config: OSSDConfig | None = None) -> tuple:
    return (torch.zeros(1, 3, IMAGE_SIZE, IMAGE_SIZE),)
