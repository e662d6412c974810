"""One-step MeanFlow Policy (OMP) on Meta-World, with plain MeanFlow and flow matching as baselines.

A policy maps an observation to a chunk of ``horizon`` actions by transporting Gaussian
noise to the action chunk. Time convention (MeanFlow's): ``z_t = (1 - t) x + t * noise``,
so ``t = 0`` is the expert's chunk ``x``, ``t = 1`` is noise and the conditional velocity
is ``v = noise - x``. The network ``u(z, r, t | obs)`` predicts the *mean* velocity over
``[r, t]``, so one evaluation jumps the whole way: ``action = noise - u(noise, 0, 1 | obs)``.
That one-step sampler is the module's ``forward(obs, noise)``, what export and compile see.

``method`` selects the training rule (the same network and sampler for all three):

* ``meanflow``: the MeanFlow identity ``u_tgt = v - (t - r) du/dt`` with
  ``du/dt = v . d_z u + d_t u``, the Jacobian-vector product of ``u`` along ``(v, 0, 1)`` in
  ``(z, r, t)``, computed by ``torch.func.jvp``; loss ``|u - sg(u_tgt)|^2``. Backward runs
  through the forward-mode (dual) graph of the JVP, which holds the tangents' activations too.
* ``omp``: the same target, but ``du/dt`` from the Differential Derivation Equation, a central
  finite difference ``(u(z + eps v, r, t + eps) - u(z - eps v, r, t - eps)) / (2 eps)`` under
  ``no_grad`` (two extra forward passes that store nothing for backward, error O(eps^2));
  plus the directional alignment loss ``1 - cos(u, sg(u_tgt))`` per sample, weighted by
  ``direction_weight``, which keeps the direction of small mean velocities learned.
* ``flow_matching``: the instantaneous velocity ``u(z, t, t) = v`` only (``r = t``); sampled
  with Euler steps. Its one-step forward is the 1-NFE baseline; ``evaluate`` also reports
  ``sample_steps`` steps.

Pairs ``(r, t)`` are two logit-normal draws, sorted (MeanFlow's sampler); a share
``instant_fraction`` has ``r = t``, where the target is plain flow matching.

Network: an MLP over ``[z, normalized observation features, sin/cos features of t and of
t - r]`` with SiLU (smooth, so the JVP and its finite difference approximate the same
derivative). The observation features are the current frame and the goal (21 of the 39
entries; see ``CURRENT_FRAME``). Hidden widths are multiples of 64 so MX blocks tile every
hidden weight; the first layer's input (53 for ``horizon = 4``) ends in a partial block,
which the codecs pad. Observation mean and std of the training demonstrations are buffers
of the module, so the deployed forward takes the raw 39-dim observation.

Control: receding horizon. Every ``execute`` steps the policy samples a chunk of ``horizon``
actions from the current observation (fresh seeded noise) and the first ``execute`` are
executed; rollouts stop at the first success or after ``max_episode_steps``.

The paper's policies are larger networks on richer observations, trained on Adroit and
Meta-World; here the same losses, samplers and evaluation run at small scale on CPU: state
observations, one task per model, tens of demonstrations, a few thousand steps.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .config_fields import bounded, checked
from .metaworld_demos import ACTION_DIM, TASKS, DemoSpec, demonstrations, rollouts
from .training import TrainSpec

METHODS = ("omp", "meanflow", "flow_matching")
TIME_FREQUENCIES = (1.0, 2.0, 4.0, 8.0)  # times pi: sin/cos features of t and of t - r
OBS_STD_FLOOR = 1e-1  # near-constant observation entries (gripper, unused object slots) are not blown up
# The current frame (hand, gripper, objects: 18) and the goal (3) of Meta-World's 39-dim observation;
# the previous frame it repeats (18:36) is left out: with it a cloned policy reads its own last action
# off the frame difference (the copycat problem) and drifts in closed loop.
CURRENT_FRAME, GOAL = slice(0, 18), slice(36, 39)
FEATURES = 21
LOGIT_NORMAL = (-0.4, 1.0)  # mean and std of the logits of t and r (MeanFlow's sampler)


@dataclass(frozen=True)
@checked
class MeanFlowPolicyConfig:
    task: str = bounded("reach-v3", choices=TASKS)
    method: str = bounded("omp", choices=METHODS)  # omp | meanflow | flow_matching
    horizon: int = bounded(4, low=1)  # actions per predicted chunk
    execute: int = bounded(2, low=1)  # actions executed from each chunk before the policy is asked again
    width: int = bounded(256, low=64)
    depth: int = bounded(3, low=1)  # hidden layers
    train_episodes: int = bounded(40, low=1)  # expert episodes (seeds 0..n-1); failed ones are dropped
    eval_episodes: int = bounded(50, low=1)  # held-out seeds for success rate and action MSE
    steps: int = bounded(3000, low=1)
    batch: int = bounded(256, low=1)
    lr: float = bounded(1e-3, low=0, low_open=True)
    instant_fraction: float = bounded(0.5, low=0, high=1)  # share of (r, t) draws with r = t
    direction_weight: float = bounded(1.0, low=0)  # omp's directional alignment loss
    # omp's finite-difference step: where eps^2 truncation meets float32 round-off
    dde_eps: float = bounded(1e-3, low=0, low_open=True)
    sample_steps: int = bounded(10, low=1)  # the multi-step sampler evaluated for flow matching
    max_episode_steps: int = bounded(500, low=1)  # policy rollouts stop here (Meta-World's episode length)
    seed: int = bounded(0, low=0)

    def __post_init__(self):
        if self.width % 64:
            raise ValueError(f"width must be a multiple of 64, got {self.width}")
        if self.execute > self.horizon:
            raise ValueError(f"execute must be in 1..horizon={self.horizon}, got {self.execute}")

    @classmethod
    def tiny(cls, **overrides) -> MeanFlowPolicyConfig:
        """A config for tests: three reach demonstrations, a small MLP, seconds to train."""
        base = {"width": 64, "depth": 2, "train_episodes": 3, "eval_episodes": 2, "steps": 60, "batch": 64,
                "max_episode_steps": 40}
        base.update(overrides)
        return cls(**base)

    @property
    def chunk_size(self) -> int:
        return self.horizon * ACTION_DIM


# --- network ------------------------------------------------------------------------------------

class MeanFlowPolicy(nn.Module):
    """obs (B, 39), noise (B, horizon, 4) -> action chunk (B, horizon, 4), one network evaluation."""

    def __init__(self, config: MeanFlowPolicyConfig, obs_mean: torch.Tensor, obs_std: torch.Tensor):
        super().__init__()
        self.instantaneous = config.method == "flow_matching"  # sample with u(z, t, t), not u(z, r, t)
        self.register_buffer("obs_mean", obs_mean.float().reshape(1, FEATURES))
        self.register_buffer("obs_std", obs_std.float().reshape(1, FEATURES))
        self.register_buffer("frequencies", math.pi * torch.tensor(TIME_FREQUENCIES), persistent=False)
        widths = [config.chunk_size + FEATURES + 4 * len(TIME_FREQUENCIES)] + [config.width] * config.depth
        layers = []
        for n_in, n_out in itertools.pairwise(widths):
            layers += [nn.Linear(n_in, n_out), nn.SiLU()]
        self.net = nn.Sequential(*layers, nn.Linear(config.width, config.chunk_size))

    def time_features(self, s: torch.Tensor) -> torch.Tensor:
        angles = s * self.frequencies
        return torch.cat([angles.sin(), angles.cos()], dim=1)

    def velocity(self, z, r, t, obs):
        """u(z, r, t | obs): the mean velocity over [r, t]; z (B, horizon * 4), r and t (B, 1)."""
        features = [z, (observation_features(obs) - self.obs_mean) / self.obs_std, self.time_features(t),
                    self.time_features(t - r)]
        return self.net(torch.cat(features, dim=1))

    def sample(self, obs, noise, steps: int = 1):
        """Integrate from noise (t = 1) to an action chunk (t = 0) in ``steps`` equal steps: mean-velocity
        jumps ``z_r = z_t - (t - r) u(z_t, r, t)``, or Euler steps with ``u(z_t, t, t)`` for flow matching."""
        z = noise.reshape(noise.shape[0], -1)
        ones = torch.ones_like(z[:, :1])
        for k in range(steps, 0, -1):
            t, r = k / steps, (k - 1) / steps
            z = z - (t - r) * self.velocity(z, ones * (t if self.instantaneous else r), ones * t, obs)
        return z.reshape(noise.shape)

    def forward(self, obs, noise):
        return self.sample(obs, noise, 1)


def observation_features(obs):
    """The entries of the 39-dim observation the policy reads: current frame and goal, (B, 21)."""
    return torch.cat([obs[:, CURRENT_FRAME], obs[:, GOAL]], dim=1)


def _train_demonstrations(config: MeanFlowPolicyConfig):
    return demonstrations(DemoSpec.train(config.task, config.train_episodes))


def build(config: MeanFlowPolicyConfig = MeanFlowPolicyConfig()) -> MeanFlowPolicy:
    """The untrained policy, its observation normalization taken from the training demonstrations."""
    obs, _ = _train_demonstrations(config).chunks(config.horizon)
    obs = observation_features(torch.from_numpy(obs))
    return MeanFlowPolicy(config, obs.mean(0), obs.std(0).clamp_min(OBS_STD_FLOOR))


def example_inputs(config: MeanFlowPolicyConfig = MeanFlowPolicyConfig()) -> tuple:
    """(the first observation of the first training demonstration (1, 39), seeded noise (1, horizon, 4))."""
    obs = _train_demonstrations(config).episodes[0].observations[:1]
    noise = torch.randn(1, config.horizon, ACTION_DIM, generator=torch.Generator().manual_seed(config.seed))
    return torch.from_numpy(obs.copy()), noise


# --- training -----------------------------------------------------------------------------------

def sample_times(rng: np.random.Generator, n: int, instant_fraction: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(r, t), each (n, 1) float32 with r <= t: sorted logit-normal pairs, a share ``instant_fraction`` with r = t."""
    mean, std = LOGIT_NORMAL
    pair = 1.0 / (1.0 + np.exp(-(mean + std * rng.standard_normal((n, 2)))))
    r, t = pair.min(1, keepdims=True), pair.max(1, keepdims=True)
    r = np.where(rng.random((n, 1)) < instant_fraction, t, r)
    return torch.from_numpy(r.astype(np.float32)), torch.from_numpy(t.astype(np.float32))


