"""A plan of LiftQuant layers compiles: the built model equals PyTorch run on the simulators' LiftQuant weights."""

import copy

import numpy as np
import pytest
import torch
import tvm

from edgekit.compilers.build import compile_for_cpu, cuda_source, run, schedule
from edgekit.compilers.importer import import_torch
from edgekit.compilers.lower import lower
from edgekit.compilers.plan import check_weight_format, make_plan
from edgekit.simulators.liftquant import quantize

from .models import CNN, MLP, TransformerBlock, seeded


def simulated(model, plan):
    """PyTorch with each planned Linear weight as LiftQuant stores it (the same pipeline lower runs)."""
    out = copy.deepcopy(model)
    with torch.no_grad():
        for name, fmt in plan.items():
            layer = out.get_submodule(name)
            layer.weight.copy_(torch.from_numpy(quantize(layer.weight.numpy(), fmt).dequantize()))
    return out


@pytest.mark.parametrize(("cls", "shape"), [(MLP, (1, 64)), (MLP, (5, 64)), (TransformerBlock, (1, 8, 64))],
                         ids=["mlp-gemv", "mlp-gemm", "transformer"])
def test_compiled_matches_simulated_pytorch(cls, shape):
    model = seeded(cls)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    plan = make_plan(model, "liftquant:2.4")
    assert set(plan.values()) == {"liftquant_24to10"}
    executable, lowered = compile_for_cpu(import_torch(model, (x,)), plan)
    record = next(iter(lowered.layers.values()))
    assert record.format == "liftquant_24to10" and record.layout == "bytes_major"
    assert record.weight_bits == pytest.approx(8 * (record.codes_bytes + record.scales_bytes) / record.weights)
    (out,) = run(executable, [x.numpy()])
    with torch.no_grad():
        expected = simulated(model, plan)(x).numpy()
        float_out = model(x).numpy()
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5 * scale)
    assert np.abs(out - float_out).max() > 1e-3  # the weights really are the quantized ones


def test_mixed_with_block_formats_and_cuda_source():
    model = seeded(MLP)
    x = torch.randn(1, 64, generator=torch.Generator().manual_seed(2))
    plan = make_plan(model, "mxfp4", {"fc1": "liftquant_16to8"})
    lowered = lower(import_torch(model, (x,)), plan, "cuda")
    assert lowered.layers["fc1"].format == "liftquant_16to8" and lowered.layers["fc2"].format == "mxfp4"
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    source = cuda_source(tvm.compile(schedule(lowered.mod, "cuda", target), target=target))
    assert "liftquant_fc1_gemv" in source and "liftquant_fc1_rotate" in source


def test_format_names_and_refusals():
    assert check_weight_format("liftquant:2.4") == "liftquant_24to10"
    assert check_weight_format("LiftQuant:2") == "liftquant_16to8"  # the lowest-error 2-bit configuration
    assert check_weight_format("liftquant:24to10") == check_weight_format("liftquant_24to10")
    with pytest.raises(ValueError, match="no LiftQuant configuration codes 2.45 bits per weight; offered: 1.25"):
        check_weight_format("liftquant:2.45")
    with pytest.raises(ValueError, match="unknown LiftQuant configuration"):
        check_weight_format("liftquant_3to1")
    with pytest.raises(ValueError, match="unknown format 'liftqant:2'.*liftquant:BITS"):
        check_weight_format("liftqant:2")
    model = seeded(CNN)
    x = torch.randn(1, 3, 8, 8)
    with pytest.raises(ValueError, match="LiftQuant is lowered for Linear .matmul. weights only"):
        lower(import_torch(model, (x,)), make_plan(model, "liftquant:2.4"))


def test_onnx_export_refuses_liftquant_by_name(tmp_path):
    from edgekit.compilers.onnx_export import export_onnx

    model = seeded(MLP)
    with pytest.raises(ValueError, match="ONNX export does not cover LiftQuant yet .layers fc1, fc2."):
        export_onnx(model, (torch.randn(1, 64),), make_plan(model, "liftquant:2.4"), tmp_path / "m.onnx")
