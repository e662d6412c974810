"""The same apps on Flower's own engines: the deployment engine on loopback, and the Ray simulation engine."""

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from flwr.app import Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from edgekit.federated.apps import RunSettings, parse_progress, run_threads
from edgekit.federated.flower_run import LocalFederation, write_app
from edgekit.federated.tls import TLSFiles, make_certificates

# a guard against a hung run, not a speed goal: under CI's four workers on two cores each of Flower's
# processes (SuperLink, SuperNodes, ServerApp, ClientApps) imports torch, and one run took over 240 s
RUN_TIMEOUT_S = 480

ROOT = Path(__file__).resolve().parents[2]
BINARIES = ("flower-superlink", "flower-supernode", "flwr")


def submit(tmp_path, monkeypatch, simulation: bool, tls=None):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    output = tmp_path / "result.json"
    settings = RunSettings(method="diloco", clients=2, rounds=1, inner_steps=3, bandwidth_bps=1e6, latency_s=0.05,
                           device_flops=1e6, output=str(output))
    app = write_app(tmp_path / "app", "tests.federated.toy_apps:server_app", "tests.federated.toy_apps:client_app",
                    settings.run_config())
    with LocalFederation(2, simulation=simulation, workdir=tmp_path / "federation", tls=tls) as federation:
        progress = []
        log = federation.flwr_run(app, timeout_s=RUN_TIMEOUT_S,
                                  on_line=lambda line: progress.append(parse_progress(line)),
                                  federation_config={"num-supernodes": 2} if simulation else None)
        assert output.exists(), log + federation.log_tail("superlink")
    # One round: Flower starts a ClientApp process per message, seconds each; more rounds test nothing new here.
    assert [r.round for r in progress if r is not None] == [1]  # one progress line per round
    result = json.loads(output.read_text())
    assert [r["round"] for r in result["rounds"]] == [0, 1]
    assert result["rounds"][1]["used"] == [0, 1]
    assert result["rounds"][1]["eval"]["loss"] < result["rounds"][0]["eval"]["loss"]
    assert result["bytes"]["down"] > 0 and result["bytes"]["up"] > 0 and result["rounds"][1]["sim_time"] > 0
    return result


@pytest.mark.skipif(not all(shutil.which(b) for b in BINARIES),
                    reason="Flower's deployment binaries (flower-superlink, flower-supernode, flwr) are not on PATH")
def test_deployment_engine_on_loopback(tmp_path, monkeypatch):
    result = submit(tmp_path, monkeypatch, simulation=False)
    assert len(result["nodes"]) == 2 and all(n > 0 for n in result["nodes"])


@pytest.mark.skipif(not all(shutil.which(b) for b in BINARIES),
                    reason="Flower's deployment binaries (flower-superlink, flower-supernode, flwr) are not on PATH")
def test_deployment_engine_over_tls(tmp_path, monkeypatch):
    """The SuperLink serves with a certificate from a throw-away CA; SuperNodes and flwr run verify it."""
    tls = make_certificates(tmp_path / "tls")
    result = submit(tmp_path, monkeypatch, simulation=False, tls=tls)
    assert len(result["nodes"]) == 2
    config = (tmp_path / "federation" / "flwr-home" / "config.toml").read_text()
    assert "root-certificates" in config and "insecure" not in config


@pytest.mark.skipif(not all(shutil.which(b) for b in BINARIES),
                    reason="Flower's deployment binaries (flower-superlink, flower-supernode, flwr) are not on PATH")
def test_a_supernode_that_trusts_another_ca_is_refused(tmp_path):
    tls = make_certificates(tmp_path / "tls")
    other = make_certificates(tmp_path / "other", ca_name="another CA")
    with LocalFederation(0, tls=tls, workdir=tmp_path / "federation") as federation:
        federation.start_supernode("rogue", 0, root_certificates=other.ca_cert)
        rogue = federation.processes[-1][1]
        rogue.wait(timeout=120)
        log = federation.log_tail("rogue", lines=200)
    assert rogue.returncode != 0 and "CERTIFICATE_VERIFY_FAILED" in log, log


def test_tls_files_that_do_not_parse_are_named(tmp_path):
    tls = make_certificates(tmp_path / "tls")
    (tmp_path / "junk.pem").write_text("not a certificate")
    with pytest.raises(ValueError, match="TLS ca_cert '.*junk.pem' is not a PEM certificate"):
        TLSFiles(tmp_path / "junk.pem", tls.server_cert, tls.server_key).check()
    with pytest.raises(ValueError, match="TLS server_key '.*server.pem' is not a PEM private key"):
        TLSFiles(tls.ca_cert, tls.server_cert, tls.server_cert).check()
    with pytest.raises(ValueError, match="TLS server_cert '.*missing.pem' cannot be read"):
        TLSFiles(tls.ca_cert, tmp_path / "missing.pem", tls.server_key).check()


@pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                    reason="Ray is not installed (pip install 'edgekit[ray]' for Flower's simulation engine)")
def test_ray_simulation_engine(tmp_path, monkeypatch):
    submit(tmp_path, monkeypatch, simulation=True)


def test_a_clients_handler_runs_on_the_runs_threads(monkeypatch):
    # on Flower's engines a ClientApp process starts with PyTorch's default threads; float sums
    # split over another number of threads round differently, so every engine uses the run's
    monkeypatch.setattr(TaskIdentity, "_run_id", 1)  # a message is made inside a run
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 1)
    seen = []
    context = Context(1, 1, {"partition-id": 0}, RecordDict(), RunSettings(threads=2).run_config())
    run_threads(Message(RecordDict(), 1, "train.diloco"), context, lambda m, c: seen.append(torch.get_num_threads()))
    assert seen == [2]
    with pytest.raises(ValueError, match="threads must be at least 1, got 0"):
        RunSettings(threads=0)
