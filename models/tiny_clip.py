"""A tiny CLIP-like pair: a small ViT and a word-level text encoder trained contrastively on shape scenes.

The image encoder is a pre-norm ViT (patch embedding, a CLS token, learned positions,
``layers`` blocks) whose CLS output is projected to the joint space; the text encoder is a
small bidirectional transformer over word tokens, read at the end-of-text token, projected
the same way. Training is CLIP's symmetric InfoNCE over a batch of (scene, caption) pairs
with a learned temperature, on ``base`` scenes only (no held-out colour-shape combination
is ever seen). The attention blocks are written out (not ``nn.MultiheadAttention``) so
that :func:`dense_features` can read the last block's attention map and value path, which
PhaseAlign and the MaskCLIP baseline use.

Captions are padded to ``MAX_TOKENS`` words (the export shape); a word outside the vocabulary
raises a ``ValueError`` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from . import shape_scenes
from .config_fields import bounded, checked
from .training import TrainSpec

WORDS = ("<pad>", "<eot>", "a", "and", *shape_scenes.COLOURS, *shape_scenes.SHAPES)
MAX_TOKENS = 14  # "a c s and a c s and a c s" is 11 words, plus the end-of-text token


def tokenize(texts) -> torch.Tensor:
    """(len(texts), MAX_TOKENS) int64 word ids, end-of-text after the last word, padded with 0."""
    texts = [texts] if isinstance(texts, str) else list(texts)
    out = torch.zeros(len(texts), MAX_TOKENS, dtype=torch.long)
    for i, text in enumerate(texts):
        words = text.lower().split()
        if not words:
            raise ValueError(f"caption {i} is empty; the text encoder needs at least one word")
        unknown = [w for w in words if w not in WORDS[2:]]
        if unknown:
            raise ValueError(f"the text encoder has no tokens for {', '.join(map(repr, unknown))} "
                             f"(in {text!r}); known words: {', '.join(WORDS[2:])}")
        if len(words) >= MAX_TOKENS:
            raise ValueError(f"caption {text!r} has {len(words)} words; at most {MAX_TOKENS - 1}")
        out[i, :len(words)] = torch.tensor([WORDS.index(w) for w in words])
        out[i, len(words)] = WORDS.index("<eot>")
    return out


@dataclass(frozen=True)
@checked
class TinyCLIPConfig:
    image_size: int = bounded(32, choices=shape_scenes.SIZES)
    patch: int = bounded(4, low=1)
    width: int = bounded(64, low=32)
    layers: int = bounded(3, low=1)
    heads: int = bounded(4, low=1)
    text_layers: int = bounded(2, low=1)
    embed: int = bounded(64, low=32)
    steps: int = bounded(1500, low=1)
    batch: int = bounded(64, low=1)
    lr: float = bounded(2e-3, low=0, low_open=True)
    max_objects: int = bounded(3, low=1)
    eval_scenes: int = bounded(200, low=1)
    seed: int = bounded(0, low=0)

    def __post_init__(self):
        if self.image_size % self.patch:
            raise ValueError(f"patch={self.patch} must divide image_size={self.image_size}")
        if self.width % 32 or self.embed % 32:
            raise ValueError(f"width={self.width} and embed={self.embed} must be multiples of 32 (one MX block)")
        if self.width % self.heads or self.embed % 2:
            raise ValueError(f"heads={self.heads} must divide width={self.width}; embed must be even")

    @property
    def grid(self) -> int:
        return self.image_size // self.patch

    @classmethod
    def tiny(cls, **overrides) -> TinyCLIPConfig:
        return cls(**{"width": 32, "embed": 32, "layers": 2, "heads": 2, "text_layers": 1, "steps": 250,
                      "eval_scenes": 60, **overrides})


class Block(nn.Module):
    """Pre-norm transformer block whose attention weights can be returned."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))

    def attend(self, x: torch.Tensor, pad: torch.Tensor | None = None):
        """(attention output before the output projection, attention weights (B, heads, T, T), values)."""
        b, t, w = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        logits = q @ k.transpose(-1, -2) / (w // self.heads) ** 0.5
        if pad is not None:
            logits = logits.masked_fill(pad[:, None, None, :], float("-inf"))
        attn = logits.softmax(dim=-1)
        merge = lambda z: z.transpose(1, 2).reshape(b, t, w)
        return merge(attn @ v), attn, merge(v)

    def forward(self, x, pad=None):
        x = x + self.out(self.attend(x, pad)[0])
        return x + self.mlp(self.ln2(x))


class TinyCLIP(nn.Module):
    def __init__(self, config: TinyCLIPConfig):
        super().__init__()
        c = config
        self.config = c
        self.patch_embed = nn.Conv2d(3, c.width, c.patch, stride=c.patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, c.width))
        self.pos = nn.Parameter(torch.randn(1, c.grid ** 2 + 1, c.width) * 0.02)
        self.blocks = nn.ModuleList(Block(c.width, c.heads) for _ in range(c.layers))
        self.ln_post = nn.LayerNorm(c.width)
        self.image_proj = nn.Linear(c.width, c.embed, bias=False)
        self.word = nn.Embedding(len(WORDS), c.width)
        self.text_pos = nn.Parameter(torch.randn(1, MAX_TOKENS, c.width) * 0.02)
        self.text_blocks = nn.ModuleList(Block(c.width, c.heads) for _ in range(c.text_layers))
        self.ln_text = nn.LayerNorm(c.width)
        self.text_proj = nn.Linear(c.width, c.embed, bias=False)
        self.log_scale = nn.Parameter(torch.tensor(np.log(10.0), dtype=torch.float32))

    def check_images(self, images: torch.Tensor) -> None:
        s = self.config.image_size
        if images.ndim != 4 or images.shape[1:] != (3, s, s):
            raise ValueError(f"images must have shape (batch, 3, {s}, {s}); got {tuple(images.shape)}")

    def tokens_in(self, images: torch.Tensor) -> torch.Tensor:
        """Token sequence (B, 1 + grid^2, width) entering the first block."""
        self.check_images(images)
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        return torch.cat([self.cls.expand(len(x), -1, -1), x], dim=1) + self.pos

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        x = self.tokens_in(images)
        for block in self.blocks:
            x = block(x)
        return F.normalize(self.image_proj(self.ln_post(x[:, 0])), dim=-1)

    def encode_text(self, tokens: torch.Tensor) -> torch.Tensor:
        pad = tokens == 0
        x = self.word(tokens) + self.text_pos
        for block in self.text_blocks:
            x = block(x, pad)
        eot = (tokens == WORDS.index("<eot>")).float().argmax(dim=1)
        return F.normalize(self.text_proj(self.ln_text(x[torch.arange(len(x)), eot])), dim=-1)

    def forward(self, images: torch.Tensor, tokens: torch.Tensor):
        return self.encode_image(images), self.encode_text(tokens)


