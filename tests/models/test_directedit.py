"""DirectEdit: exact inversion, mask blending, value injection and bad input, on a seeded untrained network."""

import pytest
import torch

from edgekit.models import directedit as d
from edgekit.models.weights import quantized_copy


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
