"""A synthetic genome with annotated motifs and tandem repeats, windows of it, and variants.

Bases are coded A C G T N = 0..4, and 5 is the [MASK] token of the masked language model.
The genome is a run of segments: background from a seeded order-2 Markov chain
(transition probabilities drawn from a Dirichlet), planted motifs (copies of a few fixed
random 10-mers with 5% of bases substituted) and tandem repeats (a random 2-6-base unit
copied 4-10 times). Every base carries a label: background, motif or repeat. The genome
is split by position into train (first 70%), validation (next 15%) and test (last 15%).
"""

from __future__ import annotations

from functools import cache

import numpy as np

ALPHABET = "ACGTN"
MASK = 5
VOCAB = 6
BACKGROUND, MOTIF, REPEAT = 0, 1, 2
SPLITS = {"train": (0.0, 0.7), "val": (0.7, 0.85), "test": (0.85, 1.0)}
_LOOKUP = np.zeros(256, np.int64)
_LOOKUP[np.frombuffer(ALPHABET.encode(), dtype=np.uint8)] = np.arange(len(ALPHABET))


def encode(seq: str) -> np.ndarray:
    """A DNA string (A, C, G, T, N; either case) as int64 codes; other letters raise a ``ValueError``."""
    if not isinstance(seq, str):
        raise ValueError(f"a DNA sequence is a string of A, C, G, T, N; got {type(seq).__name__}")
    upper = seq.upper()
    bad = sorted(set(upper) - set(ALPHABET))
    if bad:
        raise ValueError(f"DNA sequence has letters outside ACGTN: {', '.join(map(repr, bad))}")
    return _LOOKUP[np.frombuffer(upper.encode(), dtype=np.uint8)]


def decode(codes) -> str:
    """Codes back to letters; [MASK] is written ``?``."""
    return "".join((ALPHABET + "?")[int(c)] for c in codes)


@cache
def synthetic_genome(length: int = 200_000, seed: int = 0, motifs: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """(bases (length,) int64 in 0..3, labels (length,) int64) of a seeded synthetic genome."""
    rng = np.random.default_rng([seed, 2024])
    table = rng.dirichlet(np.full(4, 0.5), size=16)  # order-2 contexts -> next-base probabilities
    cumulative = table.cumsum(1)
    words = rng.integers(0, 4, size=(motifs, 10))
    bases, labels = [], []
    prev2 = 0
    while sum(map(len, bases)) < length:
        n = int(rng.geometric(1 / 60))
        draws = rng.random(n)
        segment = np.empty(n, np.int64)
        for i in range(n):
            segment[i] = int(np.searchsorted(cumulative[prev2], draws[i]))
            prev2 = (prev2 * 4 + segment[i]) % 16
        bases.append(segment)
        labels.append(np.full(n, BACKGROUND))
        if rng.random() < 0.5:
            motif = words[rng.integers(motifs)].copy()
            hit = rng.random(10) < 0.05
            motif[hit] = (motif[hit] + rng.integers(1, 4, hit.sum())) % 4
            bases.append(motif)
            labels.append(np.full(10, MOTIF))
        else:
            unit = rng.integers(0, 4, size=rng.integers(2, 7))
            repeat = np.tile(unit, rng.integers(4, 11))
            bases.append(repeat)
            labels.append(np.full(len(repeat), REPEAT))
    return np.concatenate(bases)[:length], np.concatenate(labels)[:length]


def check_split(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"split {split!r} is unknown; allowed: {', '.join(SPLITS)}")
    return split


def windows(split: str, count: int, length: int, rng: np.random.Generator, genome_length: int = 200_000,
            seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(bases, labels), each (count, length), at random starts inside ``split``'s part of the genome."""
    bases, labels = synthetic_genome(genome_length, seed)
    low, high = (int(f * genome_length) for f in SPLITS[check_split(split)])
    if high - low <= length:
        raise ValueError(f"the {split} part of a {genome_length}-base genome is shorter than a {length}-base window")
    starts = rng.integers(low, high - length, size=count)
    idx = starts[:, None] + np.arange(length)
    return bases[idx], labels[idx]


def mask_bases(bases: np.ndarray, rate: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(tokens with [MASK] at the chosen positions, the boolean mask); each base chosen with ``rate``."""
    masked = rng.random(bases.shape) < rate
    return np.where(masked, MASK, bases), masked


def substitute(seq: np.ndarray, position: int, rng: np.random.Generator) -> np.ndarray:
    """A SNP: ``seq`` with the base at ``position`` replaced by a different one."""
    out = seq.copy()
    out[position] = (out[position] + rng.integers(1, 4)) % 4
    return out


def insert(seq: np.ndarray, position: int, rng: np.random.Generator) -> np.ndarray:
    """A one-base insertion before ``position``, the window's length kept (the last base drops off)."""
    return np.concatenate([seq[:position], [rng.integers(0, 4)], seq[position:-1]])
