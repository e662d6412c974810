"""DirectEdit: exact Euler inversion and masked, value-injected editing with a small rectified-flow transformer.

The network is a DiT-like velocity field ``v(z, t, caption)`` over 32x32 RGB shape scenes
(pixels scaled to [-1, 1], patches of ``patch`` pixels), with the caption's word tokens
(the tiny CLIP's tokenizer, padded to ``tiny_clip.MAX_TOKENS``) joined to the image tokens
in every attention block and the time added to every token. Rectified flow: ``z_t = (1 - t) x
+ t noise`` and the network regresses ``noise - x``.

Editing, with ``steps`` Euler steps on ``t_0 = 0 < ... < t_N = 1``:

- :func:`invert` runs Euler inversion ``z_{i+1} = z_i + dt v(z_i, t_i)`` and records every
  velocity and every block's attention values. The one-step reconstruction of ``z_i`` from
  ``z_{i+1}`` is ``z_{i+1} - dt v(z_{i+1}, t_{i+1})``, whose velocity is the *next* inversion
  step's evaluation; DirectEdit records the residual ``r_i = z_i - that`` so the source path
  ``z_i = z_{i+1} - dt v_{i+1} + r_i`` reproduces the input up to float round-off with one
  network evaluation beyond the inversion (at ``t_N``) instead of ``N``.
- :func:`edit` denoises from ``z_N`` with the target caption, adding the recorded residuals,
  replacing the image tokens' attention values by the source path's in the first
  ``inject`` steps (value injection), and blending with the source latent outside a mask.
- :func:`plain_reconstruct` / plain editing is the baseline: the same Euler steps backwards,
  no residuals, no injection, no blend.
- Classifier-free guidance (:func:`guided`): training replaces a ``cond_drop`` fraction of
  captions by the null caption, and the edit path may extrapolate from the null caption's
  velocity to the target's (two evaluations per step).
- :func:`null_text_optimise` is the second baseline, null-text inversion for rectified flow:
  along the plain inversion path it fits, per step, an offset of the null branch's conditioning
  so that the guided path from ``z_N`` with the source caption lands on the inversion's latents;
  the edit then uses those offsets with the target caption.

Bad input (wrong image size or channels, a mask that does not match, an empty caption, an
unknown word, a guidance scale below 1) raises a ``ValueError`` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from . import shape_scenes, tiny_clip
from .config_fields import bounded, checked
from .training import TrainSpec


@dataclass(frozen=True)
@checked
class DirectEditConfig:
    image_size: int = bounded(32, choices=shape_scenes.SIZES)
    patch: int = bounded(4, low=1)
    width: int = bounded(64, low=32)
    layers: int = bounded(3, low=1)
    heads: int = bounded(4, low=1)
    steps: int = bounded(2500, low=1)
    batch: int = bounded(32, low=1)
    lr: float = bounded(2e-3, low=0, low_open=True)
    cond_drop: float = bounded(0.1, low=0, high=1, high_open=True)  # caption dropout, for classifier-free guidance
    edit_steps: int = bounded(10, low=1)  # Euler steps of inversion and editing
    eval_scenes: int = bounded(40, low=1)
    null_iterations: int = bounded(10, low=1)  # Adam steps per Euler step of null-text optimisation
    seed: int = bounded(0, low=0)

    def __post_init__(self):
        if self.image_size % self.patch:
            raise ValueError(f"patch={self.patch} must divide image_size={self.image_size}")
        if self.width % 32 or self.width % self.heads:
            raise ValueError(f"width={self.width} must be a multiple of 32 (one MX block) and of heads={self.heads}")

    @property
    def grid(self) -> int:
        return self.image_size // self.patch

    @classmethod
    def tiny(cls, **overrides) -> DirectEditConfig:
        return cls(**{"width": 32, "layers": 2, "heads": 2, "steps": 150, "batch": 16, "edit_steps": 6,
                      "eval_scenes": 8, "null_iterations": 3, **overrides})


class Block(nn.Module):
    """Pre-norm transformer block whose attention values can be read out or replaced."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))

    def forward(self, x, pad, image_tokens: int, values=None):
        """(output, values (B, heads, T, d)); ``values`` given replace the first ``image_tokens`` tokens' values."""
        b, t, w = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        if values is not None:
            v = torch.cat([values[:, :, :image_tokens], v[:, :, image_tokens:]], dim=2)
        logits = (q @ k.transpose(-1, -2) / (w // self.heads) ** 0.5).masked_fill(pad[:, None, None, :], float("-inf"))
        x = x + self.out((logits.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, t, w))
        return x + self.mlp(self.ln2(x)), v


class FlowDiT(nn.Module):
    def __init__(self, config: DirectEditConfig):
        super().__init__()
        c = config
        self.config = c
        self.patch_embed = nn.Conv2d(3, c.width, c.patch, stride=c.patch)
        self.pos = nn.Parameter(torch.randn(1, c.grid ** 2, c.width) * 0.02)
        self.word = nn.Embedding(len(tiny_clip.WORDS), c.width)
        self.text_pos = nn.Parameter(torch.randn(1, tiny_clip.MAX_TOKENS, c.width) * 0.02)
        self.time = nn.Sequential(nn.Linear(c.width, c.width), nn.GELU(), nn.Linear(c.width, c.width))
        self.blocks = nn.ModuleList(Block(c.width, c.heads) for _ in range(c.layers))
        self.ln_out = nn.LayerNorm(c.width)
        self.head = nn.Linear(c.width, 3 * c.patch ** 2)

    def features(self, z, t, tokens, values=None, cond_offset=None):
        """(velocity (B, 3, s, s), per-block attention values); ``values`` (a list per block) injects them and
        ``cond_offset`` (B, 1, width) is added to the conditioning vector every token receives (the time
        embedding, where MM-DiT models also add the pooled caption): null-text optimisation's handle."""
        c = self.config
        n = c.grid ** 2
        half = c.width // 2
        freqs = torch.exp(-np.log(1000.0) * torch.arange(half, dtype=torch.float32) / half)
        angle = 1000.0 * t.reshape(-1, 1) * freqs
        temb = self.time(torch.cat([angle.sin(), angle.cos()], dim=1))[:, None]
        if cond_offset is not None:
            temb = temb + cond_offset
        x = torch.cat([self.patch_embed(z).flatten(2).transpose(1, 2) + self.pos,
                       self.word(tokens) + self.text_pos], dim=1) + temb
        pad = torch.cat([torch.zeros(len(z), n, dtype=torch.bool), tokens == 0], dim=1)
        out = []
        for i, block in enumerate(self.blocks):
            x, v = block(x, pad, n, None if values is None else values[i])
            out.append(v)
        p = self.head(self.ln_out(x[:, :n]))  # (B, grid^2, 3 patch^2)
        g, s = c.grid, c.patch
        vel = p.view(len(z), g, g, 3, s, s).permute(0, 3, 1, 4, 2, 5).reshape(len(z), 3, g * s, g * s)
        return vel, out

    def forward(self, z, t, tokens):
        return self.features(z, t, tokens)[0]


def build(config: DirectEditConfig) -> nn.Module:
    return FlowDiT(config)


TRAIN_STREAM, VAL_STREAM, TEST_STREAM = 0, 1, 2


def stream(config: DirectEditConfig, which: int) -> int:
    return 1000 * config.seed + which


def to_latent(images: torch.Tensor) -> torch.Tensor:
    return images * 2 - 1


def batch(seed: int, start: int, count: int, config: DirectEditConfig):
    """One-object base scenes: (latents, captions, masks (count, s, s) bool, labels)."""
    sc = shape_scenes.scenes(seed, count, config.image_size, "base", 1, start)
    return (to_latent(torch.from_numpy(np.stack([s.image for s in sc]))), [s.caption for s in sc],
            torch.from_numpy(np.stack([s.masks[0] for s in sc])), [s.labels[0] for s in sc])


def null_tokens(count: int) -> torch.Tensor:
    """The null caption: the end-of-text token alone (classifier-free guidance's unconditional input)."""
    tokens = torch.zeros(count, tiny_clip.MAX_TOKENS, dtype=torch.long)
    tokens[:, 0] = tiny_clip.WORDS.index("<eot>")
    return tokens


def train_spec(config: DirectEditConfig) -> TrainSpec:
    """AdamW on the rectified-flow loss ``|v(z_t, t, caption) - (noise - x)|^2``, fresh scenes every step; a
    ``cond_drop`` fraction of captions is replaced by the null caption so that guidance has an unconditional field."""

    def loss(model, rng, step):
        x, captions, _, _ = batch(stream(config, TRAIN_STREAM), step * config.batch, config.batch, config)
        noise = torch.from_numpy(rng.standard_normal(x.shape).astype(np.float32))
        t = torch.from_numpy(rng.uniform(0, 1, len(x)).astype(np.float32))
        tokens = tiny_clip.tokenize(captions)
        drop = torch.from_numpy(rng.uniform(0, 1, len(x)) < config.cond_drop)
        tokens[drop] = null_tokens(int(drop.sum()))
        zt = (1 - t[:, None, None, None]) * x + t[:, None, None, None] * noise
        return F.mse_loss(model(zt, t, tokens), noise - x)

    warm = max(1, config.steps // 20)
    return TrainSpec(config.steps, lambda m: torch.optim.AdamW(m.parameters(), lr=config.lr, weight_decay=0.01),
                     loss, lr=lambda s: config.lr * min(1.0, (s + 1) / warm) * 0.5 * (1 + np.cos(np.pi * s / config.steps)),
                     grad_clip=1.0)


# -- inversion and editing ---------------------------------------------------------------------

def check_inputs(model: FlowDiT, images: torch.Tensor, captions, masks: torch.Tensor | None = None) -> torch.Tensor:
    """Caption tokens, after checking image shape, mask shape and caption words."""
    s = model.config.image_size
    if images.ndim != 4 or images.shape[1:] != (3, s, s):
        raise ValueError(f"images must have shape (batch, 3, {s}, {s}); got {tuple(images.shape)}")
    if masks is not None and tuple(masks.shape) != (len(images), s, s):
        raise ValueError(f"mask must have shape {(len(images), s, s)} to match the images; got {tuple(masks.shape)}")
    captions = [captions] if isinstance(captions, str) else list(captions)
    if len(captions) != len(images):
        raise ValueError(f"{len(captions)} captions for {len(images)} images; give one caption per image")
    return tiny_clip.tokenize(captions)


def times(steps: int) -> torch.Tensor:
    return torch.linspace(0, 1, steps + 1)


@dataclass
class Inversion:
    latents: list  # z_0 .. z_N
    velocities: list  # v(z_i, t_i), i = 0 .. N (the last one at t_N for the source path)
    values: list  # attention values of each evaluation, per block
    residuals: list  # r_i = z_i - (z_{i+1} - dt v_{i+1}), i = 0 .. N-1

    @property
    def nfe(self) -> int:
        return len(self.velocities)


@torch.no_grad()
def invert(model: FlowDiT, x: torch.Tensor, captions, steps: int) -> Inversion:
    """Euler inversion from the image latent ``x`` to t = 1, recording velocities, values and residuals."""
    tokens = check_inputs(model, (x + 1) / 2, captions)
    ts = times(steps)
    z, latents, vels, vals = x, [x], [], []
    for i in range(steps + 1):
        v, feats = model.features(z, ts[i].expand(len(z)), tokens)
        vels.append(v)
        vals.append(feats)
        if i < steps:
            z = z + (ts[i + 1] - ts[i]) * v
            latents.append(z)
    residuals = [latents[i] - (latents[i + 1] - (ts[i + 1] - ts[i]) * vels[i + 1]) for i in range(steps)]
    return Inversion(latents, vels, vals, residuals)


def source_path(inv: Inversion) -> torch.Tensor:
    """DirectEdit's source path: Euler steps back with the recorded velocities plus residuals (no new evaluations)."""
    steps = len(inv.residuals)
    ts = times(steps)
    z = inv.latents[-1]
    for i in reversed(range(steps)):
        z = z - (ts[i + 1] - ts[i]) * inv.velocities[i + 1] + inv.residuals[i]
    return z


def guided(model: FlowDiT, z: torch.Tensor, t: torch.Tensor, tokens: torch.Tensor, guidance: float,
           values=None, null_offset=None) -> torch.Tensor:
    """Classifier-free guided velocity ``u + guidance (v - u)`` with ``u`` the null caption's (offset by
    ``null_offset``); at guidance 1 the caption's velocity alone (one evaluation instead of two)."""
    v, _ = model.features(z, t, tokens, values)
    if guidance == 1:
        return v
    u, _ = model.features(z, t, null_tokens(len(z)), values, null_offset)
    return u + guidance * (v - u)


def path_nfe(steps: int, guidance: float) -> int:
    """Network evaluations of one denoising path: two per step under guidance."""
    return steps * (1 if guidance == 1 else 2)


def check_guidance(guidance: float) -> None:
    if not guidance >= 1:
        raise ValueError(f"guidance={guidance} must be >= 1 (1: no classifier-free guidance)")


@torch.no_grad()
def plain_reconstruct(model: FlowDiT, inv: Inversion, captions, guidance: float = 1.0) -> torch.Tensor:
    """Plain inversion's reconstruction: Euler steps back from z_N with fresh evaluations (``steps`` more)."""
    return edit(model, inv, captions, residuals=False, inject=0, mask=None, guidance=guidance)


@torch.no_grad()
def edit(model: FlowDiT, inv: Inversion, captions, *, residuals: bool = True, inject: int = 0,
         mask: torch.Tensor | None = None, guidance: float = 1.0, null_offsets: list | None = None) -> torch.Tensor:
    """Denoise from the inverted latent with ``captions`` under classifier-free ``guidance``: residuals added,
    values injected in the first ``inject`` steps, latents outside ``mask`` (B, s, s) replaced by the inversion's at
    every step, and the null branch's conditioning offset per step by ``null_offsets`` (:func:`null_text_optimise`)."""
    x = inv.latents[0]
    tokens = check_inputs(model, (x + 1) / 2, captions, mask)
    check_guidance(guidance)
    steps = len(inv.residuals)
    if not 0 <= inject <= steps:
        raise ValueError(f"inject={inject} must be between 0 and steps={steps}")
    if null_offsets is not None and len(null_offsets) != steps:
        raise ValueError(f"null_offsets has {len(null_offsets)} entries; the inversion has steps={steps}")
    ts = times(steps)
    keep = None if mask is None else mask.to(x.dtype)[:, None]
    z = inv.latents[-1]
    for k, i in enumerate(reversed(range(steps))):
        v = guided(model, z, ts[i + 1].expand(len(z)), tokens, guidance, inv.values[i + 1] if k < inject else None,
                   None if null_offsets is None else null_offsets[i])
        z = z - (ts[i + 1] - ts[i]) * v + (inv.residuals[i] if residuals else 0)
        if keep is not None:
            z = keep * z + (1 - keep) * inv.latents[i]
    return z


@dataclass
class NullText:
    offsets: list  # per Euler step i (from t_{i+1} to t_i), the null branch's conditioning offset (B, 1, width)
    reconstruction: torch.Tensor  # the guided path from z_N with the source caption and these offsets
    forwards: int  # network evaluations spent in the optimisation (the inversion's not included)
    backwards: int  # backward passes through the network


def null_text_optimise(model: FlowDiT, inv: Inversion, captions, guidance: float, *, iterations: int = 10,
                       lr: float = 0.01) -> NullText:
    """Null-text inversion for rectified flow: walking the guided path back from z_N with the source caption,
    at each step ``iterations`` Adam steps fit an offset to the null branch's conditioning vector (this network's
    stand-in for the null caption's embedding) so that the guided Euler step lands on the inversion's latent; the
    offset carries over to the next step as its start."""
    x = inv.latents[0]
    tokens = check_inputs(model, (x + 1) / 2, captions)
    if not guidance > 1:
        raise ValueError(f"guidance={guidance} must be > 1: without guidance the null caption is not evaluated")
    if iterations < 1:
        raise ValueError(f"iterations={iterations} must be >= 1")
    if not lr > 0:
        raise ValueError(f"lr={lr} must be > 0")
    steps = len(inv.residuals)
    ts, nulls = times(steps), null_tokens(len(x))
    offset = torch.zeros(len(x), 1, model.config.width, requires_grad=True)
    offsets, z, forwards, backwards = [None] * steps, inv.latents[-1], 0, 0
    frozen = [p for p in model.parameters() if p.requires_grad]
    for p in frozen:  # only the offset learns; the network's weights and gradients stay as they are
        p.requires_grad_(False)
    try:
        for i in reversed(range(steps)):
            t, dt = ts[i + 1].expand(len(x)), ts[i + 1] - ts[i]
            with torch.no_grad():
                v, _ = model.features(z, t, tokens)
            opt = torch.optim.Adam([offset], lr=lr)
            for _ in range(iterations):
                u, _ = model.features(z, t, nulls, cond_offset=offset)
                loss = F.mse_loss(z - dt * (u + guidance * (v - u)), inv.latents[i], reduction="sum")
                opt.zero_grad()
                loss.backward()
                opt.step()
            with torch.no_grad():
                u, _ = model.features(z, t, nulls, cond_offset=offset)
                z = z - dt * (u + guidance * (v - u))
            offsets[i] = offset.detach().clone()
            forwards, backwards = forwards + iterations + 2, backwards + iterations
    finally:
        for p in frozen:
            p.requires_grad_(True)
    return NullText(offsets, z, forwards, backwards)


def psnr(a: torch.Tensor, b: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """Per-image PSNR (dB, images in [-1, 1] read as [0, 1]) over pixels where ``where`` (B, s, s) holds."""
    err = (((a - b) / 2) ** 2 * where[:, None]).sum(dim=(1, 2, 3)) / (3 * where.sum(dim=(1, 2)).clamp(min=1))
    return -10 * torch.log10(err.clamp(min=1e-12))


# -- evaluation ----------------------------------------------------------------------------------

def colour_classifier(seed: int, size: int = 32, steps: int = 100) -> nn.Module:
    """A small CNN trained here to name the colour of the one object in a scene (the edit judge)."""
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1),
                        nn.ReLU(), nn.AdaptiveMaxPool2d(1), nn.Flatten(), nn.Linear(32, len(shape_scenes.COLOURS)))
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    colours = list(shape_scenes.COLOURS)
    for step in range(steps):
        sc = shape_scenes.scenes(10_000 + seed, 32, size, "base", 1, step * 32)
        x = to_latent(torch.from_numpy(np.stack([s.image for s in sc])))
        y = torch.tensor([colours.index(s.labels[0][0]) for s in sc])
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()
    return net.eval()


def target_captions(labels, rng: np.random.Generator) -> list[str]:
    """Each object recoloured to another colour whose combination with its shape is a base one."""
    out = []
    for colour, shape in labels:
        pool = [c for c in shape_scenes.COLOURS if c != colour and (c, shape) in shape_scenes.BASE_COMBOS]
        out.append(f"a {pool[int(rng.integers(len(pool)))]} {shape}")
    return out


METHODS = {  # name -> (residuals, value injection, mask blend, null-text optimisation)
    "plain": (False, False, False, False),
    "plain_blend": (False, False, True, False),
    "nulltext": (False, False, True, True),
    "directedit_noinject": (True, False, True, False),
    "directedit": (True, True, True, False),
}
GUIDANCES = (1.0, 2.0, 4.0, 7.0, 10.0, 15.0)  # classifier-free guidance scales tried on validation (null-text: > 1)


def edit_task(config: DirectEditConfig, which: int, count: int | None = None):
    """Scenes of one stream with their recolouring: (latents, captions, masks, targets, target and source colour ids)."""
    x, captions, masks, labels = batch(stream(config, which), 0, count or config.eval_scenes, config)
    targets = target_captions(labels, np.random.default_rng(stream(config, which)))
    colours = list(shape_scenes.COLOURS)
    return (x, captions, masks, targets, torch.tensor([colours.index(t.split()[1]) for t in targets]),
            torch.tensor([colours.index(lab[0]) for lab in labels]))


def run_method(model: FlowDiT, config: DirectEditConfig, task, inv: Inversion, name: str, guidance: float,
               inject: int, judge: nn.Module) -> dict:
    """One method's edit of the task's scenes: edit success and source colour kept (by the judge), background PSNR,
    forward evaluations (inversion + optimisation + edit path) and backward passes."""
    x, captions, masks, targets, want, source = task
    res, inj, blend, null = METHODS[name]
    nt = null_text_optimise(model, inv, captions, guidance, iterations=config.null_iterations) if null else None
    y = edit(model, inv, targets, residuals=res, inject=inject if inj else 0, mask=masks if blend else None,
             guidance=guidance, null_offsets=nt and nt.offsets)
    with torch.no_grad():
        named = judge(y.clamp(-1, 1)).argmax(dim=1)
    steps = config.edit_steps
    return {"edit_success": float((named == want).float().mean()), "kept_source": float((named == source).float().mean()),
            "bg_psnr": float(psnr(y, x, ~masks).mean()),
            "nfe": steps + (1 if res else 0) + (nt.forwards if nt else 0) + path_nfe(steps, guidance),
            "backward": nt.backwards if nt else 0}


def settings(name: str, config: DirectEditConfig) -> list[tuple[float, int]]:
    """The (guidance, injection depth) pairs a method is tuned over on validation."""
    _res, inj, _blend, null = METHODS[name]
    depths = sorted({0, config.edit_steps // 3, 2 * config.edit_steps // 3, config.edit_steps}) if inj else [0]
    return [(g, k) for g in GUIDANCES if g > 1 or not null for k in depths]


def reconstruction(model: FlowDiT, config: DirectEditConfig, guidance: float, which: int = TEST_STREAM) -> dict:
    """Max |reconstruction - input| of DirectEdit's source path and of plain inversion, with the model's weights
    in float32, MXFP8 (E4M3) and MXFP4 (the simulators' block-scaled formats); and under classifier-free
    ``guidance`` (float32): plain inversion, DirectEdit's edit path with the source caption, and null-text."""
    from .weights import quantized_copy

    x, captions, _, _ = batch(stream(config, which), 0, config.eval_scenes, config)
    out = {}
    for fmt, m in (("float", model), ("mxfp8", quantized_copy(model, "mxfp8_e4m3")), ("mxfp4", quantized_copy(model, "mxfp4"))):
        inv = invert(m.eval(), x, captions, config.edit_steps)
        out[f"recon_err_directedit_{fmt}"] = float((source_path(inv) - x).abs().max())
        out[f"recon_err_plain_{fmt}"] = float((plain_reconstruct(m, inv, captions) - x).abs().max())
    inv = invert(model, x, captions, config.edit_steps)
    out["recon_err_plain_guided"] = float((plain_reconstruct(model, inv, captions, guidance) - x).abs().max())
    out["recon_err_directedit_guided"] = float((edit(model, inv, captions, guidance=guidance) - x).abs().max())
    nt = null_text_optimise(model, inv, captions, guidance, iterations=config.null_iterations)
    out["recon_err_nulltext_guided"] = float((nt.reconstruction - x).abs().max())
    return out


def evaluate(model: nn.Module, config: DirectEditConfig | None = None) -> dict:
    """Edit comparison at equal Euler steps: each method's guidance scale (and DirectEdit's value-injection depth:
    0, 1/3, 2/3 or all steps) is chosen on validation scenes by edit success (ties to higher background PSNR,
    then lower guidance, then less injection), then test scenes are scored once; plus reconstruction error, under guidance at the
    scale chosen for null-text. Headline: ``edit_success_directedit``."""
    config = config or DirectEditConfig()
    model.eval()
    judge = colour_classifier(config.seed, config.image_size)
    val, test = edit_task(config, VAL_STREAM), edit_task(config, TEST_STREAM)
    val_inv, test_inv = invert(model, val[0], val[1], config.edit_steps), invert(model, test[0], test[1], config.edit_steps)
    out = {}
    for name in METHODS:
        g, k = max(settings(name, config), key=lambda gk: (
            (s := run_method(model, config, val, val_inv, name, *gk, judge))["edit_success"], s["bg_psnr"], -gk[0], -gk[1]))
        out[f"guidance_{name}"] = g
        if METHODS[name][1]:
            out["inject_steps"] = k
        out.update({f"{key}_{name}": v for key, v in run_method(model, config, test, test_inv, name, g, k, judge).items()
                    if key != "backward" or METHODS[name][3]})
    return {**out, **reconstruction(model, config, out["guidance_nulltext"])}


def example_inputs(config: DirectEditConfig | None = None) -> tuple:
    config = config or DirectEditConfig()
    s = config.image_size
    return torch.zeros(1, 3, s, s), torch.full((1,), 0.5), tiny_clip.tokenize(["a red circle"])
