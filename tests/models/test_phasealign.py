import numpy as np
import pytest
import torch

from edgekit.models import phasealign as pa
from edgekit.models import tiny_clip
from edgekit.models.registry import train

torch.set_num_threads(1)


def test_phase_scores_gamma_one_is_the_inner_product_over_magnitudes():
    g = torch.Generator().manual_seed(0)
    feats, text = torch.randn(2, 5, 8, generator=g), torch.randn(3, 8, generator=g)
    v, t = pa.as_complex(feats), pa.as_complex(text)
    expected = (v[:, :, None, :] * t.conj()[None, None]).real.sum(-1) / (v.abs()[:, :, None] * t.abs()[None, None]).sum(-1)
    torch.testing.assert_close(pa.phase_scores(feats, text, 1.0), expected)


def test_phase_scores_see_phase_only_and_are_one_when_aligned():
    g = torch.Generator().manual_seed(1)
    text = torch.randn(2, 8, generator=g)
    aligned = 3.0 * text[None, :1]  # a patch equal to class 0, scaled
    assert pa.phase_scores(aligned, text, 0.5)[0, 0, 0] == pytest.approx(1.0)
    # a common rotation of every complex component of patch and text leaves the score unchanged
    feats = torch.randn(1, 4, 8, generator=g)
    rot = torch.exp(1j * torch.rand(4, generator=g) * 6.28)
    turn = lambda x: torch.cat([(pa.as_complex(x) * rot).real, (pa.as_complex(x) * rot).imag], dim=-1)  # noqa: E731
    for gamma in (0.0, 1.0, 2.0):
        torch.testing.assert_close(pa.phase_scores(turn(feats), turn(text), gamma), pa.phase_scores(feats, text, gamma))
    # gamma 0 ignores magnitudes: rescaling one component of the patch changes nothing
    scaled = feats.clone()
    scaled[..., 0] *= 10
    scaled[..., 4] *= 10
    torch.testing.assert_close(pa.phase_scores(scaled, text, 0.0), pa.phase_scores(feats, text, 0.0))
    assert not torch.allclose(pa.phase_scores(scaled, text, 1.0), pa.phase_scores(feats, text, 1.0))
    with pytest.raises(ValueError, match="gamma=-1"):
        pa.phase_scores(feats, text, -1)


def test_local_contrast_removes_offsets_and_scales_and_marks_peaks():
    maps = np.zeros((1, 1, 8, 8))
    np.testing.assert_allclose(pa.local_contrast(maps + 0.7), 0.0, atol=1e-9)
    maps[0, 0, 4, 4] = 1.0
    out = pa.local_contrast(maps)
    assert out[0, 0, 4, 4] == out.max() > 0
    np.testing.assert_allclose(pa.local_contrast(5 * maps + 2), out, rtol=0.02, atol=1e-9)  # up to eps


def test_propagate_identity_and_uniform_attention():
    s = torch.randn(1, 4, 3)
    torch.testing.assert_close(pa.propagate(s, torch.eye(4)[None], 2), s)
    uniform = torch.full((1, 4, 4), 0.25)
    torch.testing.assert_close(pa.propagate(s, uniform, 1), s.mean(dim=1, keepdim=True).expand(1, 4, 3))


def test_segment_mean_iou_and_boundary_f():
    maps = np.zeros((1, 2, 4, 4))
    maps[0, 1, :2] = 1.0
    maps[0, 0, 2:, :2] = 0.5
    np.testing.assert_array_equal(pa.segment(maps, 0.4), [[[2] * 4, [2] * 4, [1, 1, 0, 0], [1, 1, 0, 0]]])
    truth = np.zeros((1, 4, 4), int)
    truth[0, :2] = 2
    pred = truth.copy()
    assert pa.mean_iou(pred, truth) == 1.0 and pa.boundary_f(pred, truth) == 1.0
    pred[0, 2] = 2  # class 2 grows by a row: IoU 8/12; background 4/8
    assert pa.mean_iou(pred, truth) == pytest.approx((8 / 12 + 4 / 8) / 2)
    wide = np.zeros((1, 16, 16), int)
    wide[0, 4:12, 4:12] = 1
    shifted = np.roll(wide, 2, axis=2)
    assert pa.boundary_f(shifted, wide, tolerance=2) == 1.0 > pa.boundary_f(shifted, wide, tolerance=0)
    with pytest.raises(ValueError, match="does not match"):
        pa.mean_iou(pred, truth[:, :3])
    with pytest.raises(ValueError, match="does not match"):
        pa.boundary_f(pred, truth[:, :, :3])


@pytest.fixture(scope="module")
def model():
    return train("tiny_clip", tiny_clip.TinyCLIPConfig.tiny(), cache_dir=False).model.eval()


def test_dense_features_and_attention(model):
    images = torch.rand(2, 3, 32, 32)
    feats, attn = pa.dense_features(model, images, "value")
    assert feats.shape == (2, 64, model.config.embed) and attn.shape == (2, 64, 64)
    torch.testing.assert_close(attn.sum(-1), torch.ones(2, 64))
    last = model.blocks[-1]
    x = model.tokens_in(images)
    for block in model.blocks[:-1]:
        x = block(x)
    v = last.qkv(last.ln1(x))[..., 2 * model.config.width:]  # the value path, MaskCLIP's read-out
    torch.testing.assert_close(feats, model.image_proj(model.ln_post(last.out(v)))[:, 1:].detach())
    with pytest.raises(ValueError, match="readout='cls'"):
        pa.dense_features(model, images, "cls")
    with pytest.raises(ValueError, match=r"\(batch, 3, 32, 32\)"):
        pa.dense_features(model, torch.rand(2, 4, 32, 32))


def test_evaluate_reports_every_method_in_range(model):
    out = pa.evaluate(pa.PhaseAlignConfig.tiny(), model=model)
    for method in pa.METHODS:
        assert 0 <= out[f"miou_{method}"] <= 1 and 0 <= out[f"boundary_f_{method}"] <= 1
        assert out[f"val_miou_{method}"] > 0
    assert out["hops_cosine"] == 0 and out["hops_phasealign"] in pa.HOPS
    assert out["gamma_cosine"] == 1.0 and out["gamma_phasealign"] in pa.GAMMAS
