"""A small Llama-style byte-level language model trained on the CPython standard library.

Real data that every install has (the stdlib ``.py`` sources), trained on CPU: the
evaluation language model for quantization studies. Decoder-only transformer with
RMSNorm, rotary position embeddings, SwiGLU MLPs and causal self-attention through
``scaled_dot_product_attention``. Every projection (q, k, v, o, gate, up, down and the
output head) is an ``nn.Linear`` so :func:`edgekit.models.weights.quantized_copy`
applies to all of them; the token embedding is untied from the output head and stays
float. All widths are multiples of 64, so 32-element blocks and vector-quantizer
chunks tile every weight's input axis.
"""

from __future__ import annotations

import hashlib
import math
import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from edgekit.utils.recent import RecentResults

from .config_fields import bounded, checked
from .training import TrainSpec

VOCAB = 256
SKIP_DIRS = frozenset({"test", "tests", "idlelib", "site-packages", "__pycache__"})


@dataclass(frozen=True)
@checked
class LMConfig:
    width: int = bounded(256, low=64)
    layers: int = bounded(4, low=1)
    heads: int = bounded(4, low=1)
    mlp: int = bounded(768, low=64)  # SwiGLU hidden width
    seq_len: int = bounded(256, low=1)
    batch: int = bounded(16, low=1)
    steps: int = bounded(700, low=1)
    lr: float = bounded(2e-3, low=0, low_open=True)
    min_lr_ratio: float = bounded(0.1, low=0, high=1)  # cosine decays to lr * min_lr_ratio
    warmup: int = bounded(50, low=0)
    weight_decay: float = bounded(0.1, low=0)
    grad_clip: float = bounded(1.0, low=0, low_open=True)
    rope_base: float = bounded(10000.0, low=0, low_open=True)
    seed: int = bounded(0, low=0)
    split_seed: int = bounded(0, low=0)  # the train/validation file split; independent of the training seed
    val_fraction: float = bounded(0.05, low=0, high=1, low_open=True, high_open=True)
    max_train_bytes: int = bounded(8_000_000, low=1)
    max_val_bytes: int = bounded(1_000_000, low=1)
    eval_windows: int = bounded(128, low=1)
    eval_batch: int = bounded(32, low=1)

    def __post_init__(self):
        for name in ("width", "mlp"):
            if getattr(self, name) % 64:
                raise ValueError(f"LMConfig.{name}={getattr(self, name)} must be a multiple of 64")
        if self.width % self.heads or (self.width // self.heads) % 2:
            raise ValueError(f"width {self.width} must split into {self.heads} heads of even size")

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    @classmethod
    def tiny(cls, **overrides) -> LMConfig:
        """A config for tests: trains in a few seconds on 2 CPU cores."""
        base = {"width": 64, "layers": 2, "heads": 1, "mlp": 128, "seq_len": 64, "batch": 16, "steps": 150,
                "lr": 3e-3, "warmup": 10, "max_train_bytes": 300_000, "max_val_bytes": 60_000, "eval_windows": 32}
        base.update(overrides)
        return cls(**base)


# --- data -----------------------------------------------------------------------------

def stdlib_files(root: str | os.PathLike | None = None) -> list[Path]:
    """The stdlib's ``.py`` files, sorted, skipping test, idlelib and site-packages dirs."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        out.extend(Path(dirpath) / f for f in filenames if f.endswith(".py"))
    return sorted(out, key=lambda p: p.relative_to(root).as_posix())


def _split_key(relpath: str, seed: int) -> float:
    digest = hashlib.sha256(f"{seed}:{relpath}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def split_files(config: LMConfig, root=None) -> tuple[list[Path], list[Path]]:
    """(train files, validation files): every file in exactly one, by a seeded hash of its path.

    Each list is in a seeded-shuffled order (sorted by the hash), the order bytes are taken in.
    """
    root = Path(root or sysconfig.get_paths()["stdlib"])
    keyed = sorted((_split_key(p.relative_to(root).as_posix(), config.split_seed), p) for p in stdlib_files(root))
    train = [p for k, p in keyed if k >= config.val_fraction]
    val = [p for k, p in keyed if k < config.val_fraction]
    return train, val


def encode(text: str | bytes) -> np.ndarray:
    """Byte-level tokens: a str's UTF-8 bytes (or the bytes themselves) as uint8."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    return np.frombuffer(data, dtype=np.uint8).copy()


def decode(tokens) -> bytes:
    """The bytes of a sequence of token ids (inverse of :func:`encode`)."""
    return np.asarray(tokens, dtype=np.uint8).tobytes()


def _read_capped(files: list[Path], cap: int) -> tuple[np.ndarray, list[Path]]:
    chunks, used, total = [], [], 0
    for path in files:
        if total >= cap:
            break
        data = path.read_bytes()
        chunks.append(data)
        used.append(path)
        total += len(data)
    return encode(b"".join(chunks)[:cap]), used


def load_corpus(config: LMConfig, root=None) -> tuple[np.ndarray, np.ndarray, list[Path], list[Path]]:
    """(train bytes, validation bytes, train files used, validation files used).

    Files are concatenated in split order, capped at ``max_train_bytes`` / ``max_val_bytes``
    (the last file is cut).
    """
    train_files, val_files = split_files(config, root)
    train, train_used = _read_capped(train_files, config.max_train_bytes)
    val, val_used = _read_capped(val_files, config.max_val_bytes)
    return train, val, train_used, val_used


_CORPUS_CACHE: dict = {}


def _corpus(config: LMConfig):
    key = (config.split_seed, config.val_fraction, config.max_train_bytes, config.max_val_bytes)
    if key not in _CORPUS_CACHE:
        _CORPUS_CACHE.clear()
        _CORPUS_CACHE[key] = load_corpus(config)
    return _CORPUS_CACHE[key]


def validation_windows(config: LMConfig) -> torch.Tensor:
    """A fixed (eval_windows, seq_len + 1) int64 set of windows, evenly spaced over the validation bytes."""
    val = _corpus(config)[1]
    n = len(val) - config.seq_len - 1
    if n < 0:
        raise ValueError(f"validation split has {len(val)} bytes, fewer than seq_len + 1")
    starts = np.unique(np.linspace(0, n, config.eval_windows).astype(np.int64))
    idx = starts[:, None] + np.arange(config.seq_len + 1)
    return torch.from_numpy(val[idx].astype(np.int64))


# --- model ----------------------------------------------------------------------------

class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rope_tables(seq_len: int, head_dim: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv)  # (T, hd/2)
    return angles.cos(), angles.sin()


def _apply_rope(x, cos, sin):
    # x: (B, H, T, hd); rotate (even, odd) pairs
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.flatten(-2)


class Attention(nn.Module):
    def __init__(self, config: LMConfig):
        super().__init__()
        self.heads, self.head_dim = config.heads, config.head_dim
        self.q = nn.Linear(config.width, config.width, bias=False)
        self.k = nn.Linear(config.width, config.width, bias=False)
        self.v = nn.Linear(config.width, config.width, bias=False)
        self.o = nn.Linear(config.width, config.width, bias=False)

    def forward(self, x, cos, sin):
        b, t, c = x.shape

        def heads(y):
            return y.view(b, t, self.heads, self.head_dim).transpose(1, 2)

        q = _apply_rope(heads(self.q(x)), cos, sin)
        k = _apply_rope(heads(self.k(x)), cos, sin)
        y = F.scaled_dot_product_attention(q, k, heads(self.v(x)), is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, t, c))


