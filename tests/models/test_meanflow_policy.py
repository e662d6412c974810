import itertools
import warnings

import numpy as np
import pytest
import torch

from edgekit.models import meanflow_policy as mp
from edgekit.models import metaworld_demos as md
from edgekit.models.cache import CheckpointError
from edgekit.models.registry import get_model, make_config, train

TINY = mp.MeanFlowPolicyConfig.tiny()
TINY_DEMOS = md.DemoSpec.train("reach-v3", TINY.train_episodes)


def random_policy(dtype=torch.float32, seed=0):
    """An untrained policy network (no demonstrations needed) and a batch of inputs for it."""
    torch.manual_seed(seed)
    model = mp.MeanFlowPolicy(TINY, torch.zeros(mp.FEATURES), torch.ones(mp.FEATURES)).to(dtype)
    g = torch.Generator().manual_seed(seed + 1)
    n, size = 32, TINY.chunk_size
    z, v = (torch.randn(n, size, generator=g, dtype=dtype) for _ in range(2))
    obs = torch.randn(n, md.OBS_DIM, generator=g, dtype=dtype)
    t = torch.rand(n, 1, generator=g, dtype=dtype)
    r = t * torch.rand(n, 1, generator=g, dtype=dtype)
    return model, obs, z, v, r, t


def relative_error(a, b):
    return float((a - b).detach().norm() / b.detach().norm())


def test_dde_agrees_with_jvp_and_converges_quadratically():
    model, obs, z, v, r, t = random_policy(torch.float64)

    def velocity(z_, r_, t_):
        return model.velocity(z_, r_, t_, obs)

    u, dudt = mp.jvp_time_derivative(velocity, z, r, t, v)
    torch.testing.assert_close(u, velocity(z, r, t))
    errors = [relative_error(mp.dde_time_derivative(velocity, z, r, t, v, eps), dudt) for eps in (1e-2, 1e-3, 1e-4)]
    assert errors[0] < 0.05
    for coarse, fine in itertools.pairwise(errors):
        assert fine < coarse / 50  # central difference: error ~ eps^2


def test_dde_in_float32_until_round_off():
    model, obs, z, v, r, t = random_policy(torch.float32)

    def velocity(z_, r_, t_):
        return model.velocity(z_, r_, t_, obs)

    _, dudt = mp.jvp_time_derivative(velocity, z, r, t, v)
    default = relative_error(mp.dde_time_derivative(velocity, z, r, t, v, TINY.dde_eps), dudt)
    assert default < 5e-4
    tiny_step = relative_error(mp.dde_time_derivative(velocity, z, r, t, v, 1e-6), dudt)
    assert tiny_step > 10 * default  # float32 round-off divided by a tiny step dominates


def test_mean_flow_target_is_the_same_either_way_and_carries_no_gradient():
    model, obs, z, v, r, t = random_policy()

    def velocity(z_, r_, t_):
        return model.velocity(z_, r_, t_, obs)

    _, dudt = mp.jvp_time_derivative(velocity, z, r, t, v)
    by_jvp = mp.mean_flow_target(v, r, t, dudt)
    by_dde = mp.mean_flow_target(v, r, t, mp.dde_time_derivative(velocity, z, r, t, v, TINY.dde_eps))
    assert not by_jvp.requires_grad and not by_dde.requires_grad
    assert relative_error(by_dde, by_jvp) < 1e-4
    torch.testing.assert_close(mp.mean_flow_target(v, t, t, dudt), v)  # r = t: the conditional velocity


def test_omp_loss_backward_never_needs_the_jvp():
    model, obs, x, noise, r, t = random_policy()
    losses = {}
    for method in mp.METHODS:
        config = mp.MeanFlowPolicyConfig.tiny(method=method)
        losses[method] = mp.policy_loss(model, config, obs, x, noise, r, t)
        grads = torch.autograd.grad(losses[method], list(model.parameters()))
        assert all(torch.isfinite(g).all() for g in grads)
    # omp = the meanflow squared error (the same target up to the DDE's error) + the direction term
    z, v = (1 - t) * x + t * noise, noise - x
    u = model.velocity(z, r, t, obs)
    _, dudt = mp.jvp_time_derivative(lambda a, b, c: model.velocity(a, b, c, obs), z, r, t, v)
    direction = mp.direction_loss(u, mp.mean_flow_target(v, r, t, dudt))
    assert abs(float(losses["omp"] - losses["meanflow"] - TINY.direction_weight * direction)) < 1e-4


def test_direction_loss():
    a = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    assert float(mp.direction_loss(a, 3 * a)) == pytest.approx(0.0, abs=1e-7)
    assert float(mp.direction_loss(a, -a)) == pytest.approx(2.0)
    assert float(mp.direction_loss(a, a.flip(1))) == pytest.approx(1.0)


