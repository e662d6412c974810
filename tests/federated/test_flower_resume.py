"""On Flower's own engines, a run killed after a checkpointed round resumes on a fresh federation
and ends exactly like an uninterrupted run: in process on a grid that behaves as Flower's
engines do (fast), on the deployment engine on loopback, and on the Ray simulation engine."""

import dataclasses
import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from flwr.app import Context, RecordDict
from flwr.supercore.inflatable.inflatable_utils import inflate_object_from_contents
from flwr.supercore.task_identity import TaskIdentity

from edgekit.federated.apps import RunSettings, run_in_process
from edgekit.federated.checkpoint import load_checkpoint
from edgekit.federated.flower_run import CONNECTION, LocalFederation, write_app
from edgekit.federated.inproc_grid import InProcessGrid
from edgekit.federated.wire import nbytes

from . import job_apps, toy_apps
from .test_engines import RUN_TIMEOUT_S
from .toy import toy_workload

ROOT = Path(__file__).resolve().parents[2]
BINARIES = ("flower-superlink", "flower-supernode", "flwr")
# Two rounds, killed after the first: each exchange on these engines starts a ClientApp
# process or Ray actor call (seconds), and a longer run tests nothing more. Lost transfers
# make the network's draws part of what must resume.
SETTINGS = RunSettings(method="diloco", clients=2, rounds=2, inner_steps=3, bandwidth_bps=1e6, device_flops=1e6,
                       drop=0.2, seed=3)
needs_deployment = pytest.mark.skipif(not all(shutil.which(b) for b in BINARIES),
                                      reason="Flower's deployment binaries (flower-superlink, flower-supernode, "
                                             "flwr) are not on PATH")
needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                               reason="Ray is not installed (pip install 'edgekit[ray]' for Flower's simulation "
                                      "engine)")


