"""The simulated network: links with bandwidth, latency, jitter, drops and outages, and device speed.

Time here is simulated seconds, never slept. A transfer of ``n`` bytes that starts at
``t`` on a link arrives at ``t + latency + jitter + 8 n / bandwidth``, unless the link is
down at ``t`` (an outage) or the transfer is dropped. Every random choice is a pure
function of ``(seed, link name, what, index)``: a run is reproducible, and resuming it
needs the counters only, no generator state.

Links are named: ``client<i>`` joins client ``i`` (the i-th node id in sorted order) to
the server; ``peer<i>-<j>`` (``i < j``) joins two clients for gossip. Outages take a whole
link down in both directions for an outage period; drops and jitter are drawn per
direction and transfer.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from statistics import NormalDist

_UNIT_NORMAL = NormalDist()


def uniform(seed: int, *key) -> float:
    """A number in (0, 1) that depends only on ``seed`` and ``key`` (blake2b of their text)."""
    digest = hashlib.blake2b(repr((seed, *key)).encode(), digest_size=8).digest()
    return ((int.from_bytes(digest, "big") >> 11) + 0.5) / 2.0**53


@dataclass(frozen=True)
class LinkSpec:
    """One link's behaviour. ``jitter_s`` is the scale of a half-normal extra delay;
    ``drop`` the probability that a transfer is lost; ``outage`` the probability that the
    link is down for each ``outage_period_s`` window of simulated time."""

    bandwidth_bps: float
    latency_s: float = 0.0
    jitter_s: float = 0.0
    drop: float = 0.0
    outage: float = 0.0
    outage_period_s: float = 60.0

    def __post_init__(self):
        if not (math.isfinite(self.bandwidth_bps) and self.bandwidth_bps > 0):
            raise ValueError(f"bandwidth must be a positive number of bits per second, got {self.bandwidth_bps!r}")
        for name in ("latency_s", "jitter_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name.removesuffix('_s')} must be a non-negative number of seconds, got {value!r}")
        for name in ("drop", "outage"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
        if not (math.isfinite(self.outage_period_s) and self.outage_period_s > 0):
            raise ValueError(f"outage period must be a positive number of seconds, got {self.outage_period_s!r}")

    def nominal_seconds(self, nbytes: int) -> float:
        """Latency plus serialization time, without jitter, drops or outages."""
        return self.latency_s + 8.0 * nbytes / self.bandwidth_bps


@dataclass(frozen=True)
class Transfer:
    """One message on one link: when it left, when it arrived (None: lost) and why it was lost."""

    link: str
    direction: str
    nbytes: int
    start: float
    arrival: float | None
    lost: str | None = None


def client_link_name(index: int) -> str:
    return f"client{index}"


def peer_link_name(a: int, b: int) -> str:
    lo, hi = sorted((a, b))
    return f"peer{lo}-{hi}"


@dataclass
class Network:
    """Every link and device of a simulated federation.

    ``client`` is the link of each client to the server, ``peer`` the link of each pair of
    clients (gossip; default: the same as ``client``). ``client_overrides`` and
    ``peer_overrides`` change single links (by client index, or by a sorted index pair).
    Compute takes ``flops / device_flops`` seconds, times ``stragglers[index]`` for a
    straggling client.
    """

    client: LinkSpec
    device_flops: float
    peer: LinkSpec | None = None
    stragglers: dict[int, float] = field(default_factory=dict)
    client_overrides: dict[int, LinkSpec] = field(default_factory=dict)
    peer_overrides: dict[tuple[int, int], LinkSpec] = field(default_factory=dict)
    seed: int = 0

    def __post_init__(self):
        if not (math.isfinite(self.device_flops) and self.device_flops > 0):
            raise ValueError(f"device speed must be a positive number of FLOP/s, got {self.device_flops!r}")
        for index, factor in self.stragglers.items():
            if not (math.isfinite(factor) and factor >= 1.0):
                raise ValueError(f"straggler slowdown of client {index} must be a number >= 1, got {factor!r}")

    def client_spec(self, index: int) -> LinkSpec:
        return self.client_overrides.get(index, self.client)

    def peer_spec(self, a: int, b: int) -> LinkSpec:
        return self.peer_overrides.get(tuple(sorted((a, b))), self.peer or self.client)

    def spec_of(self, link: str) -> LinkSpec:
        if link.startswith("peer"):
            a, b = link[4:].split("-")
            return self.peer_spec(int(a), int(b))
        return self.client_spec(int(link.removeprefix("client")))

    def compute_seconds(self, index: int, flops: float) -> float:
        return flops / self.device_flops * self.stragglers.get(index, 1.0)

    def is_up(self, link: str, t: float) -> bool:
        spec = self.spec_of(link)
        if spec.outage == 0.0:
            return True
        return uniform(self.seed, link, "outage", math.floor(t / spec.outage_period_s)) >= spec.outage

    def transfer(self, link: str, direction: str, index: int, nbytes: int, start: float) -> Transfer:
        """The ``index``-th transfer in ``direction`` on ``link``: lost, or its arrival time."""
        spec = self.spec_of(link)
        if not self.is_up(link, start):
            return Transfer(link, direction, nbytes, start, None, "link down")
        if spec.drop and uniform(self.seed, link, direction, "drop", index) < spec.drop:
            return Transfer(link, direction, nbytes, start, None, "dropped")
        delay = spec.nominal_seconds(nbytes)
        if spec.jitter_s:
            delay += spec.jitter_s * abs(_UNIT_NORMAL.inv_cdf(uniform(self.seed, link, direction, "jitter", index)))
        return Transfer(link, direction, nbytes, start, start + delay)
