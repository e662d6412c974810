import json

import pytest
from click.testing import CliRunner

from edgekit.cli import main
from edgekit.federated.apps import METHODS
from edgekit.federated.choices import METHOD_NAMES
from edgekit.federated.flower_run import LocalFederation
from edgekit.fl_cli import fl, parse_duration, parse_rate


def invoke(*args):
    return CliRunner().invoke(fl, list(args), catch_exceptions=False)


def test_registered_in_edgekit():
    result = CliRunner().invoke(main, ["fl", "run", "--help"])
    assert result.exit_code == 0 and "--bandwidth" in result.output and "--engine" in result.output
    assert tuple(METHODS) == METHOD_NAMES  # the CLI's choices are the implemented methods


def test_rates_and_durations():
    assert parse_rate("10Mbit") == 1e7 and parse_rate("10Mbit/s") == 1e7 and parse_rate("2MB/s") == 1.6e7
    assert parse_rate("500 kbit") == 5e5 and parse_rate("1.5Gbit") == 1.5e9
    assert parse_duration("50ms") == pytest.approx(0.05) and parse_duration("2min") == 120.0
    assert parse_duration("200us") == pytest.approx(2e-4)


@pytest.mark.parametrize("args,message", [
    (["--bandwidth", "10Mbps"], ("Invalid value for '--bandwidth': '10Mbps' is not a positive rate; write a number "
                                 "and a unit: bit, kbit, Mbit, Gbit")),
    (["--bandwidth", "0Mbit"], "'0Mbit' is not a positive rate"),
    (["--latency", "50"], ("Invalid value for '--latency': '50' is not a duration; write a number and a unit: us, "
                           "ms, s or min")),
    (["--deadline", "soon"], "Invalid value for '--deadline'"),
    (["--drop", "1.5"], "Invalid value for '--drop': 1.5 is not in the range 0.0<=x<=1.0"),
    (["--topology", "star"], "Invalid value for '--topology': 'star' is not one of 'ring', 'hypercube'"),
    (["--compression", "int3"], "Invalid value for '--compression': 'int3' is not one of 'none', 'mxint8', 'mxfp4'"),
    (["--engine", "mpi"], "Invalid value for '--engine': 'mpi' is not one of 'inproc', 'ray', 'deployment'"),
    (["--device", "toaster"], "Invalid value for --device"),
    (["--clients", "4", "--straggler", "4"], "Invalid value for --straggler: must be a client index below --clients 4"),
    (["--config", "width"], "Invalid value for --config: 'width' must look like KEY=VALUE"),
    (["--superlink", "10.0.0.2:9093"], "Invalid value for --superlink: applies to --engine deployment only"),
])
def test_bad_input_names_the_parameter(args, message):
    result = invoke("run", "diloco", *args)
    assert result.exit_code == 2 and message in result.output, result.output


def test_bad_method_and_bad_model_config():
    result = invoke("run", "fedsgd")
    assert result.exit_code == 2 and "'fedsgd' is not one of 'diloco', 'gossip'" in result.output
    result = invoke("run", "diloco", "--clients", "2", "--rounds", "1", "--config", "depth=3")
    assert result.exit_code == 1 and "unknown config key 'depth' for model 'lm'" in result.output


def test_run_report_and_resume(tmp_path):
    out = tmp_path / "g.json"
    args = ["run", "gossip", "--clients", "2", "--rounds", "2", "-H", "2", "-k", "1", "--bandwidth", "2Mbit",
            "--drop", "0.1", "--checkpoint", str(tmp_path / "g.ckpt"), "-o", str(out)]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["settings"]["bandwidth-bps"] == 2e6 and report["meta"]["git_sha"]
    assert [r["round"] for r in report["rounds"]] == [0, 1, 2]
    summary = report["summary"]
    assert summary["bytes"]["peer"] > 0 and 0 < summary["utilization"] <= 1 and summary["final_loss"] > 0
    assert (tmp_path / "g.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    again = invoke(*args)  # the checkpoint holds round 2 of 2: nothing left to run, same report
    assert again.exit_code == 0 and json.loads(out.read_text())["summary"]["resumed_from"] == 2
    assert json.loads(out.read_text())["rounds"] == report["rounds"]
    result = invoke("report", str(out), "-o", str(tmp_path / "cmp.png"))
    assert result.exit_code == 0 and "| gossip k=1 ring |" in result.output
    assert (tmp_path / "cmp.png").exists()
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    result = invoke("report", str(bad))
    assert result.exit_code == 2 and "is not an `edgekit fl run` report" in result.output


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["deployment", "deployment on a running SuperLink", "ray"])
def test_cli_on_flowers_engines(tmp_path, engine):
    """`edgekit fl run --engine deployment|ray`: the LM apps as installed components, on loopback."""
    if engine == "ray":
        pytest.importorskip("ray", reason="Ray is not installed (pip install 'edgekit[ray]')")
    out = tmp_path / "run.json"
    args = ["run", "diloco", "--clients", "2", "--rounds", "2", "-H", "2", "-o", str(out)]
    if engine == "deployment on a running SuperLink":
        with LocalFederation(2) as federation:  # stands in for a SuperLink and SuperNodes on other machines
            result = invoke(*args, "--engine", "deployment", "--superlink", federation.address)
    else:
        result = invoke(*args, "--engine", engine)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["engine"] == engine.split()[0] and [r["round"] for r in report["rounds"]] == [0, 1, 2]
    assert report["summary"]["bytes"]["up"] > 0 and report["rounds"][2]["used"] == [0, 1]
