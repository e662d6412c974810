"""Samplers for a masked diffusion model: greedy by confidence, entropy or margin, and Info-Gain.

A masked diffusion model maps a partly masked sequence ``(B, L)`` (token 0 = mask, 1..V
the values) to logits ``(B, L, V)`` over the values at every position. A sampler fills
the masked positions over ``steps`` rounds; round ``s`` commits ``k_s`` positions, the
hole count split as evenly as possible over the rounds, so every sampler calls the
network once per round (``steps`` forward calls for a sequence) and samplers compare at
equal network evaluations.

Greedy samplers commit, each round, the ``k_s`` masked positions whose predictive
distribution scores best (highest top probability, lowest entropy, or widest margin
between the two top probabilities) with their most probable value.

The Info-Gain sampler (Yang et al., 2026, "Improving Sampling for Masked Diffusion Models
via Information Gain") draws ``candidates`` actions per round: each perturbs the values
and the position ranking with Gumbel noise of scale ``temperature`` (candidate 0 is the
greedy-confidence action, no noise). It builds every candidate's next state and runs them
through the network in one batched forward pass, scores each by its immediate cost (the
summed entropy of the positions it commits, under the current prediction) plus the mean
entropy left over the positions still masked (under the candidate's own prediction),
commits the lowest, and reuses that candidate's logits as the next round's prediction.
The first round's prediction comes from one plain forward pass and the last round needs
none (nothing is left masked to score), so it also makes ``steps`` forward calls, each
over ``candidates`` sequences; ``rows`` counts those sequence evaluations.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch.nn import functional as F

MASK = 0
GREEDY = ("confidence", "entropy", "margin")
METHODS = (*GREEDY, "info_gain")


@dataclass
class Sampled:
    tokens: torch.Tensor  # (B, L) every position filled
    forward_calls: int  # network calls (a batched call counts once)
    rows: int  # sequences evaluated per input sequence, summed over calls
    seconds: float


def check_method(method: str) -> str:
    if method not in METHODS:
        raise ValueError(f"sampler method {method!r} is unknown; allowed: {', '.join(METHODS)}")
    return method


def schedule(holes: torch.Tensor, steps: int) -> torch.Tensor:
    """(steps, B) positions to commit per round: each row's hole count split evenly, larger rounds first."""
    if steps < 1:
        raise ValueError(f"steps={steps} must be >= 1")
    s = torch.arange(steps)[:, None]
    return holes[None] // steps + (s < holes[None] % steps).long()


def entropy(logp: torch.Tensor) -> torch.Tensor:
    return -(logp.exp() * logp).sum(-1)


def position_scores(logp: torch.Tensor, method: str) -> torch.Tensor:
    """Higher is more certain: top probability, negative entropy or top-two margin, per position."""
    if method == "confidence":
        return logp.max(-1).values
    if method == "entropy":
        return -entropy(logp)
    top2 = logp.exp().topk(2, dim=-1).values
    return top2[..., 0] - top2[..., 1]


def top_positions(scores: torch.Tensor, masked: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Boolean (..., L): the ``k`` (per row, broadcast) highest-scoring masked positions."""
    scores = scores.masked_fill(~masked, float("-inf"))
    rank = scores.argsort(dim=-1, descending=True, stable=True).argsort(dim=-1, stable=True)
    return (rank < k[..., None]) & masked


def gumbel(shape, generator: torch.Generator | None) -> torch.Tensor:
    u = torch.rand(shape, generator=generator).clamp_(1e-10, 1 - 1e-10)
    return -torch.log(-torch.log(u))


@torch.no_grad()
def sample(model, tokens: torch.Tensor, method: str, steps: int, *, candidates: int = 8, temperature: float = 1.0,
           generator: torch.Generator | None = None) -> Sampled:
    """Fill every masked position (token 0) of ``tokens`` (B, L) in ``steps`` rounds with ``method``."""
    check_method(method)
    if candidates < 1:
        raise ValueError(f"candidates={candidates} must be >= 1")
    began = time.perf_counter()
    x = tokens.clone()
    plan = schedule((x == MASK).sum(-1), steps)
    if method in GREEDY:
        for k in plan:
            logp = F.log_softmax(model(x).float(), -1)
            pick = top_positions(position_scores(logp, method), x == MASK, k)
            x = torch.where(pick, logp.argmax(-1) + 1, x)
        return Sampled(x, steps, steps, time.perf_counter() - began)
    logits, calls, rows = model(x), 1, 1
    for s, k in enumerate(plan):
        logp = F.log_softmax(logits.float(), -1)  # (B, L, V)
        masked = x == MASK
        noise = torch.zeros(len(x), candidates, 1, 1)
        noise[:, 1:] = temperature
        values = (logp[:, None] + noise * gumbel((len(x), candidates, *logp.shape[1:]), generator)).argmax(-1)
        conf = logp[:, None].expand(-1, candidates, -1, -1).gather(-1, values[..., None]).squeeze(-1)  # (B, K, L)
        pick = top_positions(conf + noise[..., 0] * gumbel(conf.shape, generator), masked[:, None], k[:, None])
        nxt = torch.where(pick, values + 1, x[:, None])  # (B, K, L)
        cost = (entropy(logp)[:, None] * pick).sum(-1)  # immediate: entropy of what each candidate commits
        if s < steps - 1:
            cand_logits = model(nxt.flatten(0, 1)).unflatten(0, (len(x), candidates))
            calls, rows = calls + 1, rows + candidates
            left = nxt == MASK
            h = entropy(F.log_softmax(cand_logits.float(), -1))
            cost = cost + (h * left).sum(-1) / left.sum(-1).clamp(min=1)
        best = cost.argmin(-1)
        x = nxt[torch.arange(len(x)), best]
        if s < steps - 1:
            logits = cand_logits[torch.arange(len(x)), best]
    return Sampled(x, calls, rows, time.perf_counter() - began)
