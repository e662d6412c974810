import numpy as np
import pytest
import torch
from torch import nn

from edgekit.simulators.liftquant import quantize
from edgekit.simulators.liftquant.finetune import SignSTE, TrainableWeight, finetune_unit

FMT = "liftquant_16to8"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(32, 64, bias=False)
        self.down = nn.Linear(64, 32, bias=False)

    def forward(self, x, gain=1.0):
        return x + gain * self.down(torch.relu(self.up(x)))


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    block = Block()
    rng = np.random.default_rng(0)
    layers = {name: quantize(getattr(block, name.split(".")[0]).weight, FMT, input_scales=rng.uniform(0.8, 1.2, k),
                             group_size=16)
              for name, k in (("up.weight", 32), ("down.weight", 64))}
    inputs = [((torch.randn(16, 32),), {"gain": 0.5}) for _ in range(4)]
    with torch.no_grad():
        targets = [block(*args, **kwargs) for args, kwargs in inputs]
    return block, layers, inputs, targets


def test_trainable_weight_starts_at_the_stored_weight(setup):
    _, layers, _, _ = setup
    for q in layers.values():
        w = TrainableWeight(q)
        np.testing.assert_allclose(w().detach().numpy(), q.dequantize(), rtol=1e-4, atol=1e-6)
        back = w.to_tensor()
        np.testing.assert_array_equal(back.codes, q.codes)
        np.testing.assert_array_equal(back.row_scales, q.row_scales)
        np.testing.assert_array_equal(back.group_scales, q.group_scales)


def test_straight_through_gradient():
    latent = torch.tensor([-2.0, -0.3, 0.0, 0.5], requires_grad=True)
    out = SignSTE.apply(latent)
    assert out.tolist() == [-1.0, -1.0, 1.0, 1.0]
    out.sum().backward()
    assert latent.grad.tolist() == [0.0, 1.0, 1.0, 1.0]


def test_finetuning_lowers_the_block_error_and_never_raises_it(setup):
    block, layers, inputs, targets = setup
    tuned, summary = finetune_unit(block, layers, inputs, targets, steps=60, eval_every=20, lr=2e-3, scale_lr=1e-3)
    assert summary["final_loss"] < summary["start_loss"]
    with torch.no_grad():  # the reported loss is that of the stored (rounded) tensors
        params = {name: torch.from_numpy(q.dequantize()) for name, q in tuned.items()}
        err = sum(float(((torch.func.functional_call(block, params, a, k) - t).double() ** 2).sum())
                  for (a, k), t in zip(inputs, targets))
        energy = sum(float((t.double() ** 2).sum()) for t in targets)
    assert err / energy == pytest.approx(summary["final_loss"], rel=1e-3)
    same, summary0 = finetune_unit(block, layers, inputs, targets, steps=0)
    assert summary0["final_loss"] == summary0["start_loss"] and same == layers


def test_bad_input(setup):
    block, layers, inputs, targets = setup
    with pytest.raises(ValueError, match="equal length"):
        finetune_unit(block, layers, inputs, targets[:2])
    with pytest.raises(ValueError, match="steps must be"):
        finetune_unit(block, layers, inputs, targets, steps=-1)
