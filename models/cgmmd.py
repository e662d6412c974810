"""CGMMD: a conditional generator G(x, z) trained by the nearest-neighbour conditional MMD loss.

After Chatterjee, Choudhury and Hore, *One-shot Conditional Sampling: MMD meets Nearest
Neighbors* (arXiv 2509.25507). No adversary: the loss is the nearest-neighbour estimate of
the expected conditional MMD (ECMMD) between the data's p(y | x) and the generator's.
Each training pair i gets a generated sample yhat_i = G(x_i, z_i), z_i ~ N(0, I); over the
K nearest neighbours j of x_i (itself excluded),

    ECMMD^2 ~ mean_i mean_j [k(y_i, y_j) - k(y_i, yhat_j) - k(yhat_i, y_j) + k(yhat_i, yhat_j)]

with k a sum of Gaussian kernels (bandwidths a few multiples of the median distance between
training y's). Neighbours in x have nearly the same conditional, so the pairs (i, j) compare
p(y | x) with the generator's law where x is (nearly) shared. Sampling is one forward pass.

Baselines share the generator network and the training budget (``method``):
``mse`` trains G by mean squared error against y (the optimum ignores z and outputs the
conditional mean, so it collapses multimodal conditionals); ``cgan`` is a conditional GAN
with an MLP discriminator on (x, y) and the non-saturating loss, both players updated
in each step by one optimiser (the generator's term sees the discriminator's weights
detached, so each player descends its own loss only).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import wasserstein_distance
from torch import nn
from torch.func import functional_call
from torch.nn import functional as F

from . import cgmmd_data
from .cgmmd_data import DIMS, SYNTHETIC
from .config_fields import bounded, checked
from .training import TrainSpec

METHODS = ("cgmmd", "mse", "cgan")
BANDWIDTH_SCALES = (0.125, 0.25, 0.5, 1.0, 2.0)


@dataclass(frozen=True)
@checked
class CGMMDConfig:
    task: str = bounded("bimodal", choices=cgmmd_data.TASKS)
    method: str = bounded("cgmmd", choices=METHODS)
    hidden: int = bounded(128, low=32)
    noise: int = bounded(8, low=1)
    neighbours: int = bounded(16, low=2)  # K: neighbours in x per anchor, and generated samples per anchor
    anchors: int = bounded(64, low=1)
    steps: int = bounded(1500, low=1)
    lr: float = bounded(1e-3, low=0, low_open=True)
    train_size: int = bounded(4000, low=1)
    eval_points: int = bounded(200, low=1)  # x grid points (W1, mode coverage) for synthetic tasks
    eval_samples: int = bounded(200, low=1)  # generated samples per grid point
    seed: int = bounded(0, low=0)

    def __post_init__(self):
        if self.hidden % 32:
            raise ValueError(f"CGMMDConfig.hidden={self.hidden} must be a multiple of 32 (one MX block)")

    @property
    def x_dim(self) -> int:
        return DIMS[self.task][0]

    @property
    def y_dim(self) -> int:
        return DIMS[self.task][1]

    @classmethod
    def tiny(cls, **overrides) -> CGMMDConfig:
        return cls(**{"hidden": 64, "steps": 150, "anchors": 32, "train_size": 1000, "eval_points": 40,
                      "eval_samples": 100, **overrides})


# --- networks -------------------------------------------------------------------------

def mlp(inputs: int, hidden: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                         nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, outputs))


class Generator(nn.Module):
    """(x (B, x_dim), z (B, noise)) -> y (B, y_dim); ``critic`` (cgan only) scores (x, y)."""

    def __init__(self, config: CGMMDConfig):
        super().__init__()
        self.x_dim, self.noise = config.x_dim, config.noise
        self.net = mlp(config.x_dim + config.noise, config.hidden, config.y_dim)
        self.critic = mlp(config.x_dim + config.y_dim, config.hidden, 1) if config.method == "cgan" else None

    def forward(self, x, z):
        if x.shape[-1] != self.x_dim:
            raise ValueError(f"conditioning input has width {x.shape[-1]}, this generator takes {self.x_dim}")
        return self.net(torch.cat([x, z], dim=-1))


def build(config: CGMMDConfig = CGMMDConfig()) -> nn.Module:
    return Generator(config)


def example_inputs(config: CGMMDConfig = CGMMDConfig()) -> tuple:
    return torch.zeros(1, config.x_dim), torch.zeros(1, config.noise)


@torch.no_grad()
def generate(model: Generator, x: np.ndarray, samples: int, generator: torch.Generator) -> np.ndarray:
    """(n, samples, y_dim): ``samples`` draws of G(x_i, z) for each row x_i, one forward pass."""
    x = torch.as_tensor(np.asarray(x, dtype=np.float32))
    if x.ndim != 2 or x.shape[1] != model.x_dim:
        raise ValueError(f"conditioning input must be (n, {model.x_dim}), got shape {tuple(x.shape)}")
    z = torch.randn(len(x), samples, model.noise, generator=generator)
    return model(x[:, None].expand(-1, samples, -1), z).numpy()


# --- the loss -------------------------------------------------------------------------

def kernel(u: torch.Tensor, v: torch.Tensor, bandwidths) -> torch.Tensor:
    """Sum of Gaussian kernels exp(-|u - v|^2 / (2 h^2)) over the last axis (broadcasting)."""
    d2 = (u - v).square().sum(-1)
    return sum(torch.exp(-d2 / (2 * h * h)) for h in bandwidths)


def ecmmd(y: torch.Tensor, fake: torch.Tensor, y_nb: torch.Tensor, fake_nb: torch.Tensor, bandwidths) -> torch.Tensor:
    """Nearest-neighbour ECMMD^2 estimate: y, fake (n, d) at the anchors; y_nb, fake_nb (n, K, d) at
    each anchor's K neighbours (the data's y and the generator's samples at the neighbours' x)."""
    y, fake = y[:, None], fake[:, None]
    h = (kernel(y, y_nb, bandwidths) - kernel(y, fake_nb, bandwidths) - kernel(fake, y_nb, bandwidths)
         + kernel(fake, fake_nb, bandwidths))
    return h.mean()


def neighbour_table(x: np.ndarray, k: int) -> np.ndarray:
    """(n, k) indices of each point's k nearest other points in x (nearest first, itself left out)."""
    from sklearn.neighbors import NearestNeighbors

    return NearestNeighbors(n_neighbors=k + 1).fit(x).kneighbors(x, return_distance=False)[:, 1:]


