"""FluxNet: a surrogate of conservation laws that conserves the total by construction, and its baselines.

The network reads the state u (batch, channels, *cells) and predicts, per cell and
channel, the nonnegative amounts ``F[i -> i + s]`` it moves to each of its R neighbours on
either side (in 2D along x and along y: 4R destinations) over one whole surrogate step,
many solver steps long. The step is

    u' = u - (sum of the amounts a cell sends) + (sum of the amounts it receives),

where what a cell sends and what its neighbours receive are the same realised per-edge
amounts, read from one tensor. Every amount leaves one cell and enters another, so the
total is conserved exactly for any weights, quantized ones included, up to float
round-off in the sums.

Transport heads (softmax over the destinations plus a "keep" slot, times a capacity):

* ``L``: fractions of the sender's capacity ``relu(u - lower)``: a cell never sends more
  than it has above ``lower``, so ``u' >= lower``.
* ``U``: fractions of the receiver's capacity ``relu(upper - u)``, taken from its 2R
  upstream cells: a cell never receives more than its room below ``upper``, so ``u' <= upper``.
* ``D``: both proposals; the realised amount on each edge is their minimum. The minimum
  keeps both guarantees at once (a cell sends at most what L allows and receives at most
  what U allows), whatever the weights; a mean of the two would keep neither. The
  consistency loss (weight ``consistency``) pulls the proposals together so the minimum
  throws little of either away.

The bounds are per channel, from :mod:`.pde` (traffic density in [0, 1], water depth
>= 0, ...); a signed channel (shallow-water momentum) gets a wide interval, which makes
its transport that of the shifted, nonnegative ``u - lower``.

Boundaries: periodic problems wrap (the flows of the last R cells wrap round to the
first); Dirichlet problems (1D only, see :mod:`.pde`) are padded with ghost cells holding
the boundary values. Ghost cells send into the domain and receive from it like any cell
but are reset every step, so the interior total changes by exactly the amounts that
crossed the two boundary faces (``Step.boundary_inflow``).

Architectures (``arch``), so that the baselines are the same registered model:

* ``fluxnet``: the above.
* ``cnn``: the same convolutional body, unconstrained: ``u' = u + (upper - lower) * net(u)``.
* ``flux_rate``: the body predicts a signed flux rate across the face after each cell
  (per axis), integrated in time with ``substeps`` forward-Euler substeps (the network
  runs at every substep). Conservative (telescoping), but unbounded and ``substeps`` times
  the compute.

The body is ``layers`` valid convolutions (kernel ``kernel``, GELU, residual after the
first) over the state padded by its receptive field, then a pointwise convolution to
the head; the state is scaled to [0, 1] on the channel's bounds first. Hidden widths
are multiples of 32, so MX blocks tile every weight but the first layer's.

Strides: ``stride`` s makes one model step s of the problem's surrogate steps (the data are
every s-th state of the stride-1 trajectories, from the same initial conditions). A cell
then sends up to ``reach * s`` cells each way, the CFL-style bound: information crosses
about s times as many cells per model step. The body's receptive field stays ``layers *
(kernel // 2)`` cells around the sender; the flux-rate baseline keeps its ``substeps``, so
each of its model steps still moves an amount at most ``substeps`` faces.

Scale: the paper's solvers and networks are larger; here the mechanism is the same at
small scale: 128 cells in 1D and 32 x 32 in 2D, a few thousand CPU training steps on
tens of trajectories, rollouts of 100 surrogate steps against the solver.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import NamedTuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from edgekit.simulators import weight_formats as wf

from . import pde
from .config_fields import bounded, checked
from .training import Trained, TrainSpec
from .weights import quantized_copy

ARCHS = ("fluxnet", "cnn", "flux_rate")
HEADS = ("L", "U", "D")
# boundaries some problem takes; __post_init__ checks the chosen problem's own
BOUNDARIES = tuple(dict.fromkeys(b for p in pde.PROBLEMS.values() for b in p.boundaries))
KEEP_LOGIT = 2.0  # initial preference for "keep" over all moves together: e^2 / (e^2 + 1) ~ 88% kept
BOUND_TOLERANCE = 1e-5  # a value beyond a bound by more than this fraction of the range is a violation
STUDY_FORMATS = (wf.REFERENCE,  # and the MX float formats of 8 and 4 bits
                 *wf.names("block", lambda r: r.is_mx and r.element_kind == "float" and r.element_bits in (8, 4)))
STUDY_VARIANTS = (("fluxnet", "L"), ("fluxnet", "U"), ("fluxnet", "D"), ("cnn", "L"), ("flux_rate", "L"))


def _check_choice(key: str, value, allowed: Iterable):
    allowed = tuple(allowed)
    if value not in allowed:
        raise ValueError(f"FluxNetConfig.{key} must be one of {', '.join(allowed)}, got {value!r}")


@dataclass(frozen=True)
@checked
class FluxNetConfig:
    pde: str = bounded("traffic", choices=pde.PROBLEMS)
    head: str = bounded("L", choices=HEADS)  # L, U or D (fluxnet only; the baselines ignore it)
    arch: str = bounded("fluxnet", choices=ARCHS)  # fluxnet, cnn or flux_rate
    boundary: str = bounded("periodic", choices=BOUNDARIES)  # periodic, or dirichlet for the 1D problems
    # surrogate cells per axis; None: the problem's default (128 in 1D, 32 in 2D)
    cells: int | None = bounded(None, low=1)
    # R: neighbours each side a cell sends to per solver-sampled step; a model step of `stride` of them
    # sends up to R * stride cells (the CFL bound: information crosses ~stride times as many cells)
    reach: int = bounded(3, low=1)
    stride: int = bounded(1, low=1)  # solver-sampled steps (pde's surrogate step) per model step
    hidden: int = bounded(64, low=32)
    layers: int = bounded(4, low=1)
    kernel: int = bounded(5, low=1)
    substeps: int = bounded(8, low=1)  # flux_rate: network evaluations per surrogate step
    unroll: int = bounded(4, low=1)  # training: surrogate steps rolled out per sample
    consistency: float = bounded(1.0, low=0)  # D head: weight of the consistency loss
    train_trajectories: int = bounded(64, low=1)
    test_trajectories: int = bounded(8, low=1)
    trajectory_steps: int = bounded(100, low=1)  # surrogate steps per training trajectory
    rollout_steps: int = bounded(100, low=1)  # surrogate steps per evaluation rollout
    steps: int = bounded(1500, low=1)
    batch: int = bounded(16, low=1)
    # at 2e-3 Adam drives the softmax into one-hot moves early, where its gradient vanishes
    lr: float = bounded(5e-4, low=0, low_open=True)
    seed: int = bounded(0, low=0)
    data_seed: int = bounded(0, low=0)

    def __post_init__(self):
        _check_choice("boundary", self.boundary, pde.get_problem(self.pde).boundaries)
        if self.hidden % 32:
            raise ValueError(f"FluxNetConfig.hidden must be a positive multiple of 32, got {self.hidden}")
        if self.kernel % 2 == 0:
            raise ValueError(f"FluxNetConfig.kernel must be odd, got {self.kernel}")
        if self.unroll > self.trajectory_steps:
            raise ValueError(f"FluxNetConfig.unroll ({self.unroll}) must not exceed trajectory_steps "
                             f"({self.trajectory_steps})")
        halo = self.layers * (self.kernel // 2)
        if self.cells is not None and self.cells <= halo + self.reach:
            raise ValueError(f"FluxNetConfig.cells must exceed layers * (kernel // 2) + reach = {halo + self.reach}, "
                             f"got {self.cells}")
        if self.arch == "fluxnet" and self.grid_cells <= halo + self.neighbourhood:
            widest = (self.grid_cells - halo - 1) // self.reach
            raise ValueError(f"FluxNetConfig.stride must be in [1, {widest}] for reach {self.reach} on "
                             f"{self.grid_cells} cells: the neighbourhood reach * stride = {self.neighbourhood} "
                             f"must stay below cells - layers * (kernel // 2) = {self.grid_cells - halo}; "
                             f"got stride {self.stride} (lower stride or reach, or raise cells)")

    @property
    def problem(self) -> pde.Problem:
        return pde.get_problem(self.pde)

    @property
    def grid_cells(self) -> int:
        return self.cells or self.problem.cells

    @property
    def neighbourhood(self) -> int:
        """The farthest a FluxNet cell sends in one model step, in cells along an axis."""
        return self.reach * self.stride

    @classmethod
    def tiny(cls, **overrides) -> FluxNetConfig:
        """A config for tests: data in a fraction of a second, training in a few seconds."""
        base = {"cells": 32, "reach": 2, "hidden": 32, "layers": 2, "kernel": 3, "substeps": 4, "unroll": 2,
                "train_trajectories": 8, "test_trajectories": 2, "trajectory_steps": 20, "rollout_steps": 100,
                "steps": 40, "batch": 8, "lr": 3e-3}
        base.update(overrides)
        return cls(**base)


# ---- data ------------------------------------------------------------------------------

@functools.cache
def _trajectories(name, count, steps, cells, boundary, seed) -> np.ndarray:
    data = pde.trajectories(name, count, steps, cells=cells, boundary=boundary, seed=seed)
    data.setflags(write=False)
    return data


SPLITS = {"train": 0, "test": 1, "validation": 2}  # the second part of each split's data seed


def _strided(config: FluxNetConfig, count: int, steps: int, split: str) -> np.ndarray:
    """Every ``stride``-th state of a solver trajectory sampled at the problem's own step: (count, steps + 1, ...)."""
    data = _trajectories(config.pde, count, steps * config.stride, config.grid_cells, config.boundary,
                         (config.data_seed, SPLITS[split]))
    return data[:, ::config.stride]


