"""A small bidirectional transformer masked diffusion model of Sudoku grids, and its scoring.

The model reads a grid as ``n*n`` tokens (0 = masked, 1..n digits), adds learned row,
column and box embeddings, runs pre-norm transformer blocks with full (non-causal)
self-attention and predicts the digit at every cell. It is trained as a masked diffusion
model: each training grid gets a mask rate t ~ U(0, 1), each cell is masked with
probability t, and the loss is the cross-entropy of the masked cells. It never sees a
puzzle in training; puzzles are solved by sampling from it with a sampler of
:mod:`.mdm_samplers`, the givens left in place.

Grids come from :mod:`.sudoku`: for 4x4, the 288 grids split 60/20/20 into train,
validation and test grids; for 9x9, grids from the seeded generator, split the same way,
and each training grid relabelled by a random permutation of the digits (which keeps it
valid; 4x4 grids are not relabelled, since relabelling would reach the held-out grids).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from . import mdm_samplers, sudoku
from .config_fields import bounded, checked
from .lm import RMSNorm
from .training import TrainSpec


@dataclass(frozen=True)
@checked
class SudokuMDMConfig:
    size: int = bounded(4, choices=sudoku.SIZES)  # 4 or 9
    width: int = bounded(64, low=32)
    layers: int = bounded(2, low=1)
    heads: int = bounded(2, low=1)
    mlp: int = bounded(128, low=32)
    steps: int = bounded(400, low=1)
    batch: int = bounded(32, low=1)
    lr: float = bounded(2e-3, low=0, low_open=True)
    warmup: int = bounded(20, low=1)
    grids: int = bounded(5000, low=1)  # 9x9 grids generated (4x4 uses all 288)
    split_seed: int = bounded(0, low=0)  # the grid split and puzzles; independent of the training seed
    level: str = bounded("hard", choices=sudoku.LEVEL_NAMES)
    eval_puzzles: int = bounded(300, low=1)
    sample_steps: int = bounded(0, low=0)  # sampler rounds; 0: one cell per round
    candidates: int = bounded(8, low=1)  # Info-Gain candidate actions per round
    temperature: float = bounded(1.0, low=0)  # Info-Gain Gumbel noise scale
    seed: int = bounded(0, low=0)

    def __post_init__(self):
        sudoku.holes_for(self.size, self.level)
        for name in ("width", "mlp"):
            if getattr(self, name) % 32:
                raise ValueError(f"SudokuMDMConfig.{name}={getattr(self, name)} must be a multiple of 32 "
                                 "(one MX block)")
        if self.width % self.heads:
            raise ValueError(f"width {self.width} must split into {self.heads} heads")

    @property
    def rounds(self) -> int:
        return self.sample_steps or sudoku.holes_for(self.size, self.level)

    @classmethod
    def tiny(cls, **overrides) -> SudokuMDMConfig:
        """A config for tests: trains in a few seconds on one core."""
        return cls(**{"steps": 300, "level": "medium", "eval_puzzles": 24, "candidates": 4, **overrides})


# --- model ----------------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self, config: SudokuMDMConfig):
        super().__init__()
        self.heads = config.heads
        self.attn_norm, self.mlp_norm = RMSNorm(config.width), RMSNorm(config.width)
        self.qkv = nn.Linear(config.width, 3 * config.width, bias=False)
        self.o = nn.Linear(config.width, config.width, bias=False)
        self.up = nn.Linear(config.width, config.mlp)
        self.down = nn.Linear(config.mlp, config.width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v)  # bidirectional: every cell sees every cell
        x = x + self.o(y.transpose(1, 2).reshape(b, t, c))
        return x + self.down(F.gelu(self.up(self.mlp_norm(x))))


class SudokuMDM(nn.Module):
    """tokens (B, n*n) int64, 0 = masked -> digit logits (B, n*n, n) (index d-1 for digit d)."""

    def __init__(self, config: SudokuMDMConfig):
        super().__init__()
        n, b = config.size, sudoku.box_size(config.size)
        self.token = nn.Embedding(n + 1, config.width)
        self.row, self.col, self.box = (nn.Embedding(n, config.width) for _ in range(3))
        cells = torch.arange(n * n)
        self.register_buffer("row_of", cells // n, persistent=False)
        self.register_buffer("col_of", cells % n, persistent=False)
        self.register_buffer("box_of", (cells // n) // b * b + (cells % n) // b, persistent=False)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.norm = RMSNorm(config.width)
        self.head = nn.Linear(config.width, n)

    def forward(self, tokens):
        pos = self.row(self.row_of) + self.col(self.col_of) + self.box(self.box_of)
        x = self.token(tokens) + pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def build(config: SudokuMDMConfig = SudokuMDMConfig()) -> nn.Module:
    return SudokuMDM(config)


def example_inputs(config: SudokuMDMConfig = SudokuMDMConfig()) -> tuple:
    """One test puzzle, batch 1: a fixed (1, n*n) shape for export and compile."""
    puzzles, _ = puzzles_for(config, "test", 1)
    return (torch.from_numpy(puzzles.reshape(1, -1)),)


# --- training -------------------------------------------------------------------------

def train_grids(config: SudokuMDMConfig) -> np.ndarray:
    return sudoku.grid_splits(config.size, config.grids, config.split_seed)["train"]


def mask_grids(grids: torch.Tensor, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens, masked): each row masked at its own rate t ~ U(0, 1), at least one cell masked."""
    b, length = grids.shape
    rate = rng.uniform(0.0, 1.0, size=(b, 1))
    masked = rng.uniform(size=(b, length)) < rate
    masked[np.arange(b), rng.integers(0, length, b)] = True
    masked = torch.from_numpy(masked)
    return grids.masked_fill(masked, mdm_samplers.MASK), masked


