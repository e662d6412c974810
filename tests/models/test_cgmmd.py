import numpy as np
import pytest
import torch
from scipy.stats import wasserstein_distance

from edgekit.models import cgmmd, cgmmd_data
from edgekit.models.cgmmd import CGMMDConfig, build, generate
from edgekit.models.registry import make_config, train

torch.set_num_threads(1)
TINY = CGMMDConfig.tiny()


@pytest.fixture(scope="module")
def bimodal_models():
    return {m: train("cgmmd", CGMMDConfig.tiny(method=m), cache_dir=False).model for m in ("cgmmd", "mse")}


# --- data -----------------------------------------------------------------------------

@pytest.mark.parametrize("task", cgmmd_data.TASKS)
def test_tasks_have_their_widths(task):
    x, y = cgmmd_data.dataset(task, "val", 500)
    assert (x.shape[1], y.shape[1]) == cgmmd_data.DIMS[task]
    assert x.dtype == y.dtype == np.float32


def test_bimodal_truth_has_two_modes_and_a_mean_between_them():
    x = np.full((4000, 1), 0.5)
    y = cgmmd_data.true_conditional("bimodal", x, np.random.default_rng(0))[:, 0]
    assert abs(y.mean()) < 0.05 and np.mean(np.abs(np.abs(y) - 1.25) < 0.3) > 0.95
    ring = cgmmd_data.true_conditional("ring", np.full((1000, 1), 1.2), np.random.default_rng(0))
    assert abs(np.linalg.norm(ring, axis=1).mean() - 1.2) < 0.01


def test_digit_tasks_pool_and_corrupt_the_split_images():
    x, y = cgmmd_data.dataset("superres", "test")
    np.testing.assert_allclose(x[:, 0], y[:, [0, 1, 8, 9]].mean(1), rtol=1e-6)
    xn, yn = cgmmd_data.dataset("denoise", "test", 1)
    assert xn.min() >= 0 and xn.max() <= 1 and 0.15 < np.abs(xn - yn).mean() < 0.3
    train_imgs = {r.tobytes() for r in cgmmd_data.dataset("superres", "train")[1]}
    assert not train_imgs & {r.tobytes() for r in y}


def test_bad_task_split_and_widths_are_refused():
    with pytest.raises(ValueError, match="allowed: bimodal, heteroscedastic, ring, denoise, superres"):
        cgmmd_data.dataset("spiral", "train")
    with pytest.raises(ValueError, match="allowed: train, val, test"):
        cgmmd_data.dataset("ring", "holdout")
    with pytest.raises(ValueError, match="no known conditional"):
        cgmmd_data.true_conditional("denoise", np.zeros((1, 1)), np.random.default_rng(0))
    with pytest.raises(ValueError, match="config key 'method' of CGMMDConfig must be one of cgmmd, mse, cgan"):
        make_config("cgmmd", {"method": "vae"})
    model = build(CGMMDConfig(task="superres"))
    with pytest.raises(ValueError, match="must be \\(n, 16\\)"):
        generate(model, np.zeros((3, 64)), 2, torch.Generator())
    with pytest.raises(ValueError, match="width 64, this generator takes 16"):
        model(torch.zeros(1, 64), torch.zeros(1, 8))


# --- the loss -------------------------------------------------------------------------

def test_ecmmd_is_zero_for_a_perfect_generator_and_penalises_the_mean_and_shifts():
    gen = torch.Generator().manual_seed(0)
    n, k, widths = 4000, 8, (0.5, 1.0)

    def bimodal(shape):  # every x shares the same two-mode conditional
        return torch.where(torch.rand(shape, generator=gen) < 0.5, -1.0, 1.0)[..., None]

    y, y_nb = bimodal((n,)), bimodal((n, k))
    assert cgmmd.ecmmd(y, y, y_nb, y_nb, widths).item() == pytest.approx(0.0, abs=1e-6)
    honest = cgmmd.ecmmd(y, bimodal((n,)), y_nb, bimodal((n, k)), widths).item()
    mean = cgmmd.ecmmd(y, torch.zeros(n, 1), y_nb, torch.zeros(n, k, 1), widths).item()
    assert abs(honest) < 0.02 and mean > 0.3
    near = cgmmd.ecmmd(y, y + 0.3, y_nb, y_nb + 0.3, widths).item()
    far = cgmmd.ecmmd(y, y + 1.5, y_nb, y_nb + 1.5, widths).item()
    assert 0 < near < far


def test_neighbour_table_lists_each_points_nearest_others():
    x = np.array([[0.0], [0.1], [0.25], [1.0], [1.05]])
    table = cgmmd.neighbour_table(x, 2)
    assert table.tolist() == [[1, 2], [0, 2], [1, 0], [4, 2], [3, 2]]


def test_gan_losses_each_reach_one_player():
    model = build(CGMMDConfig.tiny(method="cgan"))
    x, y, z = torch.randn(8, 1), torch.randn(8, 1), torch.randn(8, TINY.noise)
    d_loss, g_loss = cgmmd.gan_losses(model.critic, x, y, model(x, z))
    critic, gen = list(model.critic.parameters()), list(model.net.parameters())
    assert all(g is None for g in torch.autograd.grad(g_loss, critic, retain_graph=True, allow_unused=True))
    assert all(g is not None for g in torch.autograd.grad(g_loss, gen, retain_graph=True, allow_unused=True))
    assert all(g is None for g in torch.autograd.grad(d_loss, gen, retain_graph=True, allow_unused=True))


# --- metrics --------------------------------------------------------------------------

def test_mode_coverage_psnr_and_w1():
    x = np.linspace(-1, 1, 20, dtype=np.float32)[:, None]
    rng = np.random.default_rng(0)
    truth = np.stack([cgmmd_data.true_conditional("bimodal", np.repeat(xi[None], 200, 0), rng) for xi in x])
    assert cgmmd.mode_coverage("bimodal", x, truth) == 1.0
    assert cgmmd.mode_coverage("bimodal", x, np.zeros_like(truth)) == 0.0
    assert cgmmd.mode_coverage("bimodal", x, np.abs(truth)) == 0.0  # one mode only
    np.testing.assert_allclose(cgmmd.psnr(np.full((1, 64), 0.6), np.full((1, 64), 0.5)), [20.0])
    a, b = rng.standard_normal((100, 1)), rng.standard_normal((100, 1)) + 1
    assert cgmmd.sliced_w1(a, b, None) == pytest.approx(wasserstein_distance(a[:, 0], b[:, 0]))


# --- training -------------------------------------------------------------------------

def test_training_is_deterministic():
    config = CGMMDConfig.tiny(steps=20)
    a, b = (train("cgmmd", config, cache_dir=False).model for _ in range(2))
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)


def test_cgmmd_covers_both_modes_where_mse_collapses_to_the_mean(bimodal_models):
    scores = {m: cgmmd.evaluate(model, TINY) for m, model in bimodal_models.items()}
    assert scores["cgmmd"]["mode_coverage"] >= 0.5 and scores["mse"]["mode_coverage"] == 0.0
    assert scores["cgmmd"]["cond_mmd"] < scores["mse"]["cond_mmd"]
    assert scores["cgmmd"]["w1"] < scores["mse"]["w1"]
    samples = generate(bimodal_models["mse"], np.zeros((1, 1)), 100, torch.Generator().manual_seed(0))
    assert samples.std() < 0.2 and abs(samples.mean()) < 0.3  # ignores its noise, sits at the mean
