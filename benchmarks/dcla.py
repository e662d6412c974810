"""DC-LA against MYULA on r1 and sub-gradient Langevin, same step budget (run by hand).

    python benchmarks/dcla.py [--seeds 0,1,2,3,4] [--n-steps N] [--chains N] [-o benchmarks/results/dcla.json]

For each prior (l1 - 0.8*l2, capped l1) and target:

* toy: a 2-d Gaussian likelihood whose posterior is known exactly by quadrature. Step
  size and smoothing of each sampler are chosen on two validation observations (y drawn
  at seeds 1000, 1001) by the mean marginal W1 to the quadrature density; that grid is
  also the W1-against-step-and-smoothing sweep. The test observations (y at each
  ``--seeds`` value, chains seeded by it) are scored once: W1, the exact posterior mass
  of each sampler's 90% intervals, ESS per second.
* deconvolution: a 64-pixel sparse spike train, Gaussian blur, noise 0.05. Step and
  smoothing chosen on a validation signal (seed 1000) by the posterior mean's squared
  error; test signals at each seed: that error, the fraction of true pixels inside the 90%
  intervals, ESS per second.

Writes the JSON (with provenance) and a PNG beside it.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import itertools
import json
from pathlib import Path

import numpy as np

from edgekit.models import dcla
from edgekit.utils.files import atomic_write
from edgekit.utils.provenance import load_average, provenance, require_clean_tree

GRIDS = {"toy": {"step": [0.005, 0.01, 0.02, 0.05], "smoothing": [0.01, 0.05, 0.2]},
         "deconvolution": {"step": [2.5e-4, 5e-4, 1e-3, 2e-3], "smoothing": [0.005, 0.02, 0.1]}}
BUDGET = {"toy": {"n_steps": 3000, "chains": 200}, "deconvolution": {"n_steps": 4000, "chains": 40}}
VALIDATION_SEEDS = {"toy": [1000, 1001], "deconvolution": [1000]}


def problem(target: str, penalty: str, seed: int):
    """(posterior, scorer): scorer(samples, seconds) -> metrics."""
    if target == "toy":
        posterior = dcla.toy_posterior(seed, penalty)
        exact = dcla.quadrature(posterior)

        def score(samples, seconds):
            return {"w1": dcla.marginal_w1(samples, exact),
                    "coverage90": float(dcla.interval_mass(samples, exact).mean()),
                    "ess_per_s": float(dcla.effective_sample_size(samples).min() / seconds)}
        return posterior, score
    posterior, truth = dcla.deconvolution(seed, penalty)

    def score(samples, seconds):
        flat = samples.reshape(-1, posterior.dim)
        lo, hi = np.quantile(flat, [0.05, 0.95], axis=0)
        return {"mse": float(((flat.mean(0) - truth) ** 2).mean()),
                "coverage90": float(((lo <= truth) & (truth <= hi)).mean()),
                "ess_per_s": float(dcla.effective_sample_size(samples).min() / seconds)}
    return posterior, score


def run(target: str, penalty: str, posterior, score, method: str, step: float, smoothing: float, seed: int,
        budget: dict) -> dict:
    samples, seconds = dcla.sample(method, posterior, step=step, smoothing=smoothing, seed=seed, **budget[target])
    return {"target": target, "penalty": penalty, "method": method, "step": step, "smoothing": smoothing,
            "seed": seed, "seconds": seconds, **score(samples, seconds)}


def settings(target: str, method: str):
    grid = GRIDS[target]
    smoothings = grid["smoothing"] if method != "subgradient" else [grid["smoothing"][0]]  # no smoothing in it
    return list(itertools.product(grid["step"], smoothings))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3,4", help="at least 2: the summary's intervals are over seeds")
    parser.add_argument("--n-steps", type=int, help="Langevin steps of every chain (default: "
                        + ", ".join(f"{t} {b['n_steps']}" for t, b in BUDGET.items()) + ")")
    parser.add_argument("--chains", type=int, help="chains of every run (default: "
                        + ", ".join(f"{t} {b['chains']}" for t, b in BUDGET.items()) + ")")
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/dcla.json"))
    parser.add_argument("--allow-dirty", action="store_true")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    if len(seeds) < 2:
        parser.error(f"--seeds needs at least 2 seeds for the intervals, got {args.seeds}")
    for name in ("n_steps", "chains"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    budget = {t: {"n_steps": args.n_steps or b["n_steps"], "chains": args.chains or b["chains"]}
              for t, b in BUDGET.items()}
    require_clean_tree(args.allow_dirty)
    made_with = provenance(seeds[0], threads=1)  # at the start: the code the run began with
    validation, test, chosen = [], [], {}
    for target, penalty in itertools.product(GRIDS, dcla.PRIORS):
        key = "w1" if target == "toy" else "mse"
        problems = [problem(target, penalty, s) for s in VALIDATION_SEEDS[target]]
        for method in dcla.METHODS:
            best = None
            for step, smoothing in settings(target, method):
                rows = [run(target, penalty, p, sc, method, step, smoothing, 0, budget) for p, sc in problems]
                validation += rows
                value = float(np.mean([r[key] for r in rows]))
                if best is None or value < best[0]:
                    best = (value, step, smoothing)
            chosen[f"{target}/{penalty}/{method}"] = {"step": best[1], "smoothing": best[2], f"validation_{key}": best[0]}
            print(target, penalty, method, chosen[f"{target}/{penalty}/{method}"], flush=True)
        for seed in seeds:
            posterior, score = problem(target, penalty, seed)
            for method in dcla.METHODS:
                c = chosen[f"{target}/{penalty}/{method}"]
                test.append(run(target, penalty, posterior, score, method, c["step"], c["smoothing"], seed, budget))
    summary = summarize(test)
    for row in summary:
        print(row)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    made_with["load_average_after"] = load_average()
    atomic_write(args.output, json.dumps({"meta": {**made_with, "seeds": seeds, "grids": GRIDS,
                                                "budget": budget, "validation_seeds": VALIDATION_SEEDS},
                                       "chosen": chosen, "summary": summary, "test": test,
                                       "validation": validation}, indent=1) + "\n")
    plot(validation, summary, args.output.with_suffix(".png"))
    print(f"wrote {args.output}")


def summarize(test: list[dict]) -> list[dict]:
    """Mean and 95% interval (t, over seeds) of each metric per target, prior and method."""
    from scipy import stats

    out = []
    groups = {}
    for r in test:
        groups.setdefault((r["target"], r["penalty"], r["method"]), []).append(r)
    for (target, penalty, method), rows in groups.items():
        entry = {"target": target, "penalty": penalty, "method": method, "seeds": len(rows)}
        for metric in ("w1", "mse", "coverage90", "ess_per_s"):
            if metric in rows[0]:
                values = np.array([r[metric] for r in rows])
                half = stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values))
                entry[metric] = float(values.mean())
                entry[f"{metric}_ci95"] = float(half)
        out.append(entry)
    return out


def plot(validation: list[dict], summary: list[dict], path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(18, 4))
    for ax, penalty in zip(axes[:2], dcla.PRIORS):
        rows = [r for r in validation if r["target"] == "toy" and r["penalty"] == penalty]
        for method, smoothing in sorted({(r["method"], r["smoothing"]) for r in rows}):
            pts = sorted((r["step"], r["w1"]) for r in rows if r["method"] == method and r["smoothing"] == smoothing)
            steps = sorted({s for s, _ in pts})
            ax.plot(steps, [np.mean([w for s2, w in pts if s2 == s]) for s in steps], marker="o",
                    label=method if method == "subgradient" else f"{method}, smoothing {smoothing:g}",
                    ls={"dcla": "-", "myula_r1": ":", "subgradient": "--"}[method])
        ax.set(xscale="log", yscale="log", xlabel="step size", ylabel="mean marginal W1 to quadrature",
               title=f"toy 2-d, {penalty} (validation)")
        ax.legend(fontsize=6)
    for ax, (target, metric) in zip(axes[2:], [("toy", "w1"), ("deconvolution", "mse")]):
        rows = [r for r in summary if r["target"] == target]
        labels = [f"{r['penalty']}\n{r['method']}" for r in rows]
        ax.bar(range(len(rows)), [r[metric] for r in rows], yerr=[r[f"{metric}_ci95"] for r in rows],
               color=[{"dcla": "C0", "myula_r1": "C1", "subgradient": "C2"}[r["method"]] for r in rows])
        ax.set_xticks(range(len(rows)), labels, fontsize=6, rotation=60)
        ax.set(ylabel=f"{metric} (test, mean and 95% CI)", title=f"{target}, tuned on validation")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
