"""Reference solvers of four conservation laws, and the coarse trajectories surrogates learn from.

Every solver is vectorised NumPy over a batch of trajectories, in float64, and written in
conservation form, so on a periodic domain it keeps the total of each conserved quantity
to round-off:

* ``convection_diffusion``: ``u_t + a u_x = nu u_xx`` on [0, 1), a = 1, nu = 0.002.
  Finite volumes with a first-order upwind advective flux and a central diffusive flux,
  forward Euler. Monotone, so u stays within the range of its data and boundary values,
  when ``dt (a/dx + 2 nu/dx^2) <= 1``.
* ``traffic``: the LWR model ``rho_t + (v rho (1 - rho/rho_max))_x = 0`` on [0, 1),
  v = rho_max = 1. Godunov finite volumes (the demand/supply form of the exact Riemann
  flux of a concave flux), forward Euler; keeps rho in [0, rho_max] when ``v dt/dx <= 1``.
* ``shallow_water``: ``h_t + div(h u) = 0``, ``(h u)_t + div(h u u + g h^2/2 I) = 0`` on
  the periodic square [0, 1)^2, g = 1, flat bottom. Rusanov (local Lax-Friedrichs) finite
  volumes, unsplit forward Euler; keeps h >= 0 when ``dt s (1/dx + 1/dy) <= 1`` with s the
  largest ``|u| + sqrt(g h)``. Total water and both momenta are conserved.
* ``cahn_hilliard``: ``c_t = Lap(c^3 - c - eps^2 Lap c)`` on a periodic square of side
  ``cells`` (one unit per surrogate cell), eps^2 = 1. Fourier spectral in space;
  semi-implicit in time, the stiff linear part implicit and ``S c`` added to both sides
  (S = 2): the k = 0 mode (the mass) is kept exactly and the step is stable for any dt
  when ``S >= max |f''(c)| / 2`` (= 1 for |c| <= 1); dt = 0.1 keeps it accurate.

Boundaries: every problem runs periodic. The 1D problems also run with Dirichlet
boundaries: ghost cells outside the domain hold fixed values (convection-diffusion 0.5
upstream and 0 downstream; traffic a density of 0.4 upstream and 0.1 downstream), and mass
enters and leaves through the two boundary faces. The 2D problems are periodic only
(the spectral Cahn-Hilliard solver is periodic by construction).

Trajectories: the solver runs on a grid ``refine`` times finer (per axis) than the
surrogate's cells and is sampled once per surrogate step, ``stride`` time units of many
solver steps; each sample is the block mean over ``refine`` (2D: ``refine^2``) solver
cells, which keeps the total and the bounds. Initial conditions are drawn from a seeded
generator: bumps (convection-diffusion, shallow water), piecewise-constant densities
(traffic: Riemann problems, so shocks and rarefactions) and noise around a random mean
(Cahn-Hilliard: spinodal decomposition, then coarsening).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

BOUNDARIES = ("periodic", "dirichlet")
ADVECTION, DIFFUSION = 1.0, 0.002
GRAVITY = 1.0
EPS2, STABILISER, CH_DT = 1.0, 2.0, 0.1


@dataclass(frozen=True)
class Problem:
    """One PDE: its state, the range the state stays in, its solver and its surrogate sampling."""

    name: str
    dims: int
    channels: tuple[str, ...]
    lower: tuple[float, ...]  # per channel: the bounds the solution respects (FluxNet's heads keep them)
    upper: tuple[float, ...]
    cells: int  # default surrogate cells per axis
    refine: int  # solver cells per surrogate cell, per axis
    stride: float  # surrogate step, in time units per unit of surrogate cell size
    initial: Callable  # (rng, count, n, dx, boundary) -> state (count, channels, *grid), float64
    step: Callable  # (state, dt, dx, boundary) -> state after dt
    max_dt: Callable  # (state, dx) -> the largest stable time step
    dirichlet: tuple[tuple[float, ...], tuple[float, ...]] | None = None  # (left, right) ghost values
    unit_cells: bool = False  # the domain is ``cells`` long (one unit per cell), else 1

    @property
    def boundaries(self) -> tuple[str, ...]:
        return BOUNDARIES if self.dirichlet is not None else ("periodic",)

    def cell_size(self, cells: int) -> float:
        return 1.0 if self.unit_cells else 1.0 / cells


# ---- 1D finite volumes ---------------------------------------------------------------

def ghost_pad(u: np.ndarray, width: int, boundary: str, values=None) -> np.ndarray:
    """``u`` (..., C, N) with ``width`` ghost cells each side: wrapped (periodic) or Dirichlet values."""
    if boundary == "periodic":
        return np.concatenate([u[..., -width:], u, u[..., :width]], axis=-1)
    left, right = (np.broadcast_to(np.asarray(v, u.dtype)[:, None], (*u.shape[:-1], width)) for v in values)
    return np.concatenate([left, u, right], axis=-1)


def _finite_volume_update(u, face_flux, dt, dx):
    """Conservation form: each face's flux leaves one cell and enters the next."""
    return u - dt / dx * (face_flux[..., 1:] - face_flux[..., :-1])


