"""The model zoo: name -> config, build, training, evaluation and example inputs.

Every registered model is trained by :func:`train` (seeded, resumable, cached by config
and code version, see :mod:`.training` and :mod:`.cache`), scored by its own
``evaluate`` (the metric its method is judged by, as named numbers), and fed to export
and compile through ``example_inputs``. Checkpoint files name their model and config
and carry a digest, so they can be rebuilt alone and are never loaded corrupt.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from torch import nn

from edgekit.utils.provenance import note_model

from . import (
    cache,
    cgmmd,
    digits,
    directedit,
    dnachunker,
    fluxnet,
    lm,
    meanflow_policy,
    metaworld_demos,
    ossd,
    pde,
    shape_scenes,
    sudoku_mdm,
    tiny_clip,
    training,
)
from .cache import CheckpointError
from .config_fields import describe


@dataclass(frozen=True)
class ModelEntry:
    name: str
    description: str
    config: type  # a frozen dataclass with a ``seed`` field and a ``tiny()`` classmethod for tests
    build: Callable  # config -> untrained nn.Module
    train_spec: Callable  # config -> training.TrainSpec
    evaluate: Callable  # (model, config) -> {metric name: number}
    example_inputs: Callable  # config -> tuple of tensors for export and compile
    metric: str  # the headline number of ``evaluate``
    higher_is_better: bool
    sources: tuple[ModuleType, ...]  # modules whose source text is the model's code version
    compare: Callable | None = None  # (reference, candidate, config) -> {name: number}, e.g. KL divergence

    @property
    def code(self) -> str:
        return cache.source_digest(*self.sources, training)

    @property
    def metric_label(self) -> str:
        return f"{self.metric} ({'higher' if self.higher_is_better else 'lower'} is better)"


MODELS: dict[str, ModelEntry] = {
    "digits": ModelEntry("digits", "MLP 64-256-256-10 on scikit-learn's 8x8 digits", digits.DigitsConfig,
                         digits.build, digits.train_spec, digits.evaluate, digits.example_inputs,
                         "accuracy", True, (digits,)),
    "lm": ModelEntry("lm", "Llama-style byte-level decoder (RMSNorm, RoPE, SwiGLU) on the CPython stdlib sources",
                     lm.LMConfig, lm.build, lm.train_spec, lm.evaluate, lm.example_inputs,
                     "perplexity", False, (lm,), lm.compare),
    "meanflow_policy": ModelEntry(
        "meanflow_policy", "One-step MeanFlow Policy (OMP) on Meta-World expert demonstrations; method= omp | meanflow | "
        "flow_matching", meanflow_policy.MeanFlowPolicyConfig, meanflow_policy.build, meanflow_policy.train_spec,
        meanflow_policy.evaluate, meanflow_policy.example_inputs, "success_rate", True,
        (meanflow_policy, metaworld_demos)),
    "fluxnet": ModelEntry(
        "fluxnet", "FluxNet conservative transport surrogate (per-edge amounts; heads L/U/D) of NumPy PDE solvers; "
        "pde= traffic | convection_diffusion | shallow_water | cahn_hilliard, arch= fluxnet | cnn | flux_rate",
        fluxnet.FluxNetConfig, fluxnet.build, fluxnet.train_spec, fluxnet.evaluate, fluxnet.example_inputs,
        "rollout_rel_l2", False, (fluxnet, pde)),
    "sudoku_mdm": ModelEntry(
        "sudoku_mdm", "Bidirectional transformer masked diffusion model of Sudoku (4x4 or 9x9) with greedy and "
        "Info-Gain samplers at equal forward calls", sudoku_mdm.SudokuMDMConfig, sudoku_mdm.build,
        sudoku_mdm.train_spec, sudoku_mdm.evaluate, sudoku_mdm.example_inputs, "solve_rate", True,
        (sudoku_mdm, sudoku_mdm.mdm_samplers, sudoku_mdm.sudoku, lm)),
    "cgmmd": ModelEntry(
        "cgmmd", "CGMMD conditional generator G(x, noise) trained by nearest-neighbour conditional MMD; task= bimodal "
        "| heteroscedastic | ring | denoise | superres, method= cgmmd | mse | cgan", cgmmd.CGMMDConfig, cgmmd.build,
        cgmmd.train_spec, cgmmd.evaluate, cgmmd.example_inputs, "cond_mmd", False, (cgmmd, cgmmd.cgmmd_data)),
    "dnachunker": ModelEntry(
        "dnachunker", "DNAChunker masked DNA language model with learned chunking on a synthetic genome; chunking= "
        "dynamic | kmer | bpe, encoder= conv | gru", dnachunker.DNAChunkerConfig, dnachunker.build,
        dnachunker.train_spec, dnachunker.evaluate, dnachunker.example_inputs, "masked_accuracy", True,
        (dnachunker, dnachunker.dna_data, lm)),
    "tiny_clip": ModelEntry(
        "tiny_clip", "Tiny CLIP-like pair (ViT + word-level text encoder, contrastive) on synthetic coloured-shape "
        "scenes with held-out colour-shape combinations", tiny_clip.TinyCLIPConfig, tiny_clip.build,
        tiny_clip.train_spec, tiny_clip.evaluate, tiny_clip.example_inputs, "novel_accuracy", True,
        (tiny_clip, shape_scenes)),
    "directedit": ModelEntry(
        "directedit", "Small rectified-flow transformer on shape scenes with caption conditions; DirectEdit exact "
        "Euler inversion, value injection and mask blending against plain inversion", directedit.DirectEditConfig,
        directedit.build, directedit.train_spec, directedit.evaluate, directedit.example_inputs,
        "edit_success_directedit", True, (directedit, shape_scenes, tiny_clip)),
    "ossd": ModelEntry(
        "ossd", "OSSD open-vocabulary one-stage detector (FCOS-style, 64x64 shape scenes, base classes only) with "
        "semantic distillation from the tiny CLIP, spatial distillation from a base detector and a quality head; "
        "variant= base | semantic | spatial | quality | full", ossd.OSSDConfig, ossd.build,
        lambda config: ossd.train_spec(config, train),  # its CLIP and teacher train through the zoo
        ossd.evaluate, ossd.example_inputs, "novel_ap50", True, (ossd, tiny_clip, shape_scenes)),
}


def model_names() -> list[str]:
    return list(MODELS)


def get_model(name: str) -> ModelEntry:
    if not isinstance(name, str):  # an entry already (a model's, or a study's from .studies)
        return name
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; registered: {', '.join(MODELS)}")
    return MODELS[name]


# -- configs ----------------------------------------------------------------------------------

def config_fields(config_type: type) -> dict[str, tuple[type, object]]:
    """Field name -> (type, default) of a config dataclass."""
    hints = typing.get_type_hints(config_type)
    return {f.name: (hints[f.name], f.default) for f in dataclasses.fields(config_type)}


def _parse_value(text: str, kind: type, key: str):
    if kind is bool:
        lowered = text.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"config key {key!r} takes true or false, got {text!r}")
    if kind in (int, float, str):
        try:
            return kind(text)
        except ValueError:
            raise ValueError(f"config key {key!r} takes a {kind.__name__}, got {text!r}") from None
    try:
        value = json.loads(text)
    except ValueError:
        raise ValueError(f"config key {key!r} takes JSON for {kind}, got {text!r}") from None
    return tuple(value) if isinstance(value, list) else value


def make_config(name: str | ModelEntry, overrides: Mapping[str, object] | None = None, *, tiny: bool = False):
    """The model's default (or ``tiny``) config with ``overrides`` applied; strings are parsed by field type.

    An unknown key (the error lists every key with its range), a value of the wrong type or
    one outside the range its field declares (see :mod:`.config_fields`) raises a
    ``ValueError`` that names the key.
    """
    entry = get_model(name)
    fields = config_fields(entry.config)
    overrides = dict(overrides or {})
    unknown = [k for k in overrides if k not in fields]
    if unknown:
        listing = ", ".join(f"{k} ({describe(entry.config, k)}, default {d!r})" for k, (_, d) in fields.items())
        raise ValueError(f"unknown config key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
                         f"for model {entry.name!r}; keys: {listing}")
    values = {k: _parse_value(v, fields[k][0], k) if isinstance(v, str) else v for k, v in overrides.items()}
    try:
        return entry.config.tiny(**values) if tiny else entry.config(**values)
    except (TypeError, ValueError) as err:
        raise ValueError(f"invalid config for model {entry.name!r}: {err}") from None


def parse_config_items(items: list[str]) -> dict[str, str]:
    """``["steps=100", "lr=0.01"]`` -> ``{"steps": "100", "lr": "0.01"}`` (CLI ``--config``)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"config item {item!r} must look like KEY=VALUE (e.g. steps=100)")
        out[key.strip()] = value.strip()
    return out


