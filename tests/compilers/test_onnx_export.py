"""ONNX export with packed weights: the decode subgraph is bit-exact, the model matches PyTorch."""

import copy
import os
import zlib

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from edgekit.compilers import onnx_export
from edgekit.compilers.onnx_export import decode_weight_nodes, export_onnx, onnx_session
from edgekit.compilers.plan import make_plan
from edgekit.simulators import FORMATS, QuantizedTensor, dequantize, get_format, quantize, quantize_dequantize
from edgekit.simulators import weight_formats as wf

WEIGHT_FORMATS = [*FORMATS, "fp16", "bf16", "fp32"]


# ---- the decode subgraph alone ----------------------------------------------
def run_decode(q: QuantizedTensor) -> np.ndarray:
    nodes, inits, out = decode_weight_nodes("w", q)
    graph = helper.make_graph(nodes, "decode", [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, q.shape)],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model, full_check=True)
    assert all(node.domain in ("", "ai.onnx") for node in model.graph.node)
    stored = {t.name: numpy_helper.to_array(t) for t in inits}
    assert stored["w::codes"].dtype == np.uint8 and np.array_equal(stored["w::codes"], q.codes)
    assert stored["w::scales"].dtype == np.uint8 and np.array_equal(stored["w::scales"], q.scales)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    (result,) = session.run(None, {})
    return result


def assert_bit_exact(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)  # NaN == NaN
    finite = ~np.isnan(want)
    assert np.array_equal(got.view(np.uint32)[finite], want.view(np.uint32)[finite])  # -0 vs +0 too


def special_data(shape, rng) -> np.ndarray:
    """Random values over many scales with zeros, NaN and +-Inf sprinkled in (axis 1 quantized)."""
    x = rng.standard_normal(shape) * 2.0 ** rng.integers(-20, 20, shape)
    flat = x.reshape(-1)
    idx = rng.permutation(flat.size)
    flat[idx[:7]] = 0.0
    flat[idx[7:9]] = np.nan
    flat[idx[9]], flat[idx[10]] = np.inf, -np.inf
    x = x.astype(np.float32)
    x[1] = 0.0  # a whole zero row
    return x


def random_bytes_tensor(fmt, shape, rng) -> QuantizedTensor:
    """Every code and every scale byte (NaN scales, subnormal 2^-127, ...) straight into the decoder."""
    template = quantize(np.zeros(shape, np.float32), fmt, axis=1)
    codes = rng.integers(0, 256, template.codes.shape, dtype=np.uint8)
    scales = rng.integers(0, 256, template.scales.shape, dtype=np.uint8)
    flat = scales.reshape(-1)
    flat[: min(256, flat.size)] = np.arange(256, dtype=np.uint8)[: flat.size]
    ts = np.float32(rng.uniform(0.01, 3.0)) if fmt.tensor_scale else None
    return QuantizedTensor(fmt, shape, 1, codes, scales, ts)


@pytest.mark.parametrize("name", [*FORMATS, "mxfp6_e3m2@8", "mxint8@16", "mxfp4@64"])
def test_decode_subgraph_is_bit_exact(name):
    fmt = get_format(name)
    rng = np.random.default_rng(zlib.crc32(name.encode()))  # str hash() varies by process
    cases = [
        quantize(special_data((6, 70), rng), fmt, axis=1),  # Linear, partial last block
        quantize(special_data((5, 37, 3, 3), rng), fmt, axis=1),  # Conv: transpose back, trim
        quantize(rng.standard_normal((4, 3, 5)).astype(np.float32), fmt, axis=1),  # Conv1d
        quantize(np.zeros((3, 64), np.float32), fmt, axis=1),
        random_bytes_tensor(fmt, (64, 4 * fmt.block_size), rng),
        random_bytes_tensor(fmt, (3, 70, 2, 2), rng),
    ]
    for q in cases:
        assert_bit_exact(run_decode(q), dequantize(q))


def test_decode_rejects_non_quantized():
    with pytest.raises(ValueError, match="QuantizedTensor"):
        decode_weight_nodes("w", np.zeros(4))


# ---- whole models ---------------------------------------------------------------
def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(70, 96), nn.ReLU(), nn.Linear(96, 10)).eval(), torch.randn(4, 70)


def cnn():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 10)).eval()
    return model, torch.randn(2, 3, 8, 8)


def simulated(model: nn.Module, plan: dict) -> nn.Module:
    """A copy whose planned weights hold what the format stores (the PyTorch reference)."""
    ref = copy.deepcopy(model)
    modules = dict(ref.named_modules())
    with torch.no_grad():
        for layer, fmt in plan.items():
            w = modules[layer].weight
            if fmt in ("fp16", "bf16"):
                w.copy_(w.to(getattr(torch, wf.resolve(fmt).dtype)).float())
            elif fmt != "fp32":
                w.copy_(torch.from_numpy(quantize_dequantize(w.detach().numpy(), fmt, axis=1)))
    return ref


def check_standard(path) -> onnx.ModelProto:
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    assert all(node.domain in ("", "ai.onnx") for node in model.graph.node)
    assert all(op.domain in ("", "ai.onnx") for op in model.opset_import)
    return model


