"""``edgekit models``, ``edgekit train`` and ``edgekit eval``: the zoo from the command line.

Training goes through the model cache (see :mod:`edgekit.models.cache`); so do
evaluations of a cached model, in ``evaluations.json`` beside it, keyed by format and by
the code that quantizes and scores (a result is reused only while that code is the same).
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable
from pathlib import Path

from edgekit import simulators
from edgekit.models import registry, weights
from edgekit.models.cache import read_json, source_digest, tree_digest, write_json
from edgekit.simulators import weight_formats as wf

EVALUATIONS = "evaluations.json"


def evaluation_code(entry: registry.ModelEntry) -> str:
    """What a cached evaluation depends on beyond the model: its scorer and the quantizers.

    The quantizers are the whole simulators package, codebooks included, as for builds
    (``build_cache.compiler_code``): a hand-kept module list goes stale when they import more.
    """
    return hashlib.sha256((source_digest(*entry.sources, weights) + tree_digest(simulators)).encode()).hexdigest()


def parameter_count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def model_rows(cache_dir=None) -> list[dict]:
    """One row per registered model: parameters and headline metric of its default config,
    with the value measured for it when the cache holds one."""
    rows = []
    for name in registry.model_names():
        entry = registry.get_model(name)
        config = entry.config()
        cached = read_json(registry.entry_directory(entry, config, cache_dir) / EVALUATIONS).get(wf.REFERENCE, {})
        value = cached.get("metrics", {}).get(entry.metric) if cached.get("code") == evaluation_code(entry) else None
        rows.append({"model": name, "parameters": parameter_count(entry.build(config)),
                     "metric": entry.metric_label, "fp32 (cached)": value, "description": entry.description})
    return rows


def train_model(name: str, overrides: dict, *, tiny: bool = False, cache_dir=None, retrain: bool = False,
                log: Callable[[str], None] = print) -> dict:
    """Train (or load) a registered model and score it in float; returns what was done and measured."""
    entry = registry.get_model(name)
    config = registry.make_config(entry, overrides, tiny=tiny)
    trained = registry.train(entry, config, cache_dir=cache_dir, progress=True, retrain=retrain, log=log)
    directory = registry.entry_directory(entry, config, cache_dir)
    row = evaluate_formats(entry, config, trained.model, [wf.REFERENCE], directory)[0]
    return {"model": name, "config": dataclasses.asdict(config), "checkpoint": str(trained.checkpoint),
            "cached": trained.cached, "resumed_from": trained.resumed_from, "steps": trained.steps,
            "train_seconds": trained.train_seconds, "parameters": parameter_count(trained.model),
            "final_loss": trained.loss_history[-1] if trained.loss_history else None, "evaluation": row}


def resolve(spec: str, overrides: dict, *, tiny: bool = False, cache_dir=None,
            log: Callable[[str], None] = print) -> tuple[registry.ModelEntry, object, object, Path | None]:
    """(entry, config, model, cache directory or None) for a registered name or a checkpoint file."""
    if spec not in registry.model_names() and Path(spec).is_file():
        if overrides or tiny:
            raise ValueError("--config and --tiny apply to registered model names, not to a checkpoint file "
                             "(its config is stored in it)")
        entry, config, model = registry.load_checkpoint(spec)
        return entry, config, model, None
    if spec not in registry.model_names():
        raise ValueError(f"MODEL {spec!r} is neither a registered model ({', '.join(registry.model_names())}) "
                         "nor an existing checkpoint file")
    entry = registry.get_model(spec)
    config = registry.make_config(entry, overrides, tiny=tiny)
    trained = registry.train(entry, config, cache_dir=cache_dir, progress=True, log=log)
    return entry, config, trained.model, registry.entry_directory(entry, config, cache_dir)


def evaluate_formats(entry, config, model, format_names: list[str], directory: Path | None,
                     progress: Callable | None = None) -> list[dict]:
    """One row per format: bits per weight, the model's metrics, and ``compare`` against float.

    Results are read from and written to ``evaluations.json`` in ``directory``, the
    model's cache entry; None (a model from a checkpoint file) measures without caching.
    """
    store = read_json(directory / EVALUATIONS) if directory else {}
    code = evaluation_code(entry)
    rows = []
    jobs = progress(format_names) if progress else format_names
    for name in jobs:
        cached = store.get(name)
        if cached and cached.get("code") == code:
            rows.append({**cached["row"], "source": "cache"})
            continue
        start = time.perf_counter()
        candidate = model if name == wf.REFERENCE else weights.quantized_copy(model, name)
        row = {"format": name, "bits/weight": weights.bits_per_weight(model, name),
               **entry.evaluate(candidate, config)}
        if entry.compare is not None and name != wf.REFERENCE:
            row.update(entry.compare(model, candidate, config))
        row["seconds"] = round(time.perf_counter() - start, 2)
        rows.append({**row, "source": "measured"})
        if directory:
            store[name] = {"code": code, "row": row}
            write_json(directory / EVALUATIONS, store)
    return rows
