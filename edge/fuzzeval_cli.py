"""``edgekit fuzzeval``: score generated HumanEval programs with fuzz tests and select them with a PAC FDR bound."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from edgekit.utils.output import markdown_table


@click.command()
@click.option("--problems", type=click.IntRange(2, 164), default=40, show_default=True,
              help="How many HumanEval problems (the first N).")
@click.option("--candidates", type=click.IntRange(1), default=5, show_default=True, help="Programs per problem.")
@click.option("--epsilon", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.1, show_default=True,
              help="Target false discovery rate.")
@click.option("--delta", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.1, show_default=True,
              help="Allowed probability that the FDR exceeds epsilon.")
@click.option("--splits", type=click.IntRange(1), default=200, show_default=True,
              help="Random calibration/test splits to evaluate the selection on.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--server", default=None, metavar="URL",
              help="An OpenAI-compatible server (e.g. http://localhost:8000/v1) to generate programs; "
                   "default: the offline generator of AST mutants.")
@click.option("--model", "model_name", default=None, help="Model name on --server.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=Path("fuzzeval.json"),
              show_default=True)
def fuzzeval(problems, candidates, epsilon, delta, splits, seed, server, model_name, output):
    """FuzzEval: fuzz-test generated programs in a sandbox and select them with an FDR guarantee."""
    from dataclasses import asdict

    from edgekit.models.fuzzeval import disagreements, evaluate_selection, score_problems, server_candidates
    from edgekit.models.humaneval import load_problems

    generator = None
    if server or model_name:
        if not (server and model_name):
            raise click.UsageError("--server and --model go together")
        from edgekit.models.llm_client import ChatClient

        generator = server_candidates(ChatClient(server, model_name))
    chosen = load_problems()[:problems]
    with click.progressbar(length=len(chosen), label="problems", file=sys.stderr) as bar:
        scored = score_problems(chosen, candidates, seed, generator, progress=lambda _: bar.update(1))
    selection = evaluate_selection(scored, epsilon, delta, splits, seed)
    rows = [{"method": m, f"P(FDR > {epsilon})": r["violation_rate"], "FDR": r["fdr_mean"],
             "selected": r["selection_rate"], "recall": r["recall"]} for m, r in selection.items()]
    click.echo(markdown_table(rows))
    result = {"epsilon": epsilon, "delta": delta, "seed": seed, "selection": selection,
              "disagreements": disagreements(scored), "scored": [asdict(s) for s in scored]}
    output.write_text(json.dumps(result, indent=1))
    click.echo(f"wrote {output}")
