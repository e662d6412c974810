"""`edgekit bench` as a user runs it: four backends timed on this machine, foreign targets refused."""

import json

import pytest
from click.testing import CliRunner

from edgekit.cli import main
from edgekit.models.digits import DigitsConfig
from edgekit.models.registry import save_checkpoint, train
from edgekit.targets import load_target, runs_here, target_names

BACKENDS = ("tvm", "onnxruntime", "onnxruntime (quantized graph)", "torch eager")


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def table_rows(output: str) -> dict[str, list[str]]:
    """Backend -> cells of the markdown table's rows."""
    lines = [line for line in output.splitlines() if line.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True)) for line in lines[1:]]
    return {r["backend"]: r for r in rows}


def test_bench_times_four_backends(tmp_path):
    out = tmp_path / "b.json"
    result = run("bench", "digits", "--target", "host", "--format", "mxint8", "-r", 2, "-o", out)
    assert result.exit_code == 0, result.output
    rows = table_rows(result.stdout)
    assert set(rows) == set(BACKENDS)
    assert rows["tvm"]["format"] == "mxint8" and rows["tvm"]["bits/weight"] == "8.25"
    assert rows["onnxruntime (quantized graph)"]["bits/weight"] == "8.25"
    assert rows["onnxruntime"]["format"] == rows["torch eager"]["format"] == "fp32"
    assert " ± " in rows["tvm"]["latency (ms)"] and rows["onnxruntime"]["x onnxruntime fp32"] == "1"
    assert float(rows["onnxruntime"]["size (MiB)"]) > 3.5 * float(rows["tvm"]["size (MiB)"])

    data = json.loads(out.read_text())
    assert data["meta"]["versions"]["apache-tvm"] and data["meta"]["seed"] == 0
    samples = {s["backend"]: s for s in data["samples"]}
    assert set(samples) == set(BACKENDS)
    for s in samples.values():
        assert len(s["samples_ms"]) == 2 and all(t > 0 for t in s["samples_ms"]) and s["calls_per_sample"] >= 1
    # the same codes, decoded by TVM and by the ONNX graph; float PyTorch vs float onnxruntime
    assert samples["tvm"]["checked_against"].startswith("onnxruntime (quantized graph)")
    assert samples["tvm"]["max_abs_diff"] < 1e-4
    assert samples["torch eager"]["max_abs_diff"] < 1e-4
    setup = data["setup"][0]
    assert setup["target"] == "host" and setup["rounds"] == 2 and setup["onnxruntime_level"] == "ORT_ENABLE_BASIC"
    assert setup["tvm_threads"] >= 1 and {r["threads"] for r in data["results"][1:]} == {setup["threads_requested"]}


@pytest.mark.parametrize("name,needs", [("rpi4", "aarch64 CPU"), ("h100", "CUDA GPU sm_90a")])
def test_foreign_target_benchmarks_nothing(tmp_path, name, needs):
    if runs_here(load_target(name)):
        pytest.skip(f"{name} runs on this machine")
    out = tmp_path / "b.json"
    result = run("bench", "digits", "--target", name, "-o", out)
    assert result.exit_code == 1
    assert f"target {name} does not run on this machine ({needs} needed); nothing benchmarked" in result.output
    assert "training" not in result.output and not out.exists()


def test_unknown_target_names_the_registry(tmp_path):
    result = run("bench", "digits", "--target", "rpi6", "-o", tmp_path / "b.json")
    assert result.exit_code == 2
    assert "unknown target 'rpi6'" in result.output and "Did you mean rpi5 or rpi4?" in result.output
    for name in target_names():
        assert name in result.output
    assert not (tmp_path / "b.json").exists()


@pytest.mark.parametrize("args,code,message", [
    (["nomodel"], 1, "MODEL 'nomodel' is neither a registered model (digits, lm, meanflow_policy, fluxnet,"),
    (["digits", "--format", "mxfp5"], 2, "unknown format 'mxfp5'; allowed: fp32, fp16, bf16, mxfp8_e4m3"),
    (["digits", "-r", "0"], 2, "0 is not in the range x>=1"),
    (["digits", "--threads", "0"], 2, "0 is not in the range x>=1"),
])
def test_bad_input_is_named(tmp_path, args, code, message):
    result = run("bench", *args, "-o", tmp_path / "b.json")
    assert result.exit_code == code
    assert message in result.output


def test_bench_onnx_file_runs_the_backends_that_apply(tmp_path):
    """An ONNX file: TVM, onnxruntime on the file and on its quantized export; PyTorch is skipped, said so."""
    config = DigitsConfig(hidden=32, steps=10)
    ckpt = save_checkpoint(tmp_path / "d.pt", "digits", config, train("digits", config, cache_dir=False).model)
    model = tmp_path / "d.onnx"
    assert run("export", ckpt, "--format", "fp32", "-o", model).exit_code == 0
    result = run("bench", model, "--format", "fp32", "-r", 1, "-o", tmp_path / "b.json")
    assert result.exit_code == 0, result.output
    assert set(table_rows(result.stdout)) == {"tvm", "onnxruntime"}
    assert "skipped torch eager: MODEL is a model file" in result.output
    samples = json.loads((tmp_path / "b.json").read_text())["samples"]
    assert samples[0]["max_abs_diff"] < 1e-4
    result = run("bench", model, "--format", "mxfp4", "-r", 1, "-o", tmp_path / "q.json")
    assert result.exit_code == 0, result.output
    assert len(table_rows(result.stdout)) == 3  # TVM, onnxruntime float and quantized