class SwiGLU(nn.Module):
    def __init__(self, config: LMConfig):
        super().__init__()
        self.gate = nn.Linear(config.width, config.mlp, bias=False)
        self.up = nn.Linear(config.width, config.mlp, bias=False)
        self.down = nn.Linear(config.mlp, config.width, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, config: LMConfig):
        super().__init__()
        self.attn_norm = RMSNorm(config.width)
        self.attn = Attention(config)
        self.mlp_norm = RMSNorm(config.width)
        self.mlp = SwiGLU(config)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class ByteLM(nn.Module):
    """tokens (B, T) int64, T <= seq_len -> next-byte logits (B, T, 256)."""

    def __init__(self, config: LMConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(VOCAB, config.width)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.norm = RMSNorm(config.width)
        self.head = nn.Linear(config.width, VOCAB, bias=False)
        cos, sin = _rope_tables(config.seq_len, config.head_dim, config.rope_base)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.apply(self._init)
        for name, p in self.named_parameters():  # GPT-2 style scaled init of residual outputs
            if name.endswith(("o.weight", "down.weight")):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * config.layers))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, tokens):
        t = tokens.shape[1]
        cos, sin = self.rope_cos[:t], self.rope_sin[:t]
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(self.norm(x))


def build(config: LMConfig = LMConfig()) -> nn.Module:
    return ByteLM(config)


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def example_inputs(config: LMConfig = LMConfig()) -> tuple:
    """One validation window of ``seq_len`` bytes, batch 1: the shape compile and export fix."""
    return (validation_windows(config)[:1, :-1].contiguous(),)