def _convection_diffusion_step(u, dt, dx, boundary):
    ext = ghost_pad(u, 1, boundary, PROBLEMS["convection_diffusion"].dirichlet)
    flux = ADVECTION * ext[..., :-1] - DIFFUSION * (ext[..., 1:] - ext[..., :-1]) / dx  # upwind for a > 0
    return _finite_volume_update(u, flux, dt, dx)


def _traffic_flux(rho):
    return rho * (1.0 - rho)


def _traffic_step(rho, dt, dx, boundary):
    ext = ghost_pad(rho, 1, boundary, PROBLEMS["traffic"].dirichlet)
    demand = _traffic_flux(np.minimum(ext[..., :-1], 0.5))  # what the upstream cell can send
    supply = _traffic_flux(np.maximum(ext[..., 1:], 0.5))  # what the downstream cell can take
    return _finite_volume_update(rho, np.minimum(demand, supply), dt, dx)


def _bumps(rng, count, n, dx, periodic, amplitude, width, number=(1, 4)):
    """(count, n) Gaussian bumps at random places: their pointwise maximum, so values stay <= max amplitude."""
    x = (np.arange(n) + 0.5) * dx
    length = n * dx
    out = np.zeros((count, n))
    for row in out:
        for _ in range(rng.integers(*number)):
            centre = rng.uniform(0, length) if periodic else rng.uniform(0.15, 0.85) * length
            d = np.abs(x - centre)
            if periodic:
                d = np.minimum(d, length - d)
            np.maximum(row, rng.uniform(*amplitude) * np.exp(-0.5 * (d / rng.uniform(*width)) ** 2), out=row)
    return out


def _convection_diffusion_initial(rng, count, n, dx, boundary):
    return _bumps(rng, count, n, dx, boundary == "periodic", (0.3, 1.0), (0.02, 0.08))[:, None]


def _traffic_initial(rng, count, n, dx, boundary):
    """Piecewise-constant densities in [0.05, 0.95] on 2 to 5 random segments."""
    out = np.empty((count, 1, n))
    for row in out[:, 0]:
        cuts = np.sort(rng.choice(np.arange(1, n), rng.integers(1, 5), replace=False))
        levels = rng.uniform(0.05, 0.95, len(cuts) + 1)
        row[:] = levels[np.searchsorted(cuts, np.arange(n), side="right")]
    return out


def _convection_diffusion_max_dt(u, dx):
    return 1.0 / (ADVECTION / dx + 2.0 * DIFFUSION / dx**2)


def _traffic_max_dt(rho, dx):
    return dx  # v = 1


# ---- 2D shallow water ----------------------------------------------------------------

