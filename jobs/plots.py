"""Plots of measured results (matplotlib, written as PNG)."""

from __future__ import annotations

import io
import math

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

from edgekit.simulators import weight_formats as wf
from edgekit.utils.output import atomic_write

# Shades per element width: blues 8-bit, greens 6-bit, reds 4-bit.
SHADES = {8: ["#08306b", "#2171b5", "#6baed6"], 6: ["#00441b", "#41ab5d"], 4: ["#67000d", "#cb181d", "#fc9272"]}


def qsnr_plot(rows: list[dict], path, blocks: list, title: str = "QSNR by block size") -> None:
    """One panel per (tensor, rotation): QSNR against block size, a line per format.

    INT formats are solid, FP dashed; the colour family gives the element width, so
    the 8-bit INT/FP crossover reads as a solid and a dashed blue line crossing.
    """
    tensors = list(dict.fromkeys(r["tensor"] for r in rows))
    rotations = list(dict.fromkeys(r["rotation"] for r in rows))
    fig, axes = plt.subplots(len(rotations), len(tensors), figsize=(3.4 * len(tensors), 3.2 * len(rotations)),
                             squeeze=False, sharey="row")
    labels = [str(b) for b in blocks]
    formats = list(dict.fromkeys(r["format"] for r in rows if not r["format"].endswith("_asym")))
    bits_of = {r["format"]: r["bits"] for r in rows}
    color = {}
    for fmt in formats:
        shades = SHADES.get(bits_of[fmt], ["tab:gray"])
        color[fmt] = shades[sum(bits_of[f] == bits_of[fmt] for f in color) % len(shades)]
    for i, rotation in enumerate(rotations):
        for j, tensor in enumerate(tensors):
            ax = axes[i][j]
            for fmt in formats:
                pts = {r["block"]: r for r in rows if (r["tensor"], r["rotation"], r["format"]) == (tensor, rotation, fmt)}
                if not pts:
                    continue
                first = next(iter(pts.values()))
                ys = [pts[b]["qsnr_db"] if b in pts and math.isfinite(pts[b]["qsnr_db"]) else math.nan for b in blocks]
                ax.plot(labels, ys, marker="o", ms=3, lw=1.4, color=color[fmt],
                        ls="-" if first["kind"] == "int" else "--", label=fmt)
            ax.set_title(f"{tensor}" + ("" if rotation == "none" else f"\n+ {rotation}"), fontsize=9)
            ax.grid(alpha=0.3)
            ax.tick_params(labelsize=7)
            if j == 0:
                ax.set_ylabel("QSNR (dB)")
            if i == len(rotations) - 1:
                ax.set_xlabel("block size")
    handles, names = axes[0][0].get_legend_handles_labels()
    ncol = min(len(names), 2 * len(tensors))
    legend_rows = -(-len(names) // ncol)
    fig.legend(handles, names, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.035 * legend_rows * 2 / len(rotations), 1, 1))
    atomic_write(path, png_bytes(fig))


