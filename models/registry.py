"""Registered models: name -> how to build, train and feed it; checkpoints that name their model."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from . import digits, lm

CHECKPOINT_KEYS = ("model", "config", "state_dict")


@dataclass(frozen=True)
class ModelEntry:
    name: str
    description: str
    config: type
    build: Callable  # config -> nn.Module (untrained)
    train: Callable  # config -> trained nn.Module
    example_inputs: Callable  # config -> tuple of tensors for export and compile


def _digits_inputs(config) -> tuple:
    return (torch.zeros(1, 64),)


MODELS: dict[str, ModelEntry] = {
    "digits": ModelEntry("digits", "MLP 64-256-256-10 on scikit-learn's 8x8 digits", digits.DigitsConfig,
                         digits.build, digits.train, _digits_inputs),
    "lm": ModelEntry("lm", "Llama-style byte-level decoder (RMSNorm, RoPE, SwiGLU) on the CPython stdlib sources",
                     lm.LMConfig, lm.build, lm.train, lm.example_inputs),
}


def model_names() -> list[str]:
    return list(MODELS)


def get_model(name: str) -> ModelEntry:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; registered: {', '.join(MODELS)}")
    return MODELS[name]


def save_checkpoint(path, name: str, config, model: nn.Module) -> Path:
    """A checkpoint file that names its model and config, so it can be rebuilt alone."""
    path = Path(path)
    torch.save({"model": name, "config": dataclasses.asdict(config), "state_dict": model.state_dict()}, path)
    return path


def load_checkpoint(path) -> tuple[ModelEntry, object, nn.Module]:
    """(entry, config, model in eval mode) from a file written by :func:`save_checkpoint`."""
    path = Path(path)
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises UnpicklingError, RuntimeError, EOFError ...
        raise ValueError(f"{path} is not a readable edgekit checkpoint: {type(err).__name__}: "
                         f"{str(err).splitlines()[0] if str(err) else ''}") from err
    if not isinstance(data, dict) or any(k not in data for k in CHECKPOINT_KEYS):
        raise ValueError(f"{path} is not an edgekit checkpoint (it needs the keys {', '.join(CHECKPOINT_KEYS)})")
    entry = get_model(data["model"])
    try:
        config = entry.config(**data["config"])
        model = entry.build(config)
        model.load_state_dict(data["state_dict"])
    except (TypeError, RuntimeError) as err:
        raise ValueError(f"{path}: checkpoint does not match model {entry.name!r}: {str(err).splitlines()[0]}") from err
    return entry, config, model.eval()
