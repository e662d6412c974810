import pytest
import torch

from edgekit.models import shape_scenes, tiny_clip
from edgekit.models.registry import train

torch.set_num_threads(1)
TINY = tiny_clip.TinyCLIPConfig.tiny()


@pytest.fixture(scope="module")
def trained():
    return train("tiny_clip", TINY, cache_dir=False)


def test_training_is_deterministic_and_learns_the_words(trained):
    again = train("tiny_clip", TINY.__class__.tiny(steps=3), cache_dir=False).model
    other = train("tiny_clip", TINY.__class__.tiny(steps=3), cache_dir=False).model
    for a, b in zip(again.parameters(), other.parameters()):
        assert torch.equal(a, b)
    assert trained.loss_history[-1] < 0.6 * trained.loss_history[0]
    scores = tiny_clip.evaluate(trained.model, TINY)
    assert scores["base_accuracy"] > 3 / 36  # well above chance among 36 prompts


def test_encoders_are_unit_norm_and_padding_does_not_leak(trained):
    model = trained.model.eval()
    img, txt = model(torch.rand(2, 3, 32, 32), tiny_clip.tokenize(["a red star", "a blue circle and a red star"]))
    torch.testing.assert_close(img.norm(dim=-1), torch.ones(2))
    torch.testing.assert_close(txt.norm(dim=-1), torch.ones(2))
    tokens = tiny_clip.tokenize(["a red star"])
    noisy = tokens.clone()
    noisy[0, 5:] = 0  # padding beyond the end-of-text token already 0: same embedding
    torch.testing.assert_close(model.encode_text(tokens), model.encode_text(noisy))


def test_tokenize_pads_and_rejects_bad_text():
    t = tiny_clip.tokenize("a red star")
    assert t.shape == (1, tiny_clip.MAX_TOKENS)
    assert t[0, :4].tolist() == [tiny_clip.WORDS.index(w) for w in ("a", "red", "star", "<eot>")]
    assert (t[0, 4:] == 0).all()
    with pytest.raises(ValueError, match="caption 0 is empty"):
        tiny_clip.tokenize([""])
    with pytest.raises(ValueError, match="no tokens for 'purple'"):
        tiny_clip.tokenize(["a purple star"])


def test_bad_images_and_configs_are_named(trained):
    with pytest.raises(ValueError, match=r"\(batch, 3, 32, 32\); got \(1, 1, 32, 32\)"):
        trained.model.encode_image(torch.zeros(1, 1, 32, 32))
    with pytest.raises(ValueError, match=r"got \(1, 3, 64, 64\)"):
        trained.model.encode_image(torch.zeros(1, 3, 64, 64))
    with pytest.raises(ValueError, match="'image_size' of TinyCLIPConfig must be one of 32, 64, got 48"):
        tiny_clip.TinyCLIPConfig(image_size=48)
    with pytest.raises(ValueError, match="multiples of 32"):
        tiny_clip.TinyCLIPConfig(width=48)


def test_never_trains_on_held_out_combinations():
    _, captions = tiny_clip.batch(0, 0, 200, TINY)
    held = {f"a {shape_scenes.label_name(p)}" for p in shape_scenes.HELD_OUT}
    assert not any(part in held for c in captions for part in c.split(" and "))
