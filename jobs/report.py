"""``edgekit report``: accuracy against bit-width, latency and size per target, and what fits where.

For each model: train it or load it from the cache; score it in every format with its
own metric; compile it for each target (builds are cached) and time the host build;
then, for every registry target with a memory figure, pick the format with the best
metric whose weights fit when the model is scaled to a deployment size. Every number
carries where it came from: measured in this run, or read from a cache entry whose key
matches the current code and config.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path

import numpy as np

from edgekit.models import registry, studies, weights
from edgekit.simulators import weight_formats as wf

from .build_cache import artifact_bytes, cached_build, compiler_code
from .compile import load_model
from .evaluate import evaluate_formats

DEFAULT_MODELS = ("lm", "fluxnet", "meanflow_policy")
REPORT_LIFTQUANT_BITS = (2, 2.4, 3, 4)


def default_formats() -> list[str]:
    """The float reference, every block format of the table, and LiftQuant at 2, 2.4, 3 and 4 code bits."""
    return [wf.REFERENCE, *wf.names("block"), *wf.liftquant_for_bits(*REPORT_LIFTQUANT_BITS)]


DEFAULT_TARGETS = ("host", "h100", "rpi4")
MODEL_FILE_SUFFIXES = (".onnx", ".pt2")
# Parameter counts of a realistic deployment of each method, for the memory budget: a
# 7B-parameter LLM, a 100M-parameter PDE surrogate, a 300M-parameter robot policy, an 8B masked
# diffusion LM (LLaDA-8B, the Info-Gain paper's), a 10M-parameter conditional generator, a
# 100M-parameter DNA language model.
DEFAULT_DEPLOY_PARAMS = {"lm": 7e9, "fluxnet": 1e8, "meanflow_policy": 3e8, "digits": 1e6, "sudoku_mdm": 8e9,
                         "cgmmd": 1e7, "dnachunker": 1e8}
# The report trains shorter than each model's default (``edgekit train``) and scores the LM on
# half its validation windows, so that the whole default report finishes on 2 CPU cores well
# inside 30 minutes from a cold cache (the LM's 700 default steps alone take about 13 minutes).
# The architectures, and so the kernels and sizes, are the defaults'. ``--configs default``
# uses (and shares the checkpoints of) the default configs.
REPORT_CONFIGS = {"lm": {"steps": 250, "eval_windows": 64}, "fluxnet": {"steps": 1000}}
CONFIG_SETS = ("report", "default", "tiny")
MEMORY_FOR_WEIGHTS = 0.8  # of a target's memory; the rest is left to activations, caches and the runtime
LATENCY_ROUNDS = 15


@dataclass(frozen=True)
class ModelFile:
    """A user's model file for the report, with the inputs to score it on (drawn when None)."""

    path: str
    inputs: str | None = None

    @classmethod
    def parse(cls, spec: str) -> ModelFile:
        """``MODEL.onnx`` or ``MODEL.onnx=INPUTS.npz`` (also ``.pt2``), checked to exist."""
        path, _, inputs = spec.partition("=")
        if Path(path).suffix not in MODEL_FILE_SUFFIXES:
            raise ValueError(f"model file {path!r} must end in {' or '.join(MODEL_FILE_SUFFIXES)}")
        for name, kind in ((path, "model file"), (inputs, "inputs file")):
            if name and not Path(name).is_file():
                raise ValueError(f"{kind} {name!r} does not exist")
        return cls(path, inputs or None)


@dataclass
class ReportPlan:
    """What a report covers, checked before any work starts."""

    models: list[str]
    formats: list[str]
    targets: list[str]
    deploy_params: dict[str, float]
    configs: str = "report"
    latency_rounds: int = LATENCY_ROUNDS
    budget_targets: list[str] = field(default_factory=list)
    studies: list[str] = field(default_factory=list)  # algorithm studies (edgekit.models.studies) to run too
    model_files: list[ModelFile] = field(default_factory=list)  # users' ONNX / .pt2 models, scored against float