def build(config: TinyCLIPConfig) -> nn.Module:
    return TinyCLIP(config)


def batch(seed: int, start: int, count: int, config: TinyCLIPConfig, split: str = "base"):
    """(images (count, 3, s, s), captions) of scenes ``start .. start + count`` of the stream ``seed``."""
    sc = shape_scenes.scenes(seed, count, config.image_size, split, config.max_objects, start)
    return torch.from_numpy(np.stack([s.image for s in sc])), [s.caption for s in sc]


TRAIN_STREAM, VAL_STREAM, TEST_STREAM = 0, 1, 2  # scene streams, mixed with the training seed


def stream(config: TinyCLIPConfig, which: int) -> int:
    return 1000 * config.seed + which


def swap_word(caption: str, rng: np.random.Generator) -> str:
    """A hard negative: one object's colour or shape in ``caption`` replaced by another (as in NegCLIP)."""
    words = caption.split()
    i = int(rng.choice([j for j, w in enumerate(words) if w in shape_scenes.COLOURS or w in shape_scenes.SHAPES]))
    pool = list(shape_scenes.COLOURS) if words[i] in shape_scenes.COLOURS else list(shape_scenes.SHAPES)
    colour_first = words[i] in shape_scenes.COLOURS
    # only base combinations: a held-out one must not reach training even as a negative
    pool = [w for w in pool if w != words[i] and
            ((w, words[i + 1]) if colour_first else (words[i - 1], w)) in shape_scenes.BASE_COMBOS]
    words[i] = pool[int(rng.integers(len(pool)))]
    return " ".join(words)


def train_spec(config: TinyCLIPConfig) -> TrainSpec:
    """AdamW on CLIP's symmetric InfoNCE with one word-swapped hard-negative caption per scene (image to
    text over captions and negatives, text to image over captions); every step renders fresh base scenes."""

    def loss(model, rng, step):
        images, captions = batch(stream(config, TRAIN_STREAM), step * config.batch, config.batch, config)
        negatives = [swap_word(c, rng) for c in captions]
        img, txt = model(images, tokenize(captions + negatives))
        logits = model.log_scale.clamp(max=np.log(100.0)).exp() * img @ txt.T
        # scenes in a batch can share a caption; equal captions count as positives of each other
        same = torch.tensor([[a == b for b in captions + negatives] for a in captions], dtype=torch.float32)
        target = same / same.sum(dim=1, keepdim=True)
        n = len(captions)
        return (F.cross_entropy(logits, target) + F.cross_entropy(logits[:, :n].T, target[:, :n])) / 2

    warm = max(1, config.steps // 20)
    return TrainSpec(config.steps, lambda m: torch.optim.AdamW(m.parameters(), lr=config.lr, weight_decay=0.05),
                     loss, lr=lambda s: config.lr * min(1.0, (s + 1) / warm) * 0.5 * (1 + np.cos(np.pi * s / config.steps)),
                     grad_clip=1.0)


def zero_shot_accuracy(model: TinyCLIP, config: TinyCLIPConfig, split: str, single: bool = True) -> float:
    """Fraction of one-object scenes whose label is the nearest of all 36 colour-shape prompts."""
    cfg = TinyCLIPConfig(**{**config.__dict__, "max_objects": 1}) if single else config
    images, captions = batch(stream(config, TEST_STREAM), 0, config.eval_scenes, cfg, split)
    prompts = [f"a {shape_scenes.label_name(c)}" for c in shape_scenes.ALL_COMBOS]
    with torch.no_grad():
        img, txt = model.eval()(images, tokenize(prompts))
    pred = (img @ txt.T).argmax(dim=1).numpy()
    return float(np.mean([prompts[p] == c for p, c in zip(pred, captions)]))


def evaluate(model: nn.Module, config: TinyCLIPConfig | None = None) -> dict:
    """Zero-shot classification of one-object test scenes among all 36 colour-shape prompts:
    ``novel_accuracy`` on held-out combinations (the headline) and ``base_accuracy``."""
    config = config or TinyCLIPConfig()
    return {"novel_accuracy": zero_shot_accuracy(model, config, "novel"),
            "base_accuracy": zero_shot_accuracy(model, config, "base")}


def example_inputs(config: TinyCLIPConfig | None = None) -> tuple:
    config = config or TinyCLIPConfig()
    s = config.image_size
    return torch.zeros(1, 3, s, s), tokenize(["a red star"])
