import json

import pytest
from click.testing import CliRunner

from edgekit.cli import main
from edgekit.federated.apps import METHODS
from edgekit.federated.choices import METHOD_NAMES
from edgekit.federated.flower_run import LocalFederation
from edgekit.federated.links import parse_duration, parse_rate
from edgekit.fl_cli import fl
from edgekit.jobs.fl import RUNNERS, run_label


def invoke(*args):
    return CliRunner().invoke(fl, list(args), catch_exceptions=False)


def test_registered_in_edgekit():
    result = CliRunner().invoke(main, ["fl", "run", "--help"])
    assert result.exit_code == 0 and "--bandwidth" in result.output and "--engine" in result.output
    # the CLI's choices are the implemented methods: strategies of the apps, and runners of the job
    assert tuple(METHODS) + tuple(RUNNERS) == METHOD_NAMES


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
    (["--compression", "int3"], "Invalid value for '--compression': 'int3' is not a compression; allowed: none, mxfp8_e4m3"),
    (["--engine", "mpi"], "Invalid value for '--engine': 'mpi' is not one of 'inproc', 'ray', 'deployment'"),
    (["--device", "toaster"], "Invalid value for --device"),
    (["--clients", "4", "--straggler", "4"], "Invalid value for --straggler: must be a client index below --clients 4"),
    (["--config", "width"], "Invalid value for --config: 'width' must look like KEY=VALUE"),
    (["--superlink", "10.0.0.2:9093"], "Invalid value for --superlink: applies to --engine deployment only"),
])
def test_bad_input_names_the_parameter(args, message):
    result = invoke("run", "diloco", *args)
    assert result.exit_code == 2 and message in result.output, result.output


@pytest.mark.parametrize("method,args,message", [
    ("diloco", ["--topology", "hypercube"], "Invalid value for '--topology': applies to gossip only, not to diloco"),
    ("diloco", ["--budget", "0.5"], "Invalid value for '--budget': applies to rieselect only, not to diloco"),
    ("fedrgl", ["-k", "1"], "Invalid value for '-k' / '--mixing-steps': applies to gossip only, not to fedrgl"),
    ("fedrgl", ["--compression", "mxint8"], "Invalid value for '--compression': applies to diloco, gossip only"),
    ("fedrgl", ["--config", "width=8"], "Invalid value for '--config': applies to diloco, gossip, rieselect only"),
    ("fedrgl", ["--selection", "topk"], "Invalid value for '--selection': applies to rieselect only, not to fedrgl"),
    ("rieselect", ["--graph", "cora"], "Invalid value for '--graph': applies to fedrgl only, not to rieselect"),
    ("rieselect", ["--eval-every", "2"], "Invalid value for '--eval-every': applies to diloco, gossip only"),
    ("fedrgl", ["--graph", "pubmed"], "Invalid value for '--graph': 'pubmed' is not one of 'csbm', 'cora', 'citeseer'"),
    ("fedrgl", ["--noise", "flip"], "Invalid value for '--noise': 'flip' is not one of 'uniform', 'pair'"),
    ("fedrgl", ["--noise-rate", "1"], "Invalid value for '--noise-rate': 1.0 is not in the range 0.0<=x<1.0"),
    ("fedrgl", ["--graph-method", "gat"], "Invalid value for '--graph-method': 'gat' is not one of 'fedavg'"),
    ("fedrgl", ["--rounds", "5"],
     "Invalid value for --warmup: 10 warm-up rounds leave none of --rounds 5 for FedRGL's filter"),
    ("rieselect", ["--selection", "all"], "Invalid value for '--selection': 'all' is not one of 'full', 'random'"),
    ("rieselect", ["--budget", "0"], "Invalid value for '--budget': 0.0 is not in the range 0.0<x<=1.0"),
    ("rieselect", ["--rounds", "4"], "rounds (4) must be a multiple of the number of tasks (3: email, asyncio"),
    ("rieselect", ["--tasks", ","], "tasks must name at least one stdlib package, got ','"),
    ("rieselect", ["--basin", "round"], "Invalid value for '--basin': 'round' is not one of 'moving', 'fixed'"),
    ("rieselect", ["--radius", "0.3"], "Invalid value for --radius: applies to --basin fixed only"),
    ("rieselect", ["--basin", "fixed", "--radius", "0"], "Invalid value for '--radius': 0.0 is not in the range x>0.0"),
    ("diloco", ["--basin", "fixed"], "Invalid value for '--basin': applies to rieselect only, not to diloco"),
])
def test_options_of_other_methods_and_bad_method_options(method, args, message):
    result = invoke("run", method, *args)
    assert result.exit_code == 2 and message in result.output, result.output


