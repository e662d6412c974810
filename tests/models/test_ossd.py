from dataclasses import replace

import numpy as np
import pytest
import torch

from edgekit.models import ossd, shape_scenes, tiny_clip
from edgekit.models.registry import make_config, train

torch.set_num_threads(1)


def box(x0, y0, x1, y1):
    return np.array([x0, y0, x1, y1], np.float32)


def test_ap50_on_a_hand_computed_case():
    # class 0: two ground truths in image 0, one in image 1; detections by score:
    # 0.9 hit (img 0), 0.8 duplicate of the same object (false positive), 0.7 miss, 0.6 hit (img 1)
    gt = [(np.stack([box(0, 0, 10, 10), box(20, 20, 30, 30)]), np.array([0, 0])),
          (np.stack([box(0, 0, 10, 10)]), np.array([0]))]
    dets = [[(box(0, 0, 10, 10), 0, 0.9), (box(1, 0, 10, 10), 0, 0.8), (box(40, 40, 50, 50), 0, 0.7)],
            [(box(0, 0, 10, 9), 0, 0.6)]]
    # precision/recall: (1, 1/3) (1/2, 1/3) (1/3, 1/3) (1/2, 2/3); envelope 1 up to recall 1/3, 1/2 up to 2/3,
    # 0 after: 34 of the 101 recall points (0 .. 0.33) read 1, the 33 up to 0.66 read 0.5
    assert ossd.ap50(dets, gt, [0]) == pytest.approx((34 * 1.0 + 33 * 0.5) / 101)
    # a box at IoU 0.45 does not count; a class without ground truth is left out of the mean
    assert ossd.ap50([[(box(0, 0, 10, 4.5), 0, 0.9)]], [(np.stack([box(0, 0, 10, 10)]), np.array([0]))], [0, 1]) == 0.0
    assert ossd.ap50([[(box(0, 0, 10, 10), 0, 0.9)]], [(np.stack([box(0, 0, 10, 10)]), np.array([0]))], [0, 1]) == 1.0
    with pytest.raises(ValueError, match="2 images of detections but 1"):
        ossd.ap50([[], []], gt[:1], [0])


def test_distillation_losses_are_zero_when_student_equals_teacher():
    g = torch.Generator().manual_seed(0)
    region, feats = torch.randn(5, 32, generator=g), torch.randn(2, 16, 16, 16, generator=g)
    assert ossd.semantic_distillation(region, 3 * region).item() == pytest.approx(0.0, abs=1e-6)  # scale-free
    assert ossd.spatial_distillation(feats, feats.clone()).item() == 0.0
    assert ossd.semantic_distillation(region, -region).item() > 1.0
    assert ossd.spatial_distillation(feats, feats + 1).item() == pytest.approx(1.0)


def test_quality_combination_touches_novel_classes_only():
    p = torch.full((1, len(ossd.CLASSES)), 0.64)
    q = torch.full((1, 1), 0.25)
    out = ossd.combine(p, q, 0.5)
    novel = ossd.NOVEL_MASK
    torch.testing.assert_close(out[0, novel], torch.full((int(novel.sum()),), 0.4))  # sqrt(0.64 * 0.25)
    torch.testing.assert_close(out[0, ~novel], p[0, ~novel])
    torch.testing.assert_close(ossd.combine(p, q, 1.0), p)
    with pytest.raises(ValueError, match="alpha=1.5"):
        ossd.combine(p, q, 1.5)


def test_assignment_and_centerness():
    owner = ossd.assign(np.stack([box(0, 0, 32, 32), box(8, 8, 16, 16)]))
    assert owner[0, 0] == 0 and owner[2, 2] == 1 and owner[3, 3] == 1  # the smaller box wins on overlap
    assert owner[10, 10] == -1
    c = ossd.centerness(torch.tensor([[5.0, 5.0], [2.0, 5.0]]), torch.tensor([[0.0, 0, 10, 10], [0.0, 0, 10, 10]]))
    torch.testing.assert_close(c, torch.tensor([1.0, 0.5]))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    config = make_config("ossd", {"variant": "full"}, tiny=True)
    return config, train("ossd", config, cache_dir=cache).model, train("tiny_clip", config.clip_config(),
                                                                        cache_dir=cache).model


def test_novel_classes_are_scored_through_text_embeddings(trained):
    config, model, clip = trained
    torch.testing.assert_close(model.text, ossd.class_text(clip, ossd.CLASSES))
    images = torch.from_numpy(shape_scenes.render_scene(0, 0, 64, "novel").image[None])
    logits, boxes, quality = model(images)
    assert logits.shape == (1, 36, 16, 16) and boxes.shape == (1, 4, 16, 16) and quality.shape == (1, 1, 16, 16)
    # swapping two classes' text embeddings swaps their score maps: scoring is by text, not a fixed head
    i, j = ossd.CLASSES.index("red star"), ossd.CLASSES.index("red circle")
    model.text[[i, j]] = model.text[[j, i]].clone()
    swapped = model(images)[0]
    model.text[[i, j]] = model.text[[j, i]].clone()
    torch.testing.assert_close(swapped[:, i], logits[:, j])
    torch.testing.assert_close(swapped[:, j], logits[:, i])
    # one base-class teacher per seed, whatever distillation weights the student is trained with
    assert config.teacher_config() == replace(config, semantic_weight=0.1, spatial_weight=3.0).teacher_config()
    metrics = ossd.evaluate(model, config)
    assert set(metrics) == {"novel_ap50", "base_ap50", "alpha", "validation_novel_ap50"}
    assert metrics["alpha"] in ossd.ALPHAS


def test_semantic_targets_are_the_clip_embeddings_of_object_crops(trained):
    _, model, clip = trained
    images, targets = ossd.scene_batch(0, 0, 2, "base", 3)
    crops = ossd.crops(images, targets)
    assert crops.shape == (sum(len(b) for b, _ in targets), 3, 32, 32)
    losses = ossd.detection_losses(model, images, targets, model, clip, quality=True)
    assert set(losses) == {"classification", "box", "quality", "semantic", "spatial"}
    assert losses["spatial"].item() == 0.0  # the model is its own teacher here
    assert losses["semantic"].item() > 0.0


def test_bad_input_errors(trained):
    _, model, clip = trained
    with pytest.raises(ValueError, match=r"images must have shape \(batch, 3, 64, 64\); got \(1, 3, 32, 32\)"):
        model(torch.zeros(1, 3, 32, 32))
    with pytest.raises(ValueError, match=r"got \(1, 1, 64, 64\)"):
        model(torch.zeros(1, 1, 64, 64))
    scene = shape_scenes.render_scene(0, 0, 64)
    with pytest.raises(ValueError, match="masks of shape .* do not match the image"):
        ossd.scene_targets(scene.image, scene.masks[:, :32], scene.labels, scene.caption)
    with pytest.raises(ValueError, match="caption is empty"):
        ossd.scene_targets(scene.image, scene.masks, scene.labels, " ")
    with pytest.raises(ValueError, match="no tokens for 'purple'"):
        ossd.class_text(clip, ["purple star"])
    with pytest.raises(ValueError, match="class name '' is empty"):
        ossd.class_text(clip, [""])
    with pytest.raises(ValueError, match="config key 'variant' of OSSDConfig must be one of base, semantic"):
        make_config("ossd", {"variant": "huge"})
    assert tiny_clip.tokenize("a red star").shape == (1, tiny_clip.MAX_TOKENS)
