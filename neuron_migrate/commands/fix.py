"""`neuron-migrate fix`: show (or apply) the device-agnostic rewrites of CUDA-specific code."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import typer

from neuron_migrate.commands.common import progress_bar, root_options, split_codes, stderr_console
from neuron_migrate.errors import EXIT_FINDINGS, EXIT_OK, UsageError


def fix_command(
    ctx: typer.Context,
    paths: list[Path] = typer.Argument(None, help="Files or folders to fix (default: the current folder)."),
    write: bool = typer.Option(False, "--write", help="Apply the fixes to the files (default: show a diff)."),
    patch: Path | None = typer.Option(None, "--patch", help="Write the changes as a patch for `git apply`."),
    unsafe_fixes: bool = typer.Option(False, "--unsafe-fixes", help="Also apply fixes that need review."),
    include_generated: bool = typer.Option(
        False, "--include-generated", help="Also fix files marked generated (`DO NOT EDIT`, `@generated`)."
    ),
    check: bool = typer.Option(False, "--check", help="Exit 1 only if a fix is available (CI/pre-commit)."),
    select: list[str] | None = typer.Option(None, "--select", help="Only these rule codes or prefixes."),
    ignore: list[str] | None = typer.Option(None, "--ignore", help="Skip these rule codes or prefixes."),
    exclude: list[str] | None = typer.Option(None, "--exclude", help="Skip paths matching these globs."),
    jobs: int | None = typer.Option(None, "--jobs", "-j", help="Worker processes (default: one per CPU)."),
    root: Path | None = typer.Option(None, "--root", help="Paths in the diff are relative to this folder."),
    exit_zero: bool = typer.Option(False, "--exit-zero", help="Exit 0 even when findings are left."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the scan cache."),
    config_file: Path | None = typer.Option(None, "--config", help="pyproject.toml to read settings from."),
) -> None:
    """Rewrite CUDA-specific code to torch.accelerator / torch.amp code that runs on CUDA, neuron and CPU."""
    from neuron_migrate.api import run_fix
    from neuron_migrate.migrate.fix_files import write_fixed
    from neuron_migrate.reports.fix_text import render_fix_summary
    from neuron_migrate.reports.output import write_output

    if write and check:
        raise UsageError("--check and --write exclude each other: --check never writes")
    options = replace(
        root_options(ctx),
        paths=tuple(paths or ()),
        root=root,
        config_file=config_file,
        select=split_codes(select),
        ignore=split_codes(ignore),
        exclude=tuple(exclude or ()),
        jobs=jobs,
        cache=not no_cache,
    )
    with progress_bar("fixing") as progress:
        fixes = run_fix(options, unsafe_fixes, progress, include_generated)
    changed = [f for f in fixes if f.new is not None]
    diff = "".join(f.diff() for f in changed)
    if patch is not None:
        write_output(diff, patch, "--patch")
    if write:
        for fix in changed:
            if (why := write_fixed(fix)) is not None:
                fix.error, fix.new = why, None
    elif patch is None:
        write_output(diff, None)
    written_to = None if patch is None or write else str(patch)
    todo = render_fix_summary(fixes, write, unsafe_fixes, stderr_console(), written_to)
    would_change = bool(changed) and not write
    failing = would_change if check else (todo or would_change or any(f.error for f in fixes))
    raise typer.Exit(EXIT_FINDINGS if failing and not exit_zero else EXIT_OK)


def register(app: typer.Typer) -> None:
    app.command("fix")(fix_command)
