"""FluxNet and its PDE solvers: conservation by construction (also with MX-quantized weights), bounds, baselines."""

import functools
from dataclasses import replace

import numpy as np
import pytest
import torch

from edgekit.models import fluxnet, pde
from edgekit.models.fluxnet import FluxNetConfig, build, evaluate, held_out_data, rollout, rollout_metrics
from edgekit.models.registry import make_config, train
from edgekit.models.weights import quantized_copy

ROUND_OFF = 1e-5  # float32 sums over 100 steps: what is left is round-off (observed ~1e-7)
SMALL = {"traffic": 32, "convection_diffusion": 32, "shallow_water": 16, "cahn_hilliard": 16}


# ---- solvers ------------------------------------------------------------------------------

def fine_run(name, steps, boundary="periodic", count=3, cells=16, seed=0):
    """Solver states (steps + 1, count, C, *grid) on the solver's own grid, float64."""
    problem = pde.get_problem(name)
    n, dx = pde.solver_grid(problem, cells)
    state = problem.initial(np.random.default_rng(seed), count, n, dx, boundary)
    states = [state]
    for _ in range(steps):
        state = pde.advance(problem, state, problem.stride * problem.cell_size(cells), dx, boundary)
        states.append(state)
    return np.stack(states), dx


@pytest.mark.parametrize("name", list(pde.PROBLEMS))
def test_periodic_solvers_conserve_every_channel(name):
    states, _ = fine_run(name, 10)
    totals = states.sum(axis=tuple(range(3, states.ndim)))  # (T, count, C)
    scale = np.abs(states).sum(axis=tuple(range(3, states.ndim))).max()
    assert np.abs(totals - totals[0]).max() <= 1e-12 * scale
    assert np.abs(states[-1] - states[0]).max() > 1e-3  # the state did move


@pytest.mark.parametrize("boundary", pde.BOUNDARIES)
def test_traffic_density_stays_in_zero_to_rho_max(boundary):
    states, _ = fine_run("traffic", 30, boundary)
    assert states.min() >= 0.0 and states.max() <= 1.0
    jumps = np.abs(np.diff(states[0], axis=-1)).max()
    assert jumps > 0.1  # the initial condition has jumps (Riemann problems)


def test_convection_diffusion_decays_and_keeps_its_range():
    states, _ = fine_run("convection_diffusion", 30)
    l2 = np.sqrt((states**2).sum(axis=(2, 3)))  # (T, count)
    assert np.all(np.diff(l2, axis=0) <= 1e-12)  # diffusion (and upwind) never add energy
    assert np.all(l2[-1] < 0.9 * l2[0])
    assert states.min() >= 0.0 and states.max() <= states[0].max() + 1e-12  # maximum principle
    dirichlet, _ = fine_run("convection_diffusion", 30, "dirichlet")
    assert dirichlet.min() >= 0.0 and dirichlet.max() <= 1.0
    assert dirichlet[-1, :, 0, 0].min() > 0.2  # the upstream boundary value 0.5 flows in


def test_cahn_hilliard_keeps_mass_and_lowers_its_energy():
    states, dx = fine_run("cahn_hilliard", 30)
    energy = np.stack([pde.cahn_hilliard_energy(s, dx) for s in states])  # (T, count)
    assert np.all(np.diff(energy, axis=0) < 0)
    assert np.all(energy[-1] < 0.9 * energy[0])  # phase separation happened
    mass = states.sum(axis=(2, 3, 4))
    assert np.abs(mass - mass[0]).max() < 1e-9


def test_shallow_water_depth_stays_positive():
    states, _ = fine_run("shallow_water", 20)
    assert states[:, :, 0].min() > 0.5
    assert np.abs(states[-1, :, 1:]).max() > 1e-3  # the bumps set the water moving


def test_trajectories_are_seeded_coarse_means_of_the_solver():
    a = pde.trajectories("traffic", 2, 3, cells=16, seed=(0, 1))
    assert a.shape == (2, 4, 1, 16) and a.dtype == np.float32
    np.testing.assert_array_equal(a, pde.trajectories("traffic", 2, 3, cells=16, seed=(0, 1)))
    assert not np.array_equal(a, pde.trajectories("traffic", 2, 3, cells=16, seed=(0, 2)))
    states, _ = fine_run("traffic", 3, count=2, cells=16, seed=(0, 1))
    np.testing.assert_allclose(a[0, -1], pde.coarsen(states[-1, 0], 4, 1), rtol=0, atol=1e-6)


# ---- FluxNet: conservation and bounds -------------------------------------------------------

def tiny(name="traffic", **overrides):
    return FluxNetConfig.tiny(pde=name, cells=SMALL[name], **overrides)


def scrambled(config, noise=0.3):
    """Untrained weights far from the near-identity start: large, arbitrary flows."""
    torch.manual_seed(0)
    model = build(config)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(noise * torch.randn_like(p))
    return model.eval()


