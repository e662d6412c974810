"""Running a job from a command: its ValueErrors become one clean CLI error, its log lines go to stderr."""

from __future__ import annotations

from contextlib import contextmanager

import click


@contextmanager
def clear_errors():
    """A job's ValueErrors become one clear CLI error line, exit code 1."""
    try:
        yield
    except ValueError as err:
        raise click.ClickException(str(err)) from None


def run_job(job, *args, **kwargs):
    """Run a job that logs progress lines to stderr, with :func:`clear_errors`."""
    with clear_errors():
        return job(*args, log=lambda msg: click.echo(msg, err=True), **kwargs)