def png_bytes(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def _line(fmt: str) -> str:
    """The line a format's point joins: one for all LiftQuant configurations, else its own."""
    return "liftquant" if wf.resolve(fmt).family == "liftquant" else fmt


def _scatter_by_format(ax, points: list[tuple[float, float, str]]) -> None:
    """Points (bits, value, format), labelled; formats of one family (LiftQuant) joined by a line."""
    families = {}
    for bits, value, fmt in points:
        families.setdefault(_line(fmt), []).append((bits, value, fmt))
    for family, pts in families.items():
        pts.sort()
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        ax.plot(xs, ys, marker="o", ms=5, lw=1.2 if len(pts) > 1 else 0, label=family)
        for x, y, fmt in pts:
            ax.annotate(fmt.removeprefix(f"{family}_"), (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log", base=2)
    ax.grid(alpha=0.3)
    ax.tick_params(labelsize=7)


def metric_vs_bits_png(models: list[dict], evaluations: list[dict]) -> bytes:
    """One panel per model: its own metric against stored bits per weight, a point per format."""
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.6), squeeze=False)
    for ax, model in zip(axes[0], models):
        metric = model["metric"]
        pts = [(e["bits/weight"], e[metric], e["format"]) for e in evaluations
               if e["model"] == model["model"] and math.isfinite(e[metric])]
        _scatter_by_format(ax, [p for p in pts if p[2] != wf.REFERENCE])
        for bits, value, fmt in pts:
            if fmt == wf.REFERENCE:  # every format is read against it
                ax.axhline(value, color="black", ls="--", lw=0.8, label=fmt)
        ax.set_title(f"{model['model']}", fontsize=10)
        ax.legend(fontsize=7, frameon=False)
        ax.set_xlabel("bits per weight (scales included)")
        ax.set_ylabel(f"{metric} ({'higher' if model['higher_is_better'] else 'lower'} is better)", fontsize=8)
    fig.suptitle("Accuracy against bit-width", fontsize=11)
    fig.tight_layout()
    return png_bytes(fig)


def latency_size_png(models: list[dict], builds: list[dict], latency: list[dict]) -> bytes:
    """Per model: host latency against bits per weight (top), artifact size per target (bottom)."""
    fig, axes = plt.subplots(2, len(models), figsize=(4.2 * len(models), 6.4), squeeze=False)
    for j, model in enumerate(models):
        name = model["model"]
        lat = [(r["weight_bits"], r["median_ms"], r["format"]) for r in _with_bits(latency, builds) if r["model"] == name]
        _scatter_by_format(axes[0][j], lat)
        axes[0][j].set_title(f"{name}: host latency", fontsize=10)
        axes[0][j].set_ylabel("median ms per call", fontsize=8)
        ax = axes[1][j]
        for target in dict.fromkeys(b["target"] for b in builds if b["model"] == name):
            pts = sorted((b["weight_bits"], b["artifact_bytes"] / 2**20) for b in builds
                         if b["model"] == name and b["target"] == target and b["built"])
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=4, lw=1.2, label=target)
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7, frameon=False)
        ax.set_title(f"{name}: build size", fontsize=10)
        ax.set_xlabel("bits per weight (scales included)")
        ax.set_ylabel("artifacts (MiB)", fontsize=8)
    fig.tight_layout()
    return png_bytes(fig)


def _with_bits(latency: list[dict], builds: list[dict]) -> list[dict]:
    bits = {(b["model"], b["format"], b["target"]): b.get("weight_bits") for b in builds}
    return [{**r, "weight_bits": bits[(r["model"], r["format"], r["target"])]} for r in latency]


def output_agreement_png(rows: list[dict], title: str) -> bytes:
    """Per output, the cosine similarity to float and the max error of each format, side by side (bars)."""
    outputs = list(dict.fromkeys(r["output"] for r in rows))
    formats = list(dict.fromkeys(r["format"] for r in rows))
    fig, axes = plt.subplots(len(outputs), 2, figsize=(max(6.0, 0.9 * len(formats) + 3), 2.8 * len(outputs)),
                             squeeze=False)
    for i, output in enumerate(outputs):
        by_format = {r["format"]: r for r in rows if r["output"] == output}
        for ax, key, label in ((axes[i][0], "cosine", "1 - cosine to float"), (axes[i][1], "max_abs_error",
                                                                               "max |error|")):
            values = [max(by_format[f][key] if key != "cosine" else 1.0 - by_format[f][key], 1e-12) for f in formats]
            ax.bar(range(len(formats)), values, color="tab:blue")
            ax.set_yscale("log")
            ax.set_xticks(range(len(formats)), formats, rotation=45, ha="right", fontsize=8)
            ax.set_title(f"{output}: {label}", fontsize=9)
            ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    return png_bytes(fig)
