"""Conv1d layers lower to the conv2d decode kernel (height 1) and export to ONNX, matching PyTorch."""

import pytest
import torch
from torch import nn

from edgekit.compilers.build import run
from edgekit.compilers.importer import import_torch
from edgekit.compilers.onnx_export import export_onnx, onnx_session
from edgekit.compilers.pipeline import compile_for_cpu
from edgekit.compilers.plan import make_plan

from .test_compiled_models import assert_float32_close, simulated


class Conv1dNet(nn.Module):
    """Padding, stride, dilation and a pointwise conv: every conv1d attribute the lowering maps."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(3, 32, 5, padding=2)
        self.conv2 = nn.Conv1d(32, 64, 3, stride=2, dilation=2, padding=(1,))
        self.mix = nn.Conv1d(64, 8, 1)

    def forward(self, x):
        return self.mix(torch.relu(self.conv2(torch.relu(self.conv1(x)))))


@pytest.fixture(scope="module")
def network():
    torch.manual_seed(0)
    return Conv1dNet().eval(), torch.randn(2, 3, 24, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("fmt", ["fp32", "mxfp8_e4m3", "mxfp4", "nvfp4"])
def test_conv1d_compiles_and_matches(network, fmt):
    model, x = network
    executable, lowered = compile_for_cpu(import_torch(model, (x,)), make_plan(model, fmt))
    assert {name: record.op for name, record in lowered.layers.items()} == dict.fromkeys(
        ["conv1", "conv2", "mix"], "conv1d")
    assert lowered.layers["conv2"].shape == [64, 32, 3]
    (out,) = run(executable, [x.numpy()])
    with torch.no_grad():
        assert_float32_close(out, simulated(model, fmt)(x).numpy())


@pytest.mark.parametrize("fmt", ["mxfp8_e4m3", "mxfp4"])
def test_conv1d_onnx_export_matches(network, fmt, tmp_path):
    model, x = network
    summary = export_onnx(model, (x,), make_plan(model, fmt), tmp_path / "conv1d.onnx")
    assert summary["layers"]["conv2"]["shape"] == [64, 32, 3]
    session = onnx_session(tmp_path / "conv1d.onnx")
    (out,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    with torch.no_grad():
        assert_float32_close(out, simulated(model, fmt)(x).numpy())