def test_one_step_forward_is_noise_minus_mean_velocity():
    model, obs, _, _, _, _ = random_policy()
    noise = torch.randn(obs.shape[0], TINY.horizon, md.ACTION_DIM, generator=torch.Generator().manual_seed(3))
    flat = noise.reshape(len(noise), -1)
    zeros, ones = torch.zeros(len(obs), 1), torch.ones(len(obs), 1)
    with torch.no_grad():
        expected = (flat - model.velocity(flat, zeros, ones, obs)).reshape(noise.shape)
        torch.testing.assert_close(model(obs, noise), expected, rtol=0, atol=0)
        # two mean-velocity jumps: 1 -> 0.5 -> 0
        half = flat - 0.5 * model.velocity(flat, 0.5 * ones, ones, obs)
        two = half - 0.5 * model.velocity(half, zeros, 0.5 * ones, obs)
        torch.testing.assert_close(model.sample(obs, noise, 2), two.reshape(noise.shape), rtol=0, atol=0)


def test_flow_matching_samples_with_instantaneous_velocity():
    torch.manual_seed(0)
    config = mp.MeanFlowPolicyConfig.tiny(method="flow_matching")
    model = mp.MeanFlowPolicy(config, torch.zeros(mp.FEATURES), torch.ones(mp.FEATURES))
    _, obs, z, _, _, _ = random_policy()
    noise = z.reshape(len(z), config.horizon, md.ACTION_DIM)
    ones = torch.ones(len(z), 1)
    with torch.no_grad():
        euler = z - 0.5 * model.velocity(z, ones, ones, obs)
        euler = euler - 0.5 * model.velocity(euler, 0.5 * ones, 0.5 * ones, obs)
        torch.testing.assert_close(model.sample(obs, noise, 2), euler.reshape(noise.shape), rtol=0, atol=0)


@pytest.mark.parametrize("method", mp.METHODS)
def test_training_is_deterministic_and_lowers_the_loss(method):
    config = mp.MeanFlowPolicyConfig.tiny(method=method)
    a, b = (train("meanflow_policy", config, cache_dir=False) for _ in range(2))
    for (name, pa), pb in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        assert torch.equal(pa, pb), name
    assert np.mean(a.loss_history[-10:]) < np.mean(a.loss_history[:10])
    other = train("meanflow_policy", mp.MeanFlowPolicyConfig.tiny(method=method, seed=1, steps=3), cache_dir=False)
    assert not torch.equal(other.model.net[0].weight, a.model.net[0].weight)


def test_evaluate_and_example_inputs():
    config = mp.MeanFlowPolicyConfig.tiny(method="flow_matching", sample_steps=3)
    model = train("meanflow_policy", config, cache_dir=False).model
    result = mp.evaluate(model, config)
    assert set(result) == {"expert_success_rate", "action_mse", "success_rate", "mean_episode_steps",
                           "action_mse_3nfe", "success_rate_3nfe", "mean_episode_steps_3nfe"}
    assert result["expert_success_rate"] == 1.0
    assert 0.0 <= result["success_rate"] <= 1.0 and result["action_mse"] > 0
    assert 1 <= result["mean_episode_steps"] <= config.max_episode_steps
    assert mp.evaluate(model, config) == result  # seeded noise, seeded placements
    more = mp.evaluate(model, config, nfes=(1, 2, 4))
    assert {k: more[k] for k in ("action_mse", "success_rate", "mean_episode_steps")} == \
        {k: result[k] for k in ("action_mse", "success_rate", "mean_episode_steps")}
    assert {"action_mse_2nfe", "success_rate_4nfe"} <= set(more) and "action_mse_3nfe" not in more
    for bad in ((2, 4), (1, 0)):
        with pytest.raises(ValueError, match="nfes"):
            mp.evaluate(model, config, nfes=bad)
    obs, noise = mp.example_inputs(config)
    assert obs.shape == (1, md.OBS_DIM) and noise.shape == (1, config.horizon, md.ACTION_DIM)
    np.testing.assert_array_equal(obs[0].numpy(), md.demonstrations(TINY_DEMOS).episodes[0].observations[0])
    assert model(obs, noise).shape == noise.shape


