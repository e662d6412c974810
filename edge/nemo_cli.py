"""``edgekit nemo``: solve an optimisation word problem with validated, repaired candidate models."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.command()
@click.argument("text_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=False)
@click.option("--family", default=None, help="Solve a generated problem of this family instead of TEXT_FILE.")
@click.option("--candidates", type=click.IntRange(1), default=4, show_default=True)
@click.option("--max-rounds", type=click.IntRange(0), default=3, show_default=True, help="Repairs per candidate.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--server", default=None, metavar="URL",
              help="An OpenAI-compatible server (e.g. http://localhost:8000/v1) as the modelling agent; "
                   "default: the offline agent.")
@click.option("--model", "model_name", default=None, help="Model name on --server.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the answer and every candidate's history as JSON.")
def nemo(text_file, family, candidates, max_rounds, seed, server, model_name, output):
    """NEMO: word problem -> HiGHS / CP-SAT models, cross-checked by a simulator, repaired, MBR-selected."""
    from edgekit.models.nemo import choose, solve_problem
    from edgekit.models.nemo_agent import OfflineAgent
    from edgekit.models.nemo_problems import FAMILIES, WordProblem, generate

    if (text_file is None) == (family is None):
        raise click.UsageError("give either TEXT_FILE or --family")
    if family is not None and family not in FAMILIES:
        raise click.BadParameter(f"{family!r}; families: {', '.join(FAMILIES)}", param_hint="--family")
    agent = OfflineAgent()
    if server or model_name:
        if not (server and model_name):
            raise click.UsageError("--server and --model go together")
        from edgekit.models.llm_client import ChatClient
        from edgekit.models.nemo_server_agent import ServerAgent

        agent = ServerAgent(ChatClient(server, model_name))
    problem = generate(family, seed) if family else WordProblem("unknown", text_file.read_text(), {}, float("nan"), "")
    try:
        attempts = solve_problem(problem, agent, candidates, max_rounds, seed)
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    answer = choose("validated_mbr", attempts)
    click.echo(problem.text)
    for k, a in enumerate(attempts):
        click.echo(f"candidate {k}: slips {list(a.spec.slips) or 'none'}; first {a.first.status} {a.first.objective}; "
                   f"{'validated' if a.validated else 'not validated'} after {a.rounds} repair(s); "
                   f"feedback {a.feedback}")
    if answer is None or answer.status != "optimal":
        raise click.ClickException("no candidate produced a solution the solver calls optimal")
    click.echo(f"answer: objective {answer.objective}" + (f" (known optimum {problem.optimum})" if family else ""))
    click.echo(json.dumps({k: v for k, v in answer.solution.items() if abs(v) > 1e-9}))
    if output:
        output.write_text(json.dumps({"text": problem.text, "answer": answer.__dict__,
                                      "candidates": [{"slips": a.spec.slips, "validated": a.validated,
                                                      "rounds": a.rounds, "feedback": a.feedback} for a in attempts]},
                                     indent=1))
        click.echo(f"wrote {output}", err=True)
