"""Users' own models in: export, eval, compile and the runtime-only runner on models edgekit did not make."""

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from edgekit.cli import main
from edgekit.compilers.onnx_export import onnx_session
from edgekit.compilers.onnx_graph import input_shapes, read_onnx, simplify, weight_sites
from edgekit.compilers.runtime import RUNTIME_DIR_ENV, runtime_dir
from edgekit.jobs.graph_eval import evaluate_model_file
from edgekit.simulators import dequantize, quantize

from .user_models import CORPUS, export_onnx, inputs_npz, save_program

pytest.importorskip("transformers", reason="the user-model corpus is built with transformers' config classes")

# The least cosine similarity to float of a model's output with every weight in a format (random weights, so
# deep networks amplify the error; the 4-bit floor is ResNet-18's, the weakest here).
MIN_COSINE = {"fp16": 0.9999, "mxint8": 0.999, "mxfp8_e4m3": 0.99, "mxfp6_e2m3": 0.99, "mxfp4": 0.9, "mxint4": 0.9,
              "nvfp4": 0.9, "liftquant_24to10": 0.9}


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("user-models")
    return {name: export_onnx(name, folder) for name in CORPUS}, folder


@pytest.mark.parametrize("name", list(CORPUS))
def test_every_format_runs_in_onnxruntime_close_to_float(corpus, name):
    files, folder = corpus
    rows = evaluate_model_file(str(files[name]), list(MIN_COSINE), inputs_npz(name, folder), log=lambda _: None)
    scored = {r["format"]: r for r in rows}
    has_dense = any(len(s.shape) == 2 for s in weight_sites(read_onnx(files[name]))[0].values())
    assert set(scored) == set(MIN_COSINE) - (set() if has_dense else {"liftquant_24to10"})
    for fmt, row in scored.items():
        assert row["cosine"] >= MIN_COSINE[fmt], (fmt, row)
        assert 0 < row["max_abs_error"] < float("inf")
    if name != "linear":  # fp16 and MX INT8 keep every top-1 decision of these small heads
        assert scored["fp16"]["top1_agreement"] == 1.0


def test_weights_are_found_whatever_their_names(corpus):
    files, _ = corpus
    sites, _ = weight_sites(read_onnx(files["linear"]))
    assert [(s.initializer.startswith("onnx::MatMul"), s.op, s.axis, s.shape) for s in sites.values()] == [
        (True, "MatMul", 0, (256, 128))]
    sites, skipped = weight_sites(simplify(read_onnx(files["mobilenet_v2"]), {}))
    assert skipped and all("grouped convolution" in why for why in skipped.values())  # depthwise kept float
    assert all(s.op == "Conv" for s in sites.values() if s.op != "Gemm")
    bert_sites, _ = weight_sites(simplify(read_onnx(files["bert"]), {}), embeddings=True)
    assert any(s.op == "Gather" for s in bert_sites.values())
    assert not any(s.op == "Gather" for s in weight_sites(simplify(read_onnx(files["bert"]), {}))[0].values())


def test_a_weight_behind_cast_and_transpose_is_quantized_along_its_input_channels(tmp_path):
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((48, 64)).astype(np.float16)  # stored (out, in) as float16
    graph = helper.make_graph(
        [helper.make_node("Cast", ["onnx::w_7"], ["w32"], to=TensorProto.FLOAT),
         helper.make_node("Transpose", ["w32"], ["wt"], perm=[1, 0]),
         helper.make_node("MatMul", ["x", "wt"], ["y"], name="/proj/MatMul")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 48])],
        [numpy_helper.from_array(weight, "onnx::w_7")])
    path = tmp_path / "cast_transpose.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    sites, _ = weight_sites(read_onnx(path))
    assert {k: (s.op, s.axis) for k, s in sites.items()} == {"proj": ("MatMul", 1)}
    out = tmp_path / "q.onnx"
    assert run("export", path, "--format", "mxint8", "-o", out).exit_code == 0
    x = rng.standard_normal((3, 64)).astype(np.float32)
    expected = x @ dequantize(quantize(weight.astype(np.float32), "mxint8", axis=1)).astype(np.float16).astype(
        np.float32).T
    np.testing.assert_allclose(onnx_session(out).run(None, {"x": x})[0], expected, rtol=1e-5, atol=1e-5)