def train_spec(config: SudokuMDMConfig = SudokuMDMConfig()) -> TrainSpec:
    """AdamW with linear warmup; random-mask cross-entropy over the masked cells of training grids."""
    grids = torch.from_numpy(train_grids(config).reshape(-1, config.size ** 2))
    n = config.size

    def loss(model, rng, step):
        batch = grids[torch.from_numpy(rng.integers(0, len(grids), config.batch))]
        if n == 9:
            relabel = torch.from_numpy(np.stack([np.concatenate(([0], rng.permutation(n) + 1))
                                                 for _ in range(config.batch)]))
            batch = relabel.gather(1, batch)
        tokens, masked = mask_grids(batch, rng)
        logits = model(tokens)
        return F.cross_entropy(logits[masked], batch[masked] - 1)

    return TrainSpec(config.steps, lambda m: torch.optim.AdamW(m.parameters(), lr=config.lr, weight_decay=0.01),
                     loss, lr=lambda step: config.lr * min(1.0, (step + 1) / config.warmup), grad_clip=1.0)


# --- evaluation -----------------------------------------------------------------------

def puzzles_for(config: SudokuMDMConfig, split: str, count: int | None = None):
    """(puzzles, solutions) of the config's size and level from the ``split`` grids."""
    return sudoku.puzzle_set(config.size, config.level, split, count or config.eval_puzzles, config.grids,
                             config.split_seed)


def score(filled: np.ndarray, puzzles: np.ndarray, solutions: np.ndarray) -> dict:
    """``solve_rate`` (every cell right), ``cell_accuracy`` over the holes, mean ``violations``."""
    filled = filled.reshape(solutions.shape)
    holes = puzzles == 0
    right = (filled == solutions) | ~holes
    return {"solve_rate": float(right.all(axis=(1, 2)).mean()),
            "cell_accuracy": float((filled == solutions)[holes].mean()),
            "violations": float(np.mean([sudoku.violations(g) for g in filled]))}


def run_sampler(model, puzzles: np.ndarray, solutions: np.ndarray, method: str, rounds: int, *, candidates: int = 8,
                temperature: float = 1.0, seed: int = 0, batch: int = 64) -> dict:
    """Fill ``puzzles`` with one sampler; its scores, forward calls, rows per puzzle and seconds per puzzle."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.from_numpy(puzzles.reshape(len(puzzles), -1))
    filled, seconds, calls, rows = [], 0.0, 0, 0
    model.eval()
    for chunk in tokens.split(batch):
        out = mdm_samplers.sample(model, chunk, method, rounds, candidates=candidates, temperature=temperature,
                                  generator=generator)
        filled.append(out.tokens.numpy())
        seconds, calls, rows = seconds + out.seconds, out.forward_calls, out.rows
    return {**score(np.concatenate(filled), puzzles, solutions), "forward_calls": calls, "rows": rows,
            "seconds_per_puzzle": seconds / len(puzzles)}


def evaluate(model: nn.Module, config: SudokuMDMConfig = SudokuMDMConfig()) -> dict:
    """Every sampler on the test puzzles at the config's rounds (equal forward calls).

    ``solve_rate`` is Info-Gain's; each sampler's scores are prefixed by its name;
    ``info_gain_rows`` counts the sequences Info-Gain evaluates per puzzle.
    """
    puzzles, solutions = puzzles_for(config, "test")
    out = {}
    for method in mdm_samplers.METHODS:
        result = run_sampler(model, puzzles, solutions, method, config.rounds, candidates=config.candidates,
                             temperature=config.temperature, seed=config.seed)
        out.update({f"{method}_{k}": result[k] for k in ("solve_rate", "cell_accuracy", "violations",
                                                           "seconds_per_puzzle")})
    # every sampler makes the same forward calls; Info-Gain's each evaluate ``candidates`` sequences
    return {"solve_rate": out["info_gain_solve_rate"], "forward_calls": result["forward_calls"],
            "info_gain_rows": result["rows"], **out}