@functools.cache
def trained(name, head, arch="fluxnet"):
    config = tiny(name, head=head, arch=arch)
    return config, train("fluxnet", config).model


def rollout_of(model, config):
    reference = torch.from_numpy(held_out_data(config).copy())
    states, inflow = rollout(model, reference[:, 0], config.rollout_steps)
    problem = config.problem
    metrics = rollout_metrics(states, reference, inflow, config.boundary == "periodic", problem.lower, problem.upper)
    return states, metrics


def assert_conserved_and_bounded(model, config):
    states, metrics = rollout_of(model, config)
    assert states.shape[1] == config.rollout_steps + 1 and torch.isfinite(states).all()
    assert metrics["mass_drift"] < ROUND_OFF
    if config.head in ("L", "D"):
        assert metrics["lower_violations"] == 0
    if config.head in ("U", "D"):
        assert metrics["upper_violations"] == 0
    if config.head == "D":
        assert metrics["max_bound_excess"] == 0.0
    return states


@pytest.mark.parametrize("head", fluxnet.HEADS)
@pytest.mark.parametrize("name", list(pde.PROBLEMS))
def test_untrained_fluxnet_conserves_and_keeps_its_bounds(name, head):
    config = tiny(name, head=head)
    states = assert_conserved_and_bounded(scrambled(config), config)
    assert (states[:, -1] - states[:, 0]).abs().max() > 0.05  # it moved a lot, and still conserved


@pytest.mark.parametrize("head", fluxnet.HEADS)
@pytest.mark.parametrize("name", ["traffic", "shallow_water"])
def test_trained_fluxnet_conserves_and_keeps_its_bounds(name, head):
    config, model = trained(name, head)
    assert_conserved_and_bounded(model, config)


@pytest.mark.parametrize("fmt", ["mxfp8_e4m3", "mxfp4"])
@pytest.mark.parametrize("head", fluxnet.HEADS)
@pytest.mark.parametrize("name", ["traffic", "shallow_water"])
def test_quantized_fluxnet_still_conserves_and_keeps_its_bounds(name, head, fmt):
    """The issue's test: MX-quantized weights change the flows, never the conservation or the bounds."""
    config, model = trained(name, head)
    quantized = quantized_copy(model, fmt)
    changed = [not torch.equal(a, b) for a, b in zip(model.parameters(), quantized.parameters())]
    assert any(changed)
    assert_conserved_and_bounded(quantized, config)
    assert_conserved_and_bounded(quantized_copy(scrambled(config), fmt), config)


@pytest.mark.parametrize("arch,head", [("fluxnet", "L"), ("fluxnet", "U"), ("fluxnet", "D"), ("flux_rate", "L")])
@pytest.mark.parametrize("name", ["traffic", "convection_diffusion"])
def test_dirichlet_total_changes_by_exactly_the_boundary_flows(name, arch, head):
    config = tiny(name, arch=arch, head=head, boundary="dirichlet")
    torch.manual_seed(0)
    model = scrambled(config) if arch == "fluxnet" else build(config).eval()  # scrambled flux rates blow up
    states, metrics = rollout_of(model, config)
    assert metrics["mass_drift"] < ROUND_OFF
    mass = states.double().sum(-1)
    assert (mass[:, -1] - mass[:, 0]).abs().max() > 1e-3 * mass[:, 0].abs().max()  # mass did cross the boundaries


def test_the_baselines_break_conservation_or_bounds():
    """The cnn predicts the next state freely: its total drifts. The flux-rate model conserves, unbounded."""
    torch.manual_seed(0)
    config = tiny("traffic", arch="cnn")
    _, metrics = rollout_of(build(config).eval(), config)
    assert metrics["mass_drift"] > 1e-2
    config, model = trained("traffic", "L", "cnn")
    assert evaluate(model, config)["mass_drift"] > ROUND_OFF
    config = tiny("traffic", arch="flux_rate")
    _, metrics = rollout_of(build(config).eval(), config)
    assert metrics["mass_drift"] < ROUND_OFF  # telescoping face fluxes
    _, metrics = rollout_of(scrambled(config, noise=0.05), config)
    assert metrics["lower_violations"] > 0 and metrics["upper_violations"] > 0  # nothing bounds them


# ---- training, config ---------------------------------------------------------------------

def test_training_is_deterministic_and_learns():
    config, model = trained("traffic", "L")
    again = train("fluxnet", config, cache_dir=False).model
    for a, b in zip(model.state_dict().values(), again.state_dict().values()):
        assert torch.equal(a, b)
    reference = torch.from_numpy(held_out_data(config).copy())
    standing_still = rollout_metrics(reference[:, :1].expand_as(reference), reference, None, True, (0.0,), (1.0,))
    assert evaluate(model, config)["rollout_rel_l2"] < 0.5 * standing_still["rollout_rel_l2"]