def bandwidths(y: np.ndarray, seed: int = 0) -> tuple[float, ...]:
    """Kernel bandwidths: ``BANDWIDTH_SCALES`` times the median distance between training y's."""
    rng = np.random.default_rng(seed)
    sub = y[rng.choice(len(y), min(len(y), 500), replace=False)]
    d = np.sqrt(((sub[:, None] - sub[None]) ** 2).sum(-1))
    median = float(np.median(d[np.triu_indices(len(sub), 1)]))
    return tuple(median * s for s in BANDWIDTH_SCALES)


def gan_losses(critic: nn.Module, x, y, fake) -> tuple[torch.Tensor, torch.Tensor]:
    """(discriminator loss, non-saturating generator loss). The first reaches the critic only
    (fake detached), the second the generator only (critic weights detached)."""
    d_loss = (F.softplus(-critic(torch.cat([x, y], -1))).mean()
              + F.softplus(critic(torch.cat([x, fake.detach()], -1))).mean())
    frozen = {n: p.detach() for n, p in critic.named_parameters()}
    g_loss = F.softplus(-functional_call(critic, frozen, (torch.cat([x, fake], -1),))).mean()
    return d_loss, g_loss


def train_spec(config: CGMMDConfig = CGMMDConfig()) -> TrainSpec:
    x_np, y_np = cgmmd_data.dataset(config.task, "train", config.train_size)
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)
    k, a = config.neighbours, config.anchors
    table = torch.from_numpy(neighbour_table(x_np, k))
    widths = bandwidths(y_np)

    def loss(model, rng, step):
        if config.method == "cgmmd":
            idx = torch.from_numpy(rng.choice(len(x), a, replace=False))
            rows = torch.cat([idx[:, None], table[idx]], 1)  # (A, 1 + K): anchor, then its neighbours
            fake = model(x[rows], torch.randn(a, k + 1, config.noise))
            return ecmmd(y[idx], fake[:, 0], y[rows[:, 1:]], fake[:, 1:], widths)
        z = torch.randn(a, k, config.noise)
        rows = torch.from_numpy(rng.choice(len(x), a * k, replace=False))
        xb, yb = x[rows], y[rows]
        fake = model(xb, z.reshape(a * k, -1))
        if config.method == "mse":
            return F.mse_loss(fake, yb)
        return sum(gan_losses(model.critic, xb, yb, fake))

    betas = (0.5, 0.999) if config.method == "cgan" else (0.9, 0.999)
    return TrainSpec(config.steps, lambda m: torch.optim.Adam(m.parameters(), lr=config.lr, betas=betas), loss)


# --- evaluation -----------------------------------------------------------------------