def test_expert_demonstrations_succeed_and_seeds_are_disjoint():
    demos = md.demonstrations(TINY_DEMOS)
    assert demos.expert_success_rate == 1.0 and len(demos.episodes) == TINY.train_episodes
    for ep in demos.episodes:
        assert ep.success and len(ep.actions) == ep.success_step + TINY_DEMOS.steps_after_success
        assert ep.observations.shape == (len(ep.actions), md.OBS_DIM)
        assert np.abs(ep.actions).max() <= 1.0
    obs, chunks = demos.chunks(4)
    assert obs.shape[0] == chunks.shape[0] == sum(len(ep.actions) for ep in demos.episodes)
    first = demos.episodes[0].actions
    np.testing.assert_array_equal(chunks[0], first[:4])
    np.testing.assert_array_equal(chunks[len(first) - 1], np.repeat(first[-1:], 4, axis=0))  # padded at the end
    held_out = md.DemoSpec.held_out("reach-v3", 1000)
    assert not set(held_out.seeds) & set(md.DemoSpec.train("reach-v3", 1000).seeds)
    with pytest.raises(ValueError, match="straddle"):
        md.DemoSpec("reach-v3", md.EVAL_SEED_BASE - 2, 5)


def test_reset_to_seed_matches_a_freshly_built_environment():
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS_GOAL_OBSERVABLE

    fresh = ALL_V3_ENVIRONMENTS_GOAL_OBSERVABLE["reach-v3-goal-observable"](seed=7)
    reused = md.make_env("reach-v3")
    md.reset_to_seed(reused, 3)
    np.testing.assert_array_equal(md.reset_to_seed(reused, 7), fresh.reset()[0])


def test_demonstration_cache_round_trips_and_refuses_corrupt_files(tmp_path, monkeypatch):
    spec = md.DemoSpec.train("reach-v3", 2)
    first = md.load_demonstrations(spec, tmp_path)
    path = md.demo_path(spec, tmp_path)
    assert path.is_file() and path.is_relative_to(tmp_path / "demos")

    collected = md.collect
    monkeypatch.setattr(md, "collect", lambda spec: pytest.fail("collected again instead of reading the cache"))
    again = md.load_demonstrations(spec, tmp_path)
    np.testing.assert_array_equal(again.succeeded, first.succeeded)
    for a, b in zip(again.episodes, first.episodes, strict=True):
        assert (a.seed, a.success_step) == (b.seed, b.success_step)
        np.testing.assert_array_equal(a.observations, b.observations)
        np.testing.assert_array_equal(a.actions, b.actions)

    with pytest.raises(CheckpointError, match="not demonstrations of"):
        md.read_demonstrations(path, md.DemoSpec.train("reach-v3", 3))

    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupt"):
        md.read_demonstrations(path, spec)
    monkeypatch.setattr(md, "collect", collected)
    with pytest.warns(UserWarning, match="collecting the demonstrations again"):
        redone = md.load_demonstrations(spec, tmp_path)
    assert path.with_name(path.name + ".corrupt").is_file()
    np.testing.assert_array_equal(redone.episodes[0].actions, first.episodes[0].actions)


def test_bad_config_names_the_key_and_the_allowed_values():
    with pytest.raises(ValueError, match=r"'task' of MeanFlowPolicyConfig must be one of reach-v3, push-v3, drawer-open-v3.*got 'reach'"):
        mp.MeanFlowPolicyConfig(task="reach")
    with pytest.raises(ValueError, match=r"'method' of MeanFlowPolicyConfig must be one of omp, meanflow, flow_matching, got 'ddpm'"):
        mp.MeanFlowPolicyConfig(method="ddpm")
    with pytest.raises(ValueError, match="execute must be in 1..horizon=4"):
        mp.MeanFlowPolicyConfig(execute=5)
    with pytest.raises(ValueError, match="width must be a multiple of 64"):
        mp.MeanFlowPolicyConfig(width=100)
    with pytest.raises(ValueError, match="'method' of MeanFlowPolicyConfig must be one of"):
        make_config("meanflow_policy", {"method": "ddpm"})
    with pytest.raises(ValueError, match="task must be one of"):
        md.DemoSpec.train("pick-v3", 3)


def test_registered():
    entry = get_model("meanflow_policy")
    assert entry.config is mp.MeanFlowPolicyConfig and entry.metric == "success_rate" and entry.higher_is_better
    assert make_config("meanflow_policy", {"method": "meanflow", "task": "push-v3"}).method == "meanflow"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # building and sampling emits nothing
        model = entry.build(TINY)
        with torch.no_grad():
            model(*entry.example_inputs(TINY))


def test_no_successful_demonstration_is_a_clear_error():
    spec = md.DemoSpec.train("reach-v3", 1)
    demos = md.Demonstrations(spec, np.array([False]), [])
    assert demos.expert_success_rate == 0.0
    with pytest.raises(ValueError, match="reach-v3 expert succeeded on none of seeds 0..0"):
        demos.chunks(4)
