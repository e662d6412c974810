"""DNAChunker: a masked DNA language model that learns where to cut its input into chunks.

Pipeline (after the paper's dynamic-chunking design, scaled down):

1. embed bases and encode them with a small convolutional or bidirectional-GRU encoder
   (the paper uses BiMamba);
2. the router scores each position's boundary probability from the dissimilarity of
   adjacent encoder states, p_t = (1 - cos(W_q h_t, W_k h_{t-1})) / 2 (p_0 = 1); a
   boundary is p_t >= 1/2, and every [MASK] is its own chunk (boundaries at it and after it);
3. each chunk is represented by the encoder state at its first base; the chunks, padded to
   a fixed maximum count (the window length) with the padding masked out of attention, go
   through the main network (transformer blocks);
4. de-chunking gives every base its chunk's output, scaled by a straight-through confidence
   (p_t at a boundary, 1 - p_t inside a chunk: 1 in value, p's gradient backwards) and
   added to its encoder state; a head predicts the bases at the masked positions.

A ratio loss holds the boundary rate of the positions not forced by a [MASK] near
1 / ``target_chunk``:
R / (R - 1) ((R - 1) F G + (1 - F)(1 - G)), with F the fraction of positions that are
boundaries and G the mean boundary probability (minimal at F = G = 1 / R).

``chunking`` = ``dynamic`` (the router), ``kmer`` (a boundary every ``target_chunk`` bases)
or ``bpe`` (boundaries at the starts of byte-pair-encoding tokens, vocabulary 4^k, trained on
the train part of the genome): the baselines use the same network with fixed boundaries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from . import dna_data
from .config_fields import bounded, checked
from .dna_data import MASK, VOCAB
from .lm import RMSNorm
from .training import TrainSpec

CHUNKINGS = ("dynamic", "kmer", "bpe")
ENCODERS = ("conv", "gru")


@dataclass(frozen=True)
@checked
class DNAChunkerConfig:
    chunking: str = bounded("dynamic", choices=CHUNKINGS)
    encoder: str = bounded("conv", choices=ENCODERS)
    length: int = bounded(128, low=1)
    width: int = bounded(64, low=32)
    heads: int = bounded(2, low=1)
    main_layers: int = bounded(2, low=0)
    # R: mean chunk length the ratio loss aims at; k of the k-mer baseline
    target_chunk: int = bounded(4, low=2)
    ratio_weight: float = bounded(0.05, low=0)
    mask_rate: float = bounded(0.15, low=0, high=1, low_open=True, high_open=True)
    steps: int = bounded(600, low=1)
    batch: int = bounded(32, low=1)
    lr: float = bounded(2e-3, low=0, low_open=True)
    genome_length: int = bounded(200_000, low=1)
    eval_windows: int = bounded(256, low=1)
    seed: int = bounded(0, low=0)

    def __post_init__(self):
        if self.width % 32 or self.width % self.heads:
            raise ValueError(f"width {self.width} must be a multiple of 32 (one MX block) and split into "
                             f"{self.heads} heads")

    @classmethod
    def tiny(cls, **overrides) -> DNAChunkerConfig:
        return cls(**{"length": 64, "width": 32, "heads": 1, "main_layers": 1, "steps": 100, "batch": 16,
                      "genome_length": 40_000, "eval_windows": 32, **overrides})


# --- network --------------------------------------------------------------------------

class ChunkBlock(nn.Module):
    """Pre-norm transformer block over chunk slots; padding slots are masked out of attention."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.attn_norm, self.mlp_norm = RMSNorm(width), RMSNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.o = nn.Linear(width, width, bias=False)
        self.up, self.down = nn.Linear(width, 2 * width), nn.Linear(2 * width, width)

    def forward(self, z, valid):
        b, c, w = z.shape
        q, k, v = self.qkv(self.attn_norm(z)).view(b, c, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(w // self.heads)
        scores = torch.where(valid[:, None, None, :], scores, torch.full_like(scores, -1e9))
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, c, w)
        z = z + self.o(y)
        return z + self.down(F.gelu(self.up(self.mlp_norm(z))))


class ConvEncoder(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv1d(width, width, 5, padding=2) for _ in range(2))

    def forward(self, x):
        h = x.transpose(1, 2)
        for conv in self.convs:
            h = h + F.gelu(conv(h))
        return h.transpose(1, 2)


class GRUEncoder(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.gru = nn.GRU(width, width // 2, batch_first=True, bidirectional=True)

    def forward(self, x):
        return x + self.gru(x)[0]


class DNAChunker(nn.Module):
    """tokens (B, L) int64 (bases 0..4, [MASK] 5) [, boundaries (B, L) float for fixed chunkings]
    -> base logits (B, L, 4)."""

    def __init__(self, config: DNAChunkerConfig):
        super().__init__()
        self.dynamic = config.chunking == "dynamic"
        self.embed = nn.Embedding(VOCAB, config.width)
        self.encoder = ConvEncoder(config.width) if config.encoder == "conv" else GRUEncoder(config.width)
        self.route_q = nn.Linear(config.width, config.width, bias=False)
        self.route_k = nn.Linear(config.width, config.width, bias=False)
        for router in (self.route_q, self.route_k):  # start from the plain cosine of adjacent states
            nn.init.eye_(router.weight)
        self.main = nn.ModuleList(ChunkBlock(config.width, config.heads) for _ in range(config.main_layers))
        self.norm = RMSNorm(config.width)
        self.head = nn.Linear(config.width, 4)
        self.register_buffer("slots", torch.arange(config.length), persistent=False)
        # running sums as a product with an upper-triangular ones matrix: exact for 0/1 boundaries,
        # and a matmul every compile target lowers (TVM has no CPU lowering of cumsum)
        self.register_buffer("prefix", torch.ones(config.length, config.length).triu(), persistent=False)

    def route(self, tokens, h, boundaries=None):
        """(boundary probabilities p, hard boundaries b as 0/1 floats, free: positions not forced to
        be boundaries by a [MASK] or the window start), each (B, L)."""
        q, k = F.normalize(self.route_q(h[:, 1:]), dim=-1), F.normalize(self.route_k(h[:, :-1]), dim=-1)
        p = torch.cat([torch.ones_like(h[:, :1, 0]), 0.5 * (1 - (q * k).sum(-1))], dim=1)
        is_mask = tokens == MASK
        forced = is_mask | torch.cat([torch.ones_like(is_mask[:, :1]), is_mask[:, :-1]], dim=1)
        if not self.dynamic:
            if boundaries is None:
                raise ValueError("fixed chunkings (kmer, bpe) take the boundaries as a second input")
            p = boundaries.float()
        p = torch.where(forced, torch.ones_like(p), p)
        return p, (p >= 0.5).float(), ~forced

    def forward_with_routing(self, tokens, boundaries=None):
        h = self.encoder(self.embed(tokens))
        p, b, free = self.route(tokens, h, boundaries)
        t = tokens.shape[1]
        chunk_of = (b @ self.prefix[:t, :t] - 1)[..., None] == self.slots  # (B, L, C): base t lies in chunk c
        starts = (chunk_of & (b[..., None] > 0)).float()
        z = starts.transpose(1, 2) @ h  # (B, C, W): each chunk's first encoder state, zero padding
        valid = self.slots < b.sum(1, keepdim=True)
        for block in self.main:
            z = block(z, valid)
        conf = torch.where(b > 0, p, 1 - p)
        conf = conf + (1 - conf).detach()  # straight-through: 1 forwards, conf's gradient backwards
        y = h + conf[..., None] * (chunk_of.float() @ z)
        return self.head(self.norm(y)), p, b, free

    def forward(self, tokens, boundaries=None):
        return self.forward_with_routing(tokens, boundaries)[0]


def build(config: DNAChunkerConfig = DNAChunkerConfig()) -> nn.Module:
    return DNAChunker(config)


def ratio_loss(p: torch.Tensor, b: torch.Tensor, free: torch.Tensor, target: float) -> torch.Tensor:
    """The chunk-rate loss over the ``free`` positions (forced boundaries left out, or masks alone
    would meet the rate): minimal when the boundary fraction and mean probability are 1 / target."""
    f, g = b[free].mean(), p[free].mean()
    return target / (target - 1) * ((target - 1) * f * g + (1 - f) * (1 - g))


# --- fixed tokenizations --------------------------------------------------------------

def kmer_boundaries(shape: tuple[int, int], k: int) -> np.ndarray:
    """A boundary every ``k`` positions of the window."""
    return np.broadcast_to((np.arange(shape[1]) % k == 0).astype(np.float32), shape).copy()


@cache
def bpe_tokenizer(vocab: int, genome_length: int, seed: int):
    """A byte-pair-encoding tokenizer over ACGTN with ``vocab`` tokens, trained on the train part."""
    from tokenizers import Tokenizer, models, trainers

    bases, _ = dna_data.synthetic_genome(genome_length, seed)
    end = int(dna_data.SPLITS["train"][1] * genome_length)
    text = dna_data.decode(bases[:end])
    tokenizer = Tokenizer(models.BPE())
    trainer = trainers.BpeTrainer(vocab_size=vocab, initial_alphabet=list(dna_data.ALPHABET), show_progress=False)
    tokenizer.train_from_iterator((text[i:i + 1000] for i in range(0, len(text), 1000)), trainer)
    return tokenizer


def bpe_boundaries(tokens: np.ndarray, config: DNAChunkerConfig) -> np.ndarray:
    """Boundaries at BPE token starts; masked bases are shown to the tokenizer as N, so the cut
    never depends on a hidden base."""
    tokenizer = bpe_tokenizer(4 ** config.target_chunk, config.genome_length, 0)
    texts = [dna_data.decode(np.where(row == MASK, 4, row)) for row in tokens]
    out = np.zeros(tokens.shape, np.float32)
    for i, encoding in enumerate(tokenizer.encode_batch(texts)):
        out[i, [start for start, _ in encoding.offsets]] = 1.0
    return out


def boundaries_for(tokens: np.ndarray, config: DNAChunkerConfig) -> torch.Tensor | None:
    """The fixed chunking's boundaries for ``tokens``; None for the dynamic chunker."""
    if config.chunking == "kmer":
        return torch.from_numpy(kmer_boundaries(tokens.shape, config.target_chunk))
    if config.chunking == "bpe":
        return torch.from_numpy(bpe_boundaries(tokens, config))
    return None


def example_inputs(config: DNAChunkerConfig = DNAChunkerConfig()) -> tuple:
    """One test window with its masks, (1, length); fixed chunkings add their boundaries. The
    chunk axis is padded to ``length`` slots, so any segmentation fits one exported shape."""
    bases, _ = dna_data.windows("test", 1, config.length, np.random.default_rng(1), config.genome_length)
    tokens, _ = dna_data.mask_bases(bases, config.mask_rate, np.random.default_rng(2))
    fixed = boundaries_for(tokens, config)
    return (torch.from_numpy(tokens),) if fixed is None else (torch.from_numpy(tokens), fixed)


# --- training -------------------------------------------------------------------------

def train_spec(config: DNAChunkerConfig = DNAChunkerConfig()) -> TrainSpec:
    """AdamW on masked-base cross-entropy (+ the ratio loss for the dynamic chunker)."""
    def loss(model, rng, step):
        bases, _ = dna_data.windows("train", config.batch, config.length, rng, config.genome_length)
        tokens, masked = dna_data.mask_bases(bases, config.mask_rate, rng)
        logits, p, b, free = model.forward_with_routing(torch.from_numpy(tokens), boundaries_for(tokens, config))
        masked = torch.from_numpy(masked)
        out = F.cross_entropy(logits[masked], torch.from_numpy(bases)[masked])
        if config.chunking == "dynamic":
            out = out + config.ratio_weight * ratio_loss(p, b, free, config.target_chunk)
        return out

    return TrainSpec(config.steps, lambda m: torch.optim.AdamW(m.parameters(), lr=config.lr, weight_decay=0.01),
                     loss, grad_clip=1.0)


# --- evaluation -----------------------------------------------------------------------

@torch.no_grad()
def segment(model: DNAChunker, tokens: np.ndarray, config: DNAChunkerConfig) -> np.ndarray:
    """Hard boundaries (n, L) the model uses on ``tokens``."""
    model.eval()
    return model.forward_with_routing(torch.from_numpy(tokens), boundaries_for(tokens, config))[2].numpy()


def chunk_lengths(boundaries: np.ndarray) -> np.ndarray:
    """For every position, the length of the chunk it lies in."""
    ids = np.cumsum(boundaries, axis=1) - 1
    out = np.zeros(boundaries.shape)
    for i, row in enumerate(ids.astype(int)):
        out[i] = np.bincount(row)[row]
    return out


def moved_far(before: np.ndarray, after: np.ndarray, site: int, shift: int, distance: int) -> float:
    """Mean count of boundaries changed farther than ``distance`` from ``site`` after a variant;
    positions past the site are compared with their ``shift``-ed place (1 for an insertion).
    Positions within ``distance`` of the window's end are left out too: an insertion pushes the
    last base out of the window, which changes the context there, not the variant."""
    length = before.shape[1]
    pos = np.arange(length)
    far = np.abs(pos - site) > distance
    mapped = np.where(pos >= site, pos + shift, pos)
    inside = far & (mapped < length - distance) & (pos < length - distance)
    return float((before[:, inside] != after[:, mapped[inside]]).sum(1).mean())


@torch.no_grad()
def masked_accuracy(model: nn.Module, config: DNAChunkerConfig, split: str = "test") -> float:
    """Accuracy of the predicted bases at the masked positions of ``eval_windows`` windows of ``split``."""
    rng = np.random.default_rng([config.seed, 99])
    bases, _ = dna_data.windows(split, config.eval_windows, config.length, rng, config.genome_length)
    tokens, masked = dna_data.mask_bases(bases, config.mask_rate, rng)
    logits = model.eval()(torch.from_numpy(tokens), boundaries_for(tokens, config))
    return float((logits.argmax(-1).numpy() == bases)[masked].mean())


def evaluate(model: nn.Module, config: DNAChunkerConfig = DNAChunkerConfig()) -> dict:
    """On test windows: ``masked_accuracy``; ``mean_chunk`` length, and ``chunk_in_motif`` /
    ``_repeat`` / ``_background``: the mean length of the chunk holding a base of each kind;
    ``snp_far_moves`` and ``insertion_far_moves``: boundaries moved more than 8 bases away from
    a variant at the window's centre, per window."""
    out = {"masked_accuracy": masked_accuracy(model, config, "test")}
    rng = np.random.default_rng([config.seed, 98])
    bases, labels = dna_data.windows("test", config.eval_windows, config.length, rng, config.genome_length)
    clean = segment(model, bases, config)
    lengths = chunk_lengths(clean)
    out["mean_chunk"] = float(config.length / clean.sum(1).mean())
    for name, label in (("motif", dna_data.MOTIF), ("repeat", dna_data.REPEAT), ("background", dna_data.BACKGROUND)):
        out[f"chunk_in_{name}"] = float(lengths[labels == label].mean())
    site = config.length // 2
    snp = np.stack([dna_data.substitute(row, site, rng) for row in bases])
    ins = np.stack([dna_data.insert(row, site, rng) for row in bases])
    out["snp_far_moves"] = moved_far(clean, segment(model, snp, config), site, 0, 8)
    out["insertion_far_moves"] = moved_far(clean, segment(model, ins, config), site, 1, 8)
    return out
