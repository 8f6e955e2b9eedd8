"""`neuron-migrate report`: the effort estimate as HTML, Markdown, JSON or SARIF, from a scan and traces."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import typer

from neuron_migrate.commands.common import progress_bar, root_options, stderr_console
from neuron_migrate.errors import UsageError

FORMATS = ("html", "md", "json", "sarif")


def report_command(
    ctx: typer.Context,
    path: Path | None = typer.Argument(None, help="Folder or file to scan (default: the current folder)."),
    scan_file: Path | None = typer.Option(
        None, "--scan", help="Use this `scan --format json` file instead of scanning."
    ),
    trace_files: list[Path] | None = typer.Option(
        None, "--trace", help="A `trace --format json` file; repeat to merge several."
    ),
    output_format: str = typer.Option("html", "--format", help="html | md | json | sarif."),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write the report here (default stdout)."
    ),
    config_file: Path | None = typer.Option(None, "--config", help="pyproject.toml to read settings from."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the scan cache."),
) -> None:
    """Estimate the migration effort (low / likely / high engineer-hours) from a scan and traces."""
    from neuron_migrate.api import make_report
    from neuron_migrate.reports.output import write_output
    from neuron_migrate.reports.render import RENDERERS, report_summary

    if output_format not in FORMATS:
        raise UsageError(f"--format {output_format!r}: choose one of {', '.join(FORMATS)}")
    options = replace(
        root_options(ctx), paths=(path,) if path else (), config_file=config_file, cache=not no_cache
    )
    with progress_bar("scanning") if scan_file is None else nullcontext() as progress:
        report = make_report(options, scan_file, tuple(trace_files or ()), progress)
    write_output(RENDERERS[output_format](report), output)
    console = stderr_console()
    for line in report_summary(report, output):
        console.print(line, markup=False)


def register(app: typer.Typer) -> None:
    app.command("report")(report_command)