@pytest.fixture(autouse=True)
def importable_tests(monkeypatch):
    """The apps' processes import ``tests.federated.toy_apps`` from this checkout."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


class Killed(Exception):
    pass


class FlowerLikeGrid(InProcessGrid):
    """The in-process grid as a ServerApp on Flower's engines sees one: node, run and task ids
    drawn at random (ids of several varint widths, node ids in the reverse order of the
    partitions), each run's client contexts new. It dies at the first exchange after ``dies``
    returns True (a killed run)."""

    def __init__(self, settings: RunSettings, draw: int, dies=lambda: False, apps=toy_apps):
        rng = random.Random(draw)
        run_config = settings.run_config()
        super().__init__(apps.client_app, settings.clients, run_config)
        base = rng.getrandbits(rng.choice([20, 63])) + settings.clients
        self.contexts = {base - i: Context(self.run.run_id, base - i,
                                           {"partition-id": i, "num-partitions": settings.clients},
                                           RecordDict(), run_config) for i in range(settings.clients)}
        # Flower's message ids (which replies carry) have one width, 64 hex digits: this grid's
        # ("run.count") stay those of run 1, with a count of 10 digits in every run
        self._sent = 10**9
        TaskIdentity.run_id = rng.getrandbits(rng.choice([8, 40, 63]))
        TaskIdentity.task_id = rng.getrandbits(rng.choice([8, 63]))
        self.dies = dies

    def send_and_receive(self, messages, *, timeout=None):
        if self.dies():
            raise Killed
        return super().send_and_receive(messages, timeout=timeout)


def serve(grid: FlowerLikeGrid, settings: RunSettings, apps=toy_apps) -> dict:
    """The ServerApp of ``apps`` (the toy apps, or edgekit's: :mod:`.job_apps`) on ``grid``, as
    Flower's engines call it; the summary it wrote."""
    apps.server_app(grid=grid, context=Context(grid.run.run_id, 0, {}, RecordDict(), settings.run_config()))
    return json.loads(Path(settings.output).read_text())


def states_size(saved: dict) -> int:
    """Serialized size of the client context states' records in checkpoint ``saved``."""
    return sum(nbytes(record) for node in saved["grid"]["inner"]["states"].values()
               for record in inflate_object_from_contents(node["root"], dict(node["objects"])).values())


def pop_state_traffic(whole: dict, resumed: dict, restored: int) -> None:
    """Take the bytes of the context states carried for checkpoints out of both summaries, and
    check them: counted apart from the simulated links and resumed with the checkpoint, they are
    the whole run's plus the ``restored`` bytes handed back to the clients after the kill."""
    carried, uninterrupted = (s["summary"].pop("checkpoint_state_bytes") for s in (resumed, whole))
    assert carried == {"up": uninterrupted["up"], "down": uninterrupted["down"] + restored}
    assert uninterrupted["down"] > 0 and (uninterrupted["up"] > 0) == (restored > 0)  # requests; states where kept


def killed_and_resumed(tmp_path: Path, settings: RunSettings, after: int, apps=toy_apps) -> tuple:
    """``settings`` served whole, and killed after round ``after`` and resumed, each on a grid of
    its own draw, with the checks every such run passes; (the whole run's summary, the grids
    of the whole and the resumed runs)."""
    checkpoint = tmp_path / "run.ckpt"
    # the whole run keeps a checkpoint too (never resumed), so that its clients carry their states as well
    settings = dataclasses.replace(settings, output=str(tmp_path / "whole.json"), checkpoint=str(tmp_path / "whole.ckpt"))
    killed = dataclasses.replace(settings, checkpoint=str(checkpoint), output=str(tmp_path / "killed.json"))
    resumed = dataclasses.replace(killed, output=str(tmp_path / "resumed.json"))
    grids = [FlowerLikeGrid(settings, draw=1, apps=apps), FlowerLikeGrid(resumed, draw=3, apps=apps)]
    whole = serve(grids[0], settings, apps)
    dies = lambda: checkpoint.exists() and load_checkpoint(checkpoint)["round"] >= after
    with pytest.raises(Killed):
        serve(FlowerLikeGrid(killed, draw=2, dies=dies, apps=apps), killed, apps)
    assert load_checkpoint(checkpoint)["round"] == after
    restored = states_size(load_checkpoint(checkpoint))
    again = serve(grids[1], resumed, apps)
    assert again.pop("resumed_from") == after and whole.pop("resumed_from") == 0
    pop_state_traffic(whole, again, restored)
    assert again == whole  # the final parameters, every round's record, byte counts, simulated times
    assert any(r["network"] for r in whole["records"])  # lost transfers: the network's draws resumed too
    return whole, grids


@pytest.mark.parametrize("method", ["diloco", "gossip"])
def test_run_on_a_flower_like_grid_killed_and_resumed_ends_as_uninterrupted(tmp_path, method):
    settings = dataclasses.replace(SETTINGS, method=method, clients=3, rounds=3, mixing_steps=1)
    whole, _ = killed_and_resumed(tmp_path, settings, after=1)
    assert whole["nodes"] == [1000, 1001, 1002]  # shown by partition, as in process


# Small runs of two clients (seconds in process), killed after round 2 of 3: past FedRGL's warm-up
# (filter, pseudo-labels); RieSelect learns a task a round, so its clients have taken the first
# task's Fisher anchors into their contexts, and round 3 needs them beside the second task's.
RUNNER_SETTINGS = {
    "fedrgl": RunSettings(method="fedrgl", clients=2, rounds=3, warmup=1, inner_steps=2, noise="pair", drop=0.2),
    "rieselect": RunSettings(method="rieselect", clients=2, rounds=3, inner_steps=1, tasks="json,tomllib,html",
                             drop=0.2),
}


@pytest.mark.parametrize("method", list(RUNNER_SETTINGS))
def test_fedrgl_and_rieselect_on_a_flower_like_grid_killed_and_resumed_end_as_uninterrupted(tmp_path, method):
    _, grids = killed_and_resumed(tmp_path, RUNNER_SETTINGS[method], after=2, apps=job_apps)
    # RieSelect's clients keep Fisher anchors in their contexts (FedRGL's keep nothing); in runs this
    # small the knapsacks pick the same layers without them, so the contexts themselves are compared
    contexts = [{c.node_config["partition-id"]: c.state.object_id for c in grid.contexts.values()} for grid in grids]
    assert contexts[1] == contexts[0]
    assert any(len(c.state) for c in grids[0].contexts.values()) == (method == "rieselect")


def test_checkpoints_are_refused_on_another_engine_or_configuration(tmp_path):
    inproc = tmp_path / "inproc.ckpt"
    settings = dataclasses.replace(SETTINGS, rounds=1, output=str(tmp_path / "out.json"))
    run_in_process(settings, lambda _: toy_workload(SETTINGS.clients), checkpoint=str(inproc))
    with pytest.raises(ValueError, match="written by the in-process engine; resume it there"):
        serve(FlowerLikeGrid(settings, draw=1), dataclasses.replace(settings, checkpoint=str(inproc)))
    flower = dataclasses.replace(settings, checkpoint=str(tmp_path / "flower.ckpt"))
    serve(FlowerLikeGrid(flower, draw=1), flower)
    with pytest.raises(ValueError, match="written by one of Flower's engines; resume it there"):
        run_in_process(settings, lambda _: toy_workload(SETTINGS.clients), checkpoint=flower.checkpoint)
    other = dataclasses.replace(flower, inner_steps=4)
    with pytest.raises(ValueError, match=r"different configuration \(differs in inner-steps\)"):
        serve(FlowerLikeGrid(other, draw=1, dies=lambda: True), other)  # refused before any exchange


def app(tmp_path: Path, name: str, settings: RunSettings, apps: str = "toy_apps") -> Path:
    return write_app(tmp_path / name, f"tests.federated.{apps}:server_app", f"tests.federated.{apps}:client_app",
                     settings.run_config())


def federation_config(simulation: bool) -> dict | None:
    return {"num-supernodes": SETTINGS.clients} if simulation else None


def kill_after_round(federation: LocalFederation, app_dir: Path, checkpoint: Path, simulation: bool,
                     after: int = 1) -> int:
    """Submit ``app_dir``, SIGKILL the flwr CLI and every process of the federation once round
    ``after`` is in ``checkpoint``; the round the checkpoint holds then."""
    args = ["flwr", "run", str(app_dir), CONNECTION]
    for key, value in (federation_config(simulation) or {}).items():
        args += ["--federation-config", f"{key}={value}"]
    cli = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, env=federation.env(),
                           start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not (checkpoint.exists() and load_checkpoint(checkpoint)["round"] >= after):
            assert cli.poll() in (None, 0) and time.monotonic() < deadline, federation.log_tail("superlink")
            time.sleep(0.01)
    finally:
        federation.stop(grace_s=0)  # SIGKILL: no chance to clean up
        if cli.poll() is None:  # it returns once the run is submitted
            os.killpg(cli.pid, signal.SIGKILL)
        cli.wait(timeout=30)
    return load_checkpoint(checkpoint)["round"]


def resumes_exactly(tmp_path: Path, simulation: bool, settings: RunSettings = SETTINGS, apps: str = "toy_apps",
                    after: int | None = None) -> None:
    """``settings`` run whole, and killed after round ``after`` (its next-to-last by default) and resumed
    on a fresh federation, with the apps of module ``apps``: the same summary, and the same final client
    context states. For those the whole run keeps a checkpoint too (it is never resumed)."""
    checkpoint = tmp_path / "run.ckpt"
    whole = dataclasses.replace(settings, output=str(tmp_path / "whole.json"), checkpoint=str(tmp_path / "whole.ckpt"))
    killed = dataclasses.replace(settings, output=str(tmp_path / "killed.json"), checkpoint=str(checkpoint))
    resumed = dataclasses.replace(killed, output=str(tmp_path / "resumed.json"))
    with LocalFederation(settings.clients, simulation=simulation, workdir=tmp_path / "first") as federation:
        federation.flwr_run(app(tmp_path, "whole", whole, apps), timeout_s=RUN_TIMEOUT_S,
                            federation_config=federation_config(simulation))
        killed_at = kill_after_round(federation, app(tmp_path, "killed", killed, apps), checkpoint, simulation,
                                     after=settings.rounds - 1 if after is None else after)
    assert 1 <= killed_at < settings.rounds, "the run finished before it could be killed"
    assert not Path(killed.output).exists()
    restored = states_size(load_checkpoint(checkpoint))
    with LocalFederation(settings.clients, simulation=simulation, workdir=tmp_path / "second") as federation:
        other = dataclasses.replace(resumed, inner_steps=4)
        # a runner's checkpoint also records its method's settings, which differ with inner-steps
        with pytest.raises(RuntimeError, match=r"different configuration \(differs in inner-steps\b"):
            federation.flwr_run(app(tmp_path, "other", other, apps), timeout_s=RUN_TIMEOUT_S,
                                federation_config=federation_config(simulation))
        federation.flwr_run(app(tmp_path, "resumed", resumed, apps), timeout_s=RUN_TIMEOUT_S,
                            federation_config=federation_config(simulation))
    a, b = (json.loads(Path(s.output).read_text()) for s in (whole, resumed))
    assert b.pop("resumed_from") == killed_at and a.pop("resumed_from") == 0
    pop_state_traffic(a, b, restored)
    assert b["final_sha256"] == a["final_sha256"]
    assert b == a  # every round's record, the byte counts and simulated times too
    assert any(r["network"] for r in a["records"])  # a transfer was lost: the network's draws resumed
    states = [{node: saved["root"] for node, saved in load_checkpoint(path)["grid"]["inner"]["states"].items()}
              for path in (whole.checkpoint, checkpoint)]
    assert states[1] == states[0]  # AdamW moments, Fisher anchors: what the clients' contexts ended with


# Four submissions and two federations each: 3 to 5 minutes apiece on a busy 2-core machine
# (a ClientApp process or Ray worker start per exchange), so kept out of the default run; the
# grid test above checks the same property in seconds.
@pytest.mark.slow
@needs_deployment
def test_deployment_run_killed_and_resumed_ends_as_uninterrupted(tmp_path):
    resumes_exactly(tmp_path, simulation=False)


@pytest.mark.slow
@needs_ray
@needs_deployment
def test_ray_run_killed_and_resumed_ends_as_uninterrupted(tmp_path):
    # Ray's actors stay up, so a toy round takes milliseconds: killed after round 1 of 4, the run cannot
    # finish between the checkpoint's poll and the kill, even on a loaded machine
    resumes_exactly(tmp_path, simulation=True, settings=dataclasses.replace(SETTINGS, rounds=4), after=1)


# edgekit's apps, each ClientApp process also building its method's data (graph clients, stdlib
# tasks): about 6.5 minutes apiece on a busy 2-core machine (load 5, pinned to one core).
@pytest.mark.slow
@needs_deployment
@pytest.mark.parametrize("method", list(RUNNER_SETTINGS))
def test_deployment_fedrgl_and_rieselect_runs_killed_and_resumed_end_as_uninterrupted(tmp_path, method):
    resumes_exactly(tmp_path, simulation=False, settings=RUNNER_SETTINGS[method], apps="job_apps")


@pytest.mark.slow
@needs_ray
@needs_deployment
@pytest.mark.parametrize("method", list(RUNNER_SETTINGS))
def test_ray_fedrgl_and_rieselect_runs_killed_and_resumed_end_as_uninterrupted(tmp_path, method):
    resumes_exactly(tmp_path, simulation=True, settings=RUNNER_SETTINGS[method], apps="job_apps")
