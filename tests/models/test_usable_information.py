import numpy as np
import pytest
import torch

from edgekit.models import usable_information as ui
from edgekit.models.registry import make_config
from edgekit.models.studies import get_study

torch.set_num_threads(1)


def split(*arrays, n_train=600):
    return [a[:n_train] for a in arrays], [a[n_train:] for a in arrays]


def gaussian(n, d, seed):
    return np.random.default_rng(seed).standard_normal((n, d))


def test_linear_cka_is_symmetric_and_invariant_to_rotation_and_scale():
    a = gaussian(500, 6, 0)
    q, _ = np.linalg.qr(gaussian(6, 6, 1))
    assert ui.linear_cka(a, 3.0 * a @ q + 2.0) == pytest.approx(1.0)
    b = gaussian(500, 4, 2)
    assert ui.linear_cka(a, b) == pytest.approx(ui.linear_cka(b, a))
    assert ui.linear_cka(a, b) < 0.1


def test_rsa_is_one_for_the_same_geometry_and_low_for_unrelated():
    a = gaussian(100, 5, 0)
    assert ui.rsa(a, 2 * a) == pytest.approx(1.0)
    assert abs(ui.rsa(a, gaussian(100, 5, 1))) < 0.2


def test_usable_information_is_asymmetric():
    a = gaussian(1000, 8, 0)
    b = a[:, :2]  # b is a function of a; of a, b knows 2 coordinates of 8
    (a_tr, b_tr), (a_te, b_te) = split(a, b)
    known = 0.5 * np.log(1 / ui.RESOLUTION)
    assert ui.usable_information(a_tr, b_tr, a_te, b_te, "linear") == pytest.approx(known)
    assert ui.usable_information(b_tr, a_tr, b_te, a_te, "linear") == pytest.approx(known * 2 / 8, abs=0.05)
    noise = gaussian(1000, 3, 5)
    assert ui.usable_information(a_tr, noise[:600], a_te, noise[600:], "linear") < 0.02


def test_invertible_nonlinear_map_has_low_cka_but_high_mlp_information():
    z = gaussian(1600, 3, 0)
    q, _ = np.linalg.qr(gaussian(3, 3, 1))
    fz = np.exp(1.5 * z @ q)
    (z_tr, f_tr), (z_te, f_te) = split(z, fz, n_train=1200)
    assert ui.linear_cka(z_te, f_te) < 0.5
    linear = ui.usable_information(f_tr, z_tr, f_te, z_te, "linear")
    mlp = ui.usable_information(f_tr, z_tr, f_te, z_te, "mlp")
    assert mlp > linear + 0.5 and mlp > 1.0  # R^2 above 0.86 where the linear family gets far less


def test_coarse_residual_uncertainty_is_bounded_by_the_fine_one():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, 900)
    a = np.eye(10)[y] + 0.8 * rng.standard_normal((900, 10))  # a noisy view of the fine label
    (a_tr, y_tr), (a_te, y_te) = split(a, y)
    for family in ui.FAMILIES:
        out = ui.label_usable_information(a_tr, y_tr, a_te, y_te, family, groups=np.arange(10) % 2)
        assert out["coarse_conditional_entropy"] <= out["conditional_entropy"]
        assert 0 < out["information"] <= out["entropy"]
        assert out["entropy"] == pytest.approx(np.log(10), abs=0.05)


@pytest.fixture(scope="module")
def tiny_net():
    return ui.train_network(32, 0, steps=120)


def test_stitching_a_network_into_itself_keeps_its_accuracy(tiny_net):
    _, _, x_test, y_test = ui.digits_data()
    own = ui.task_accuracy(tiny_net(torch.from_numpy(x_test)).detach(), y_test, "fine")
    stitched = ui.stitch_accuracy(tiny_net, tiny_net, 1, steps=150)
    assert own > 0.8 and stitched >= own - 0.03
    assert ui.stitch_accuracy(tiny_net, tiny_net, 1, "coarse", steps=150) >= stitched - 0.01


def test_quantization_damage_orders_formats(tiny_net):
    config = ui.UsableInformationConfig.tiny()
    rows = ui.quantization_damage(config)
    info = {(r["format"], r["layer"]): r["info_quant_to_float"] for r in rows}
    assert {layer for _, layer in info} == {0, 1, 2}
    for layer in range(3):
        assert info[("mxint8", layer)] > info[("mxfp4", layer)]
    entry = get_study("usable_information")
    result = entry.evaluate(config)
    assert result[entry.metric] == min(info.values())


def test_bad_input():
    a, b = gaussian(50, 3, 0), gaussian(40, 3, 1)
    with pytest.raises(ValueError, match="same inputs \\(rows\\): got 50 and 40"):
        ui.linear_cka(a, b)
    with pytest.raises(ValueError, match="same inputs"):
        ui.rsa(a, b)
    with pytest.raises(ValueError, match="must be 2-d"):
        ui.linear_cka(a[:, 0], a)
    with pytest.raises(ValueError, match="same features"):
        ui.usable_information(a, a, b, b[:, :2])
    with pytest.raises(ValueError, match="family must be one of linear, mlp"):
        ui.usable_information(a, a, a, a, "kernel")
    with pytest.raises(ValueError, match="task must be one of fine, coarse"):
        ui.stitch_accuracy(None, None, 0, "medium")
    with pytest.raises(ValueError, match="'family' of UsableInformationConfig must be one of linear, mlp, got 'svm'"):
        make_config(get_study("usable_information"), {"family": "svm"})
    with pytest.raises(ValueError, match=r"'formats' .* each entry a block format \(mxfp8_e4m3, .*got \('mxfp3',\)"):
        make_config(get_study("usable_information"), {"formats": '["mxfp3"]'})