# --- training and evaluation ----------------------------------------------------------

def lr_at(step: int, config: LMConfig) -> float:
    """Linear warmup over ``warmup`` steps, then cosine decay to ``lr * min_lr_ratio``."""
    if step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    frac = (step - config.warmup) / max(1, config.steps - config.warmup)
    cos = 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))
    return config.lr * (config.min_lr_ratio + (1 - config.min_lr_ratio) * cos)


def train_spec(config: LMConfig = LMConfig()) -> TrainSpec:
    """AdamW (no decay on norms), warmup + cosine, gradient clipping; random windows of the train bytes."""
    train_bytes = torch.from_numpy(_corpus(config)[0].astype(np.int64))
    if len(train_bytes) <= config.seq_len + 1:
        raise ValueError(f"train split has {len(train_bytes)} bytes, fewer than seq_len + 2")
    offsets = torch.arange(config.seq_len + 1)

    def optimizer(model):
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        return torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                                  {"params": no_decay, "weight_decay": 0.0}], lr=config.lr, betas=(0.9, 0.95))

    def loss(model, rng, step):
        starts = torch.from_numpy(rng.integers(0, len(train_bytes) - config.seq_len - 1, config.batch))
        window = train_bytes[starts[:, None] + offsets]
        logits = model(window[:, :-1])
        return F.cross_entropy(logits.reshape(-1, VOCAB), window[:, 1:].reshape(-1))

    return TrainSpec(config.steps, optimizer, loss, lr=lambda step: lr_at(step, config), grad_clip=config.grad_clip)


# the float model, the format being scored and one spare: evaluate and compare share passes
_recent_log_probs: RecentResults[torch.Tensor] = RecentResults(3)


def _weights_key(model: nn.Module, config: LMConfig) -> str:
    digest = hashlib.sha256(repr(config).encode())
    for name, value in model.state_dict().items():
        digest.update(name.encode())
        digest.update(value.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


@torch.no_grad()
def _log_probs(model: nn.Module, config: LMConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """(next-byte log-probabilities (windows, T, 256), targets (windows, T)) over the validation windows.

    The last few results are kept, keyed by the weights' bytes: scoring a format and comparing
    it with the float model then runs each model over the windows once.
    """
    windows = validation_windows(config)

    def run() -> torch.Tensor:
        model.eval()
        return torch.cat([F.log_softmax(model(chunk[:, :-1]).float(), dim=-1)
                          for chunk in windows.split(config.eval_batch)])

    return _recent_log_probs.get(_weights_key(model, config), run), windows[:, 1:]


def unigram_log_probs(config: LMConfig) -> np.ndarray:
    """Byte log-probabilities estimated on the train split, add-one smoothed."""
    counts = np.bincount(_corpus(config)[0], minlength=VOCAB).astype(np.float64) + 1.0
    return np.log(counts / counts.sum())


def evaluate(model: nn.Module, config: LMConfig = LMConfig()) -> dict:
    """Validation ``perplexity``, ``bits_per_byte`` and the train-split byte ``unigram_perplexity``.

    All over the same fixed validation windows: every position predicts its next byte; the
    unigram baseline scores the same target bytes.
    """
    logp, target = _log_probs(model, config)
    count = target.numel()
    nll = -logp.gather(-1, target[..., None]).double().sum().item() / count
    targets = target.numpy()
    uni_nll = -float(unigram_log_probs(config)[targets].mean())
    return {"perplexity": math.exp(nll), "bits_per_byte": nll / math.log(2), "cross_entropy": nll,
            "unigram_perplexity": math.exp(uni_nll), "unigram_bits_per_byte": uni_nll / math.log(2),
            "tokens": count}


def compare(reference: nn.Module, candidate: nn.Module, config: LMConfig = LMConfig()) -> dict:
    """Mean ``kl`` = KL(reference || candidate) in nats per position of the next-byte
    distributions, and ``agreement``: the fraction of positions where both argmaxes agree,
    over the validation windows."""
    (ref, _), (cand, _) = _log_probs(reference, config), _log_probs(candidate, config)
    kl = (ref.exp() * (ref - cand)).sum(-1).double().sum().item()
    agree = (ref.argmax(-1) == cand.argmax(-1)).sum().item()
    count = ref.shape[0] * ref.shape[1]
    return {"kl": kl / count, "kl_bits": kl / count / math.log(2), "agreement": agree / count, "tokens": count}