def jvp_time_derivative(velocity, z, r, t, v):
    """(u, du/dt) with du/dt = JVP of ``velocity`` along (v, 0, 1) in (z, r, t), by ``torch.func.jvp``."""
    return torch.func.jvp(velocity, (z, r, t), (v, torch.zeros_like(r), torch.ones_like(t)))


def dde_time_derivative(velocity, z, r, t, v, eps: float):
    """du/dt by the Differential Derivation Equation: a central difference along (v, 0, 1), no autograd graph."""
    with torch.no_grad():
        return (velocity(z + eps * v, r, t + eps) - velocity(z - eps * v, r, t - eps)) / (2 * eps)


def mean_flow_target(v, r, t, dudt):
    """The MeanFlow identity u(z, r, t) = v - (t - r) du/dt, cut from the graph (stop-gradient)."""
    return (v - (t - r) * dudt).detach()


def direction_loss(u, target):
    """1 - cosine between predicted and target mean velocity, per sample, averaged."""
    return (1.0 - F.cosine_similarity(u, target, dim=1)).mean()


def policy_loss(model: MeanFlowPolicy, config: MeanFlowPolicyConfig, obs, x, noise, r, t) -> torch.Tensor:
    """The training loss of ``config.method`` on expert chunks ``x`` (B, horizon * 4) at observations ``obs``."""
    z, v = (1 - t) * x + t * noise, noise - x
    if config.method == "flow_matching":
        return F.mse_loss(model.velocity(z, t, t, obs), v)

    def velocity(z_, r_, t_):
        return model.velocity(z_, r_, t_, obs)

    if config.method == "meanflow":
        u, dudt = jvp_time_derivative(velocity, z, r, t, v)
        return F.mse_loss(u, mean_flow_target(v, r, t, dudt))
    u = velocity(z, r, t)
    target = mean_flow_target(v, r, t, dde_time_derivative(velocity, z, r, t, v, config.dde_eps))
    return F.mse_loss(u, target) + config.direction_weight * direction_loss(u, target)


