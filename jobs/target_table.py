"""The hardware target table as report rows."""

from __future__ import annotations

import json

from edgekit.targets import HardwareTarget, load_target, runs_here, target_names, tvm_target

GIB = 2**30


def target_rows(specs: list[str | HardwareTarget] | None = None) -> list[dict]:
    """One row per target: every registry target (CPUs, then GPUs, smallest memory first),
    or the given specs in their order. ``ValueError`` for a spec :func:`load_target` rejects."""
    if specs is None:
        targets = sorted((load_target(n) for n in target_names()),
                         key=lambda t: (t.device != "cpu", t.memory_bytes or 0, t.name))
    else:
        targets = [load_target(s) for s in specs]
    return [target_row(t) for t in targets]


def target_row(t: HardwareTarget) -> dict:
    return {
        "name": t.name,
        "kind": t.device,
        "host arch": t.arch,
        "memory (GiB)": None if t.memory_bytes is None else t.memory_bytes / GIB,
        "bandwidth (GB/s)": None if t.memory_bandwidth is None else t.memory_bandwidth / 1e9,
        **{f"{p} TFLOP/s": _tera(t.peak(p)) for p in ("fp16", "fp8", "fp4")},
        "native formats": ", ".join(t.native_formats) or "none",
        "TVM target": tvm_short(t),
        "runs here": "yes" if runs_here(t) else "no",
    }


def tvm_short(t: HardwareTarget) -> str:
    """A short name for the TVM target: the tag, else kind and arch or CPU; then the host CPU."""
    target = tvm_target(t)
    kind = target.kind.name
    if not t.tvm_spec.startswith("{"):
        head = t.tvm_spec
    else:
        detail = target.attrs.get("arch") if kind == "cuda" else target.attrs.get("mcpu")
        head = f"{kind} {detail}" if detail else kind
    host = target.host
    if host is not None and (t.tvm_host is not None or "host" in _json(t.tvm_spec)):
        cpu = host.attrs.get("mcpu") or str(host.attrs.get("mtriple", "")).split("-", 1)[0] or host.kind.name
        head += f" + host {cpu}"
    return head


def _json(spec: str) -> dict:
    return json.loads(spec) if spec.startswith("{") else {}


def _tera(ops: float | None) -> float | None:
    return None if ops is None else ops / 1e12