def test_tls_options_are_checked_before_any_work(tmp_path):
    from edgekit.federated.tls import make_certificates

    tls = make_certificates(tmp_path / "tls")
    base = ["run", "diloco", "--clients", "2", "--rounds", "1", "-o", str(tmp_path / "r.json")]
    result = invoke(*base, "--engine", "deployment", "--ssl-ca-certfile", str(tls.ca_cert))
    assert result.exit_code == 2 and "TLS needs all three files; missing --ssl-certfile, --ssl-keyfile" in result.output
    result = invoke(*base, "--ssl-ca-certfile", str(tls.ca_cert), "--ssl-certfile", str(tls.server_cert),
                    "--ssl-keyfile", str(tls.server_key))
    assert result.exit_code == 2 and "local SuperLink of --engine deployment" in result.output
    result = invoke(*base, "--engine", "deployment", "--ssl-ca-certfile", str(tls.server_key), "--ssl-certfile",
                    str(tls.server_cert), "--ssl-keyfile", str(tls.server_key))
    assert result.exit_code == 2 and "is not a PEM certificate" in result.output
    result = invoke(*base, "--engine", "deployment", "--root-certificates", str(tls.ca_cert))
    assert result.exit_code == 2 and "give --superlink too" in result.output
    assert not (tmp_path / "r.json").exists()


def test_a_budget_below_one_layer_is_named(tmp_path):
    result = invoke("run", "rieselect", "--clients", "2", "--rounds", "3", "--budget", "0.0003",
                    "-o", str(tmp_path / "r.json"))
    assert result.exit_code == 1 and ("budget 0.0003 of an update gives 138 bytes per client and round, below the "
                                      "smallest layer (256 bytes); allowed: at least 0.00056") in result.output
    assert not (tmp_path / "r.json").exists()


def test_missing_data_is_named(tmp_path):
    result = invoke("run", "fedrgl", "--graph", "cora", "--planetoid", str(tmp_path), "--rounds", "1", "--warmup", "0",
                    "-o", str(tmp_path / "r.json"))
    assert result.exit_code == 1 and f"Planetoid files missing in {tmp_path}: ind.cora.x" in result.output
    result = invoke("run", "rieselect", "--tasks", "nosuchpackage", "--rounds", "1", "-o", str(tmp_path / "r.json"))
    assert result.exit_code == 1 and "no stdlib files under 'nosuchpackage'" in result.output


def test_bad_method_and_bad_model_config():
    result = invoke("run", "fedsgd")
    assert result.exit_code == 2 and "'fedsgd' is not one of 'diloco', 'gossip', 'fedrgl', 'rieselect'" in result.output
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


def test_report_rows_name_the_compression():
    gossip = {"method": "gossip", "mixing-steps": 1, "topology": "ring", "compression": "none"}
    assert run_label(gossip) == "gossip k=1 ring"
    assert run_label({**gossip, "compression": "mxfp4"}) == "gossip k=1 ring mxfp4"  # else two rows look alike
    assert run_label({"method": "diloco", "compression": "mxint8"}) == "diloco mxint8"


