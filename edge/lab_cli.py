"""``edgekit lab plan``: a laboratory layout (JSON and a PNG plan) from a text specification."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.group()
def lab():
    """LabBuilder: text specification -> protocol -> laboratory layout."""


@lab.command()
@click.argument("spec", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--method", type=click.Choice(["optimised", "greedy", "random"]), default="optimised", show_default=True)
@click.option("--iterations", type=click.IntRange(0), default=600, show_default=True, help="Annealing steps.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--server", default=None, metavar="URL",
              help="Read SPEC as free text with an OpenAI-compatible server (e.g. http://localhost:8000/v1).")
@click.option("--model", "model_name", default=None, help="Model name on --server.")
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path), default=Path("layout"),
              show_default=True, help="Directory for layout.json and plan.png.")
def plan(spec, method, iterations, seed, server, model_name, output):
    """Plan the room for the protocol in SPEC (see docs/models/labbuilder.md for the grammar)."""
    from edgekit.models import lab_layout
    from edgekit.models.lab_protocol import parse_spec, read_with_server

    if bool(server) != bool(model_name):
        raise click.UsageError("--server and --model go together")
    try:
        if server:
            from edgekit.models.llm_client import ChatClient

            protocol = read_with_server(ChatClient(server, model_name), spec.read_text())
        else:
            protocol = parse_spec(spec.read_text())
        layout = lab_layout.plan(protocol, method, seed, iterations)
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    output.mkdir(parents=True, exist_ok=True)
    result = lab_layout.to_json(layout)
    (output / "layout.json").write_text(json.dumps(result, indent=1))
    lab_layout.plot_plan(layout, output / "plan.png")
    m = result["metrics"]
    click.echo(f"{len(result['items'])} items; collision rate {m['collision_rate']:.2f}, out of bounds "
               f"{m['out_of_bounds_rate']:.2f}, weighted safety violations {m['weighted_safety_violations']:.0f}, "
               f"reachable steps {m['reachable_step_fraction']:.2f}")
    for name in ("colliding", "out_of_bounds"):
        if m[name]:
            click.echo(f"does not fit ({name.replace('_', ' ')}): {', '.join(m[name])}")
    click.echo(f"wrote {output / 'layout.json'} and {output / 'plan.png'}")
