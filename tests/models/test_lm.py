import math

import numpy as np
import pytest
import torch

from edgekit.models import lm
from edgekit.models.lm import (
    LMConfig,
    build,
    compare,
    evaluate,
    example_inputs,
    load_corpus,
    split_files,
)
from edgekit.models.registry import get_model, load_checkpoint, save_checkpoint, train
from edgekit.models.weights import quantizable_weights, quantized_copy

TINY = LMConfig.tiny()


@pytest.fixture(scope="module")
def trained():
    return train("lm", TINY, cache_dir=False).model


def test_split_is_by_file_disjoint_and_deterministic():
    train_files, val_files = split_files(TINY)
    assert train_files and val_files
    assert not set(train_files) & set(val_files)
    assert sorted(train_files + val_files) == sorted(lm.stdlib_files())
    assert split_files(TINY) == (train_files, val_files)
    # the split does not move with the training seed
    assert split_files(LMConfig.tiny(seed=5)) == (train_files, val_files)
    for path in train_files + val_files:
        assert path.suffix == ".py"
        assert not {"test", "tests", "idlelib", "site-packages"} & set(path.parts)


def test_corpus_is_capped_uint8_and_from_its_files():
    tr, va, tr_used, va_used = load_corpus(TINY)
    assert tr.dtype == va.dtype == np.uint8
    assert len(tr) == TINY.max_train_bytes and len(va) == TINY.max_val_bytes
    train_files, val_files = split_files(TINY)
    assert tr_used == train_files[:len(tr_used)] and va_used == val_files[:len(va_used)]
    assert lm.decode(tr[:100]) == tr_used[0].read_bytes()[:100]


def test_tokenizer_round_trips_bytes():
    text = "def f(x):\n    return 'é→ü' + x  # ünïcödé\n"
    assert lm.decode(lm.encode(text)) == text.encode("utf-8")
    every = bytes(range(256))
    tokens = lm.encode(every)
    assert tokens.dtype == np.uint8 and list(tokens) == list(range(256))
    assert lm.decode(tokens) == every


def test_shapes_widths_and_linear_projections():
    model = build(TINY)
    (x,) = example_inputs(TINY)
    assert x.shape == (1, TINY.seq_len) and x.dtype == torch.int64
    assert model(x).shape == (1, TINY.seq_len, 256)
    assert model(torch.zeros(3, 10, dtype=torch.int64)).shape == (3, 10, 256)
    weights = quantizable_weights(model)
    assert len(weights) == 7 * TINY.layers + 1  # q k v o gate up down per block, and the head
    for w in weights.values():
        assert w.shape[1] % 64 == 0 and w.shape[0] % 64 == 0
    with pytest.raises(ValueError):
        LMConfig(width=100)


def test_causal_masking():
    model = build(TINY).eval()
    x = torch.randint(0, 256, (2, TINY.seq_len), generator=torch.Generator().manual_seed(0))
    y = x.clone()
    y[:, 40:] = (y[:, 40:] + 1) % 256
    with torch.no_grad():
        a, b = model(x), model(y)
    torch.testing.assert_close(a[:, :40], b[:, :40], rtol=0, atol=1e-6)
    assert not torch.allclose(a[:, 40:], b[:, 40:])


def test_training_is_deterministic(trained):
    again = train("lm", TINY, cache_dir=False).model
    for (name, pa), pb in zip(trained.state_dict().items(), again.state_dict().values()):
        assert torch.equal(pa, pb), name
    other = train("lm", LMConfig.tiny(seed=1, steps=5), cache_dir=False).model
    assert not torch.equal(other.head.weight, trained.head.weight)


def test_trained_model_beats_the_unigram_baseline(trained):
    result = evaluate(trained, TINY)
    assert result["perplexity"] < result["unigram_perplexity"]
    assert math.isclose(result["bits_per_byte"], math.log2(result["perplexity"]))
    untrained = evaluate(build(TINY), TINY)
    assert untrained["perplexity"] > result["perplexity"]
    assert result["unigram_perplexity"] == untrained["unigram_perplexity"]


def test_compare_identical_and_quantized(trained):
    same = compare(trained, trained, TINY)
    assert abs(same["kl"]) < 1e-6 and same["agreement"] == 1.0
    mxint8 = compare(trained, quantized_copy(trained, "mxint8"), TINY)
    mxfp4 = compare(trained, quantized_copy(trained, "mxfp4"), TINY)
    for r in (mxint8, mxfp4):
        assert math.isfinite(r["kl"]) and r["kl"] >= -1e-9
        assert 0.0 <= r["agreement"] <= 1.0
    assert mxint8["kl"] < mxfp4["kl"]
    assert mxint8["agreement"] >= mxfp4["agreement"]


def test_registered_and_checkpoint_round_trip(trained, tmp_path):
    entry = get_model("lm")
    assert entry.config is LMConfig and entry.config(seed=3).seed == 3
    path = save_checkpoint(tmp_path / "lm.pt", "lm", TINY, trained)
    _, config, model = load_checkpoint(path)
    assert config == TINY
    (x,) = example_inputs(TINY)
    with torch.no_grad():
        torch.testing.assert_close(model(x), trained(x), rtol=0, atol=0)


def test_torch_export(trained):
    inputs = example_inputs(TINY)
    program = torch.export.export(trained, inputs)
    with torch.no_grad():
        torch.testing.assert_close(program.module()(*inputs), trained(*inputs))