def check_plan(models, formats, targets, deploy_params=None, configs="report",
               latency_rounds=LATENCY_ROUNDS, study_names=None, model_files=None) -> ReportPlan:
    """Names checked against the registries, each error listing what is valid.

    ``model_files``: ``MODEL.onnx[=INPUTS.npz]`` specs; given without ``models``, the report
    covers those files alone rather than the default zoo models.
    """
    from edgekit.compilers.plan import check_weight_format
    from edgekit.targets import load_target, target_names

    if configs not in CONFIG_SETS:
        raise ValueError(f"configs must be one of {', '.join(CONFIG_SETS)}, got {configs!r}")
    files = [ModelFile.parse(spec) for spec in model_files or []]
    models = list(models or ([] if files else DEFAULT_MODELS))
    unknown = [m for m in models if m not in registry.model_names()]
    if unknown:
        raise ValueError(f"unknown model{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
                         f"registered: {', '.join(registry.model_names())}")
    checked_formats = [check_weight_format(name) for name in formats or default_formats()]
    if wf.REFERENCE not in checked_formats:
        checked_formats.insert(0, wf.REFERENCE)  # every other format is read against float
    target_list = list(targets or DEFAULT_TARGETS)
    for spec in target_list:
        try:
            load_target(spec)
        except ValueError as err:
            raise ValueError(f"unknown target {spec!r}: {err}") from None
    strange = [m for m in deploy_params or {} if m not in registry.model_names()]
    if strange:
        raise ValueError(f"--deploy-params names unknown model {', '.join(map(repr, strange))}; "
                         f"registered: {', '.join(registry.model_names())}")
    deploy = {**DEFAULT_DEPLOY_PARAMS, **(deploy_params or {})}
    for name, count in deploy.items():
        if not (isinstance(count, (int, float)) and math.isfinite(count) and count >= 1):
            raise ValueError(f"deploy parameter count of {name!r} must be a number >= 1, got {count!r}")
    missing = [m for m in models if m not in deploy]
    if missing:
        raise ValueError(f"no deployment size for {', '.join(missing)}; give --deploy-params NAME=COUNT")
    if latency_rounds < 1:
        raise ValueError(f"latency rounds must be at least 1, got {latency_rounds}")
    for name in study_names or []:
        studies.get_study(name)
    return ReportPlan(models, list(dict.fromkeys(checked_formats)), target_list, deploy, configs, latency_rounds,
                      target_names(), list(dict.fromkeys(study_names or [])), files)


def model_config(entry, configs: str):
    """The config a report trains ``entry`` with: its report-sized, default or tiny config."""
    overrides = REPORT_CONFIGS.get(entry.name, {}) if configs == "report" else {}
    return registry.make_config(entry, overrides, tiny=configs == "tiny")


def codable_formats(name: str, model, formats: list[str]) -> tuple[list[str], list[dict]]:
    """(formats that can code ``model``, a row with the reason for each that cannot).

    LiftQuant codes Linear weights only, so a model with convolutions is reported without
    it rather than scored in a form no build could run.
    """
    codable, skipped = [], []
    for fmt in formats:
        try:
            weights.check_codable(model, fmt)
        except ValueError as err:
            skipped.append({"model": name, "format": fmt, "reason": str(err)})
        else:
            codable.append(fmt)
    return codable, skipped


def time_build(library: Path, inputs: list[np.ndarray], rounds: int) -> dict:
    """Median and spread of one call of a host build's ``main`` (TVM's C++ timer, no Python overhead)."""
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.runtime.load_module(str(library)), tvm.cpu())
    args = [tvm.runtime.tensor(x) for x in inputs]
    vm["main"](*args)  # warm-up
    start = time.perf_counter()
    vm["main"](*args)
    one = max(time.perf_counter() - start, 1e-7)
    number = max(1, int(0.02 / one))  # each sample lasts about 20 ms
    timer = vm.time_evaluator("main", tvm.cpu(), number=number, repeat=rounds)
    samples = [1e3 * s for s in timer(*args).results]
    return {"median_ms": statistics.median(samples), "min_ms": min(samples),
            "std_ms": statistics.pstdev(samples), "calls_per_sample": number, "rounds": rounds}


