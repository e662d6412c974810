import numpy as np
import pytest

from edgekit.models import shape_scenes as ss


@pytest.mark.parametrize("size", ss.SIZES)
@pytest.mark.parametrize("split", ss.SPLITS)
def test_masks_match_pixels_and_boxes_match_masks(size, split):
    for scene in ss.scenes(3, 20, size, split):
        assert scene.image.shape == (3, size, size) and scene.image.dtype == np.float32
        covered = scene.masks.any(axis=0)
        assert not (scene.masks.sum(axis=0) > 1).any()  # visible masks never overlap
        for (colour, _), mask, box in zip(scene.labels, scene.masks, scene.boxes):
            assert mask.any()
            np.testing.assert_array_equal(scene.image[:, mask].T, np.tile(ss.COLOURS[colour], (mask.sum(), 1))
                                          .astype(np.float32))
            x0, y0, x1, y1 = box
            ys, xs = np.nonzero(mask)
            assert (x0, y0, x1, y1) == (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
        # background pixels are low-saturation: far from every object colour
        bg = scene.image[:, ~covered].T
        dist = np.abs(bg[:, None, :] - np.array(list(ss.COLOURS.values()))[None]).max(axis=2)
        assert dist.min() > 0.2


def test_split_holds_out_combinations_and_captions_name_objects():
    base = [lab for sc in ss.scenes(0, 200) for lab in sc.labels]
    novel = [lab for sc in ss.scenes(0, 50, split="novel") for lab in sc.labels]
    assert not set(base) & set(ss.HELD_OUT) and set(novel) <= set(ss.HELD_OUT)
    assert set(base) == set(ss.BASE_COMBOS)  # every base combination occurs
    assert {c for c, _ in base} == set(ss.COLOURS) and {s for _, s in base} == set(ss.SHAPES)
    scene = ss.render_scene(0, 1, split="novel", max_objects=4)
    assert scene.caption == " and ".join(f"a {c} {s}" for c, s in scene.labels)


def test_rendering_is_deterministic_and_seeded():
    a, b = ss.render_scene(5, 7, 64), ss.render_scene(5, 7, 64)
    np.testing.assert_array_equal(a.image, b.image)
    np.testing.assert_array_equal(a.masks, b.masks)
    assert a.caption == b.caption
    assert not np.array_equal(a.image, ss.render_scene(6, 7, 64).image)


def test_label_map_and_occlusion():
    scene = next(sc for sc in ss.scenes(1, 100) if len(sc.labels) >= 2)
    lm = ss.label_map(scene, ss.ALL_COMBOS)
    for lab, m in zip(scene.labels, scene.masks):
        assert (lm[m] == 1 + ss.ALL_COMBOS.index(lab)).all()
    assert (lm[~scene.masks.any(axis=0)] == 0).all()
    with pytest.raises(ValueError, match="not among classes"):
        ss.label_map(scene, ["nothing"])


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="size=48"):
        ss.render_scene(0, 0, 48)
    with pytest.raises(ValueError, match="split='test'.*base, novel"):
        ss.render_scene(0, 0, 32, "test")
    with pytest.raises(ValueError, match="max_objects"):
        ss.render_scene(0, 0, 32, "base", 0)
    with pytest.raises(ValueError, match="shape='hexagon'"):
        ss.shape_mask("hexagon", 5, 5, 3, 32)
    with pytest.raises(ValueError, match="mask 0 is empty"):
        ss.mask_boxes(np.zeros((1, 8, 8), bool))
