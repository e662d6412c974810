"""FluxNet (heads L, U, D) vs an unconstrained CNN and a flux-rate surrogate on four PDEs, in float32,
MXFP8 and MXFP4 weights (run by hand; trains through the model cache, so a rerun only evaluates).

    python benchmarks/fluxnet_study.py [--pdes traffic,convection_diffusion,shallow_water,cahn_hilliard]
                                       [--boundary periodic] [--formats fp32,mxfp8_e4m3,...]
                                       [--config KEY=VALUE ...] [-o benchmarks/results/fluxnet_study.json]
                                       [--allow-dirty]

Every surrogate is the registered ``fluxnet`` model with another config, trained by
``edgekit.models.registry.train`` (seeded, cached). The 1D problems use the default config
(128 cells, hidden 64, 4 layers, kernel 5, 1500 steps); the 2D problems a smaller one
(``SMALL_2D``: 32 x 32 cells, hidden 32, 3 layers, kernel 3, 2-step unrolls, 16 training
trajectories, 1000 steps) to fit 2 CPU cores; the flux-rate baseline integrates with 4
substeps per surrogate step (4 network runs per step). Each model is rolled out for 100
surrogate steps from held-out initial conditions and compared with the solver
(``fluxnet.evaluate``), with its weights as trained and quantized by
``edgekit.models.weights.quantized_copy``. Writes JSON (rows, configs, provenance) and
the Markdown table beside it. A ``persistence`` row per problem (the state never changes)
gives the scale of the rollout errors. ``--config`` overrides every surrogate's config (after the
above), e.g. ``steps=3 rollout_steps=4`` for a quick check of the script.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

SMALL_2D = {"hidden": 32, "layers": 3, "kernel": 3, "unroll": 2, "batch": 8, "train_trajectories": 16,
            "test_trajectories": 4, "steps": 1000}
FLUX_RATE = {"substeps": 4}
COLUMNS = ["pde", "boundary", "arch", "head", "format", "rollout_rel_l2", "rel_l2_final", "mass_drift",
           "lower_violations", "upper_violations", "max_bound_excess", "train_seconds"]


def main():
    from edgekit.models import fluxnet, pde

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pdes", default=",".join(pde.PROBLEMS), help="comma-separated problems")
    parser.add_argument("--boundary", default="periodic", choices=pde.BOUNDARIES)
    parser.add_argument("--formats", default=",".join(fluxnet.STUDY_FORMATS), help="weight formats; fp32: as trained")
    parser.add_argument("--config", nargs="*", default=[], metavar="KEY=VALUE",
                        help="fluxnet config overrides, applied to every surrogate")
    parser.add_argument("-o", "--output", type=Path, default=Path("benchmarks/results/fluxnet_study.json"))
    parser.add_argument("--allow-dirty", action="store_true", help="run on a tree with uncommitted changes")
    args = parser.parse_args()

    import torch

    from edgekit.models.registry import make_config, parse_config_items, train
    from edgekit.utils.output import atomic_write, json_safe, markdown_table
    from edgekit.utils.provenance import load_average, provenance, require_clean_tree

    require_clean_tree(args.allow_dirty)
    meta = provenance(0, threads=torch.get_num_threads())  # at the start: the code and load the run began with
    configs = []
    try:
        overrides = parse_config_items(args.config)
        for name in args.pdes.split(","):
            base = {"boundary": args.boundary, **(SMALL_2D if pde.get_problem(name).dims == 2 else {})}
            for arch, head in fluxnet.STUDY_VARIANTS:
                configs.append(make_config("fluxnet", {"pde": name, "arch": arch, "head": head, **base,
                                                       **(FLUX_RATE if arch == "flux_rate" else {}), **overrides}))
    except ValueError as err:  # a bad --config item or problem name, before any training
        parser.error(str(err))
    formats = args.formats.split(",")
    began = time.perf_counter()

    def log(message):
        print(f"[{time.perf_counter() - began:7.1f} s] {message}", flush=True)

    def trained(config):
        log(f"train {config.pde} {config.boundary} {config.arch} {config.head}")
        return train("fluxnet", config)

    rows = fluxnet.compare_surrogates(trained, configs, formats, log=log)
    for config in {(c.pde, c.boundary): c for c in configs}.values():  # the error of standing still, for scale
        reference = torch.from_numpy(fluxnet.held_out_data(config).copy())
        problem = config.problem
        metrics = fluxnet.rollout_metrics(reference[:, :1].expand_as(reference), reference, None,
                                          config.boundary == "periodic", problem.lower, problem.upper)
        rows.append({"pde": config.pde, "boundary": config.boundary, "arch": "persistence", "head": "",
                     "format": "", **metrics})
    table = markdown_table(rows, COLUMNS)
    print(table)
    meta.update({"command": " ".join(["python", *sys.argv]), "small_2d": SMALL_2D, "flux_rate": FLUX_RATE,
                 "overrides": overrides, "seconds": time.perf_counter() - began,
                 "load_average_after": load_average()})
    atomic_write(args.output, json.dumps(json_safe({"meta": meta, "rows": rows}), indent=2) + "\n")
    atomic_write(args.output.with_suffix(".md"), table + "\n")
    print(f"wrote {args.output} and {args.output.with_suffix('.md')}")


if __name__ == "__main__":
    main()