def train_data(config: FluxNetConfig) -> np.ndarray:
    """Training trajectories (train_trajectories, trajectory_steps + 1, C, *cells), float32, one model step apart."""
    return _strided(config, config.train_trajectories, config.trajectory_steps, "train")


def held_out_data(config: FluxNetConfig, split: str = "test") -> np.ndarray:
    """Held-out trajectories (test_trajectories, rollout_steps + 1, C, *cells) from other initial conditions.

    ``split``: ``test``, or ``validation`` (other initial conditions again) for choosing hyperparameters.
    """
    if split not in ("test", "validation"):
        raise ValueError(f"split must be one of test, validation, got {split!r}")
    return _strided(config, config.test_trajectories, config.rollout_steps, split)


# ---- the network -------------------------------------------------------------------------

def _narrow_cells(x: torch.Tensor, starts: Iterable[int], size: int) -> torch.Tensor:
    """``x`` cut to ``size`` cells from ``starts`` along its trailing cell axes (slices: exportable)."""
    starts = tuple(starts)
    for axis, start in zip(range(-len(starts), 0), starts):
        x = x.narrow(axis, start, size)
    return x


def _wrap(x: torch.Tensor, width: int, dims: int) -> torch.Tensor:
    """Periodic padding by ``width`` cells on both sides of the last ``dims`` axes."""
    if width == 0:
        return x
    for axis in range(-dims, 0):
        n = x.shape[axis]
        x = torch.cat([x.narrow(axis, n - width, width), x, x.narrow(axis, 0, width)], dim=axis)
    return x


