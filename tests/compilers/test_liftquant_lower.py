"""A plan of LiftQuant layers compiles: the built model equals PyTorch run on the simulators' LiftQuant weights."""

import copy

import numpy as np
import pytest
import torch
import tvm

from edgekit.compilers.build import run
from edgekit.compilers.export import cuda_source
from edgekit.compilers.importer import import_torch
from edgekit.compilers.kernel_schedules import vector_isa
from edgekit.compilers.lower import lower
from edgekit.compilers.pipeline import compile_for_cpu
from edgekit.compilers.plan import check_weight_format, make_plan
from edgekit.compilers.schedule import schedule
from edgekit.simulators.liftquant import quantize
from edgekit.targets import tvm_target

from .models import CNN, MLP, TransformerBlock, seeded


def simulated(model, plan):
    """PyTorch with each planned Linear weight as LiftQuant stores it (the same pipeline lower runs)."""
    out = copy.deepcopy(model)
    with torch.no_grad():
        for name, fmt in plan.items():
            layer = out.get_submodule(name)
            layer.weight.copy_(torch.from_numpy(quantize(layer.weight.numpy(), fmt).dequantize()))
    return out


HOST_TABLES = vector_isa(tvm_target("host")) is not None  # AVX-512, or AVX2 with FMA


@pytest.mark.parametrize(("cls", "shape", "host"), [
    (MLP, (1, 64), False), (MLP, (5, 64), False), (TransformerBlock, (1, 8, 64), False),
    # built for this CPU: fc1's 96 rows take the nibble-table GEMV, fc2's 10 the bit selects
    pytest.param(MLP, (1, 64), True, marks=pytest.mark.skipif(not HOST_TABLES, reason="no AVX-512 or AVX2 here")),
    pytest.param(MLP, (5, 64), True, marks=pytest.mark.skipif(not HOST_TABLES, reason="no AVX-512 or AVX2 here")),
], ids=["mlp-gemv", "mlp-gemm", "transformer", "mlp-gemv-host", "mlp-gemm-host"])
def test_compiled_matches_simulated_pytorch(cls, shape, host):
    model = seeded(cls)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    plan = make_plan(model, "liftquant:2.4")
    assert set(plan.values()) == {"liftquant_24to10"}
    executable, lowered = compile_for_cpu(import_torch(model, (x,)), plan, tvm_target("host") if host else None)
    if host:  # build.schedule gave the 96-row layer the nibble-table GEMV; 10 rows keep the bit selects
        scheduled = schedule(lowered.mod, "cpu", tvm_target("host"))
        tables = {gv.name_hint: "lut" in f.script() for gv, f in scheduled.functions_items() if "gemv" in gv.name_hint}
        assert tables == {"liftquant_24to10_96x64_gemv": True, "liftquant_24to10_10x96_gemv": False}
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
    assert "liftquant_16to8_96x64_gemv" in source and "liftquant_16to8_96x64_rotate" in source


@pytest.mark.parametrize("given", [True, False], ids=["build-target", "default"])
def test_cuda_lowering_names_the_arch_so_tvm_does_not_guess_it(given, capfd):
    """A bare CUDA target makes TVM warn 'Unable to detect CUDA version' (from C++, on fd 2) with no GPU here."""
    model = seeded(MLP)
    x = torch.randn(1, 64, generator=torch.Generator().manual_seed(2))
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90"}) if given else None
    capfd.readouterr()
    mod = schedule(lower(import_torch(model, (x,)), {"fc1": "liftquant_16to8"}, "cuda", target=target).mod, "cuda", target)
    assert "Unable to detect CUDA version" not in capfd.readouterr().err
    assert "liftquant_16to8_96x64_gemv" in {gv.name_hint for gv, _ in mod.functions_items()}
    tvm.target.Target({"kind": "cuda"})  # the check can fail: a bare target does warn
    assert "Unable to detect CUDA version" in capfd.readouterr().err


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


def decoded_by_onnx(q, tmp_path):
    import onnx
    from onnx import TensorProto, helper

    from edgekit.compilers.liftquant_onnx import liftquant_weight_nodes
    from edgekit.compilers.onnx_export import onnx_session

    nodes, inits, out = liftquant_weight_nodes("w", q)
    graph = helper.make_graph(nodes, "decode", [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, q.shape)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model, full_check=True)
    path = tmp_path / "decode.onnx"
    path.write_bytes(model.SerializeToString())
    return onnx_session(path).run(None, {})[0]


@pytest.mark.parametrize("fmt", ["liftquant_8to4", "liftquant_24to10", "liftquant_12to4"])
def test_onnx_decode_subgraph(tmp_path, fmt):
    rng = np.random.default_rng(4)
    w = rng.standard_normal((12, 70)).astype(np.float32)  # 70: padding to d, and a dense rotation factor
    plain = quantize(w, fmt, rotate=False)  # the decoder's sums and scales alone: bit for bit
    assert np.array_equal(decoded_by_onnx(plain, tmp_path), plain.rotated_weights()[:, :70])
    d = plain.format.chunk
    for q in (quantize(w, fmt), quantize(w, fmt, group_size=4 * d, input_scales=rng.uniform(0.5, 2.0, 70))):
        want = q.dequantize()  # the rotation is undone in float32 in the graph, in float64 by the simulator
        np.testing.assert_allclose(decoded_by_onnx(q, tmp_path), want, rtol=0, atol=2e-6 * np.abs(want).max())


def test_onnx_export_of_liftquant_layers(tmp_path):
    import onnx
    from onnx import numpy_helper

    from edgekit.compilers.onnx_export import export_onnx, onnx_session
    from edgekit.simulators.formats import get_liftquant_format
    from edgekit.simulators.liftquant import codebook_bytes

    model = seeded(TransformerBlock)
    x = torch.randn(2, 8, 64, generator=torch.Generator().manual_seed(2))
    plan = make_plan(model, "liftquant:2.4", {"down": "liftquant_16to8", "proj": "mxfp4"})
    summary = export_onnx(model, (x,), plan, tmp_path / "m.onnx")
    stored = {t.name: numpy_helper.to_array(t) for t in onnx.load(tmp_path / "m.onnx").graph.initializer}
    for layer in ("qkv", "up", "down"):
        q = quantize(model.get_submodule(layer).weight.detach().numpy(), plan[layer])
        assert np.array_equal(stored[f"{layer}.weight::codes"], q.codes)  # the simulators' bits, as stored
        assert summary["layers"][layer]["codes_bytes"] + summary["layers"][layer]["scales_bytes"] == q.nbytes
    books = sum(codebook_bytes(get_liftquant_format(f)) for f in ("liftquant_24to10", "liftquant_16to8"))
    assert summary["totals"]["codebook_bytes"] == books  # once per configuration, not per layer
    session = onnx_session(tmp_path / "m.onnx")
    (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    reference = simulated(model, {k: v for k, v in plan.items() if v.startswith("liftquant")})
    with torch.no_grad():
        from edgekit.models.weights import quantized_copy

        reference.proj = quantized_copy(model.proj, "mxfp4")
        want = reference(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_onnx_export_refuses_liftquant_convolutions(tmp_path):
    from edgekit.compilers.onnx_export import export_onnx

    model = seeded(CNN)
    with pytest.raises(ValueError, match="LiftQuant codes Linear weights only; layers conv1, conv2 are convolutions"):
        export_onnx(model, (torch.randn(1, 3, 8, 8),), make_plan(model, "liftquant:2.4"), tmp_path / "m.onnx")
    assert not list(tmp_path.iterdir())