def host_memory() -> int:
    """Physical memory of this machine in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def budget_fit(models: list[dict], evaluations: dict, builds: list[dict], plan: ReportPlan) -> list[dict]:
    """Per registry target and model: the best-scoring format whose weights fit, among those it can run.

    A format counts as runnable on a target when a build of it for a target of the same
    device kind succeeded in this report (so a format the compile path cannot lower for
    that device is never offered). Memory is the weights alone at the measured bits per
    weight, times the model's deployment parameter count, against ``MEMORY_FOR_WEIGHTS`` of
    the target's memory.
    """
    from edgekit.targets import load_target

    built = {}
    for b in builds:
        if b["built"]:
            built.setdefault((b["model"], b["device"]), set()).add(b["format"])
    rows = []
    for target_name in plan.budget_targets:
        target = load_target(target_name)
        for model in models:
            name, better = model["model"], model["higher_is_better"]
            row = {"target": target_name, "device": target.device, "model": name,
                   "deploy_params": plan.deploy_params[name]}
            memory, note = target.memory_bytes, ""
            if memory is None and target.name == "host":
                memory, note = host_memory(), "memory of this machine"
            if memory is None:
                rows.append({**row, "fits": None, "note": "the target file gives no memory figure"})
                continue
            runnable = built.get((name, target.device), set())
            if not runnable:
                rows.append({**row, "fits": None, "memory_bytes": memory,
                             "note": f"nothing was built for a {target.device} target in this report"})
                continue
            budget = MEMORY_FOR_WEIGHTS * memory
            candidates = []
            for ev in evaluations[name]:
                weight_bytes = plan.deploy_params[name] * ev["bits/weight"] / 8
                value = ev[model["metric"]]
                if ev["format"] in runnable and weight_bytes <= budget and math.isfinite(value):
                    candidates.append((value if better else -value, -ev["bits/weight"], ev, weight_bytes))
            if not candidates:
                smallest = min((e for e in evaluations[name] if e["format"] in runnable), key=lambda e: e["bits/weight"])
                rows.append({**row, "fits": False, "memory_bytes": memory,
                             "note": f"no runnable format fits: {smallest['format']} needs "
                                     f"{plan.deploy_params[name] * smallest['bits/weight'] / 8 / 2**30:.1f} GiB"})
                continue
            _, _, best, weight_bytes = max(candidates, key=lambda c: c[:2])
            rows.append({**row, "fits": True, "memory_bytes": memory, "format": best["format"],
                         "bits/weight": best["bits/weight"], "weight_bytes": weight_bytes,
                         model["metric"]: best[model["metric"]], "metric": model["metric"],
                         "native": best["format"] in target.native_formats, "note": note})
    return rows


def run_report(plan: ReportPlan, cache_dir=None, log: Callable[[str], None] = print,
               progress: Callable | None = None) -> dict:
    """Every section of the report, as plain data (see :mod:`.report_output` for the files)."""
    from edgekit.models.cache import cache_root
    from edgekit.targets import load_target, runs_here

    from .bench import configure_tvm_threads

    root = cache_root(cache_dir)
    code = compiler_code()
    threads, note = configure_tvm_threads(os.cpu_count() or 1)
    if note:
        log(note)
    models, evaluations, builds, latencies, skipped = [], {}, [], [], []
    total = len(plan.models)
    for index, name in enumerate(plan.models, 1):
        entry = registry.get_model(name)
        config = model_config(entry, plan.configs)
        log(f"[{index}/{total}] {name}: training or loading from the cache")
        trained = registry.train(entry, config, cache_dir=cache_dir, progress=True, log=log)
        directory = registry.entry_directory(entry, config, cache_dir)
        models.append({"model": name, "description": entry.description, "metric": entry.metric,
                       "higher_is_better": entry.higher_is_better,
                       "parameters": sum(p.numel() for p in trained.model.parameters()),
                       "deploy_params": plan.deploy_params[name], "checkpoint": str(trained.checkpoint),
                       "cache_key": directory.name, "train_source": "cache" if trained.cached else "measured",
                       "train_seconds": trained.train_seconds, "config": registry.cache.config_dict(config)})
        formats, not_codable = codable_formats(name, trained.model, plan.formats)
        skipped += not_codable
        for row in not_codable:
            log(f"[{index}/{total}] {name}: skipping {row['format']}: {row['reason']}")
        log(f"[{index}/{total}] {name}: scoring {len(formats)} formats")
        evaluations[name] = [{"model": name, **row} for row in
                             evaluate_formats(entry, config, trained.model, formats, directory,
                                              progress=progress and partial(progress, desc=f"eval {name}"))]
        inputs = [t.numpy() for t in entry.example_inputs(config)]
        jobs = [(t, f) for t in plan.targets for f in formats]
        loaded = cache(partial(load_model, str(trained.checkpoint), log=lambda msg: None))  # one import, many builds
        log(f"[{index}/{total}] {name}: {len(jobs)} builds ({', '.join(plan.targets)})")
        for target_spec, fmt in (progress(jobs, desc=f"build {name}") if progress else jobs):
            target = load_target(target_spec)
            record = {"model": name, "format": fmt, "target": target_spec, "device": target.device}
            start = time.perf_counter()
            try:
                manifest, build, cached = cached_build(trained.checkpoint, name, directory.name, fmt, target_spec,
                                                       root, code, log=lambda msg: None, loaded=loaded)
            except ValueError as err:
                builds.append({**record, "built": False, "error": str(err).splitlines()[0]})
                continue
            files = artifact_bytes(build)
            builds.append({**record, "built": True, "source": "cache" if cached else "measured",
                           "weight_bits": manifest["totals"]["weight_bits"],
                           "library_bytes": files.get("model.so"), "artifact_bytes": sum(files.values()),
                           "files": files, "cuda_binary": manifest["artifacts"].get("cuda_binary", {}).get("built"),
                           "build_dir": str(build), "seconds": round(time.perf_counter() - start, 2)})
            if target.device == "cpu" and runs_here(target):
                latencies.append({**record, **time_build(build / "model.so", inputs, plan.latency_rounds),
                                  "source": "measured"})
    return {"setup": {"tvm_threads": threads, "latency_rounds": plan.latency_rounds, "configs": plan.configs,
                      "memory_for_weights": MEMORY_FOR_WEIGHTS, "compiler_code": code},
            "models": models, "evaluations": [row for rows in evaluations.values() for row in rows],
            "not_applicable": skipped, "builds": builds, "latency": latencies, "budget": budget_fit(models, evaluations, builds, plan),
            **({"studies": run_studies(plan.studies, plan.configs, log)} if plan.studies else {}),
            **({"user_models": score_model_files(plan, log, progress)} if plan.model_files else {})}


def score_model_files(plan: ReportPlan, log: Callable[[str], None] = print, progress: Callable | None = None) -> list[dict]:
    """Each user model file in each of the plan's formats against float, in onnxruntime (``edgekit eval FILE``)."""
    from .graph_eval import evaluate_model_file

    formats = [f for f in plan.formats if f != wf.REFERENCE]
    rows = []
    for model in plan.model_files:
        name = Path(model.path).name
        log(f"{name}: scoring {len(formats)} formats against float")
        for row in evaluate_model_file(model.path, formats, Path(model.inputs) if model.inputs else None, log=log,
                                       progress=progress and partial(progress, desc=f"eval {name}")):
            rows.append({"model": name, "path": model.path, "inputs": model.inputs or "drawn", **row,
                         "source": "measured"})
    return rows


def run_studies(names: list[str], configs: str, log: Callable[[str], None] = print) -> list[dict]:
    """Each study's ``evaluate`` on its default config (tiny with ``configs="tiny"``), as report rows."""
    rows = []
    for name in names:
        entry = studies.get_study(name)
        config = registry.make_config(entry, tiny=configs == "tiny")
        log(f"study {name}: running")
        start = time.perf_counter()
        results = entry.evaluate(config)
        rows.append({"study": name, "description": entry.description, "metric": entry.metric,
                     "higher_is_better": entry.higher_is_better, "config": registry.cache.config_dict(config),
                     "results": {k: float(v) for k, v in results.items()}, "source": "measured",
                     "seconds": round(time.perf_counter() - start, 2)})
    return rows
