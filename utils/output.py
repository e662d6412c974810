"""Tables to the terminal and to files (Markdown, JSON, CSV), written atomically."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

from .files import atomic_write

OUTPUT_FORMATS = ("md", "json", "csv")


def cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def markdown_table(rows: list[dict], columns: list[str] | None = None) -> str:
    if columns is None:
        columns = list(rows[0]) if rows else []
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def csv_text(rows: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else [], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def json_safe(value):
    """JSON has no Infinity or NaN: write them as strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def write_result(path, output_format: str, sections: dict[str, list[dict]], meta: dict, markdown: str) -> Path:
    """Write a result: JSON keeps every section and the provenance, CSV the first section,
    Markdown the rendered text."""
    if output_format not in OUTPUT_FORMATS:
        raise ValueError(f"output format must be one of {', '.join(OUTPUT_FORMATS)}, got {output_format!r}")
    if output_format == "json":
        text = json.dumps(json_safe({"meta": meta, **sections}), indent=2) + "\n"
    elif output_format == "csv":
        text = csv_text(next(iter(sections.values())))
    else:
        text = markdown + "\n"
    return atomic_write(path, text)


def resolve_output_format(path: Path | None, output_format: str | None) -> str:
    if output_format:
        return output_format
    suffix = path.suffix.lstrip(".").lower() if path else ""
    return suffix if suffix in OUTPUT_FORMATS else "json"
