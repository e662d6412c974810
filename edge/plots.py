"""Plots of measured results (matplotlib, written as PNG)."""

from __future__ import annotations

import io
import math

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from .output import atomic_write  # noqa: E402

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
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    atomic_write(path, buf.getvalue())