def test_a_model_with_nothing_to_quantize_is_an_error_and_leaves_no_file(tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    result = run("export", path, "--format", "mxfp4", "-o", tmp_path / "q.onnx")
    assert result.exit_code == 1 and "no MatMul/Gemm/Conv weight" in result.output and "--format fp32" in result.output
    result = run("compile", path, "--format", "mxfp4", "-o", tmp_path / "build")
    assert result.exit_code == 1 and "no MatMul/Gemm/Conv weight" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["relu.onnx"]
    result = run("compile", path, "--format", "fp32", "-o", tmp_path / "build")
    assert result.exit_code == 0 and "no layer quantized" in result.output


def test_symbolic_dims_need_a_size_and_a_wrong_one_is_named(corpus):
    files, _ = corpus
    graph = read_onnx(files["gpt2"])
    with pytest.raises(ValueError, match=r"input 'input_ids' has symbolic dims .*--input-shape input_ids=1x16"):
        input_shapes(graph)
    assert input_shapes(graph, {"input_ids": (3, 8)}) == {"input_ids": (3, 8)}
    with pytest.raises(ValueError, match=r"input 'pixel_values' has dims .*gave \[1, 3, 16, 16\]"):
        input_shapes(read_onnx(files["vit"]), {"pixel_values": (1, 3, 16, 16)})
    with pytest.raises(ValueError, match="which the model does not take"):
        input_shapes(graph, {"ids": (1, 4)})


# Transformer exports keep shape arithmetic TVM's ONNX frontend cannot take with a symbolic batch: they are
# built for a given batch. The others keep their symbolic batch.
FIXED_BATCH = {"bert": ["input_ids=2x16", "attention_mask=2x16"], "gpt2": ["input_ids=2x16"],
               "vit": ["pixel_values=2x3x32x32"]}


@pytest.mark.parametrize("name", ["bert", "gpt2", "vit", "resnet18", "linear"])
def test_host_build_runs_with_the_runtime_alone_and_matches_onnxruntime(corpus, tmp_path, name):
    files, folder = corpus
    args = [a for shape in FIXED_BATCH.get(name, []) for a in ("--input-shape", shape)]
    build = tmp_path / "build"
    result = run("compile", files[name], "--format", "mxfp4", "-o", build, *args)
    assert result.exit_code == 0, result.output
    manifest = json.loads((build / "manifest.json").read_text())
    assert manifest["layers"] and manifest["model_source"] == "onnx"
    assert manifest["max_batch"] == (None if name in FIXED_BATCH else 64)
    exported = tmp_path / "q.onnx"
    assert run("export", files[name], "--format", "mxfp4", "-o", exported).exit_code == 0
    for batch in (2,) if name in FIXED_BATCH else (1, 3):
        inputs = inputs_npz(name, folder, batch)
        expected = onnx_session(exported).run(None, dict(np.load(inputs)))[0]
        script = ("import sys, numpy as np; sys.modules['tvm'] = None\n"  # the compiler cannot be imported
                  "from edgekit.compilers.runtime import load\n"
                  "from edgekit.cli import read_arrays\n"
                  "from pathlib import Path\n"
                  f"build = load({str(build)!r})\n"
                  f"y = build(*read_arrays([Path({str(inputs)!r})], [i['name'] for i in build.inputs]))[0]\n"
                  f"np.save({str(tmp_path / 'y.npy')!r}, y)\n"
                  "assert 'tvm' not in [m for m in sys.modules if sys.modules[m] is not None]\n")
        env = {**os.environ, RUNTIME_DIR_ENV: str(runtime_dir())}
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120,
                              check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        scale = float(np.abs(expected).max())
        np.testing.assert_allclose(np.load(tmp_path / "y.npy"), expected, rtol=1e-4, atol=1e-4 * scale)


def test_a_graph_tvm_cannot_take_with_a_symbolic_batch_is_built_for_one_and_says_so(corpus, tmp_path):
    files, _ = corpus
    result = run("compile", files["vit"], "--format", "mxint8", "-o", tmp_path / "build")
    assert result.exit_code == 0, result.output
    assert "with a symbolic batch" in result.output and "building it for a batch of 1" in result.output
    manifest = json.loads((tmp_path / "build" / "manifest.json").read_text())
    assert manifest["inputs"][0]["shape"] == [1, 3, 32, 32] and manifest["max_batch"] is None


def test_a_zoo_model_builds_for_any_batch_up_to_max_batch(tmp_path):
    import torch

    from edgekit.compilers.runtime import load
    from edgekit.models.digits import DigitsConfig
    from edgekit.models.registry import save_checkpoint, train
    from edgekit.models.weights import quantized_copy

    config = DigitsConfig(hidden=64, steps=5)
    model = train("digits", config, cache_dir=False).model
    checkpoint = save_checkpoint(tmp_path / "digits.pt", "digits", config, model)
    build = tmp_path / "build"
    result = run("compile", checkpoint, "--format", "nvfp4", "--max-batch", 8, "-o", build)
    assert result.exit_code == 0, result.output
    assert "any batch up to 8" in result.output
    loaded = load(build)
    reference = quantized_copy(model, "nvfp4")
    for batch in (1, 2, 8):
        x = np.random.default_rng(batch).random((batch, 64), dtype=np.float32)
        with torch.no_grad():
            np.testing.assert_allclose(loaded(x)[0], reference(torch.from_numpy(x)).numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"symbolic dims from 1 to 8"):
        loaded(np.zeros((9, 64), np.float32))
    result = run("compile", checkpoint, "--format", "liftquant:2.4", "--max-batch", 8, "-o", tmp_path / "lq")
    assert result.exit_code == 1 and "LiftQuant kernels are built for a fixed batch" in result.output
    assert not (tmp_path / "lq").exists()


def test_torch_export_program_exports_and_compiles(tmp_path):
    program = save_program(tmp_path)
    out = tmp_path / "mlp.onnx"
    result = run("export", program, "--format", "mxint8", "-o", out)
    assert result.exit_code == 0, result.output
    assert "2 quantized layers" in result.output
    build = tmp_path / "build"
    result = run("compile", program, "--format", "mxint8", "-o", build)
    assert result.exit_code == 0, result.output
    manifest = json.loads((build / "manifest.json").read_text())
    assert manifest["model_source"] == "torch.export" and len(manifest["layers"]) == 2
    x = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    result = run("run", build, "--input", tmp_path / "x.npy", "-o", tmp_path / "y.npy")
    assert result.exit_code == 0, result.output
    expected = onnx_session(out).run(None, {onnx_session(out).get_inputs()[0].name: x})[0]
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), expected, rtol=1e-5, atol=1e-5)