def _shallow_water_fluxes(state, axis):
    """Physical flux along ``axis`` (-1: x, -2: y) of (h, hu, hv), and the local wave speed."""
    h, hu, hv = state[:, 0], state[:, 1], state[:, 2]
    u, v = hu / h, hv / h
    normal = u if axis == -1 else v
    pressure = 0.5 * GRAVITY * h * h
    flux = np.stack([h * normal, hu * normal + (pressure if axis == -1 else 0.0),
                     hv * normal + (pressure if axis == -2 else 0.0)], axis=1)
    return flux, np.abs(normal) + np.sqrt(GRAVITY * h)


def _shallow_water_step(state, dt, dx, boundary):
    change = np.zeros_like(state)
    for axis in (-1, -2):
        flux, speed = _shallow_water_fluxes(state, axis)
        flux_r, speed_r, state_r = (np.roll(a, -1, axis=axis) for a in (flux, speed, state))
        # Rusanov flux at the face after each cell
        face = 0.5 * (flux + flux_r) - 0.5 * np.maximum(speed, speed_r)[:, None] * (state_r - state)
        change -= face - np.roll(face, 1, axis=axis)
    return state + dt / dx * change


def _shallow_water_max_dt(state, dx):
    _, speed_x = _shallow_water_fluxes(state, -1)
    _, speed_y = _shallow_water_fluxes(state, -2)
    return dx / (float(np.max(speed_x)) + float(np.max(speed_y)))


def _shallow_water_initial(rng, count, n, dx, boundary):
    """Still water of depth 1 with 1 to 3 radial bumps of height 0.1 to 0.4."""
    x = (np.arange(n) + 0.5) * dx
    h = np.ones((count, n, n))
    for row in h:
        for _ in range(rng.integers(1, 4)):
            cy, cx = rng.uniform(0, 1, 2)
            dy, dxx = (np.minimum(np.abs(x - c), 1 - np.abs(x - c)) for c in (cy, cx))
            r2 = dy[:, None] ** 2 + dxx[None, :] ** 2
            row += rng.uniform(0.1, 0.4) * np.exp(-0.5 * r2 / rng.uniform(0.05, 0.12) ** 2)
    return np.stack([h, np.zeros_like(h), np.zeros_like(h)], axis=1)


# ---- 2D Cahn-Hilliard ----------------------------------------------------------------

def _wavenumbers(n, dx):
    """(k_y as a column, k_x as a row) of ``rfft2`` on an n x n grid of spacing dx."""
    return 2 * np.pi * np.fft.fftfreq(n, d=dx)[:, None], 2 * np.pi * np.fft.rfftfreq(n, d=dx)[None, :]


def _cahn_hilliard_step(c, dt, dx, boundary):
    n = c.shape[-1]
    ky, kx = _wavenumbers(n, dx)
    k2 = ky**2 + kx**2
    implicit = 1.0 + dt * STABILISER * k2
    c_hat = (implicit * np.fft.rfft2(c) - dt * k2 * np.fft.rfft2(c**3 - c)) / (implicit + dt * EPS2 * k2**2)
    return np.fft.irfft2(c_hat, s=(n, n))


def cahn_hilliard_energy(c: np.ndarray, dx: float) -> np.ndarray:
    """Free energy ``integral of (c^2 - 1)^2 / 4 + eps^2 |grad c|^2 / 2`` per trajectory (spectral gradient)."""
    n = c.shape[-1]
    ky, kx = _wavenumbers(n, dx)
    c_hat = np.fft.rfft2(c)
    grad2 = sum(np.fft.irfft2(1j * k * c_hat, s=(n, n)) ** 2 for k in (ky, kx))
    return (0.25 * (c**2 - 1.0) ** 2 + 0.5 * EPS2 * grad2).sum(axis=(-1, -2, -3)) * dx**2


def _cahn_hilliard_max_dt(c, dx):
    return CH_DT


def _cahn_hilliard_initial(rng, count, n, dx, boundary):
    """A random mean in [-0.3, 0.3] (inside the spinodal region) plus noise of size 0.05."""
    mean = rng.uniform(-0.3, 0.3, (count, 1, 1, 1))
    return mean + 0.05 * rng.standard_normal((count, 1, n, n))


