"""Every benchmark script runs in a tiny setting, so none rots between the runs that measure.

Each runs as a user runs it (a subprocess from the repository root) and must write a results
file that records where it came from. Only a script that needs hardware CI lacks (a CUDA
device) is listed instead, with the reason; a test fails when a script is in neither list.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
# script -> arguments that make it small (every run adds --allow-dirty and -o)
TINY = {
    "bench_codecs.py": ["--log2n", "13", "--repeats", "1", "--skip-memory", "--isas", "native"],
    "bench_fl_engine.py": ["--lm-rounds", "1", "--lm-inner-steps", "2", "--clients", "4", "--rounds", "2"],
    "bench_gemv.py": ["--n", "256", "--k", "256", "--rounds", "7", "--sample-ms", "1", "--skip-model",
                      "--liftquant", "16to8", "--cache-size", "64"],
    "bench_meanflow_policy.py": ["--tasks", "reach-v3", "--seeds", "0", "1", "--nfes", "1", "2", "--jobs", "1",
                                 "--memory-methods", "meanflow", "omp", "--memory-batch", "8",
                                 "--memory-steps", "1", "--rounds", "1", "--threads", "1", "--formats", "mxint8",
                                 "--config", "width=64", "depth=1", "train_episodes=1", "eval_episodes=1", "steps=2",
                                 "batch=8", "max_episode_steps=10"],
    "cgmmd.py": ["--seeds", "0", "--tasks", "bimodal", "denoise", "--lrs", "1e-3", "--config", "steps=5", "hidden=32",
                 "anchors=4", "neighbours=2", "train_size=100", "eval_points=5", "eval_samples=10"],
    "comparison_oracle.py": ["--seeds", "0", "--trials", "5"],
    "dcla.py": ["--seeds", "0,1", "--n-steps", "40", "--chains", "4"],
    "directedit.py": ["--seeds", "0", "--config", "steps=20", "width=32", "layers=1", "heads=2", "eval_scenes=4",
                      "edit_steps=3", "null_iterations=2"],
    "dnachunker.py": ["--seeds", "0", "--lrs", "1e-3", "--config", "length=32", "width=32", "heads=1", "main_layers=1",
                      "steps=3", "batch=4", "genome_length=5000", "eval_windows=4", "target_chunk=2"],
    "fl_diloco.py": ["--rounds", "1", "--inner-steps", "1", "--bandwidths", "10Mbit", "--topologies", "ring",
                     "--conditions", "stragglers", "--methods", "diloco:0,gossip:0", "--jobs", "1"],
    "fl_fedrgl.py": ["--graphs", "csbm", "--csbm-nodes", "300", "--noises", "pair:0.3", "--clients", "2", "--seeds",
                     "0,1", "--rounds", "1", "--jobs", "1"],
    "fl_rieselect.py": ["--clients", "2", "--rounds-per-task", "1", "--local-steps", "1", "--seeds", "0"],
    "fl_rieselect_study.py": ["--orders", "1", "--seeds", "0", "--budgets", "0.25", "--clients", "2",
                              "--rounds-per-task", "1", "--local-steps", "1", "--jobs", "1"],
    "gptq_liftquant.py": ["--seeds", "0", "--models", "digits", "--liftquant", "16to8", "--grids", "int4_g64"],
    "fluxnet_strides.py": ["--pdes", "traffic", "--strides", "1,2", "--seeds", "0", "--steps", "3", "--lrs", "3e-3",
                           "--horizon", "8"],
    "fluxnet_study.py": ["--pdes", "traffic", "--formats", "fp32,mxfp4", "--config", "steps=2", "batch=2", "unroll=1",
                         "hidden=32", "layers=1", "cells=32", "rollout_steps=4", "train_trajectories=2",
                         "test_trajectories=1", "trajectory_steps=4"],
    "fuzzeval.py": ["--seeds", "0", "--problems", "3", "--candidates", "2", "--splits", "5"],
    "labbuilder.py": ["--seeds", "0", "--specs", "1", "--iterations", "20"],
    "liftquant_accuracy.py": ["--config", "steps=5", "width=64", "layers=1", "heads=1", "mlp=128", "seq_len=32",
                              "batch=4", "warmup=2", "max_train_bytes=200000", "eval_windows=8", "--uniform", "16to8",
                              "--finetuned", "--mixed-bits", "--calibration-batches", "1"],
    "liftquant_search.py": ["--samples", "64", "--layer", "256", "--layer-rows", "16", "--configs", "16to8"],
    "mx_training.py": ["--seeds", "0", "--config", "steps=5", "width=64", "layers=1", "heads=1", "mlp=128",
                       "seq_len=32", "batch=4", "warmup=2", "max_train_bytes=200000", "eval_windows=8",
                       "schemes=bf16,mxint8"],
    "nemo.py": ["--seeds", "0", "--per-family", "1", "--candidates", "1", "--max-rounds", "1"],
    "ossd.py": ["--seeds", "0", "--jobs", "1", "--semantic-weights", "0.3,1", "--config", "clip_steps=20", "width=8", "steps=2", "batch=2",
                "val_scenes=2", "test_scenes=2"],
    "phasealign.py": ["--seeds", "0", "--config", "clip_steps=20", "val_scenes=4", "test_scenes=4", "thresholds=2"],
    "sudoku_infogain.py": ["--seeds", "0", "--rounds", "2", "--temperatures", "1.0", "--val-puzzles", "4", "--config",
                           "width=32", "layers=1", "heads=1", "mlp=32", "steps=5", "batch=8", "warmup=1",
                           "eval_puzzles=4", "candidates=2"],
    "usable_information.py": ["--seeds", "0", "--widths", "16,32", "--config", "steps=20",
                              'formats=["mxint8","mxfp4"]', "--stitch-steps", "5", "--mlp-steps", "5"],
    "user_models.py": ["--models", "linear", "--formats", "mxfp4", "--rounds", "1", "--threads", "1"],
}
# scripts that need hardware CI lacks
NEEDS_HARDWARE = {
    "gpu_check.py": "needs a CUDA device to run its builds",
}
# a shared module; the docs renderer (tests/test_docs.py); the codebook trainer, which writes package data
# (its training is tested in tests/simulators/test_liftquant_codebooks.py)
NOT_SCRIPTS = {"seed_stats.py", "kept_runs.py", "render_docs.py", "train_codebooks.py"}


def test_every_benchmark_script_is_accounted_for():
    scripts = {p.name for p in BENCHMARKS.glob("*.py")} - NOT_SCRIPTS
    assert scripts == set(TINY) | set(NEEDS_HARDWARE), "add the script to TINY (or, if it needs hardware CI lacks, to NEEDS_HARDWARE)"
    assert not set(TINY) & set(NEEDS_HARDWARE)


@pytest.mark.parametrize("script", sorted(TINY))
def test_benchmark_runs_tiny(script, tmp_path):
    out = tmp_path / "result.json"
    run = subprocess.run([sys.executable, str(BENCHMARKS / script), *TINY[script], "--allow-dirty", "-o", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    data = json.loads(out.read_text())
    meta = data["meta"] if "meta" in data else {**data["provenance"], "command": data["command"]}
    assert meta["git_sha"] and script in meta["command"]
    assert meta["cpu"]["model"] and "vector_extensions" in meta["cpu"]
    # the load when the run began and when it ended, and its thread count: what the figures' noise depends on
    assert "load_average" in meta["cpu"] and "load_average_after" in meta and meta.get("threads"), sorted(meta)


def test_diloco_plots_are_redrawn_from_a_results_file(tmp_path):
    """``fl_diloco.py --replot`` draws the grid plot and each condition's plot from the runs a results file
    holds, without running anything; a missing file is refused by name."""
    out = tmp_path / "grid.json"
    script = [sys.executable, str(BENCHMARKS / "fl_diloco.py")]
    made = subprocess.run([*script, *TINY["fl_diloco.py"], "--allow-dirty", "-o", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, check=False)
    assert made.returncode == 0, made.stderr[-3000:]
    plots = sorted(tmp_path.glob("*.png"))
    assert len(plots) == 2  # the grid, and the one condition and bandwidth of the tiny run
    for plot in plots:
        plot.unlink()
    redrawn = subprocess.run([*script, "--replot", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120,
                             check=False)
    assert redrawn.returncode == 0, redrawn.stderr[-3000:]
    assert sorted(tmp_path.glob("*.png")) == plots and all(p.stat().st_size > 10_000 for p in plots)
    missing = subprocess.run([*script, "--replot", str(tmp_path / "none.json")], cwd=ROOT, capture_output=True,
                             text=True, timeout=120, check=False)
    assert missing.returncode == 2 and "--replot: no results file at" in missing.stderr
