"""Usable-information similarity of digits networks, stitching, CKA, RSA, and what quantization destroys (run by hand).

    python benchmarks/usable_information.py [--seeds 0,1,2] [-o benchmarks/results/usable_information.json]

Networks: the zoo's digits MLP (64-h-h-10) at widths 16, 64 and 256 (``--widths``), one per
seed, all on the split of seed 0. For each seed s, network pairs (A, B) = (width w, seed s) and
(256, seed s+1) for w in 16, 64, 256, at both hidden layers:

* representation similarity: I_V(A -> B) and I_V(B -> A) (nats per coordinate) for the
  linear and the MLP family, linear CKA, RSA;
* functional similarity: stitching A's front into B's back (and B's into A's) through a
  trained linear layer, test accuracy on the fine (10 digits) and coarse (even/odd) task;
* task similarity: the residual V-entropy of B's predicted digit given A's layer, and of
  its parity with the same predictor's probabilities summed (the fine-to-coarse bound);
* an invertible nonlinear map: z = A's layer-2 representation (16 principal components,
  standardized), f(z) = exp(1.5 z Q), Q a random rotation: CKA, RSA and both families;
* quantization: per format and layer, I_V(quantized -> float) and back (linear family),
  CKA and accuracy of the width-256 network.

With other ``--widths``, the widest one takes the place of 256.

Writes the JSON (with provenance) and a PNG beside it.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import torch

from edgekit.models import registry
from edgekit.models import usable_information as ui
from edgekit.models.studies import get_study
from edgekit.utils.files import atomic_write
from edgekit.utils.provenance import load_average, provenance, require_clean_tree

WIDTHS = (16, 64, 256)  # the widest: B of every pair, the invertible map's z, the quantized network
PCA_DIMS = 16  # the invertible map's z
GROUPS = np.arange(10) % 2


def predicted(model, x) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(x)).argmax(1).numpy()


def pair_rows(nets, widths, seeds, log, stitch_steps: int, mlp_steps: int) -> list[dict]:
    x_train, _, x_test, _ = ui.digits_data()
    rows = []
    for s in seeds:
        t = seeds[(seeds.index(s) + 1) % len(seeds)]
        for width in widths:
            a, b = nets[(width, s)], nets[(widths[-1], t)]
            la_tr, la_te = ui.layer_outputs(a, x_train), ui.layer_outputs(a, x_test)
            lb_tr, lb_te = ui.layer_outputs(b, x_train), ui.layer_outputs(b, x_test)
            labels = {"a": (predicted(a, x_train), predicted(a, x_test)), "b": (predicted(b, x_train), predicted(b, x_test))}
            for layer in (0, 1):
                row = {"seed": s, "a": f"w{width}s{s}", "b": f"w{widths[-1]}s{t}", "width_a": width, "layer": layer,
                       "cka": ui.linear_cka(la_te[layer], lb_te[layer]), "rsa": ui.rsa(la_te[layer], lb_te[layer])}
                for family in ui.FAMILIES:
                    row[f"info_a_to_b_{family}"] = ui.usable_information(la_tr[layer], lb_tr[layer], la_te[layer],
                                                                         lb_te[layer], family, s, mlp_steps)
                    row[f"info_b_to_a_{family}"] = ui.usable_information(lb_tr[layer], la_tr[layer], lb_te[layer],
                                                                         la_te[layer], family, s, mlp_steps)
                    for src, dst, (rep_tr, rep_te) in (("a", "b", (la_tr, la_te)), ("b", "a", (lb_tr, lb_te))):
                        out = ui.label_usable_information(rep_tr[layer], labels[dst][0], rep_te[layer], labels[dst][1],
                                                          family, s, groups=GROUPS, mlp_steps=mlp_steps)
                        row[f"fine_residual_{src}_to_{dst}_{family}"] = out["conditional_entropy"]
                        row[f"coarse_residual_{src}_to_{dst}_{family}"] = out["coarse_conditional_entropy"]
                for task in ui.TASKS:
                    row[f"stitch_a_to_b_{task}"] = ui.stitch_accuracy(a, b, layer, task, steps=stitch_steps, seed=s)
                    row[f"stitch_b_to_a_{task}"] = ui.stitch_accuracy(b, a, layer, task, steps=stitch_steps, seed=s)
                rows.append(row)
                log(f"pair {row['a']} {row['b']} layer {layer}: stitch {row['stitch_a_to_b_fine']:.3f} / "
                    f"{row['stitch_b_to_a_fine']:.3f}, info lin {row['info_a_to_b_linear']:.2f} / "
                    f"{row['info_b_to_a_linear']:.2f}, cka {row['cka']:.3f}")
    return rows


def invertible_rows(nets, widest: int, seeds, mlp_steps: int) -> list[dict]:
    from sklearn.decomposition import PCA

    x_train, _, x_test, _ = ui.digits_data()
    rows = []
    for s in seeds:
        h_tr, h_te = ui.layer_outputs(nets[(widest, s)], x_train)[1], ui.layer_outputs(nets[(widest, s)], x_test)[1]
        pca = PCA(PCA_DIMS, random_state=s).fit(h_tr)
        z_tr, z_te = pca.transform(h_tr), pca.transform(h_te)
        scale = z_tr.std(0)
        z_tr, z_te = z_tr / scale, z_te / scale
        q, _ = np.linalg.qr(np.random.default_rng(s).standard_normal((PCA_DIMS, PCA_DIMS)))
        f_tr, f_te = np.exp(1.5 * z_tr @ q), np.exp(1.5 * z_te @ q)
        row = {"seed": s, "cka": ui.linear_cka(z_te, f_te), "rsa": ui.rsa(z_te, f_te)}
        for family in ui.FAMILIES:
            row[f"info_z_to_fz_{family}"] = ui.usable_information(z_tr, f_tr, z_te, f_te, family, s, mlp_steps)
            row[f"info_fz_to_z_{family}"] = ui.usable_information(f_tr, z_tr, f_te, z_te, family, s, mlp_steps)
            row[f"info_z_to_z_{family}"] = ui.usable_information(z_tr, z_tr, z_te, z_te, family, s, mlp_steps)
        rows.append(row)
    return rows


def quantization_rows(config: ui.UsableInformationConfig, seeds) -> list[dict]:
    rows = []
    for s in seeds:
        for row in ui.quantization_damage(dataclasses.replace(config, seed=s)):
            rows.append({"seed": s, **row})
    return rows


def summarize(rows, keys) -> list[dict]:
    from scipy import stats

    groups = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    out = []
    for key, group in groups.items():
        entry = dict(zip(keys, key), seeds=len(group))
        for m, v in group[0].items():
            if m in keys or m == "seed" or not isinstance(v, float):
                continue
            values = np.array([g[m] for g in group])
            half = stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else 0.0
            entry[m], entry[f"{m}_ci95"] = float(values.mean()), float(half)
        out.append(entry)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--config", nargs="*", default=[], metavar="KEY=VALUE",
                        help="usable_information config overrides, e.g. steps (every network's training) and "
                             "formats (the quantization rows'); hidden is the widest of --widths")
    parser.add_argument("--widths", default=",".join(map(str, WIDTHS)), help="network widths, comma-separated")
    parser.add_argument("--stitch-steps", type=int, default=200, help="training steps of each stitching layer")
    parser.add_argument("--mlp-steps", type=int, default=600, help="most training steps of each MLP-family fit")
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/usable_information.json"))
    parser.add_argument("--allow-dirty", action="store_true")
    args = parser.parse_args()
    widths = sorted({int(w) for w in args.widths.split(",") if w.strip().isdigit()})
    if len(widths) != len(set(args.widths.split(","))) or widths[0] < 1 or widths[-1] < PCA_DIMS:
        parser.error(f"--widths takes positive integers, the widest at least {PCA_DIMS} (the invertible map's z), "
                     f"got {args.widths}")
    try:
        overrides = registry.parse_config_items(args.config)
        if "hidden" in overrides:
            raise ValueError("hidden is the widest of --widths")
        config = registry.make_config(get_study("usable_information"), {**overrides, "hidden": widths[-1]})
    except ValueError as error:
        parser.error(f"--config: {error}")
    for name in ("stitch_steps", "mlp_steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    require_clean_tree(args.allow_dirty)
    torch.set_num_threads(1)
    seeds = [int(s) for s in args.seeds.split(",")]
    made_with, start = provenance(seeds[0], threads=1), time.perf_counter()
    nets = {(w, s): ui.train_network(w, s, config.steps) for w in widths for s in seeds}
    x_test, y_test = ui.digits_data()[2:]
    accuracy = {f"w{w}s{s}": float((predicted(m, x_test) == y_test).mean()) for (w, s), m in nets.items()}
    print("accuracy", accuracy, flush=True)
    pairs = pair_rows(nets, widths, seeds, lambda msg: print(msg, flush=True), args.stitch_steps, args.mlp_steps)
    invertible = invertible_rows(nets, widths[-1], seeds, args.mlp_steps)
    print("invertible", summarize(invertible, []), flush=True)
    quant = quantization_rows(config, seeds)
    made_with["load_average_after"] = load_average()
    result = {"meta": {**made_with, "seeds": seeds, "widths": widths,
                       "config": dataclasses.asdict(config) | {"seed": seeds},
                       "stitch_steps": args.stitch_steps, "mlp_steps": args.mlp_steps,
                       "seconds": time.perf_counter() - start},
              "network_accuracy": accuracy,
              "pairs_summary": summarize(pairs, ["width_a", "layer"]),
              "invertible_summary": summarize(invertible, []),
              "quantization_summary": summarize(quant, ["format", "layer"]),
              "pairs": pairs, "invertible": invertible, "quantization": quant}
    result["meta"]["seconds"] = time.perf_counter() - start
    args.output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.output, json.dumps(result, indent=1) + "\n")
    plot(result, args.output.with_suffix(".png"))
    print(f"wrote {args.output}")


def plot(result: dict, path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 4.5))
    pairs, widths = result["pairs"], result["meta"]["widths"]
    ax = axes[0]
    for layer, marker in ((0, "o"), (1, "s")):
        rows = [r for r in pairs if r["layer"] == layer]
        ax.scatter([r["stitch_a_to_b_fine"] for r in rows], [r["stitch_b_to_a_fine"] for r in rows], marker=marker,
                   c=[np.log2(r["width_a"]) for r in rows], cmap="viridis", label=f"layer {layer + 1}")
    lo = min(min(r["stitch_a_to_b_fine"], r["stitch_b_to_a_fine"]) for r in pairs)
    ax.plot([lo, 1], [lo, 1], "k--", lw=0.8)
    ax.set(xlabel=f"stitch A -> B accuracy (A width {'/'.join(map(str, widths))}, B width {widths[-1]})",
           ylabel="stitch B -> A accuracy", title="stitching, both directions (fine task)")
    ax.legend(fontsize=7)
    ax = axes[1]
    for family, color in (("linear", "C0"), ("mlp", "C1")):
        ax.scatter([r[f"info_a_to_b_{family}"] for r in pairs], [r[f"info_b_to_a_{family}"] for r in pairs],
                   color=color, label=f"V-information, {family}")
    ax.scatter([r["cka"] * 3 for r in pairs], [r["cka"] * 3 for r in pairs], color="k", marker="x",
               label="linear CKA x 3 (symmetric)")
    ax.plot([0, 4], [0, 4], "k--", lw=0.8)
    ax.set(xlabel="I_V(A -> B), nats/coordinate", ylabel="I_V(B -> A)", title="representation similarity, both directions")
    ax.legend(fontsize=7)
    ax = axes[2]
    inv = result["invertible_summary"][0]
    names = ["cka", "rsa", "info_fz_to_z_linear", "info_fz_to_z_mlp", "info_z_to_z_mlp"]
    ax.bar(range(len(names)), [inv[n] for n in names], yerr=[inv[f"{n}_ci95"] for n in names], color="C2")
    ax.set_xticks(range(len(names)), ["CKA", "RSA", "I_V lin\nf(z)->z", "I_V MLP\nf(z)->z", "I_V MLP\nz->z"], fontsize=8)
    ax.set(title="invertible map f(z) = exp(1.5 zQ)")
    ax = axes[3]
    quant = result["quantization_summary"]
    formats = list(dict.fromkeys(r["format"] for r in quant))
    for layer in (0, 1, 2):
        rows = {r["format"]: r for r in quant if r["layer"] == layer}
        ax.plot(range(len(formats)), [rows[f]["info_quant_to_float"] for f in formats], "o-", label=f"layer {layer + 1}")
    ax.set_xticks(range(len(formats)), formats, rotation=45, fontsize=7)
    ax.set(ylabel="I_V(quantized -> float), linear, nats/coord",
           title=f"what quantization destroys (width {widths[-1]})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
