"""The format table as report rows."""

from __future__ import annotations

from edgekit.simulators import FORMATS


def format_rows() -> list[dict]:
    rows = []
    for name, f in FORMATS.items():
        e = f.element
        rows.append({
            "format": name,
            "element": e.name,
            "bits/element": f.bits_per_element,
            "block": f.block_size,
            "scale": f.scale.name + (" + fp32/tensor" if f.tensor_scale else ""),
            "max normal": e.max_normal,
            "min subnormal": e.min_subnormal,
            "NaN": "yes" if e.has_nan else "no",
            "Inf": "yes" if e.kind == "float" and e.inf else "no",
            "description": f.description,
        })
    return rows
