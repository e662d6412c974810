"""Training with quantized GEMM operands: each product rounds along its own reduction axis."""

import numpy as np
import pytest
import torch
from torch import nn

from edgekit.models import mx_training as mt
from edgekit.simulators import quantize_dequantize


def test_each_gemm_rounds_its_operands_along_its_reduction():
    torch.manual_seed(0)
    x = torch.randn(64, 96, requires_grad=True)
    w = torch.randn(32, 96, requires_grad=True)
    y = mt.QuantizedMatmul.apply(x, w, "mxfp4", "mxint8")
    g = torch.randn(64, 32)
    y.backward(g)

    def q(t, fmt, axis):
        return torch.from_numpy(quantize_dequantize(t.detach().numpy(), fmt, axis))

    assert torch.equal(y, q(x, "mxfp4", 1) @ q(w, "mxfp4", 1).T)
    assert torch.equal(x.grad, q(g, "mxint8", 1) @ q(w, "mxint8", 0))  # reduction over the output features
    assert torch.equal(w.grad, q(g, "mxint8", 0).T @ q(x, "mxint8", 0))  # reduction over the tokens


def test_bf16_training_step_is_close_to_float_and_mx4_is_not():
    torch.manual_seed(0)
    float_model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
    x = torch.randn(32, 64)
    grads = {}
    for scheme in ("float", "bf16", "mxfp4_forward"):
        model = nn.Sequential(*[nn.Linear(m.in_features, m.out_features) if isinstance(m, nn.Linear) else m
                                for m in float_model])
        model.load_state_dict(float_model.state_dict())
        if scheme != "float":
            mt.quantize_linears(model, scheme)
        model(x).square().mean().backward()
        grads[scheme] = model[0].weight.grad
    rel = {s: float((grads[s] - grads["float"]).norm() / grads["float"].norm()) for s in ("bf16", "mxfp4_forward")}
    assert rel["bf16"] < 0.02 < rel["mxfp4_forward"]


def test_asymmetric_int_range_reaches_minus_two_and_symmetric_clips():
    block = np.zeros((1, 32), np.float32)
    block[0, 0], block[0, 1] = 1.9999, -1.9999  # amax in [1, 2): the E8M0 scale is 1, elements k/64
    sym = mt.round_operand(torch.from_numpy(block), "mxint8", 1).numpy()[0]
    asym = mt.round_operand(torch.from_numpy(block), "mxint8_asym", 1).numpy()[0]
    assert sym[0] == 127 / 64 and sym[1] == -127 / 64
    assert asym[0] == 127 / 64 and asym[1] == -2.0  # the negative side only: a biased error


def test_fp32_scale_baselines_never_clip():
    t = torch.tensor([[3.0, -3.0, 0.5], [0.25, 1.0, -0.1]])
    for fmt in ("int8_tensor", "int8_channel"):
        out = mt.round_operand(t, fmt, 1)
        assert torch.allclose(out.abs().amax(dim=1), t.abs().amax(dim=1) if fmt == "int8_channel" else out.abs().amax(1))
        assert float((out - t).abs().max()) <= float(t.abs().max()) / 127 / 2 + 1e-7


def test_quantize_linears_keeps_the_weights_and_refuses_unknown_schemes():
    model = nn.Sequential(nn.Linear(8, 4), nn.Linear(4, 2))
    before = [p.clone() for p in model.parameters()]
    mt.quantize_linears(model, "mxint8")
    assert all(isinstance(m, mt.QuantizedLinear) for m in model)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    with pytest.raises(ValueError, match="scheme must be one of bf16"):
        mt.quantize_linears(model, "int3")
    with pytest.raises(ValueError, match=r"'schemes' of MXTrainingConfig must be a list, each entry one of bf16.*got \('bf16', 'fp64'\)"):
        mt.MXTrainingConfig(schemes=("bf16", "fp64"))


def test_asymmetric_range_only_ever_rounds_lower_than_symmetric():
    """Where the two ranges differ, the asymmetric one gives the lower value: its error is biased negative."""
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32))
    for fmt in ("mxint8", "mxint4"):
        diff = mt.round_operand(x, f"{fmt}_asym", 1) - mt.round_operand(x, fmt, 1)
        assert float(diff.max()) <= 0 and float(diff.min()) < 0
    rows = {r["format"]: r for r in mt.clipping_bias(size=1 << 16)}
    assert set(rows) == {"mxint8", "mxint8_asym", "mxint4", "mxint4_asym", "int8_tensor", "int8_channel"}


def test_tiny_training_runs_every_scheme_it_names():
    out = mt.evaluate(mt.MXTrainingConfig.tiny(steps=5))
    assert set(out) == {"val_ce_bf16", "val_ce_mxint8", "val_ce_mxint8_asym", "excess_mxint8", "excess_mxint8_asym"}
    assert all(np.isfinite(v) for v in out.values())
