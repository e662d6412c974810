"""DirectEdit: exact inversion, mask blending, value injection, guidance, null-text optimisation and bad input,
on a seeded untrained network."""

import numpy as np
import pytest
import torch

from edgekit.models import directedit as d
from edgekit.models.weights import quantized_copy

torch.set_num_threads(1)  # tiny tensors: extra threads only contend on a shared machine


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    config = d.DirectEditConfig.tiny()
    model = d.build(config).eval()
    x, captions, masks, _labels = d.batch(7, 0, 3, config)
    return config, model, x, captions, masks


def test_source_path_reconstructs_exactly_while_plain_inversion_drifts(setup):
    config, model, x, captions, _ = setup
    inv = d.invert(model, x, captions, config.edit_steps)
    assert inv.nfe == config.edit_steps + 1
    assert (d.source_path(inv) - x).abs().max() < 1e-5
    assert (d.plain_reconstruct(model, inv, captions) - x).abs().max() > 1e-3


@pytest.mark.parametrize("fmt", ["mxfp8_e4m3", "mxfp4"])
def test_reconstruction_stays_exact_with_quantized_weights(setup, fmt):
    config, model, x, captions, _ = setup
    inv = d.invert(quantized_copy(model, fmt).eval(), x, captions, config.edit_steps)
    assert (d.source_path(inv) - x).abs().max() < 1e-5


def test_blend_keeps_the_source_outside_the_mask(setup):
    config, model, x, captions, masks = setup
    inv = d.invert(model, x, captions, config.edit_steps)
    targets = [c.replace(c.split()[1], "cyan" if c.split()[1] != "cyan" else "red") for c in captions]
    y = d.edit(model, inv, targets, mask=masks)
    outside = ~masks[:, None].expand_as(x)
    assert (y - x)[outside].abs().max() < 1e-5
    assert (y - x)[~outside].abs().max() > 1e-3  # the edit does change the object
    unblended = d.edit(model, inv, targets, mask=None)
    assert (unblended - x)[outside].abs().max() > 1e-3


def test_value_injection_changes_the_edit_path(setup):
    config, model, x, captions, _masks = setup
    inv = d.invert(model, x, captions, config.edit_steps)
    targets = ["a cyan square"] * len(x)
    a = d.edit(model, inv, targets, inject=0)
    b = d.edit(model, inv, targets, inject=config.edit_steps)
    assert (a - b).abs().max() > 1e-4
    # injecting the source values under the source caption reproduces the source exactly
    assert (d.edit(model, inv, captions, inject=config.edit_steps) - x).abs().max() < 1e-5


def test_guidance_uses_the_null_caption(setup):
    config, model, x, captions, _ = setup
    inv = d.invert(model, x, captions, config.edit_steps)
    # guidance 1 is the caption's velocity alone: the source caption then gives back the source exactly
    assert (d.edit(model, inv, captions, guidance=1.0) - x).abs().max() < 1e-5
    guided = d.edit(model, inv, captions, guidance=3.0)
    assert (guided - x).abs().max() > 1e-3
    offsets = [torch.randn(len(x), 1, config.width, generator=torch.Generator().manual_seed(0))] * config.edit_steps
    assert (d.edit(model, inv, captions, guidance=3.0, null_offsets=offsets) - guided).abs().max() > 1e-4
    assert d.path_nfe(config.edit_steps, 1.0) == config.edit_steps
    assert d.path_nfe(config.edit_steps, 3.0) == 2 * config.edit_steps


def test_null_text_optimisation_tracks_the_inversion_under_guidance(setup):
    config, model, x, captions, _ = setup
    inv = d.invert(model, x, captions, config.edit_steps)
    before = [p.detach().clone() for p in model.parameters()]
    nt = d.null_text_optimise(model, inv, captions, 3.0, iterations=10)
    plain = (d.plain_reconstruct(model, inv, captions, 3.0) - x).abs().mean()
    assert (nt.reconstruction - x).abs().mean() < plain / 2
    # the offsets replayed by the edit path give the same reconstruction
    replay = d.edit(model, inv, captions, residuals=False, guidance=3.0, null_offsets=nt.offsets)
    assert (replay - nt.reconstruction).abs().max() < 1e-5
    assert nt.forwards == config.edit_steps * 12 and nt.backwards == config.edit_steps * 10
    assert all(torch.equal(a, b) and b.requires_grad for a, b in zip(before, model.parameters()))
    assert all(p.grad is None for p in model.parameters())


def test_null_text_bad_arguments_are_named(setup):
    _config, model, x, captions, _ = setup
    inv = d.invert(model, x, captions, 2)
    with pytest.raises(ValueError, match="guidance=1.0 must be > 1"):
        d.null_text_optimise(model, inv, captions, 1.0)
    with pytest.raises(ValueError, match="iterations=0"):
        d.null_text_optimise(model, inv, captions, 2.0, iterations=0)
    with pytest.raises(ValueError, match="lr=0"):
        d.null_text_optimise(model, inv, captions, 2.0, lr=0)
    with pytest.raises(ValueError, match="null_offsets has 1 entries"):
        d.edit(model, inv, captions, guidance=2.0, null_offsets=[None])
    with pytest.raises(ValueError, match="guidance=0.5 must be >= 1"):
        d.edit(model, inv, captions, guidance=0.5)


def test_caption_dropout_trains_on_the_null_caption():
    config = d.DirectEditConfig.tiny(cond_drop=0.5, batch=64)
    spec = d.train_spec(config)
    seen = []
    model = d.build(config)
    original = model.forward
    model.forward = lambda z, t, tokens: seen.append(tokens) or original(z, t, tokens)
    spec.loss(model, np.random.default_rng(0), 0)
    null = (seen[0] == d.null_tokens(1)).all(dim=1)
    assert 16 < int(null.sum()) < 48  # about half of 64
    with pytest.raises(ValueError, match="cond_drop"):
        d.DirectEditConfig.tiny(cond_drop=1.0)


def test_bad_input_is_named(setup):
    _config, model, x, captions, masks = setup
    with pytest.raises(ValueError, match="images must have shape"):
        d.invert(model, x[:, :, :16, :16], captions, 2)
    with pytest.raises(ValueError, match="images must have shape"):
        d.invert(model, x[:, :1], captions, 2)
    inv = d.invert(model, x, captions, 2)
    with pytest.raises(ValueError, match="mask must have shape"):
        d.edit(model, inv, captions, mask=masks[:, :16])
    with pytest.raises(ValueError, match="caption 0 is empty"):
        d.invert(model, x, ["", *captions[1:]], 2)
    with pytest.raises(ValueError, match="no tokens for 'purple'"):
        d.edit(model, inv, ["a purple circle"] * len(x))
    with pytest.raises(ValueError, match="inject=9"):
        d.edit(model, inv, captions, inject=9)


def test_example_inputs_run_the_velocity_network():
    config = d.DirectEditConfig.tiny()
    v = d.build(config)(*d.example_inputs(config))
    assert v.shape == (1, 3, 32, 32)
