"""``edgekit study NAME``: run a study (an algorithm with its baselines, see ``edgekit.models.studies``)."""

from __future__ import annotations

from pathlib import Path

import click

from edgekit.utils.output import OUTPUT_FORMATS, markdown_table, write_result
from edgekit.utils.provenance import provenance


@click.command(name="study")
@click.argument("name", metavar="NAME", required=False)
@click.option("--config", "config_items", multiple=True, metavar="KEY=VALUE",
              help="Config override (repeatable), e.g. --config seed=1.")
@click.option("--tiny", is_flag=True, help="Start from the study's tiny test config.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where to write the results.")
@click.option("--output-format", type=click.Choice(OUTPUT_FORMATS), default=None,
              help="File format of --output (default: from its suffix, else json).")
def study(name, config_items, tiny, output, output_format):
    """Run study NAME with its config (and --config overrides); without NAME, list the studies."""
    import dataclasses

    from edgekit.models.registry import make_config, parse_config_items
    from edgekit.models.studies import STUDIES, get_study

    if name is None:
        click.echo(markdown_table([{"study": s.name, "metric": s.metric_label, "description": s.description}
                                   for s in STUDIES.values()]))
        return
    try:
        entry = get_study(name)
        config = make_config(entry, parse_config_items(list(config_items)), tiny=tiny)
        result = entry.evaluate(config)
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    rows = [{"metric": k, "value": v} for k, v in result.items()]
    text = f"{entry.name}: {entry.metric_label}\n{dataclasses.asdict(config)}\n\n" + markdown_table(rows)
    click.echo(text)
    if output:
        fmt = output_format or (output.suffix.lstrip(".").lower() if output.suffix.lstrip(".").lower()
                                in OUTPUT_FORMATS else "json")
        path = write_result(output, fmt, {"study": rows}, {**provenance(config.seed),
                                                            "config": dataclasses.asdict(config)}, text)
        click.echo(f"wrote {path}", err=True)
