"""`edgekit compile` and `edgekit export` as a user runs them, bad input included."""

import json
import shutil

import numpy as np
import onnx
import pytest
import torch
import tvm
from click.testing import CliRunner

from edgekit.cli import main
from edgekit.compilers.onnx_export import onnx_session
from edgekit.models.digits import DigitsConfig
from edgekit.models.registry import save_checkpoint, train
from edgekit.models.weights import quantized_copy


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A quickly trained digits MLP saved as an edgekit checkpoint."""
    config = DigitsConfig(hidden=64, steps=20)
    model = train("digits", config, cache_dir=False).model
    path = save_checkpoint(tmp_path_factory.mktemp("ckpt") / "digits.pt", "digits", config, model)
    return path, model


def test_compile_host_writes_library_and_manifest(checkpoint, tmp_path):
    path, model = checkpoint
    out = tmp_path / "build"
    result = run("compile", path, "--format", "mxfp4", "--layer", "4=mxint8", "--target", "host", "-o", out)
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "mixed"
    assert {n: r["format"] for n, r in manifest["layers"].items()} == {"0": "mxfp4", "2": "mxfp4", "4": "mxint8"}
    assert manifest["layers"]["0"]["codes_bytes"] == 64 * 64 // 2 and manifest["layers"]["0"]["scales_bytes"] == 128
    assert manifest["layers"]["0"]["weight_bits"] == pytest.approx(4.25)
    assert manifest["inputs"] == [{"name": "input", "shape": [1, 64], "dtype": "float32"}]
    assert manifest["outputs"] == [{"shape": [1, 10], "dtype": "float32"}]
    prov = manifest["provenance"]
    assert prov["seed"] == 0 and prov["git_sha"] and prov["versions"]["apache-tvm"] and prov["versions"]["torch"]
    assert manifest["artifacts"]["library_machine"] in ("x86_64", "aarch64")
    # the library runs and computes the simulated model
    vm = tvm.relax.VirtualMachine(tvm.runtime.load_module(str(out / "model.so")), tvm.cpu())
    x = np.random.default_rng(0).random((1, 64), dtype=np.float32)
    expected = quantized_copy(model, "mxfp4")
    expected[4] = quantized_copy(model[4], "mxint8")
    with torch.no_grad():
        np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x))[0].numpy(), expected(torch.from_numpy(x)).numpy(),
                                   rtol=1e-5, atol=1e-5)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind


@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-gcc") is None, reason="aarch64-linux-gnu-gcc is not installed")
@pytest.mark.parametrize("target", ["rpi4", "jetson-orin"])
def test_compile_for_aarch64_boards(checkpoint, tmp_path, target):
    result = run("compile", checkpoint[0], "--format", "nvfp4", "--target", target, "-o", tmp_path / target)
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / target / "manifest.json").read_text())
    assert manifest["artifacts"]["library_machine"] == "aarch64"
    assert manifest["target"]["cross_compiler"] == "aarch64-linux-gnu-gcc"
    if target == "jetson-orin":
        assert (tmp_path / target / "kernels.cu").read_text().count("__global__") >= 3
        binary = manifest["artifacts"]["cuda_binary"]
        assert binary["built"] == (shutil.which("nvcc") is not None)
        if binary["built"]:
            assert binary["archs"] == ["sm_87"] and (tmp_path / target / binary["file"]).is_file()


def test_compile_cuda_without_nvcc_says_so(checkpoint, tmp_path, monkeypatch):
    monkeypatch.setattr("edgekit.compilers.export.NVCC", "no-such-nvcc")
    result = run("compile", checkpoint[0], "--format", "mxfp8", "--target", "h100", "-o", tmp_path / "b")
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["artifacts"]["cuda_binary"] == {"built": False, "reason": "nvcc not found on PATH"}
    assert "no CUDA binary (nvcc not found on PATH)" in result.output


def test_compile_onnx_file_and_registered_name(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    path = tmp_path / "m.onnx"
    torch.onnx.export(model, (torch.zeros(1, 32),), str(path), dynamo=False)
    result = run("compile", path, "--format", "mxint8", "-o", tmp_path / "onnx_build")
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "onnx_build" / "manifest.json").read_text())
    assert manifest["model_source"] == "onnx" and set(manifest["layers"]) == {"0", "2"}
    result = run("compile", "digits", "--format", "fp16", "-o", tmp_path / "digits_build")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "digits_build" / "manifest.json").read_text())["layers"]["0"]["weight_bits"] == 16


def test_compile_builds_the_codes_quantize_wrote(checkpoint, tmp_path):
    from edgekit.models.registry import load_checkpoint
    from edgekit.quantize_cli import quantize
    from edgekit.simulators.liftquant import load_tensors

    path, _ = checkpoint
    codes, saved, out = tmp_path / "codes.npz", tmp_path / "q.pt", tmp_path / "build"
    result = CliRunner().invoke(quantize, [str(path), "--bits", "3", "--configs", "8to4,16to8,12to4",
                                           "--finetune-steps", "4", "--calibration-batches", "2",
                                           "--codes", str(codes), "--save", str(saved), "-o", str(tmp_path / "q.json")],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    result = run("compile", saved, "--codes", codes, "--target", "host", "-o", out)
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    tensors = load_tensors(codes)
    assert manifest["codes"] == str(codes)
    assert {n: r["format"] for n, r in manifest["layers"].items()} == {n: t.format.name for n, t in tensors.items()}
    assert all(manifest["layers"][n]["codes_bytes"] == t.codes.nbytes for n, t in tensors.items())
    # the library computes the fine-tuned model quantize saved, not a fresh encoding
    _, _, finetuned = load_checkpoint(saved)
    vm = tvm.relax.VirtualMachine(tvm.runtime.load_module(str(out / "model.so")), tvm.cpu())
    x = np.random.default_rng(2).random((1, 64), dtype=np.float32)
    with torch.no_grad():
        np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x))[0].numpy(), finetuned(torch.from_numpy(x)).numpy(),
                                   rtol=1e-4, atol=1e-4)


def test_export_runs_in_onnxruntime(checkpoint, tmp_path):
    path, model = checkpoint
    out = tmp_path / "m.onnx"
    result = run("export", path, "--format", "mxfp6_e2m3", "-o", out)
    assert result.exit_code == 0, result.output
    graph = onnx.load(str(out)).graph
    assert {i.data_type for i in graph.initializer if i.name.endswith("codes")} <= {onnx.TensorProto.UINT8}
    x = np.random.default_rng(1).random((1, 64), dtype=np.float32)
    session = onnx_session(out)
    (y,) = session.run(None, {session.get_inputs()[0].name: x})
    with torch.no_grad():
        np.testing.assert_allclose(y, quantized_copy(model, "mxfp6_e2m3")(torch.from_numpy(x)).numpy(),
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("args", "message"), [
    (["no-such-model"], "neither a registered model (digits"),
    (["{ckpt}", "--format", "mxfp5"], "unknown format 'mxfp5'; allowed: fp32, fp16, bf16, mxfp8_e4m3"),
    (["{ckpt}", "--target", "tpu-v9"], "tpu-v9"),
    (["{ckpt}", "--target", '{"kind": "opencl"}'], "preflight failed"),
    (["{ckpt}", "--target", '{"kind": "llvm", "mtriple": "aarch64-linux-gnu"}'], "names no cross compiler"),
    (["{ckpt}", "--layer", "fc9=mxint8"], "plan override names layer 'fc9'"),
    (["{ckpt}", "--layer", "oops"], "must look like NAME=FORMAT"),
    (["{bad_onnx}"], "is not a valid ONNX model"),
    (["{foreign_ckpt}"], "is not an edgekit checkpoint"),
    (["{ckpt}", "--codes", "{bad_onnx}"], "is not a codes file written by `edgekit quantize --codes`"),
    (["{ckpt}", "--codes", "{foreign_codes}"], "codes layers fc9 that the model does not have"),
    (["{ckpt}", "--codes", "{codes}", "--layer", "2=mxint8"], "--layer names 2, which --codes already codes"),
])
def test_bad_input_is_named_and_writes_nothing(checkpoint, tmp_path, args, message):
    from edgekit.simulators.liftquant import quantize, save_tensors

    bad_onnx = tmp_path / "bad.onnx"
    bad_onnx.write_bytes(b"not a protobuf at all")
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(3)}, foreign)
    coded = quantize(checkpoint[1][2].weight.detach().numpy(), "liftquant_8to4")
    fill = {"{ckpt}": checkpoint[0], "{bad_onnx}": bad_onnx, "{foreign_ckpt}": foreign,
            "{codes}": save_tensors(tmp_path / "codes.npz", {"2": coded}),
            "{foreign_codes}": save_tensors(tmp_path / "foreign.npz", {"fc9": coded})}
    args = [str(fill.get(a, a)) for a in args]
    out = tmp_path / "out"
    result = run("compile", *args, "-o", out)
    assert result.exit_code != 0
    assert message in result.output
    assert "Traceback" not in result.output
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_output_directory_that_is_not_a_build_is_refused(checkpoint, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    result = run("compile", checkpoint[0], "-o", out)
    assert result.exit_code != 0 and "is not a directory this command wrote (no manifest.json)" in result.output
    assert (out / "notes.txt").read_text() == "keep me"
