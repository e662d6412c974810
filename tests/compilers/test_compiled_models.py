"""Compiled models equal PyTorch run on the simulators' dequantized weights (float32 tolerance)."""

import copy

import numpy as np
import pytest
import torch

from edgekit.compilers.build import run
from edgekit.compilers.importer import import_onnx, import_torch
from edgekit.compilers.lower import lower
from edgekit.compilers.pipeline import compile_for_cpu
from edgekit.compilers.plan import make_plan
from edgekit.models.weights import quantizable_weights, quantized_copy
from edgekit.simulators import FORMATS

from .models import NETWORKS, seeded

WEIGHT_FORMATS = ["fp32", "fp16", "bf16", *FORMATS]


def simulated(model, fmt):
    """The model PyTorch runs for comparison: weights as the format stores them."""
    if fmt == "fp32":
        return model
    if fmt != "fp16":
        return quantized_copy(model, fmt)
    out = copy.deepcopy(model)
    with torch.no_grad():
        for weight in quantizable_weights(out).values():
            weight.copy_(weight.half().float())
    return out


def assert_float32_close(actual, expected):
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=2e-6 * scale)


@pytest.fixture(scope="module", params=list(NETWORKS))
def network(request):
    cls, shape = NETWORKS[request.param]
    model = seeded(cls)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    return model, x


@pytest.mark.parametrize("fmt", WEIGHT_FORMATS)
def test_compiled_matches_simulated_pytorch(network, fmt):
    model, x = network
    imported = import_torch(model, (x,))
    plan = make_plan(model, fmt)
    executable, lowered = compile_for_cpu(imported, plan)
    assert set(lowered.layers) == set(plan)
    (out,) = run(executable, [x.numpy()])
    with torch.no_grad():
        expected = simulated(model, fmt)(x).numpy()
    assert_float32_close(out, expected)


def test_float_weights_are_gone_from_the_module(network):
    """Planned weights are packed uint8 constants; no float constant of their size remains."""
    model, x = network
    imported = import_torch(model, (x,))
    lowered = lower(imported, make_plan(model, "mxfp4"), "cpu")
    import tvm

    float_sizes, uint8_sizes = set(), set()

    def collect(expr):
        if isinstance(expr, tvm.ir.expr.GenericConst) and hasattr(expr.value, "numpy"):
            value = expr.value.numpy()
            if value.dtype == np.float32:
                float_sizes.add(value.size)
            else:
                uint8_sizes.add(value.size)

    tvm.relax.analysis.post_order_visit(lowered.mod["main"], collect)
    weight_sizes = {w.numel() for w in quantizable_weights(model).values()}
    assert float_sizes and not float_sizes & weight_sizes  # biases remain, weights do not
    assert {r.codes_bytes for r in lowered.layers.values()} <= uint8_sizes


def test_mixed_plan_per_layer_overrides():
    cls, shape = NETWORKS["mlp"]
    model = seeded(cls)
    x = torch.randn(*shape)
    plan = make_plan(model, "mxfp4", {"fc2": "mxint8"})
    executable, lowered = compile_for_cpu(import_torch(model, (x,)), plan)
    assert {n: r.format for n, r in lowered.layers.items()} == {"fc1": "mxfp4", "fc2": "mxint8"}
    expected = copy.deepcopy(model)
    expected.fc1 = quantized_copy(model.fc1, "mxfp4")
    expected.fc2 = quantized_copy(model.fc2, "mxint8")
    with torch.no_grad():
        assert_float32_close(run(executable, [x.numpy()])[0], expected(x).numpy())


def test_float_onnx_file_made_elsewhere(tmp_path):
    """A plain float ONNX file from torch's exporter imports, compiles and matches."""
    cls, shape = NETWORKS["cnn"]
    model = seeded(cls)
    x = torch.randn(*shape)
    path = tmp_path / "cnn.onnx"
    torch.onnx.export(model, (x,), str(path), dynamo=False)
    imported = import_onnx(path)
    assert set(imported.layers) == {"conv1", "conv2", "fc"}
    executable, _ = compile_for_cpu(imported, make_plan(imported.layers, "mxint8"))
    with torch.no_grad():
        assert_float32_close(run(executable, [x.numpy()])[0], quantized_copy(model, "mxint8")(x).numpy())


def test_op_tvm_cannot_import_is_named():
    class Spectral(torch.nn.Module):
        def forward(self, x):
            return torch.fft.rfft(x).real

    with pytest.raises(ValueError, match=r"TVM cannot import Spectral: .*_fft_r2c"):
        import_torch(Spectral(), (torch.randn(4, 8),))


def test_plan_naming_unknown_layer_in_lower():
    cls, shape = NETWORKS["mlp"]
    model = seeded(cls)
    imported = import_torch(model, (torch.randn(*shape),))
    with pytest.raises(ValueError, match="plan names layer 'nope', which is not a Linear/Conv layer of the model; layers: fc1, fc2"):
        lower(imported, {"nope": "mxfp4"})
    with pytest.raises(ValueError, match="device must be one of cpu, cuda"):
        lower(imported, make_plan(model, "mxfp4"), "tpu")


def test_onnx_matmul_with_untransposed_weight(tmp_path):
    """An ONNX MatMul whose weight initializer is (in, out), as other tools write it."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(4)
    w = rng.standard_normal((64, 48)).astype(np.float32)
    bias = rng.standard_normal(48).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "proj.weight"], ["h"]), helper.make_node("Add", ["h", "proj.bias"], ["y"])],
        "proj", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 48])],
        [numpy_helper.from_array(w, "proj.weight"), numpy_helper.from_array(bias, "proj.bias")])
    path = tmp_path / "proj.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    imported = import_onnx(path)
    assert list(imported.layers) == ["proj"]
    executable, lowered = compile_for_cpu(imported, make_plan(imported.layers, "nvfp4"))
    assert lowered.layers["proj"].shape == [64, 48] and lowered.layers["proj"].op == "gemm"
    x = rng.standard_normal((2, 64)).astype(np.float32)
    from edgekit.simulators import quantize_dequantize

    expected = x @ quantize_dequantize(np.ascontiguousarray(w.T), "nvfp4", axis=1).T + bias
    assert_float32_close(run(executable, [x])[0], expected)


@pytest.mark.parametrize("fmt", ["mxint8", "nvfp4", "liftquant_16to8"])
def test_layers_of_one_shape_share_one_kernel(fmt):
    """Three 64x64 layers and a 64x10 head: one kernel per shape (per layer where NVFP4 compiles
    in its tensor scale), and each layer still computes with its own codes."""
    import tvm

    model = seeded(lambda: torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU())
                                                 for _ in range(3)], torch.nn.Linear(64, 10)))
    x = torch.randn(1, 64, generator=torch.Generator().manual_seed(3))
    plan = make_plan(model, fmt)
    executable, lowered = compile_for_cpu(import_torch(model, (x,)), plan)
    kernels = sorted(gv.name_hint for gv, func in lowered.mod.functions_items() if isinstance(func, tvm.tirx.PrimFunc))
    # LiftQuant: a GEMV per shape and one rotation, which depends on the input width only
    expected_count = {"mxint8": 2, "nvfp4": 4, "liftquant_16to8": 3}[fmt]
    assert len(kernels) == expected_count, kernels
    with torch.no_grad():
        assert_float32_close(run(executable, [x.numpy()])[0], simulated(model, fmt)(x).numpy())
