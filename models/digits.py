"""A small MLP classifier trained on scikit-learn's bundled 8x8 handwritten digits.

Real data that every install has, trained in a few seconds on CPU: the built-in model
of ``edgekit demo`` and the real trained weights of the INT-vs-FP study.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import torch
from torch import nn

from .config_fields import bounded, checked
from .training import TrainSpec


@dataclass(frozen=True)
@checked
class DigitsConfig:
    hidden: int = bounded(256, low=1)
    steps: int = bounded(660, low=1)  # 60 epochs of batches of 128
    lr: float = bounded(3e-3, low=0, low_open=True)
    batch: int = bounded(128, low=1)
    test_fraction: float = bounded(0.25, low=0, high=1, low_open=True, high_open=True)
    seed: int = bounded(0, low=0)

    @classmethod
    def tiny(cls, **overrides) -> DigitsConfig:
        return cls(**{"hidden": 32, "steps": 120, **overrides})


@cache
def load_digits_split(test_fraction: float = 0.25, seed: int = 0) -> tuple[np.ndarray, ...]:
    """(x_train, y_train, x_test, y_test), pixels scaled to [0, 1], split by a seeded shuffle."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = (data.data / 16.0).astype(np.float32)
    y = data.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(len(x) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def build(config: DigitsConfig) -> nn.Module:
    return nn.Sequential(
        nn.Linear(64, config.hidden), nn.ReLU(),
        nn.Linear(config.hidden, config.hidden), nn.ReLU(),
        nn.Linear(config.hidden, 10),
    )


def train_spec(config: DigitsConfig) -> TrainSpec:
    """Adam on cross-entropy over batches drawn without replacement."""
    x, y, _, _ = load_digits_split(config.test_fraction, config.seed)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)

    def loss(model, rng, step):
        idx = torch.from_numpy(rng.choice(len(xt), min(config.batch, len(xt)), replace=False))
        return nn.functional.cross_entropy(model(xt[idx]), yt[idx])

    return TrainSpec(config.steps, lambda m: torch.optim.Adam(m.parameters(), lr=config.lr), loss)


def evaluate(model: nn.Module, config: DigitsConfig = DigitsConfig()) -> dict:
    """Top-1 ``accuracy`` on the held-out split."""
    _, _, x, y = load_digits_split(config.test_fraction, config.seed)
    with torch.no_grad():
        pred = model.eval()(torch.from_numpy(x)).argmax(dim=1).numpy()
    return {"accuracy": float((pred == y).mean())}


def example_inputs(config: DigitsConfig = DigitsConfig()) -> tuple:
    return (torch.zeros(1, 64),)
