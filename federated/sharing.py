"""Max-min fair sharing of devices' uplinks and downlinks by concurrent transfers, on a simulated clock.

Each device has an uplink and a downlink of its own capacity (bits per second); a transfer
uses its sender's uplink and its receiver's downlink, and may have a cap of its own (its
link's bandwidth). While a set of transfers is active, their rates are the max-min fair
allocation (progressive filling): raise every unfrozen rate together until a resource or a
transfer's cap is full, freeze the transfers it limits, repeat. Rates are recomputed when a
transfer starts or ends; between those events every rate is constant, so the finish times
are exact (no time step, nothing sleeps).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

_EPS = 1e-12


@dataclass(frozen=True)
class Flow:
    """``bits`` from ``sender``'s uplink to ``receiver``'s downlink, from ``start`` (seconds);
    ``cap`` bounds its rate on its own (bits per second; ``inf``: none)."""

    sender: Hashable
    receiver: Hashable
    bits: float
    start: float
    cap: float = math.inf


def fair_rates(flows: Sequence[Flow], uplink: Mapping, downlink: Mapping) -> list[float]:
    """The max-min fair rates of ``flows`` all active at once (progressive filling).

    ``uplink[d]`` and ``downlink[d]`` are device ``d``'s capacities; a device missing from
    either has no limit there."""
    resources: dict[tuple, tuple[float, list[int]]] = {}
    for i, flow in enumerate(flows):
        for key, capacities, device in (("up", uplink, flow.sender), ("down", downlink, flow.receiver)):
            capacity = capacities.get(device, math.inf)
            if math.isfinite(capacity):
                resources.setdefault((key, device), (capacity, []))[1].append(i)
    rates = [0.0] * len(flows)
    frozen = [False] * len(flows)
    remaining = {key: capacity for key, (capacity, _) in resources.items()}
    while not all(frozen):
        # the smallest equal increment that fills a resource, or a transfer's cap
        shares = {key: remaining[key] / n for key, (_, members) in resources.items()
                  if (n := sum(not frozen[i] for i in members))}
        caps = [flows[i].cap - rates[i] for i in range(len(flows)) if not frozen[i]]
        step = min([*shares.values(), *caps])
        if not math.isfinite(step):
            raise ValueError("a transfer has no finite capacity anywhere: give a bandwidth to its devices or link")
        for i in range(len(flows)):
            if not frozen[i]:
                rates[i] += step
        for key, (_, members) in resources.items():
            remaining[key] -= step * sum(not frozen[i] for i in members)
        full = {key for key, value in remaining.items() if value <= _EPS * resources[key][0]}
        for i in range(len(flows)):
            if not frozen[i] and (rates[i] >= flows[i].cap * (1 - _EPS) or any(
                    key in full for key in (("up", flows[i].sender), ("down", flows[i].receiver)))):
                frozen[i] = True
    return rates


def finish_times(flows: Sequence[Flow], uplink: Mapping, downlink: Mapping) -> list[float]:
    """When each flow's last bit has left (serialization only: add latency outside)."""
    left = [float(flow.bits) for flow in flows]
    finish = [math.nan] * len(flows)
    pending = sorted(range(len(flows)), key=lambda i: (flows[i].start, i))
    active: list[int] = []
    now = flows[pending[0]].start if pending else 0.0
    while pending or active:
        while pending and flows[pending[0]].start <= now:
            i = pending.pop(0)
            if left[i] <= 0:
                finish[i] = now
            else:
                active.append(i)
        if not active:
            now = flows[pending[0]].start
            continue
        rates = fair_rates([flows[i] for i in active], uplink, downlink)
        ends = [now + left[i] / rate for i, rate in zip(active, rates)]
        until = min([*ends, *([flows[pending[0]].start] if pending else [])])
        still = []
        for i, rate, end in zip(active, rates, ends):
            if end <= until:
                finish[i], left[i] = end, 0.0
            else:
                left[i] -= rate * (until - now)
                still.append(i)
        active, now = still, until
    return finish
