import numpy as np
import torch

from edgekit.models.digits import DigitsConfig, evaluate
from edgekit.models.registry import train
from edgekit.models.weights import quantizable_weights, quantized_copy
from edgekit.simulators import quantize_dequantize

TINY = DigitsConfig.tiny()


def test_training_is_deterministic_and_learns():
    a, b = (train("digits", TINY, cache_dir=False).model for _ in range(2))
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    assert evaluate(a, TINY)["accuracy"] > 0.8


def test_quantized_copy_holds_format_values_and_leaves_the_original():
    model = train("digits", TINY, cache_dir=False).model
    before = [w.detach().clone() for w in quantizable_weights(model).values()]
    q = quantized_copy(model, "mxfp4")
    for w, orig in zip(quantizable_weights(q).values(), before):
        w = w.detach().numpy()
        np.testing.assert_array_equal(w, quantize_dequantize(orig.numpy(), "mxfp4", axis=1))
    for w, orig in zip(quantizable_weights(model).values(), before):
        assert torch.equal(w, orig)