def test_run_refuses_a_wrong_shape_and_a_foreign_build(tmp_path):
    program = save_program(tmp_path)
    build = tmp_path / "build"
    assert run("compile", program, "--format", "mxfp4", "-o", build).exit_code == 0
    np.save(tmp_path / "bad.npy", np.zeros((3, 64), np.float32))
    result = run("run", build, "--input", tmp_path / "bad.npy")
    assert result.exit_code == 1 and "input 'input' must have shape [2, 64], got [3, 64]" in result.output
    manifest = json.loads((build / "manifest.json").read_text())
    manifest["artifacts"]["library_machine"] = "aarch64" if manifest["artifacts"]["library_machine"] != "aarch64" \
        else "x86_64"
    (build / "manifest.json").write_text(json.dumps(manifest))
    result = run("run", build, "--input", tmp_path / "bad.npy")
    assert result.exit_code == 1 and "copy the build directory to that device" in result.output


def test_eval_of_a_model_file_writes_table_json_and_plot(corpus, tmp_path):
    files, folder = corpus
    out = tmp_path / "eval.json"
    result = run("eval", files["bert"], "--formats", "mxint8,mxfp4", "--inputs", inputs_npz("bert", folder), "-o", out)
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())["eval"]
    assert [r["format"] for r in rows] == ["mxint8", "mxfp4"] and rows[0]["cosine"] > rows[1]["cosine"]
    assert (tmp_path / "eval.png").read_bytes()[:4] == b"\x89PNG"
    result = run("eval", files["bert"], "--format", "mxfp4")
    assert result.exit_code == 1 and "give its values with --inputs" in result.output


@pytest.mark.skipif(__import__("shutil").which("nvcc") is None, reason="nvcc is not installed")
def test_a_cuda_build_carries_the_fatbin_the_runtime_hands_to_its_library(tmp_path):
    """No GPU here: the build's fatbin, its source digest, and the load-time callback that hands it over."""
    import tvm_ffi

    from edgekit.compilers.runtime import read_manifest, source_digest, use_prebuilt_cuda

    program = save_program(tmp_path)
    build = tmp_path / "build"
    result = run("compile", program, "--format", "mxfp4", "--target", "h100", "-o", build)
    assert result.exit_code == 0, result.output
    binary = read_manifest(build)["artifacts"]["cuda_binary"]
    assert binary["built"] and binary["archs"] == ["sm_90a"]
    fatbin = (build / binary["file"]).read_bytes()
    source = (build / "kernels.cu").read_text()
    assert binary["source_sha256"] == source_digest(source) and len(fatbin) > 1000
    use_prebuilt_cuda(build, binary)
    compile_cuda = tvm_ffi.get_global_func("tvm_callback_cuda_compile")
    assert bytes(compile_cuda(source)) == fatbin
    with pytest.raises(Exception, match="not the one kernels.fatbin was compiled from"):
        compile_cuda(source + "\n// another build")


def test_quantize_a_model_file_to_a_bit_width_then_compile_its_codes(corpus, tmp_path):
    files, folder = corpus
    codes, out = tmp_path / "codes.npz", tmp_path / "quantize.json"
    result = run("quantize", files["bert"], "--bits", 3, "--inputs", inputs_npz("bert", folder, 4), "--codes", codes,
                 "-o", out)
    assert result.exit_code == 0, result.output
    totals = json.loads(out.read_text())["totals"][0]
    assert 2.97 <= totals["bits_per_weight"] <= 3.0  # within 1% below the request
    report = json.loads(out.read_text())["result"][0]
    assert report["quantized"]["cosine"] > 0.99 and len(report["layers"]) == 12
    build = tmp_path / "build"
    result = run("compile", files["bert"], "--codes", codes, "--input-shape", "input_ids=2x16",
                 "--input-shape", "attention_mask=2x16", "-o", build)
    assert result.exit_code == 0, result.output
    layers = json.loads((build / "manifest.json").read_text())["layers"]
    chosen = {r["layer"]: r["format"] for r in report["layers"]}
    assert {name: r["format"] for name, r in layers.items()} == chosen
    result = run("quantize", files["bert"], "--bits", 3, "--save", tmp_path / "m.pt")
    assert result.exit_code == 1 and "--save writes a zoo checkpoint" in result.output
