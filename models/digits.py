"""A small MLP classifier trained on scikit-learn's bundled 8x8 handwritten digits.

Real data that every install has, trained in a few seconds on CPU: the built-in model
of ``edgekit demo`` and the real trained weights of the INT-vs-FP study.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


@dataclass(frozen=True)
class DigitsConfig:
    hidden: int = 256
    epochs: int = 60
    lr: float = 3e-3
    batch: int = 128
    test_fraction: float = 0.25
    seed: int = 0


def load_digits_split(config: DigitsConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test), pixels scaled to [0, 1], split by a seeded shuffle."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = (data.data / 16.0).astype(np.float32)
    y = data.target.astype(np.int64)
    order = np.random.default_rng(config.seed).permutation(len(x))
    n_test = int(len(x) * config.test_fraction)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def build(config: DigitsConfig) -> nn.Module:
    return nn.Sequential(
        nn.Linear(64, config.hidden), nn.ReLU(),
        nn.Linear(config.hidden, config.hidden), nn.ReLU(),
        nn.Linear(config.hidden, 10),
    )


def train(config: DigitsConfig = DigitsConfig()) -> nn.Module:
    """Train the MLP with Adam; the same config and seed give the same weights."""
    torch.manual_seed(config.seed)
    x, y, _, _ = load_digits_split(config)
    model = build(config)
    opt = torch.optim.Adam(model.parameters(), lr=config.lr)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    gen = torch.Generator().manual_seed(config.seed)
    for _ in range(config.epochs):
        for idx in torch.randperm(len(xt), generator=gen).split(config.batch):
            opt.zero_grad()
            nn.functional.cross_entropy(model(xt[idx]), yt[idx]).backward()
            opt.step()
    return model.eval()


def accuracy(model: nn.Module, config: DigitsConfig = DigitsConfig()) -> float:
    """Top-1 accuracy on the held-out split."""
    _, _, x, y = load_digits_split(config)
    with torch.no_grad():
        pred = model(torch.from_numpy(x)).argmax(dim=1).numpy()
    return float((pred == y).mean())