def train_spec(config: MeanFlowPolicyConfig = MeanFlowPolicyConfig()) -> TrainSpec:
    """Adam with cosine decay on :func:`policy_loss` over (observation, chunk) pairs of the training demonstrations."""
    obs, chunks = (torch.from_numpy(a) for a in _train_demonstrations(config).chunks(config.horizon))
    chunks = chunks.reshape(len(chunks), -1)

    def loss(model, rng, step):
        idx = torch.from_numpy(rng.integers(0, len(obs), config.batch))
        noise = torch.from_numpy(rng.standard_normal((config.batch, config.chunk_size)).astype(np.float32))
        r, t = sample_times(rng, config.batch, config.instant_fraction)  # flow matching uses t alone
        return policy_loss(model, config, obs[idx], chunks[idx], noise, r, t)

    def lr(step):  # cosine decay to zero: the last steps refine the small actions near the goal
        return config.lr * 0.5 * (1 + math.cos(math.pi * step / config.steps))

    return TrainSpec(config.steps, lambda m: torch.optim.Adam(m.parameters(), lr=config.lr), loss, lr=lr)


# --- evaluation ---------------------------------------------------------------------------------

def policy_for_episode(model: MeanFlowPolicy, config: MeanFlowPolicyConfig, seed: int, steps: int = 1):
    """The receding-horizon controller of one episode: each call samples a chunk (noise seeded by
    the config's and the episode's seed) and returns its first ``execute`` actions."""
    rng = np.random.default_rng([config.seed, seed])

    def act(obs: np.ndarray) -> np.ndarray:
        noise = torch.from_numpy(rng.standard_normal((1, config.horizon, ACTION_DIM)).astype(np.float32))
        with torch.inference_mode():
            chunk = model.sample(torch.from_numpy(obs.astype(np.float32)[None]), noise, steps)
        return chunk[0, :config.execute].numpy()

    return act


