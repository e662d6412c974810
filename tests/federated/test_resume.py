"""A killed run resumes from its last round's checkpoint and ends exactly like an uninterrupted one."""

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from edgekit.federated.apps import run_in_process
from edgekit.federated.checkpoint import CheckpointError, load_checkpoint

from .toy import toy_workload
from .toy_run import settings

WORKLOAD = toy_workload(4)
ROOT = Path(__file__).resolve().parents[2]


class Killed(Exception):
    pass


def assert_same_run(a, b):
    assert all(np.array_equal(a.final[k], b.final[k]) for k in a.final)
    assert [r.as_dict() for r in a.records] == [r.as_dict() for r in b.records]
    assert a.summary == b.summary


@pytest.mark.parametrize("method", ["diloco", "gossip"])
def test_stopped_run_resumes_to_the_same_result(tmp_path, method):
    whole, _ = run_in_process(settings(method, 5), lambda _: WORKLOAD)

    def stop_after_two(record):
        if record.round == 2:
            raise Killed

    checkpoint = tmp_path / "run.ckpt"
    with pytest.raises(Killed):
        run_in_process(settings(method, 5), lambda _: WORKLOAD, checkpoint=str(checkpoint), on_round=stop_after_two)
    assert load_checkpoint(checkpoint)["round"] == 2
    resumed, _ = run_in_process(settings(method, 5), lambda _: WORKLOAD, checkpoint=str(checkpoint))
    assert resumed.resumed_from == 2
    assert_same_run(resumed, whole)
    assert any(r.network for r in whole.records)  # the faults' draws were resumed too


def test_checkpoint_of_another_configuration_is_refused(tmp_path):
    checkpoint = tmp_path / "run.ckpt"
    run_in_process(settings("diloco", 1), lambda _: WORKLOAD, checkpoint=str(checkpoint))
    other = dataclasses.replace(settings("diloco", 1), inner_steps=6)
    with pytest.raises(ValueError, match="different configuration \\(differs in inner-steps\\)"):
        run_in_process(other, lambda _: WORKLOAD, checkpoint=str(checkpoint))
    checkpoint.write_bytes(checkpoint.read_bytes()[:-10] + b"0123456789")
    with pytest.raises(CheckpointError, match="is corrupt"):
        load_checkpoint(checkpoint)


def test_sigkilled_process_resumes_to_the_same_result(tmp_path):
    rounds = 20
    checkpoint = tmp_path / "run.ckpt"
    process = subprocess.Popen([sys.executable, "-m", "tests.federated.toy_run", "gossip", str(rounds), str(checkpoint)],
                               cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            if checkpoint.exists() and load_checkpoint(checkpoint)["round"] >= 3:
                break
            time.sleep(0.02)
        process.kill()  # SIGKILL: no chance to clean up
    finally:
        process.wait(timeout=30)
    killed_at = load_checkpoint(checkpoint)["round"]
    assert 3 <= killed_at < rounds, "the run finished before it could be killed"
    resumed, _ = run_in_process(settings("gossip", rounds), lambda _: WORKLOAD, checkpoint=str(checkpoint))
    whole, _ = run_in_process(settings("gossip", rounds), lambda _: WORKLOAD)
    assert resumed.resumed_from == killed_at
    assert_same_run(resumed, whole)


@pytest.mark.parametrize("method,options,stop", [
    ("fedrgl", {"clients": 3, "rounds": 4, "warmup": 2, "inner_steps": 2, "noise": "pair"}, 3),  # past the warm-up
    # two tasks of two rounds: stopped after round 3, where the clients took the first task's Fisher anchors
    ("rieselect", {"clients": 2, "rounds": 4, "inner_steps": 1, "tasks": "email,json"}, 3),
])
def test_stopped_fedrgl_and_rieselect_runs_resume_to_the_same_result(tmp_path, method, options, stop):
    from edgekit.federated.apps import RunSettings
    from edgekit.jobs.fl import run_inproc

    settings = RunSettings(method=method, drop=0.1, **options)
    whole, whole_grid = run_inproc(settings)

    def stop_after(record):
        if record.round == stop:
            raise Killed

    checkpoint = tmp_path / "run.ckpt"
    with pytest.raises(Killed):
        run_inproc(settings, checkpoint=str(checkpoint), on_round=stop_after)
    assert load_checkpoint(checkpoint)["round"] == stop
    resumed, resumed_grid = run_inproc(settings, checkpoint=str(checkpoint))
    assert resumed.resumed_from == stop
    assert_same_run(resumed, whole)
    # RieSelect's clients hold Fisher anchors (FedRGL's nothing); at this size the knapsacks choose
    # alike without them, so the clients' final contexts are compared too
    contexts = [{node: c.state.object_id for node, c in grid.inner.contexts.items()}
                for grid in (whole_grid, resumed_grid)]
    assert contexts[1] == contexts[0]
    other = dataclasses.replace(settings, seed=1)
    with pytest.raises(ValueError, match=r"different configuration \(differs in .*\bseed\b"):
        run_inproc(other, checkpoint=str(checkpoint))