def test_fedrgl_run_and_report(tmp_path):
    out = tmp_path / "rgl.json"
    args = ["run", "fedrgl", "--clients", "3", "--rounds", "3", "--warmup", "1", "-H", "2", "--noise", "pair",
            "--noise-rate", "0.3", "--bandwidth", "10Mbit", "--latency", "50ms", "--drop", "0.1", "-o", str(out)]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["engine"] == "inproc" and report["settings"]["graph"] == "csbm" and report["settings"]["drop"] == 0.1
    rounds = report["rounds"]
    assert [r["round"] for r in rounds] == [0, 1, 2, 3]
    accuracy = [r["metrics"]["eval"]["accuracy"] for r in rounds]  # every round, round 0 the initial model
    assert all(0 <= a <= 1 for a in accuracy) and accuracy[-1] > accuracy[0] + 0.2  # 5 classes: chance is 0.2
    summary = report["summary"]
    assert summary["final_accuracy"] == accuracy[-1] and summary["score"] == pytest.approx(sum(accuracy[-5:]) / 4)
    assert "clean_nodes" not in rounds[1]["metrics"]  # the warm-up round: plain FedAvg
    for r in rounds[2:]:  # then the filter keeps part of each client's noisy train labels
        kept, dropped = r["metrics"].get("clean_nodes", 0), r["metrics"].get("filtered_nodes", 0)
        assert (kept > 0 and dropped > 0) or not r["used"]
    assert summary["clean_nodes"] > 0 and summary["filtered_nodes"] > 0 and 0 < summary["filter_precision"] <= 1
    assert summary["missing_updates"] == sum(len(r["missing"]) for r in rounds)
    assert summary["bytes"]["up"] > 0 and summary["sim_time"] == rounds[-1]["sim_time"] > 0
    assert summary["deadline_s"] > 0 and summary["inner_steps_per_worker"] == 6
    assert (tmp_path / "rgl.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert invoke(*args).exit_code == 0 and json.loads(out.read_text())["rounds"] == rounds  # seeded: same bits


def test_rieselect_run_and_report(tmp_path):
    runs = {}
    for selection in ("rieselect", "full"):
        out = tmp_path / f"{selection}.json"
        result = invoke("run", "rieselect", "--clients", "2", "--rounds", "2", "-H", "2", "--tasks", "email,json",
                        "--selection", selection, "--budget", "0.25", "--drop", "0.1", "-o", str(out))
        assert result.exit_code == 0, result.output
        runs[selection] = json.loads(out.read_text())
    report = runs["rieselect"]
    assert [r["round"] for r in report["rounds"]] == [0, 1, 2]  # one round per task here
    losses = [r["metrics"]["eval"]["task_losses"] for r in report["rounds"]]
    assert all(len(x) == 2 and all(0 < v < 6 for v in x) for x in losses)
    summary = report["summary"]
    assert summary["task_losses"] == losses[-1] and summary["loss_when_learned"] == [losses[1][0], losses[2][1]]
    assert summary["forgetting_by_task"] == [pytest.approx(losses[2][0] - losses[1][0])]
    assert summary["forgetting"] == summary["forgetting_by_task"][0]
    assert summary["final_loss"] == pytest.approx(summary["average_loss"]) == pytest.approx(sum(losses[-1]) / 2)
    assert summary["uplink_bytes"] == summary["bytes"]["up"] > 0 and 0 < summary["layer_fraction"] < 1
    full = runs["full"]["summary"]
    # a quarter of the update's bytes each round, the Fisher shard sent when the second task starts included
    assert full["layer_fraction"] == 1 and summary["uplink_bytes"] < 0.3 * full["uplink_bytes"]
    assert (tmp_path / "rieselect.png").exists()
    result = invoke("report", str(tmp_path / "rieselect.json"), str(tmp_path / "full.json"), "-o",
                    str(tmp_path / "cmp.png"))
    assert result.exit_code == 0, result.output
    assert "| rieselect uplink 0.25 |" in result.output and "| full uplink |" in result.output
    assert "forgetting" in result.output and "accuracy" not in result.output


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


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["deployment", "ray"])
@pytest.mark.parametrize("method,args", [("fedrgl", ["--warmup", "1"]), ("rieselect", ["--tasks", "email,json"])])
def test_fedrgl_and_rieselect_on_flowers_engines(tmp_path, engine, method, args):
    """The apps the in-process engine runs, on Flower's engines: the same model, evaluated the same, every round."""
    if engine == "ray":
        pytest.importorskip("ray", reason="Ray is not installed (pip install 'edgekit[ray]')")
    common = ["run", method, "--clients", "2", "--rounds", "2", "-H", "2", "--drop", "0.1", *args]
    assert invoke(*common, "-o", str(tmp_path / "here.json")).exit_code == 0
    result = invoke(*common, "--engine", engine, "-o", str(tmp_path / "there.json"))
    assert result.exit_code == 0, result.output
    here, there = (json.loads((tmp_path / name).read_text()) for name in ("here.json", "there.json"))
    assert there["engine"] == engine and [r["round"] for r in there["rounds"]] == [0, 1, 2]
    assert [r["metrics"].get("eval") for r in there["rounds"]] == [r["metrics"].get("eval") for r in here["rounds"]]
    assert [r["used"] for r in there["rounds"]] == [r["used"] for r in here["rounds"]]
    assert there["summary"]["bytes"]["up"] > 0
