"""Meta-World expert demonstrations and policy rollouts: collection, disk cache, action chunks.

Episodes run in Meta-World 3's goal-observable task classes
(``ALL_V3_ENVIRONMENTS_GOAL_OBSERVABLE``, what ``gymnasium.make("Meta-World/goal_observable",
env_name=..., seed=s)`` builds): the seed fixes one random object and goal placement, so
every seed is one distinct initial condition. Training demonstrations take seeds
``first_seed, first_seed + 1, ...``; held-out evaluation uses seeds from
``EVAL_SEED_BASE`` up, which no training set may reach, so the two never share a placement.

Demonstrations come from Meta-World's scripted expert policies, actions clipped to the
action box ([-1, 1]^4) as the environment applies them. An expert episode runs
``steps_after_success`` steps past its first step with ``info["success"]`` set (so the data
also shows what to do close to the goal, where a policy that is slightly off arrives), or
ends unsuccessful after ``max_steps``. Only successful episodes are kept as demonstrations;
the seeds the expert failed are recorded (``Demonstrations.succeeded``) so the expert's own
success rate is reported beside the learned policy's. Policy rollouts stop at the first
success.

MuJoCo rollouts are the slow part, so a demonstration set is cached under the model cache
(``cache_root()/demos``) as a verified checkpoint file (atomic write, SHA-256 digest), keyed
by task, seeds, step limit, this module's source and the metaworld and mujoco versions. A
corrupt file is moved aside with a warning and the demonstrations are collected again.
"""

from __future__ import annotations

import functools
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import numpy as np
import torch

from . import cache

TASKS = ("reach-v3", "push-v3", "drawer-open-v3", "drawer-close-v3", "button-press-topdown-v3",
         "window-open-v3", "plate-slide-v3", "handle-press-v3", "coffee-button-v3", "faucet-open-v3",
         "door-open-v3")
OBS_DIM = 39
ACTION_DIM = 4
MAX_STEPS = 500  # Meta-World's own episode length (max_path_length)
EVAL_SEED_BASE = 1_000_000  # held-out seeds start here; training seeds stay below
DEMO_FORMAT = "metaworld-demonstrations"

# A Policy is called with the current observation and returns the actions to execute next, (k, 4).
Policy = Callable[[np.ndarray], np.ndarray]


def check_task(task: str) -> str:
    if task not in TASKS:
        raise ValueError(f"task must be one of {', '.join(TASKS)}; got {task!r}")
    return task


def expert_policy(task: str):
    """Meta-World's scripted expert for ``task`` (``reach-v3`` -> ``SawyerReachV3Policy``)."""
    from metaworld import policies

    words = check_task(task).removesuffix("-v3").split("-")
    return getattr(policies, f"Sawyer{''.join(w.capitalize() for w in words)}V3Policy")()


def make_env(task: str):
    """One goal-observable environment of ``task``; :func:`reset_to_seed` places it."""
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS_GOAL_OBSERVABLE

    return ALL_V3_ENVIRONMENTS_GOAL_OBSERVABLE[f"{check_task(task)}-goal-observable"]()


def reset_to_seed(env, seed: int) -> np.ndarray:
    """Reset ``env`` to the placement of ``seed``; the first observation.

    Does what the goal-observable class's constructor does with ``seed=seed`` (draw the
    placement from NumPy's global generator seeded with ``seed``, freeze it, seed the env),
    without building a new MuJoCo model per episode (0.27 s each); the global generator's
    state is restored afterwards.
    """
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        env._freeze_rand_vec = False  # draw a new placement at this reset
        env.reset()
    finally:
        env._freeze_rand_vec = True
        np.random.set_state(state)
    env.seed(seed)
    return env.reset()[0]


@dataclass
class Episode:
    seed: int
    observations: np.ndarray  # (T, 39) float32: the observation each action was chosen at
    actions: np.ndarray  # (T, 4) float32, as executed (clipped to [-1, 1])
    success_step: int | None  # actions taken up to and including the first successful step

    @property
    def success(self) -> bool:
        return self.success_step is not None