# -- training, checkpoints ------------------------------------------------------------------

def train(name: str | ModelEntry, config=None, *, cache_dir: str | Path | None | bool = None,
          progress: bool = False, log: Callable[[str], None] | None = None,
          on_step: Callable[[int, float], None] | None = None, checkpoint_seconds: float = 30.0,
          retrain: bool = False) -> training.Trained:
    """Train a registered model, or load it from the cache.

    ``cache_dir``: None for the default cache (:func:`cache.cache_root`), a path for
    another (also for the data the model caches on its own, such as demonstrations), False
    to train without reading or writing any cache. ``retrain`` discards a finished cached
    model first.
    """
    entry = get_model(name)
    config = config if config is not None else entry.config()
    directory = None
    if cache_dir is not False:
        directory = entry_directory(entry, config, cache_dir)
        if retrain:
            (directory / training.MODEL_FILE).unlink(missing_ok=True)
    with cache.using_cache_root(cache_dir or None):
        trained = training.fit(entry.name, config, entry.build, entry.train_spec, entry.code, directory=directory,
                               progress=progress, checkpoint_seconds=checkpoint_seconds, on_step=on_step, log=log)
    note_model({"model": entry.name, "code": entry.code, "cache_key": cache.cache_key(entry.name, config, entry.code),
                "from_cache": trained.cached})
    return trained


