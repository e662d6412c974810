"""Every registered model, in its tiny config: trains, evaluates, quantizes, exports to ONNX and compiles."""

import math

import numpy as np
import pytest
import torch

from edgekit.compilers.build import run
from edgekit.compilers.importer import import_torch
from edgekit.compilers.onnx_export import export_onnx, onnx_session
from edgekit.compilers.pipeline import compile_for_cpu
from edgekit.compilers.plan import make_plan
from edgekit.models.registry import get_model, make_config, model_names, train
from edgekit.models.weights import quantizable_weights, quantized_copy


@pytest.fixture(scope="module", params=model_names())
def tiny(request):
    """(entry, config, trained model) of one registered model; trained once into the test cache."""
    entry = get_model(request.param)
    config = make_config(entry, tiny=True)
    return entry, config, train(entry, config).model


def outputs(model, inputs) -> list[np.ndarray]:
    with torch.no_grad():
        out = model(*inputs)
    return [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]


def assert_float32_close(actual, expected):
    # float32 sums in another order (TVM's convolutions against PyTorch's, whose kernels differ by CPU):
    # through OSSD's six GroupNorm'd convolutions that reaches 3e-5 on an Intel Xeon; a wrong code or
    # scale of MXFP4 moves an output by a quantization step, thousands of times more
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=5e-5 * scale)


def test_entry_is_complete(tiny):
    entry, config, model = tiny
    assert entry.higher_is_better in (True, False)
    assert config.seed == 0 and config == make_config(entry, tiny=True)
    inputs = entry.example_inputs(config)
    assert isinstance(inputs, tuple) and inputs and all(isinstance(t, torch.Tensor) for t in inputs)
    assert quantizable_weights(model), "a deployable model has Linear/Conv weights for the formats to act on"


def test_evaluate_names_its_metric_and_quantized_copies_score(tiny):
    entry, config, model = tiny
    result = entry.evaluate(model, config)
    assert entry.metric in result and math.isfinite(result[entry.metric])
    assert all(isinstance(v, (int, float)) for v in result.values())
    mxint8 = entry.evaluate(quantized_copy(model, "mxint8"), config)
    assert set(mxint8) == set(result) and math.isfinite(mxint8[entry.metric])


def test_onnx_export_matches_the_quantized_model(tiny, tmp_path):
    entry, config, model = tiny
    inputs = entry.example_inputs(config)
    plan = make_plan(model, "mxfp4")
    path = tmp_path / f"{entry.name}.onnx"
    export_onnx(model, inputs, plan, path)
    session = onnx_session(path)
    feeds = {i.name: t.numpy() for i, t in zip(session.get_inputs(), inputs)}
    got = session.run(None, feeds)
    for g, want in zip(got, outputs(quantized_copy(model, "mxfp4"), inputs), strict=True):
        assert_float32_close(g, want)


def test_tvm_compile_matches_the_quantized_model(tiny):
    entry, config, model = tiny
    inputs = entry.example_inputs(config)
    executable, lowered = compile_for_cpu(import_torch(model, inputs), make_plan(model, "mxfp4"))
    assert set(lowered.layers) == set(quantizable_weights(model))
    got = run(executable, [t.numpy() for t in inputs])
    for g, want in zip(got, outputs(quantized_copy(model, "mxfp4"), inputs), strict=True):
        assert_float32_close(g, want)