def conditional_mmd(model, config: CGMMDConfig, split: str = "test", seed: int = 0) -> float:
    """Held-out ECMMD^2: the training loss's estimator over every pair of ``split`` with its
    neighbours from that split, one generated sample per pair (about 0 for a perfect generator)."""
    x, y = cgmmd_data.dataset(config.task, split, config.train_size)
    table = neighbour_table(x, config.neighbours)
    fake = torch.from_numpy(generate(model, x, 1, torch.Generator().manual_seed(seed))[:, 0])
    widths = bandwidths(cgmmd_data.dataset(config.task, "train", config.train_size)[1])
    y = torch.from_numpy(y)
    return float(ecmmd(y, fake, y[table], fake[table], widths))


def sliced_w1(a: np.ndarray, b: np.ndarray, projections: np.ndarray) -> float:
    """Wasserstein-1 between sample sets (exact in 1-D; averaged over unit ``projections`` otherwise)."""
    if a.shape[1] == 1:
        return float(wasserstein_distance(a[:, 0], b[:, 0]))
    return float(np.mean([wasserstein_distance(a @ p, b @ p) for p in projections]))


def mode_coverage(task: str, x: np.ndarray, samples: np.ndarray) -> float:
    """bimodal: share of x where each mode gets >= 10% of samples; ring: share of 8 angular sectors
    holding >= 5% of samples near the ring (within 0.2 of radius x), averaged over x."""
    if task == "bimodal":
        centre = 1 + x[:, :1] / 2
        upper = (np.abs(samples[..., 0] - centre) < 0.3).mean(1)
        lower = (np.abs(samples[..., 0] + centre) < 0.3).mean(1)
        return float(((upper >= 0.1) & (lower >= 0.1)).mean())
    radius = np.linalg.norm(samples, axis=-1)
    near = np.abs(radius - x[:, :1]) < 0.2
    sector = ((np.arctan2(samples[..., 1], samples[..., 0]) + np.pi) / (2 * np.pi) * 8).astype(int) % 8
    shares = np.stack([(near & (sector == s)).mean(1) for s in range(8)], axis=1)
    return float((shares >= 0.05).mean())


def psnr(estimate: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per image, pixels in [0, 1]."""
    mse = ((np.clip(estimate, 0, 1) - truth) ** 2).mean(-1)
    return 10 * np.log10(1.0 / np.maximum(mse, 1e-10))


def evaluate(model: nn.Module, config: CGMMDConfig = CGMMDConfig()) -> dict:
    """Held-out ``cond_mmd`` (ECMMD^2 on the test split) and ``latency_ms`` (1000 samples in one pass) for every task; synthetic
    tasks: ``w1`` against the true conditional on a grid of x, ``mode_coverage`` (bimodal, ring),
    ``std_error`` (mean absolute error of the conditional standard deviation); digits: ``psnr``
    of one sample, ``psnr_of_mean`` of the mean of ``eval_samples // 10`` samples and ``diversity``
    (mean per-pixel standard deviation across those samples)."""
    model.eval()
    gen = torch.Generator().manual_seed(config.seed)
    out = {"cond_mmd": conditional_mmd(model, config)}
    x_probe = np.zeros((1000, config.x_dim), np.float32)
    generate(model, x_probe, 1, gen)  # warm-up
    began = time.perf_counter()
    generate(model, x_probe, 1, gen)
    out["latency_ms"] = 1000 * (time.perf_counter() - began)
    if config.task in SYNTHETIC:
        low, high = cgmmd_data.X_RANGE[config.task]
        x = np.linspace(low, high, config.eval_points, dtype=np.float32)[:, None]
        fake = generate(model, x, config.eval_samples, gen)
        rng = np.random.default_rng([config.seed, 7])
        true = np.stack([cgmmd_data.true_conditional(config.task, np.repeat(xi[None], config.eval_samples, 0), rng)
                         for xi in x])
        proj = rng.standard_normal((32, config.y_dim))
        proj /= np.linalg.norm(proj, axis=1, keepdims=True)
        out["w1"] = float(np.mean([sliced_w1(f, t, proj) for f, t in zip(fake, true)]))
        out["std_error"] = float(np.abs(fake.std(1) - true.std(1)).mean())
        if config.task in ("bimodal", "ring"):
            out["mode_coverage"] = mode_coverage(config.task, x, fake)
        return out
    x, y = cgmmd_data.dataset(config.task, "test", config.train_size)
    samples = generate(model, x, max(2, config.eval_samples // 10), gen)
    out["psnr"] = float(psnr(samples[:, 0], y).mean())
    out["psnr_of_mean"] = float(psnr(samples.mean(1), y).mean())
    out["diversity"] = float(samples.std(1).mean())
    return out