@pytest.mark.parametrize("build", [mlp, cnn], ids=["mlp", "cnn"])
@pytest.mark.parametrize("fmt", WEIGHT_FORMATS)
def test_exported_model_matches_simulated_pytorch(tmp_path, build, fmt):
    model, x = build()
    plan = make_plan(model, fmt)
    path = tmp_path / "model.onnx"
    summary = export_onnx(model, (x,), plan, path)
    assert sorted(os.listdir(tmp_path)) == ["model.onnx"]

    onnx_model = check_standard(path)
    inits = {t.name: numpy_helper.to_array(t) for t in onnx_model.graph.initializer}
    for layer in plan:
        w = dict(model.named_modules())[layer].weight.detach().numpy()
        entry = summary["layers"][layer]
        assert entry["format"] == fmt and entry["shape"] == list(w.shape)
        if fmt == "fp32":
            assert np.array_equal(inits[f"{layer}.weight"], w)
            assert entry["weight_bits"] == 32.0
        elif fmt in ("fp16", "bf16"):
            assert f"{layer}.weight" not in inits
            assert inits[f"{layer}.weight::{fmt}"].dtype == np.dtype(wf.resolve(fmt).dtype)
            assert entry["weight_bits"] == 16.0
        else:
            assert f"{layer}.weight" not in inits
            q = quantize(w, fmt, axis=1)
            assert np.array_equal(inits[f"{layer}.weight::codes"], q.codes)  # the simulators' bytes, as stored
            assert np.array_equal(inits[f"{layer}.weight::scales"], q.scales)
            assert (entry["codes_bytes"], entry["scales_bytes"]) == (q.codes.nbytes, q.scales.nbytes)
            assert entry["weight_bits"] == pytest.approx(q.bits_per_element)
    assert summary["totals"]["codes_bytes"] == sum(e["codes_bytes"] for e in summary["layers"].values())
    assert summary["totals"]["file_bytes"] == path.stat().st_size

    session = onnx_session(path)
    (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    with torch.no_grad():
        want = simulated(model, plan)(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_mixed_plan_and_unplanned_layers(tmp_path):
    model, x = cnn()
    plan = make_plan(model, "nvfp4", overrides={"0": "fp16"})
    plan_subset = {"0": plan["0"]}  # layer "3" is not planned: stays float32
    for p in (plan, plan_subset):
        summary = export_onnx(model, (x,), p, tmp_path / "m.onnx", opset=20)
        assert set(summary["layers"]) == set(p)
        session = onnx_session(tmp_path / "m.onnx")
        (got,) = session.run(None, {"input0": x.numpy()})
        with torch.no_grad():
            want = simulated(model, p)(x).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert summary["totals"]["weight_bits"] == 16.0


# ---- errors: clear messages, no file left behind -----------------------------
class Unexportable(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.linalg.svd(self.fc(x))[0]


class Unused(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.spare = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x)


def test_plan_naming_unknown_layer(tmp_path):
    model, x = mlp()
    with pytest.raises(ValueError, match="'fc9'.*layers: 0, 2"):
        export_onnx(model, (x,), {"fc9": "mxfp4"}, tmp_path / "m.onnx")
    with pytest.raises(ValueError, match="unknown format"):
        export_onnx(model, (x,), {"0": "mxfp5"}, tmp_path / "m.onnx")
    assert os.listdir(tmp_path) == []


def test_unexportable_model(tmp_path):
    with pytest.raises(ValueError, match="could not export Unexportable: .*linalg_svd") as info:
        export_onnx(Unexportable(), (torch.randn(8, 8),), {"fc": "mxfp4"}, tmp_path / "m.onnx")
    assert "\n" not in str(info.value)
    assert os.listdir(tmp_path) == []


def test_planned_weight_missing_from_graph(tmp_path):
    with pytest.raises(ValueError, match="'spare.weight' not among the initializers.*found: fc.weight"):
        export_onnx(Unused(), (torch.randn(2, 8),), {"fc": "mxfp4", "spare": "mxint8"}, tmp_path / "m.onnx")
    assert os.listdir(tmp_path) == []


def test_bad_paths(tmp_path):
    model, x = mlp()
    plan = make_plan(model, "mxfp4")
    with pytest.raises(ValueError, match="does not exist"):
        export_onnx(model, (x,), plan, tmp_path / "missing" / "m.onnx")
    with pytest.raises(ValueError, match="is a directory"):
        export_onnx(model, (x,), plan, tmp_path)
    with pytest.raises(ValueError, match="opset"):
        export_onnx(model, (x,), plan, tmp_path / "m.onnx", opset=17)
    assert os.listdir(tmp_path) == []


def test_failed_write_leaves_old_file_and_no_temp(tmp_path, monkeypatch):
    model, x = mlp()
    path = tmp_path / "m.onnx"
    path.write_bytes(b"old")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(onnx_export.os, "replace", broken_replace)
    with pytest.raises(OSError, match="cannot write .*No space left"):
        export_onnx(model, (x,), make_plan(model, "mxfp4"), path)
    assert os.listdir(tmp_path) == ["m.onnx"] and path.read_bytes() == b"old"