def test_d_head_consistency_loss_keeps_its_proposals_together():
    config, model = trained("traffic", "D")
    unconstrained = train("fluxnet", replace(config, consistency=0.0)).model
    u = torch.from_numpy(held_out_data(config)[:, 0].copy())
    with torch.no_grad():
        gap, free_gap = (m.step(u, with_consistency=True).consistency.item() for m in (model, unconstrained))
    assert gap < 0.2 * free_gap


@pytest.mark.parametrize("key,value,allowed", [("pde", "heat", "traffic"), ("head", "X", "L, U, D"),
                                               ("arch", "mlp", "fluxnet, cnn, flux_rate"),
                                               ("boundary", "open", "periodic, dirichlet")])
def test_bad_choices_name_the_key_and_the_allowed_values(key, value, allowed):
    with pytest.raises(ValueError, match=f"config key '{key}' of FluxNetConfig must be one of .*{allowed}.*{value!r}"):
        FluxNetConfig(**{key: value})
    with pytest.raises(ValueError, match=f"{key}"):
        make_config("fluxnet", {key: value})


def test_two_d_problems_are_periodic_only_and_sizes_are_checked():
    with pytest.raises(ValueError, match="boundary must be one of periodic, got 'dirichlet'"):
        FluxNetConfig(pde="shallow_water", boundary="dirichlet")  # the message lists only "periodic"
    with pytest.raises(ValueError, match="hidden must be a positive multiple of 32"):
        FluxNetConfig(hidden=48)
    with pytest.raises(ValueError, match="cells must exceed"):
        FluxNetConfig(cells=10)


# ---- strides: one model step spans several of the problem's surrogate steps ------------------

def test_data_at_stride_s_is_every_s_th_state_of_the_stride_1_trajectories():
    strided = tiny("traffic", stride=3, trajectory_steps=4, rollout_steps=5)
    base = replace(strided, stride=1, trajectory_steps=12, rollout_steps=15)
    assert fluxnet.train_data(strided).shape == (8, 5, 1, 32)
    np.testing.assert_array_equal(fluxnet.train_data(strided), fluxnet.train_data(base)[:, ::3])
    for split in ("test", "validation"):
        assert held_out_data(strided, split).shape == (2, 6, 1, 32)
        np.testing.assert_array_equal(held_out_data(strided, split), held_out_data(base, split)[:, ::3])
    assert not np.array_equal(held_out_data(strided, "validation"), held_out_data(strided))  # other initial states
    with pytest.raises(ValueError, match="split must be one of test, validation, got 'train'"):
        held_out_data(strided, "train")


def test_a_cell_sends_up_to_reach_times_stride_cells():
    config = tiny("traffic", stride=3)  # reach 2: up to 6 cells each way in one step
    u = torch.zeros(1, 1, 32)
    u[0, 0, 16] = 0.9  # only this cell has anything to send (L head: capacity u - lower)
    with torch.no_grad():
        moved = scrambled(config).step(u).state[0, 0]
    reached = torch.nonzero(moved > 0).flatten().tolist()
    assert reached == list(range(16 - 6, 16 + 7))
    assert abs(moved.sum().item() - 0.9) < 1e-6


def test_a_stride_the_neighbourhood_cannot_cover_names_stride_reach_and_the_allowed_values():
    # 32 cells, reach 2, layers 2 x (kernel 3 // 2): reach * stride must stay below 32 - 2 = 30
    assert build(tiny("traffic", stride=14)).destinations[-1] == (-1, 28)
    with pytest.raises(ValueError, match=r"stride must be in \[1, 14\] for reach 2 on 32 cells.*got stride 15"):
        tiny("traffic", stride=15)
    with pytest.raises(ValueError, match="config key 'stride' of FluxNetConfig must be an integer >= 1, got 0"):
        tiny("traffic", stride=0)
    with pytest.raises(ValueError, match=r"stride must be in \[1, "):
        make_config("fluxnet", {"stride": 100})
    tiny("traffic", arch="flux_rate", stride=15)  # the baselines move amounts across faces only: no neighbourhood


@pytest.mark.parametrize("head", fluxnet.HEADS)
@pytest.mark.parametrize("name", list(pde.PROBLEMS))
def test_untrained_fluxnet_conserves_and_keeps_its_bounds_at_stride_4(name, head):
    config = tiny(name, head=head, stride=4, rollout_steps=25)  # the 100 solver-sampled steps of stride 1
    states = assert_conserved_and_bounded(scrambled(config), config)
    assert (states[:, -1] - states[:, 0]).abs().max() > 0.05


@pytest.mark.parametrize("name", ["traffic", "convection_diffusion"])
def test_dirichlet_total_changes_by_exactly_the_boundary_flows_at_stride_3(name):
    config = tiny(name, boundary="dirichlet", stride=3, rollout_steps=34)
    states, metrics = rollout_of(scrambled(config), config)
    assert metrics["mass_drift"] < ROUND_OFF
    mass = states.double().sum(-1)
    assert (mass[:, -1] - mass[:, 0]).abs().max() > 1e-3 * mass[:, 0].abs().max()
