"""The format table as report rows: block formats, then LiftQuant configurations."""

from __future__ import annotations

from edgekit.simulators.weight_formats import weight_formats


def format_rows() -> list[dict]:
    rows = []
    for row in weight_formats("block"):
        name, f = row.name, row.block
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
    for row in weight_formats("liftquant"):
        name, f = row.name, row.liftquant
        rows.append({
            "format": name,
            "element": f"{f.lifted} signs per {f.chunk} weights",
            "bits/element": f.code_bits_per_weight,  # codes only: the row scale adds 16 / row length
            "block": f.chunk,
            "scale": f"{f.row_scale}/row (+ {f.group_scale.name}/group, {f.input_scale}/input)",
            "max normal": None,
            "min subnormal": None,
            "NaN": "no",
            "Inf": "no",
            "description": f.description,
        })
    return rows