def run_episode(env, seed: int, policy: Policy, max_steps: int = MAX_STEPS, steps_after_success: int = 0) -> Episode:
    """Run ``policy`` from the placement of ``seed`` for ``max_steps`` actions, or until
    ``steps_after_success`` actions after the first successful step."""
    obs = reset_to_seed(env, seed)
    observations, actions, success_step = [], [], None
    with warnings.catch_warnings():
        # the scripted experts warn whenever a gain saturates the action box; the env clips, as we do
        warnings.filterwarnings("ignore", message=r"Constant\(s\) may be too high", category=UserWarning)
        while len(actions) < max_steps:
            planned = np.asarray(policy(obs), dtype=np.float64).reshape(-1, ACTION_DIM)
            for action in np.clip(planned[:max_steps - len(actions)], -1.0, 1.0):
                observations.append(obs)
                actions.append(action)
                obs, _, _, _, info = env.step(action)
                if success_step is None and info["success"]:
                    success_step = len(actions)
                    max_steps = min(max_steps, success_step + steps_after_success)
                if len(actions) >= max_steps:
                    break
    return Episode(seed, _f32(observations), _f32(actions), success_step)


def _f32(rows) -> np.ndarray:
    return np.asarray(rows, dtype=np.float32)


def rollouts(task: str, seeds, policy_for_seed: Callable[[int], Policy], max_steps: int = MAX_STEPS,
             steps_after_success: int = 0) -> list[Episode]:
    """One episode per seed in one environment; ``policy_for_seed(seed)`` makes each episode's policy."""
    env = make_env(task)
    return [run_episode(env, int(seed), policy_for_seed(int(seed)), max_steps, steps_after_success)
            for seed in seeds]


# --- demonstrations ------------------------------------------------------------------------------

@dataclass(frozen=True)
class DemoSpec:
    """Which demonstrations: the expert on ``task`` for seeds ``first_seed .. first_seed + episodes - 1``."""

    task: str
    first_seed: int
    episodes: int
    max_steps: int = MAX_STEPS
    steps_after_success: int = 20

    def __post_init__(self):
        check_task(self.task)
        if self.episodes < 1:
            raise ValueError(f"episodes must be at least 1, got {self.episodes}")
        if not 1 <= self.max_steps <= MAX_STEPS:
            raise ValueError(f"max_steps must be in 1..{MAX_STEPS} (Meta-World's episode length), got {self.max_steps}")
        if self.first_seed < 0:
            raise ValueError(f"first_seed must be non-negative, got {self.first_seed}")
        if self.steps_after_success < 0:
            raise ValueError(f"steps_after_success must be non-negative, got {self.steps_after_success}")
        if self.first_seed < EVAL_SEED_BASE < self.first_seed + self.episodes:
            raise ValueError(f"seeds {self.first_seed}..{self.first_seed + self.episodes - 1} straddle "
                             f"EVAL_SEED_BASE={EVAL_SEED_BASE}: training and held-out seeds must stay disjoint")

    @property
    def seeds(self) -> range:
        return range(self.first_seed, self.first_seed + self.episodes)

    @classmethod
    def train(cls, task: str, episodes: int) -> DemoSpec:
        return cls(task, 0, episodes)

    @classmethod
    def held_out(cls, task: str, episodes: int) -> DemoSpec:
        return cls(task, EVAL_SEED_BASE, episodes)


@dataclass
class Demonstrations:
    """The expert's successful episodes of a :class:`DemoSpec`, and which seeds it failed."""

    spec: DemoSpec
    succeeded: np.ndarray  # (episodes,) bool, per seed of the spec
    episodes: list[Episode]  # the successful ones, in seed order

    @property
    def expert_success_rate(self) -> float:
        return float(self.succeeded.mean())

    def chunks(self, horizon: int) -> tuple[np.ndarray, np.ndarray]:
        """(observations (N, 39), action chunks (N, horizon, 4)): every step of every episode with
        the ``horizon`` actions from it on; past the episode's end the last action repeats."""
        if not self.episodes:
            raise ValueError(f"the {self.spec.task} expert succeeded on none of seeds {self.spec.seeds.start}.."
                             f"{self.spec.seeds.stop - 1}: no demonstrations; take more episodes")
        obs, chunks = [], []
        for ep in self.episodes:
            steps = len(ep.actions)
            index = np.minimum(np.arange(steps)[:, None] + np.arange(horizon), steps - 1)
            obs.append(ep.observations)
            chunks.append(ep.actions[index])
        return np.concatenate(obs), np.concatenate(chunks)