def evaluate(model: nn.Module, config: MeanFlowPolicyConfig = MeanFlowPolicyConfig(),
             nfes: Sequence[int] | None = None) -> dict:
    """Over ``eval_episodes`` held-out seeds: ``success_rate`` and ``mean_episode_steps`` (failures count
    ``max_episode_steps``) of rollouts at 1 network evaluation per chunk, ``action_mse`` of the sampled
    chunk against the expert's at every step of the expert's held-out episodes, and the expert's own
    ``expert_success_rate``; for each other sampler step count ``k`` in ``nfes`` also ``*_{k}nfe``.
    ``nfes`` defaults to 1 and ``sample_steps`` for flow matching, 1 for the mean-velocity methods."""
    if nfes is None:
        nfes = (1, config.sample_steps) if config.method == "flow_matching" else (1,)
    bad = [k for k in nfes if not isinstance(k, int) or k < 1]
    if bad or 1 not in nfes:
        raise ValueError(f"nfes must be positive integers including 1 (the unsuffixed figures), got {list(nfes)}")
    model = model.eval()
    held_out = demonstrations(DemoSpec.held_out(config.task, config.eval_episodes))
    obs, chunks = (torch.from_numpy(a) for a in held_out.chunks(config.horizon))
    noise = torch.randn(chunks.shape, generator=torch.Generator().manual_seed(config.seed))
    out = {"expert_success_rate": held_out.expert_success_rate}
    for steps in sorted(set(nfes)):
        suffix = "" if steps == 1 else f"_{steps}nfe"
        with torch.inference_mode():
            out["action_mse" + suffix] = float(F.mse_loss(model.sample(obs, noise, steps), chunks))
        episodes = rollouts(config.task, held_out.spec.seeds,
                            lambda seed, k=steps: policy_for_episode(model, config, seed, k), config.max_episode_steps)
        out["success_rate" + suffix] = float(np.mean([ep.success for ep in episodes]))
        out["mean_episode_steps" + suffix] = float(np.mean([ep.success_step or config.max_episode_steps
                                                            for ep in episodes]))
    return out
