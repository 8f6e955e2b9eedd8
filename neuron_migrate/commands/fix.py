"""`neuron-migrate fix`: show (or apply) the device-agnostic rewrites of CUDA-specific code."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from neuron_migrate.commands.common import stderr_console
from neuron_migrate.commands.scan import scan_options, with_progress
from neuron_migrate.errors import EXIT_FINDINGS, EXIT_OK, UsageError
from neuron_migrate.migrate.fix_files import FileFix, fix_tree, write_fixed
from neuron_migrate.reports.output import write_output


def fix_command(
    paths: list[Path] = typer.Argument(None, help="Files or folders to fix (default: the current folder)."),
    write: bool = typer.Option(False, "--write", help="Apply the fixes to the files (default: show a diff)."),
    patch: Optional[Path] = typer.Option(None, "--patch", help="Write the changes as a patch for `git apply`."),
    unsafe_fixes: bool = typer.Option(False, "--unsafe-fixes", help="Also apply fixes that need review."),
    check: bool = typer.Option(False, "--check", help="Exit 1 only if a fix is available (CI/pre-commit)."),
    select: Optional[list[str]] = typer.Option(None, "--select", help="Only these rule codes or prefixes."),
    ignore: Optional[list[str]] = typer.Option(None, "--ignore", help="Skip these rule codes or prefixes."),
    exclude: Optional[list[str]] = typer.Option(None, "--exclude", help="Skip paths matching these globs."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", help="Worker processes (default: one per CPU)."),
    root: Optional[Path] = typer.Option(None, "--root", help="Paths in the diff are relative to this folder."),
    exit_zero: bool = typer.Option(False, "--exit-zero", help="Exit 0 even when findings are left."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the scan cache."),
    config_file: Optional[Path] = typer.Option(None, "--config", help="pyproject.toml to read settings from."),
) -> None:
    """Rewrite CUDA-specific code to torch.accelerator / torch.amp code that runs on CUDA, neuron and CPU."""
    if write and check:
        raise UsageError("--check and --write exclude each other: --check never writes")
    paths = paths or [Path(".")]
    for path in paths:
        if not path.exists():
            raise UsageError(f"{path}: no such file or directory; pass a file or folder to fix")
    options = scan_options(paths, select, ignore, None, exclude, jobs, root, no_cache, None, False, config_file)
    fixes = with_progress(lambda o, progress=None: fix_tree(o, unsafe_fixes, progress), options, "fixing", True)
    changed = [f for f in fixes if f.new is not None]
    diff = "".join(f.diff() for f in changed)
    if patch is not None:
        write_output(diff, patch)
    if write:
        for fix in changed:
            if (why := write_fixed(fix)) is not None:
                fix.error, fix.new = why, None
    elif patch is None:
        write_output(diff, None)
    todo = _summarise(fixes, write, unsafe_fixes)
    would_change = bool(changed) and not write
    failing = would_change if check else (todo or would_change or any(f.error for f in fixes))
    raise typer.Exit(EXIT_FINDINGS if failing and not exit_zero else EXIT_OK)


def _summarise(fixes: list[FileFix], write: bool, unsafe: bool) -> int:
    """Print what was fixed, what is left for a person, and the notes that need no change; returns how many
    findings are left to do (notes excluded)."""
    console = stderr_console()
    changed = [f for f in fixes if f.new is not None]
    applied = sum(len(f.applied) for f in fixes)
    left = [(f.rel, finding, why) for f in fixes for finding, why in f.left]
    todo = [entry for entry in left if entry[1].severity != "info"]
    notes = len(left) - len(todo)
    for f in fixes:
        if f.error:
            console.print(f"[red]{escape(f.rel)}: not fixed: {escape(f.error)}[/]")
        for why in f.skipped:
            console.print(f"[yellow]{escape(f.rel)}: skipped {escape(why)}[/]")
    if todo:
        console.print("[bold]Left for a person:[/]")
        for rel, finding, why in todo:
            where = f"{rel}[cell {finding.cell}]" if finding.cell else rel
            console.print(f"  {escape(where)}:{finding.line}:{finding.col + 1} {finding.code} "
                          f"{escape(finding.message)} [dim]({escape(why)})[/]")
    verb = "fixed" if write else "would fix"
    unsafe_left = sum(1 for _, _, why in todo if why.startswith("unsafe"))
    console.print(
        f"\n{len(changed)} files {'changed' if write else 'would change'}, {applied} findings {verb}, "
        f"{len(todo)} left for a person" + (f" ({unsafe_left} have unsafe fixes: --unsafe-fixes)" if unsafe_left
                                            and not unsafe else "")
        + (f", {notes} notes that need no change (`neuron-migrate scan` lists them)" if notes else "") + "."
    )
    if changed and not write:
        console.print("[dim]Nothing was written: rerun with --write to apply, or --patch FILE for git apply.[/]")
    return len(todo)


def register(app: typer.Typer) -> None:
    app.command("fix")(fix_command)
