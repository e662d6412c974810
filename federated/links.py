"""The simulated network: links with bandwidth, latency, jitter, drops and outages, and device speed.

Time here is simulated seconds, never slept. A transfer of ``n`` bytes that starts at
``t`` alone on a link arrives at ``t + latency + jitter + 8 n / bandwidth``, unless the link
is down at ``t`` (an outage) or the transfer is dropped. Every device has one uplink and one
downlink of its link's bandwidth (the server: ``server_bandwidth_bps``, unlimited by default),
and the transfers that :meth:`Network.transfers` is given share them max-min fairly while
they overlap (see :mod:`.sharing`): two payloads a device sends at once take twice as long.
Latency, jitter, drops and outages stay per link; a lost transfer takes no capacity. Every random choice is a pure
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
import re
from dataclasses import dataclass, field
from statistics import NormalDist

from .sharing import Flow, finish_times

_UNIT_NORMAL = NormalDist()
# Rates and durations as people write them (the command line's --bandwidth, --latency ...)
PREFIXES = {"": 1.0, "k": 1e3, "K": 1e3, "m": 1e6, "M": 1e6, "g": 1e9, "G": 1e9}
DURATION_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0}
_NUMBER = r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*"
_RATE = re.compile(_NUMBER + r"([kKmMgG]?)(bit|B)(?:/s)?\s*$")
_DURATION = re.compile(_NUMBER + r"(us|ms|s|min)\s*$")


def parse_rate(text: str) -> float:
    """Bits per second from ``10Mbit``, ``10Mbit/s``, ``1.5Gbit``, ``500kbit`` or bytes per second, ``2MB/s``."""
    match = _RATE.match(text)
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"{text!r} is not a positive rate; write a number and a unit: bit, kbit, Mbit, Gbit "
                         "(bits per second) or B, kB, MB, GB (bytes per second), '/s' optional, e.g. 10Mbit")
    return float(match.group(1)) * PREFIXES[match.group(2)] * (8.0 if match.group(3) == "B" else 1.0)


def parse_duration(text: str) -> float:
    """Seconds from ``50ms``, ``1.5s``, ``200us`` or ``2min``."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a duration; write a number and a unit: us, ms, s or min, e.g. 50ms")
    return float(match.group(1)) * DURATION_UNITS[match.group(2)]


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
    Client ``i``'s uplink and downlink have ``client_spec(i)``'s bandwidth, the server's have
    ``server_bandwidth_bps`` (None: unlimited); a peer link's bandwidth caps its own transfers.
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
    server_bandwidth_bps: float | None = None

    def __post_init__(self):
        if not (math.isfinite(self.device_flops) and self.device_flops > 0):
            raise ValueError(f"device speed must be a positive number of FLOP/s, got {self.device_flops!r}")
        if self.server_bandwidth_bps is not None and not (
                math.isfinite(self.server_bandwidth_bps) and self.server_bandwidth_bps > 0):
            raise ValueError("server bandwidth must be a positive number of bits per second (or None: unlimited), "
                             f"got {self.server_bandwidth_bps!r}")
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
        """The ``index``-th transfer in ``direction`` on ``link``, alone on its devices' links."""
        return self.transfers([(link, direction, index, nbytes, start)])[0]

    def transfers(self, requests: list[tuple[str, str, int, int, float]]) -> list[Transfer]:
        """Concurrent transfers, each ``(link, direction, index, nbytes, start)``: lost, or when it
        arrives, its sender's uplink and its receiver's downlink shared with the others."""
        results: list[Transfer | None] = [None] * len(requests)
        sent, flows = [], []
        for i, (link, direction, index, nbytes, start) in enumerate(requests):
            spec = self.spec_of(link)
            if not self.is_up(link, start):
                results[i] = Transfer(link, direction, nbytes, start, None, "link down")
            elif spec.drop and uniform(self.seed, link, direction, "drop", index) < spec.drop:
                results[i] = Transfer(link, direction, nbytes, start, None, "dropped")
            else:
                sender, receiver = endpoints(link, direction)
                sent.append(i)
                flows.append(Flow(sender, receiver, 8.0 * nbytes, start, spec.bandwidth_bps))
        devices = {d for flow in flows for d in (flow.sender, flow.receiver)}
        capacity = {d: self.device_bandwidth(d) for d in devices}
        for i, done in zip(sent, finish_times(flows, capacity, capacity)):
            link, direction, index, nbytes, start = requests[i]
            spec = self.spec_of(link)
            arrival = done + spec.latency_s
            if spec.jitter_s:
                arrival += spec.jitter_s * abs(_UNIT_NORMAL.inv_cdf(uniform(self.seed, link, direction, "jitter", index)))
            results[i] = Transfer(link, direction, nbytes, start, arrival)
        return results

    def device_bandwidth(self, device: int | str) -> float:
        """The capacity of a device's uplink (and downlink): ``SERVER``'s or client ``device``'s."""
        if device == SERVER:
            return math.inf if self.server_bandwidth_bps is None else self.server_bandwidth_bps
        return self.client_spec(device).bandwidth_bps


SERVER = "server"


def endpoints(link: str, direction: str) -> tuple[int | str, int | str]:
    """(sender, receiver) of a transfer: ``SERVER`` or a client index."""
    if link.startswith("peer"):
        src, dst = direction.split(">")
        return int(src), int(dst)
    client = int(link.removeprefix("client"))
    return (SERVER, client) if direction == "down" else (client, SERVER)
