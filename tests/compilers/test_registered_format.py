"""A weight format registered at run time reaches every consumer with no other edit:
the format table, the codec by name, ONNX export (onnxruntime equal to the simulator)
and a host compile (TVM equal to the simulator)."""

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from torch import nn

from edgekit.cli import main
from edgekit.compilers.build import run
from edgekit.compilers.importer import import_torch
from edgekit.compilers.onnx_export import export_onnx, onnx_session
from edgekit.compilers.pipeline import compile_for_cpu
from edgekit.compilers.plan import make_plan
from edgekit.models.weights import quantized_copy
from edgekit.simulators import dequantize, get_format, quantize, quantize_dequantize
from edgekit.simulators import weight_formats as wf

NAME = "mxfp4_b16"


@pytest.fixture
def mxfp4_b16():
    """MXFP4 with one E8M0 scale per 16 elements instead of 32."""
    row = wf.register(wf.WeightFormat(NAME, "block", block=get_format("mxfp4@16"),
                                      description="MXFP4, E8M0 scale per 16"))
    yield row
    wf.unregister(NAME)


def model_and_input():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(48, 32), nn.ReLU(), nn.Linear(32, 8)).eval()
    return model, torch.randn(4, 48, generator=torch.Generator().manual_seed(1))


def test_listed_by_edgekit_formats(mxfp4_b16):
    result = CliRunner().invoke(main, ["formats"])
    assert result.exit_code == 0, result.output
    cells = next([c.strip() for c in ln.split("|")] for ln in result.output.splitlines() if f" {NAME} " in ln)
    assert "16" in cells  # its block size
    assert "4.5" in cells  # bits per element: 4 + 8 / 16


def test_quantized_by_name_like_its_block_format(mxfp4_b16):
    x = np.random.default_rng(0).standard_normal((6, 40)).astype(np.float32)
    q = quantize(x, NAME, axis=1)
    assert q.format.block_size == 16 and q.scales.shape[-1] == 3
    np.testing.assert_array_equal(dequantize(q), quantize_dequantize(x, "mxfp4@16", axis=1))
    assert not np.array_equal(dequantize(q), quantize_dequantize(x, "mxfp4", axis=1))


def test_onnx_export_matches_the_simulator(mxfp4_b16, tmp_path):
    model, x = model_and_input()
    plan = make_plan(model, NAME)
    summary = export_onnx(model, (x,), plan, tmp_path / "m.onnx")
    assert {e["format"] for e in summary["layers"].values()} == {NAME}
    session = onnx_session(tmp_path / "m.onnx")
    (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    with torch.no_grad():
        want = quantized_copy(model, NAME)(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_host_compile_matches_the_simulator(mxfp4_b16):
    model, x = model_and_input()
    executable, lowered = compile_for_cpu(import_torch(model, (x,)), make_plan(model, NAME))
    assert set(lowered.layers) == {"0", "2"}
    (got,) = run(executable, [x.numpy()])
    with torch.no_grad():
        want = quantized_copy(model, NAME)(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6 * max(1.0, float(np.abs(want).max())))
