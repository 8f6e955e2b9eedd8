"""`neuron-migrate scan`: report every CUDA-specific construct in a code base."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import typer

from neuron_migrate.commands.common import progress_bar, root_options, split_codes, stderr_console
from neuron_migrate.errors import EXIT_FINDINGS, EXIT_OK, UsageError

FORMATS = ("text", "json", "sarif", "github")


def scan_command(
    ctx: typer.Context,
    paths: list[Path] = typer.Argument(None, help="Files or folders to scan (default: the current folder)."),
    select: list[str] | None = typer.Option(
        None, "--select", help="Only these rule codes or prefixes (NM1,NM401)."
    ),
    ignore: list[str] | None = typer.Option(None, "--ignore", help="Skip these rule codes or prefixes."),
    output_format: str = typer.Option("text", "--format", help="text | json | sarif | github."),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write machine output here (default stdout)."
    ),
    jobs: int | None = typer.Option(None, "--jobs", "-j", help="Worker processes (default: one per CPU)."),
    include: list[str] | None = typer.Option(None, "--include", help="Only paths matching these globs."),
    exclude: list[str] | None = typer.Option(None, "--exclude", help="Skip paths matching these globs."),
    root: Path | None = typer.Option(None, "--root", help="Report paths relative to this folder."),
    exit_zero: bool = typer.Option(False, "--exit-zero", help="Exit 0 even when there are findings."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the scan cache."),
    cache_dir: Path | None = typer.Option(
        None, "--cache-dir", help="Cache folder (default .neuron-migrate-cache)."
    ),
    no_gitignore: bool = typer.Option(False, "--no-gitignore", help="Also scan files .gitignore excludes."),
    config_file: Path | None = typer.Option(None, "--config", help="pyproject.toml to read settings from."),
) -> None:
    """Find CUDA-specific code: device strings, torch.cuda APIs, cuda amp, NCCL, backend flags, CUDA-only libraries."""  # noqa: E501 - typer keeps the docstring's line breaks in --help
    from neuron_migrate.api import run_scan
    from neuron_migrate.reports.output import write_output

    if output_format not in FORMATS:
        raise UsageError(f"--format {output_format!r}: choose one of {', '.join(FORMATS)}")
    options = replace(
        root_options(ctx),
        paths=tuple(paths or ()),
        root=root,
        config_file=config_file,
        select=split_codes(select),
        ignore=split_codes(ignore),
        include=tuple(include or ()),
        exclude=tuple(exclude or ()),
        respect_gitignore=not no_gitignore,
        jobs=jobs,
        cache=not no_cache,
        cache_dir=cache_dir,
    )
    with progress_bar("scanning") as progress:
        result = run_scan(options, progress)
    if output_format == "text" and output is None:
        from neuron_migrate.reports.scan_text import render_scan_text

        render_scan_text(result, stderr_console())
    else:
        write_output(_render(result, output_format), output)
        if output_format != "text":  # plain text: a machine format's run needs no console library
            typer.echo(f"{len(result.findings)} findings in {result.files_scanned} files.", err=True)
    # information findings ("no change needed") never fail a run
    actionable = [f for f in result.findings if f.severity != "info"]
    raise typer.Exit(EXIT_FINDINGS if actionable and not exit_zero else EXIT_OK)


def _render(result, output_format: str) -> str:
    """The scan as a file or stdout in `output_format` (text without colour, at 120 columns). Only the chosen
    renderer is imported: SARIF's rule metadata imports every rule (and libcst), which JSON never needs."""
    if output_format == "json":
        from neuron_migrate.model import to_json

        return to_json(result)
    if output_format == "sarif":
        from neuron_migrate.reports.sarif import render_sarif

        return render_sarif(result.findings)
    if output_format == "github":
        from neuron_migrate.reports.github import render_github

        return render_github(result.findings)
    from neuron_migrate.reports.scan_text import scan_text

    return scan_text(result)


def register(app: typer.Typer) -> None:
    app.command("scan")(scan_command)
