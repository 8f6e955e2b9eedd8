"""`neuron-migrate scan`: report every CUDA-specific construct in a code base."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from neuron_migrate.commands.common import config_for, is_tty, scan_root, split_codes, stderr_console
from neuron_migrate.errors import EXIT_FINDINGS, EXIT_OK, UsageError
from neuron_migrate.migrate.scanner import ScanOptions, scan
from neuron_migrate.migrate.sources import Selection
from neuron_migrate.model import ScanResult, to_json
from neuron_migrate.reports.github import render_github
from neuron_migrate.reports.output import write_output
from neuron_migrate.reports.sarif import render_sarif
from neuron_migrate.reports.scan_text import render_scan_text

FORMATS = ("text", "json", "sarif", "github")


def scan_options(
    paths: list[Path], select: list[str] | None = None, ignore: list[str] | None = None,
    include: list[str] | None = None, exclude: list[str] | None = None, jobs: int | None = None,
    root: Path | None = None, no_cache: bool = False, cache_dir: Path | None = None,
    no_gitignore: bool = False, config_file: Path | None = None,
) -> ScanOptions:
    """Flags merged with `[tool.neuron-migrate]`: the one place `scan`, `fix`, `report` and `check` build
    their file selection and rule set."""
    paths = paths or [Path(".")]
    config = config_for(paths, config_file)
    selection = Selection(
        include=tuple(include or ()) or config.include,
        exclude=config.exclude + tuple(exclude or ()),
        respect_gitignore=config.respect_gitignore and not no_gitignore,
    )
    return ScanOptions(
        paths=tuple(paths),
        root=scan_root(paths, root),
        select=split_codes(select) or config.select,
        ignore=config.ignore + split_codes(ignore),
        selection=selection,
        jobs=jobs if jobs is not None else config.jobs,
        cache_dir=None if no_cache else (cache_dir or Path(".neuron-migrate-cache")),
        target_torch=config.target_torch,
    )


def run_scan(paths: list[Path], *args, progress: bool = False, **kwargs) -> ScanResult:
    """Scan with flags merged with the config (see `scan_options`)."""
    return with_progress(scan, scan_options(paths, *args, **kwargs), "scanning", progress)


def with_progress(function, options: ScanOptions, label: str, progress: bool):
    """`function(options, progress=...)` with a progress bar on a terminal."""
    if not (progress and is_tty()):
        return function(options)
    from rich.progress import Progress

    with Progress(transient=True, console=stderr_console()) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return function(options, progress=update)


def scan_command(
    paths: list[Path] = typer.Argument(None, help="Files or folders to scan (default: the current folder)."),
    select: Optional[list[str]] = typer.Option(None, "--select", help="Only these rule codes or prefixes (NM1,NM401)."),
    ignore: Optional[list[str]] = typer.Option(None, "--ignore", help="Skip these rule codes or prefixes."),
    output_format: str = typer.Option("text", "--format", help="text | json | sarif | github."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write machine output here (default stdout)."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", help="Worker processes (default: one per CPU)."),
    include: Optional[list[str]] = typer.Option(None, "--include", help="Only paths matching these globs."),
    exclude: Optional[list[str]] = typer.Option(None, "--exclude", help="Skip paths matching these globs."),
    root: Optional[Path] = typer.Option(None, "--root", help="Report paths relative to this folder."),
    exit_zero: bool = typer.Option(False, "--exit-zero", help="Exit 0 even when there are findings."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the scan cache."),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help="Cache folder (default .neuron-migrate-cache)."),
    no_gitignore: bool = typer.Option(False, "--no-gitignore", help="Also scan files .gitignore excludes."),
    config_file: Optional[Path] = typer.Option(None, "--config", help="pyproject.toml to read settings from."),
) -> None:
    """Find CUDA-specific code: device strings, torch.cuda APIs, cuda amp, NCCL, backend flags, CUDA-only libraries."""
    if output_format not in FORMATS:
        raise UsageError(f"--format {output_format!r}: choose one of {', '.join(FORMATS)}")
    if jobs is not None and jobs < 0:
        raise UsageError(f"--jobs {jobs}: must be 0 (one per CPU) or more")
    result = run_scan(paths, select, ignore, include, exclude, jobs, root, no_cache, cache_dir, no_gitignore,
                      config_file, progress=True)
    actionable = [f for f in result.findings if f.severity != "info"]
    console = stderr_console()
    if output_format == "text":
        if output is not None:
            import io

            from rich.console import Console

            buffer = io.StringIO()
            render_scan_text(result, Console(file=buffer, no_color=True, width=120, emoji=False))
            write_output(buffer.getvalue(), output)
        else:
            render_scan_text(result, console)
    else:
        rendered = {"json": to_json, "sarif": lambda r: render_sarif(r.findings),
                    "github": lambda r: render_github(r.findings)}[output_format](result)
        write_output(rendered, output)
        console.print(f"{len(result.findings)} findings in {result.files_scanned} files.")
    # information findings ("no change needed") never fail a run
    raise typer.Exit(EXIT_FINDINGS if actionable and not exit_zero else EXIT_OK)


def register(app: typer.Typer) -> None:
    app.command("scan")(scan_command)