def collect(spec: DemoSpec) -> Demonstrations:
    """Run the expert on every seed of ``spec`` (no cache)."""
    expert = expert_policy(spec.task)
    episodes = rollouts(spec.task, spec.seeds, lambda seed: expert.get_action, spec.max_steps,
                        spec.steps_after_success)
    succeeded = np.array([ep.success for ep in episodes], dtype=bool)
    return Demonstrations(spec, succeeded, [ep for ep in episodes if ep.success])


def code_version() -> str:
    """This module's source and the simulator versions: what the cached rollouts depend on."""
    return f"{cache.source_digest(sys.modules[__name__])}/metaworld {version('metaworld')}/mujoco {version('mujoco')}"


def demo_path(spec: DemoSpec, cache_dir=None) -> Path:
    key = cache.cache_key(DEMO_FORMAT, spec, code_version())
    return cache.cache_root(cache_dir) / "demos" / spec.task / f"{key}.pt"


def _payload(demos: Demonstrations) -> dict:
    eps = demos.episodes
    return {"succeeded": torch.from_numpy(demos.succeeded),
            "seeds": torch.tensor([ep.seed for ep in eps], dtype=torch.int64),
            "lengths": torch.tensor([len(ep.actions) for ep in eps], dtype=torch.int64),
            "success_steps": torch.tensor([ep.success_step for ep in eps], dtype=torch.int64),
            "observations": torch.from_numpy(np.concatenate([ep.observations for ep in eps]) if eps
                                             else np.zeros((0, OBS_DIM), np.float32)),
            "actions": torch.from_numpy(np.concatenate([ep.actions for ep in eps]) if eps
                                        else np.zeros((0, ACTION_DIM), np.float32))}


def _from_payload(spec: DemoSpec, payload: dict) -> Demonstrations:
    bounds = np.cumsum([0, *payload["lengths"].tolist()])
    obs, actions = payload["observations"].numpy(), payload["actions"].numpy()
    episodes = [Episode(seed, obs[a:b], actions[a:b], success_step) for seed, success_step, a, b
                in zip(payload["seeds"].tolist(), payload["success_steps"].tolist(), bounds[:-1], bounds[1:])]
    return Demonstrations(spec, payload["succeeded"].numpy(), episodes)


def read_demonstrations(path, spec: DemoSpec) -> Demonstrations:
    """The demonstrations in a cache file; :class:`cache.CheckpointError` if it is corrupt or of another spec."""
    envelope, payload = cache.read_checkpoint(path)
    if envelope["kind"] != DEMO_FORMAT or envelope["config"] != cache.config_dict(spec):
        raise cache.CheckpointError(f"{path} holds {envelope['kind']} of {envelope['config']}, "
                                    f"not demonstrations of {cache.config_dict(spec)}")
    return _from_payload(spec, payload)


def load_demonstrations(spec: DemoSpec, cache_dir=None) -> Demonstrations:
    """The demonstrations of ``spec``: from the disk cache, else collected and cached."""
    path = demo_path(spec, cache_dir)
    if path.exists():
        try:
            return read_demonstrations(path, spec)
        except cache.CheckpointError as err:
            moved = cache.quarantine(path)
            warnings.warn(f"{err}; moved to {moved.name} and collecting the demonstrations again", stacklevel=2)
    demos = collect(spec)
    cache.ensure_writable(path.parent)
    cache.write_checkpoint(path, model=DEMO_FORMAT, config=spec, code=code_version(), kind=DEMO_FORMAT,
                           payload=_payload(demos))
    return demos


@functools.lru_cache(maxsize=16)
def _memo(spec: DemoSpec, root: Path) -> Demonstrations:
    return load_demonstrations(spec, root)


def demonstrations(spec: DemoSpec) -> Demonstrations:
    """:func:`load_demonstrations` from the current cache root, kept in memory for this process."""
    return _memo(spec, cache.cache_root())