PROBLEMS: dict[str, Problem] = {
    "convection_diffusion": Problem("convection_diffusion", 1, ("u",), (0.0,), (1.0,), 128, 4, 2.0,
                                    _convection_diffusion_initial, _convection_diffusion_step,
                                    _convection_diffusion_max_dt, dirichlet=((0.5,), (0.0,))),
    "traffic": Problem("traffic", 1, ("rho",), (0.0,), (1.0,), 128, 4, 3.0, _traffic_initial, _traffic_step,
                       _traffic_max_dt, dirichlet=((0.4,), (0.1,))),
    "shallow_water": Problem("shallow_water", 2, ("h", "hu", "hv"), (0.0, -1.0, -1.0), (3.0, 1.0, 1.0), 32, 2,
                             1.5, _shallow_water_initial, _shallow_water_step, _shallow_water_max_dt),
    "cahn_hilliard": Problem("cahn_hilliard", 2, ("c",), (-1.2,), (1.2,), 32, 1, 1.0, _cahn_hilliard_initial,
                             _cahn_hilliard_step, _cahn_hilliard_max_dt, unit_cells=True),
}


def get_problem(name: str) -> Problem:
    if name not in PROBLEMS:
        raise ValueError(f"pde must be one of {', '.join(PROBLEMS)}, got {name!r}")
    return PROBLEMS[name]


def check_boundary(problem: Problem, boundary: str) -> str:
    if boundary not in problem.boundaries:
        raise ValueError(f"boundary for pde {problem.name!r} must be one of {', '.join(problem.boundaries)}, "
                         f"got {boundary!r}")
    return boundary


def advance(problem: Problem, state: np.ndarray, duration: float, dx: float, boundary: str) -> np.ndarray:
    """``state`` after ``duration``, in equal solver steps no longer than the stable step."""
    substeps = max(1, math.ceil(duration / (0.9 * problem.max_dt(state, dx)) - 1e-9))
    dt = duration / substeps
    for _ in range(substeps):
        state = problem.step(state, dt, dx, boundary)
    return state


def coarsen(state: np.ndarray, factor: int, dims: int) -> np.ndarray:
    """Block means over ``factor`` cells per axis of the last ``dims`` axes."""
    if factor == 1:
        return state
    shape = state.shape[:-dims]
    for n in state.shape[-dims:]:
        shape += (n // factor, factor)
    return state.reshape(shape).mean(axis=tuple(range(-2 * dims + 1, 0, 2)))


def solver_grid(problem: Problem, cells: int) -> tuple[int, float]:
    """(solver cells per axis, solver cell size) for ``cells`` surrogate cells per axis."""
    return cells * problem.refine, problem.cell_size(cells) / problem.refine


def trajectories(name: str, count: int, steps: int, *, cells: int | None = None, boundary: str = "periodic",
                 seed: int | tuple[int, ...] = 0) -> np.ndarray:
    """``count`` solver trajectories sampled every surrogate step: float32 (count, steps + 1, C, *grid).

    ``seed`` (an int or a tuple of ints) seeds the initial conditions; the rest is deterministic.
    """
    problem = get_problem(name)
    check_boundary(problem, boundary)
    cells = cells or problem.cells
    if cells < 8:
        raise ValueError(f"cells must be at least 8, got {cells}")
    n, dx = solver_grid(problem, cells)
    rng = np.random.default_rng(seed)
    state = problem.initial(rng, count, n, dx, boundary)
    out = np.empty((count, steps + 1, len(problem.channels), *(cells,) * problem.dims), np.float32)
    out[:, 0] = coarsen(state, problem.refine, problem.dims)
    stride = problem.stride * problem.cell_size(cells)
    for t in range(steps):
        state = advance(problem, state, stride, dx, boundary)
        out[:, t + 1] = coarsen(state, problem.refine, problem.dims)
    return out