class Step(NamedTuple):
    state: torch.Tensor  # u after one surrogate step
    consistency: torch.Tensor | None  # D head: mean squared gap between the L and U proposals (per range^2)
    boundary_inflow: torch.Tensor | None  # (batch, channels): net amount in through Dirichlet boundaries


class FluxNet(nn.Module):
    """u (batch, channels, *cells) -> u after one surrogate step (``arch``: FluxNet or a baseline)."""

    def __init__(self, config: FluxNetConfig):
        super().__init__()
        problem = config.problem
        self.arch, self.head, self.dims = config.arch, config.head, problem.dims
        self.channels = len(problem.channels)
        self.periodic = config.boundary == "periodic"
        self.substeps = config.substeps if config.arch == "flux_rate" else 1
        self.trim = config.kernel // 2  # cells a valid convolution eats on each side
        self.halo = config.layers * self.trim  # the body's receptive field on each side
        axes = range(-self.dims, 0)
        if config.arch == "flux_rate":  # one signed flux per face, the face after each cell
            self.destinations = [(axis, 1) for axis in axes]
        else:
            reach = config.neighbourhood
            shifts = [*range(-reach, 0), *range(1, reach + 1)]
            self.destinations = [(axis, shift) for axis in axes for shift in shifts]
        self.margin = 0 if config.arch == "cnn" else max(abs(s) for _, s in self.destinations)

        shape = (1, self.channels) + (1,) * self.dims
        self.register_buffer("lower", torch.tensor(problem.lower, dtype=torch.float32).view(shape))
        self.register_buffer("upper", torch.tensor(problem.upper, dtype=torch.float32).view(shape))
        if not self.periodic:
            left, right = problem.dirichlet
            self.register_buffer("ghost_left", torch.tensor(left, dtype=torch.float32).view(1, -1, 1))
            self.register_buffer("ghost_right", torch.tensor(right, dtype=torch.float32).view(1, -1, 1))

        conv = nn.Conv1d if self.dims == 1 else nn.Conv2d
        self.body = nn.ModuleList(conv(self.channels if i == 0 else config.hidden, config.hidden, config.kernel)
                                  for i in range(config.layers))
        slots = len(self.destinations) + 1  # the destinations and "keep"
        self.proposals = 2 if config.head == "D" else 1
        outputs = {"cnn": self.channels, "flux_rate": self.channels * self.dims,
                   "fluxnet": self.proposals * self.channels * slots}[config.arch]
        self.out = conv(config.hidden, outputs, 1)
        with torch.no_grad():  # start near "u' = u": small moves, small updates
            self.out.weight.mul_(0.1)
            self.out.bias.zero_()
            if config.arch == "fluxnet":
                self.out.bias.view(self.proposals, self.channels, slots)[:, :, 0] = KEEP_LOGIT + math.log(slots - 1)

    # -- body -------------------------------------------------------------------------------
    def _pad(self, u: torch.Tensor, width: int) -> torch.Tensor:
        if self.periodic:
            return _wrap(u, width, self.dims)
        b = u.shape[0]
        return torch.cat([self.ghost_left.expand(b, -1, width), u, self.ghost_right.expand(b, -1, width)], dim=-1)

    def _head_output(self, u: torch.Tensor, margin: int) -> torch.Tensor:
        """The output layer over the cells and ``margin`` ghost cells on each side."""
        h = (self._pad(u, self.halo + margin) - self.lower) / (self.upper - self.lower)
        for i, layer in enumerate(self.body):
            y = F.gelu(layer(h))
            h = y if i == 0 else _narrow_cells(h, (self.trim,) * self.dims, h.shape[-1] - 2 * self.trim) + y
        return self.out(h)

    def _extended(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(state, head output) over the cells and ``margin`` ghost cells each side.

        Periodic: computed on the cells, then wrapped, so a wrapped copy is bit for bit
        its original and every amount is the same number where it leaves and where it arrives.
        """
        if self.periodic:
            return _wrap(u, self.margin, self.dims), _wrap(self._head_output(u, 0), self.margin, self.dims)
        return self._pad(u, self.margin), self._head_output(u, self.margin)

    # -- transport ------------------------------------------------------------------------
    def _windows(self, amounts: torch.Tensor, direction: int) -> torch.Tensor:
        """Per destination (axis, s), ``amounts[:, :, d]`` over the cells moved by ``direction * s`` along axis.

        ``amounts`` (B, C, D, *extended cells). For amounts indexed by sender,
        direction 0 gives what each cell sends and -1 what each cell receives; indexed by
        receiver, +1 and 0.
        """
        n = amounts.shape[-1] - 2 * self.margin
        parts = []
        # split, not a narrow per destination: each narrow's backward fills a zero tensor of the full size
        for piece, (axis, shift) in zip(amounts.split(1, dim=2), self.destinations):
            starts = [self.margin + (direction * shift if a == axis else 0) for a in range(-self.dims, 0)]
            parts.append(_narrow_cells(piece, starts, n))
        return torch.cat(parts, dim=2)

    def _proposal(self, logits: torch.Tensor, capacity: torch.Tensor) -> torch.Tensor:
        """Softmax over destinations and "keep", the keep slot dropped, times the capacity: (B, C, D, *cells)."""
        b, _, *cells = logits.shape
        fractions = torch.softmax(logits.reshape(b, self.channels, len(self.destinations) + 1, *cells), dim=2)
        return fractions[:, :, 1:] * capacity.unsqueeze(2)

    def _flows(self, u: torch.Tensor, with_consistency: bool):
        """(sent, received, consistency): realised amounts (B, C, D, *cells) by the cell that sends / receives."""
        u_ext, out = self._extended(u)
        if self.arch == "flux_rate":
            b, _, *cells = out.shape
            scale = ((self.upper - self.lower) / self.substeps).unsqueeze(2)
            rate = out.reshape(b, self.channels, self.dims, *cells) * scale
            return self._windows(rate, 0), self._windows(rate, -1), None
        width = self.channels * (len(self.destinations) + 1)
        if self.head == "L":
            by_sender = self._proposal(out, F.relu(u_ext - self.lower))
            return self._windows(by_sender, 0), self._windows(by_sender, -1), None
        by_receiver = self._proposal(out[:, -width:], F.relu(self.upper - u_ext))
        if self.head == "U":
            return self._windows(by_receiver, 1), self._windows(by_receiver, 0), None
        by_sender = self._proposal(out[:, :width], F.relu(u_ext - self.lower))
        sent_l, sent_u = self._windows(by_sender, 0), self._windows(by_receiver, 1)
        consistency = None
        if with_consistency:
            scale = (self.upper - self.lower).unsqueeze(2)
            consistency = ((sent_l - sent_u) / scale).pow(2).mean()
        received = torch.minimum(self._windows(by_sender, -1), self._windows(by_receiver, 0))
        return torch.minimum(sent_l, sent_u), received, consistency

    def _boundary_inflow(self, sent: torch.Tensor, received: torch.Tensor) -> torch.Tensor:
        """(B, C): amounts received from ghost cells minus amounts sent to them (1D Dirichlet)."""
        n = sent.shape[-1]
        cells = torch.arange(n, device=sent.device)
        shifts = torch.tensor([s for _, s in self.destinations], device=sent.device)[:, None]

        def outside(index):
            return ((index < 0) | (index >= n)).to(sent.dtype)

        return (received * outside(cells - shifts)).sum((2, 3)) - (sent * outside(cells + shifts)).sum((2, 3))

    def step(self, u: torch.Tensor, with_consistency: bool = False, with_inflow: bool = False) -> Step:
        """One surrogate step, with the D head's consistency and the Dirichlet boundary inflow on request."""
        if self.arch == "cnn":
            return Step(u + (self.upper - self.lower) * self._head_output(u, 0), None, None)
        consistency, inflow = None, None
        for _ in range(self.substeps):
            sent, received, consistency = self._flows(u, with_consistency)
            u = u - sent.sum(2) + received.sum(2)
            if with_inflow and not self.periodic:
                change = self._boundary_inflow(sent, received)
                inflow = change if inflow is None else inflow + change
        return Step(u, consistency, inflow)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return self.step(u).state


def build(config: FluxNetConfig = FluxNetConfig()) -> nn.Module:
    return FluxNet(config)


def example_inputs(config: FluxNetConfig = FluxNetConfig()) -> tuple:
    """The first held-out initial condition, batch 1: (1, C, *cells)."""
    return (torch.from_numpy(held_out_data(config)[:1, 0].copy()),)


# ---- training ----------------------------------------------------------------------------

def _range(config: FluxNetConfig) -> torch.Tensor:
    problem = config.problem
    span = np.subtract(problem.upper, problem.lower).astype(np.float32)
    return torch.from_numpy(span).view((1, -1) + (1,) * problem.dims)


def train_spec(config: FluxNetConfig = FluxNetConfig()) -> TrainSpec:
    """Adam with cosine decay on the error of ``unroll``-step rollouts from random windows of the trajectories.

    Loss: mean over the unrolled steps of the squared error per range^2, plus, for the
    D head, ``consistency`` times the proposals' gap.
    """
    data = torch.from_numpy(train_data(config).copy())
    span = _range(config)
    n, length = data.shape[:2]

    def loss(model, rng, step):
        index = torch.from_numpy(rng.integers(0, n, config.batch))
        start = torch.from_numpy(rng.integers(0, length - config.unroll, config.batch))
        u = data[index, start]
        total = torch.zeros(())
        for k in range(1, config.unroll + 1):
            result = model.step(u, with_consistency=config.head == "D")
            u = result.state
            total = total + ((u - data[index, start + k]) / span).pow(2).mean()
            if result.consistency is not None:
                total = total + config.consistency * result.consistency
        return total / config.unroll

    def lr(step):
        return config.lr * 0.5 * (1 + math.cos(math.pi * step / config.steps))

    return TrainSpec(config.steps, lambda m: torch.optim.Adam(m.parameters(), lr=config.lr), loss, lr=lr,
                     grad_clip=1.0)


# ---- evaluation --------------------------------------------------------------------------

@torch.no_grad()
def rollout(model: nn.Module, u0: torch.Tensor, steps: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(states (B, steps + 1, C, *cells), boundary inflow per step (B, steps, C) or None) of ``steps`` steps."""
    states, inflows = [u0], []
    u = u0
    for _ in range(steps):
        result = model.step(u, with_inflow=True)
        u = result.state
        states.append(u)
        if result.boundary_inflow is not None:
            inflows.append(result.boundary_inflow)
    return torch.stack(states, 1), (torch.stack(inflows, 1) if inflows else None)


def rollout_metrics(states: torch.Tensor, reference: torch.Tensor, inflow: torch.Tensor | None, periodic: bool,
                    lower: Iterable[float], upper: Iterable[float]) -> dict:
    """Errors against the solver, conservation and bounds of a rollout (see :func:`evaluate`)."""
    dims = states.ndim - 3
    cell_axes = tuple(range(3, 3 + dims))
    error = (states - reference).flatten(2).norm(dim=2) / reference.flatten(2).norm(dim=2)  # (B, T + 1)
    out = {"rollout_rel_l2": error[:, 1:].mean().item(), "rel_l2_step1": error[:, 1].mean().item(),
           "rel_l2_final": error[:, -1].mean().item()}
    shape = (1, 1, -1) + (1,) * dims
    low = torch.tensor(tuple(lower), dtype=states.dtype).view(shape)
    high = torch.tensor(tuple(upper), dtype=states.dtype).view(shape)
    if periodic or inflow is not None:
        mass = states.double().sum(cell_axes)  # (B, T + 1, C)
        change = mass - mass[:, :1]
        if inflow is not None:
            change[:, 1:] -= inflow.double().cumsum(1)
        transported = (states[:, :1] - low).double().abs().sum(cell_axes)  # (B, 1, C): the total above `lower`
        out["mass_drift"] = (change.abs() / transported.clamp_min(1e-30)).max().item()
    span = high - low
    below, above = (low - states) / span, (states - high) / span
    out["lower_violations"] = (below > BOUND_TOLERANCE).double().mean().item()
    out["upper_violations"] = (above > BOUND_TOLERANCE).double().mean().item()
    out["max_bound_excess"] = max(0.0, below.max().item(), above.max().item())
    return out


def evaluate(model: nn.Module, config: FluxNetConfig = FluxNetConfig(), split: str = "test") -> dict:
    """Rollouts of ``rollout_steps`` surrogate steps from the held-out initial conditions, against the solver.

    ``split``: the test trajectories, or the validation ones (see :func:`held_out_data`).

    * ``rollout_rel_l2``: relative L2 error ``|u - u_solver| / |u_solver|`` per trajectory,
      mean over trajectories and steps (``rel_l2_step1``: after one step, ``rel_l2_final``:
      after the last).
    * ``mass_drift``: the largest ``|total(t) - total(0) - inflow(0..t)|`` over steps,
      channels and trajectories, relative to the initial total above the lower bound,
      ``sum(u(0) - lower)`` (the amount a transport moves around: the total mass where
      lower = 0); inflow is what the model itself moved through Dirichlet boundaries (0 on
      periodic domains). Absent for the cnn baseline on a Dirichlet domain, which has no
      boundary flows to balance against.
    * ``lower_violations`` / ``upper_violations``: the fraction of cell values over the
      rollout below ``lower`` / above ``upper`` by more than 1e-5 of the range;
      ``max_bound_excess``: the largest excursion beyond either bound, per range.
    """
    reference = torch.from_numpy(held_out_data(config, split).copy())
    states, inflow = rollout(model.eval(), reference[:, 0], config.rollout_steps)
    problem = config.problem
    return rollout_metrics(states, reference, inflow, config.boundary == "periodic", problem.lower, problem.upper)


# ---- the surrogate comparison ------------------------------------------------------------

def compare_surrogates(train: Callable[[FluxNetConfig], Trained], configs: Iterable[FluxNetConfig],
                       formats: Iterable[str] = STUDY_FORMATS,
                       log: Callable[[str], None] | None = None) -> list[dict]:
    """Train (``train``: e.g. the registry's, with its cache) and evaluate each config, in float and in each
    weight format: one row of :func:`evaluate`'s metrics per (config, format)."""
    rows = []
    for config in configs:
        trained = train(config)
        for fmt in formats:
            model = trained.model if fmt == wf.REFERENCE else quantized_copy(trained.model, fmt)
            row = {"pde": config.pde, "boundary": config.boundary, "arch": config.arch,
                   "head": config.head if config.arch == "fluxnet" else "", "format": fmt,
                   **evaluate(model, config), "train_seconds": trained.train_seconds, "config": asdict(config)}
            rows.append(row)
            if log is not None:
                log(f"{config.pde} {config.arch} {row['head']} {row['format']}: "
                    f"rollout rel L2 {row['rollout_rel_l2']:.4g}, mass drift {row.get('mass_drift', float('nan')):.3g}")
    return rows