def entry_directory(entry: ModelEntry, config, cache_dir: str | Path | None = None) -> Path:
    """The cache directory of one (model, config, code version)."""
    return cache.entry_dir(cache.cache_root(cache_dir), entry.name, config, entry.code)


def save_checkpoint(path, name: str, config, model: nn.Module) -> Path:
    """A checkpoint file that names its model and config and carries a digest of its weights."""
    entry = get_model(name)
    return cache.write_checkpoint(path, model=entry.name, config=config, code=entry.code, kind="model",
                                  payload={"state_dict": model.state_dict()})


def load_checkpoint(path) -> tuple[ModelEntry, object, nn.Module]:
    """(entry, config, model in eval mode) from a checkpoint written by :func:`save_checkpoint`
    or the cache. Raises :class:`CheckpointError` (a ``ValueError``) for a foreign, corrupt or
    mismatched file."""
    envelope, payload = cache.read_checkpoint(path)
    if envelope["kind"] != "model":
        raise CheckpointError(f"{path} holds training progress, not a finished model; "
                              "run `edgekit train` to finish it")
    if envelope["model"] not in MODELS:
        raise CheckpointError(f"{path} is a checkpoint of model {envelope['model']!r}, which is not registered "
                              f"({', '.join(MODELS)})")
    entry = MODELS[envelope["model"]]
    try:
        config = entry.config(**envelope["config"])
        model = entry.build(config)
        model.load_state_dict(payload["state_dict"])
    except (TypeError, ValueError, RuntimeError, KeyError) as err:
        raise CheckpointError(f"{path}: checkpoint does not match model {entry.name!r}: "
                              f"{str(err).splitlines()[0]}") from None
    return entry, config, model.eval()
