"""`neuron-migrate fix`: show (or apply) the device-agnostic rewrites of CUDA-specific code."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from neuron_migrate.commands.common import config_for, scan_root, split_codes, stderr_console
from neuron_migrate.errors import EXIT_FINDINGS, EXIT_OK, UsageError
from neuron_migrate.migrate.fix_files import FileFix, fix_file, write_fixed
from neuron_migrate.migrate.rule import select_rules
from neuron_migrate.migrate.sources import Selection, discover
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
    root: Optional[Path] = typer.Option(None, "--root", help="Paths in the diff are relative to this folder."),
    exit_zero: bool = typer.Option(False, "--exit-zero", help="Exit 0 even when findings are left."),
    config_file: Optional[Path] = typer.Option(None, "--config", help="pyproject.toml to read settings from."),
) -> None:
    """Rewrite CUDA-specific code to torch.accelerator / torch.amp code that runs on CUDA, neuron and CPU."""
    paths = paths or [Path(".")]
    for path in paths:
        if not path.exists():
            raise UsageError(f"{path}: no such file or directory; pass a file or folder to fix")
    config = config_for(paths, config_file)
    codes = tuple(select_rules(split_codes(select) or config.select, config.ignore + split_codes(ignore)))
    base = scan_root(paths, root)
    selection = Selection(include=config.include, exclude=config.exclude + tuple(exclude or ()),
                          respect_gitignore=config.respect_gitignore)
    sources = [s for s in discover(list(paths), base, selection) if s.kind != "kernel"]
    fixes = [fix_file(source, codes, unsafe_fixes) for source in sources]
    changed = [f for f in fixes if f.new is not None]
    diff = "".join(f.diff() for f in changed)
    if patch is not None:
        write_output(diff, patch)
    failed = []
    if write and check:
        raise UsageError("--check and --write exclude each other: --check never writes")
    if write:
        for fix in changed:
            if (why := write_fixed(fix)) is not None:
                fix.error, fix.new = why, None
                failed.append(fix)
    elif patch is None:
        write_output(diff, None)
    left = _summarise(fixes, write, unsafe_fixes)
    would_change = bool(changed) and not write
    failing = would_change if check else (left or would_change or failed)
    code = EXIT_FINDINGS if failing and not exit_zero else EXIT_OK
    raise typer.Exit(code)


def _summarise(fixes: list[FileFix], write: bool, unsafe: bool) -> int:
    """Print what was fixed and what is left for a person; returns how many findings are left."""
    console = stderr_console()
    changed = [f for f in fixes if f.new is not None]
    applied = sum(len(f.applied) for f in fixes)
    left = [(f.rel, finding, why) for f in fixes for finding, why in f.left]
    for f in fixes:
        if f.error:
            console.print(f"[red]{escape(f.rel)}: not fixed: {escape(f.error)}[/]")
    if left:
        console.print("[bold]Left for a person:[/]")
        for rel, finding, why in left:
            where = f"{rel}[cell {finding.cell}]" if finding.cell else rel
            console.print(f"  {escape(where)}:{finding.line}:{finding.col + 1} {finding.code} "
                          f"{escape(finding.message)} [dim]({escape(why)})[/]")
    verb = "fixed" if write else "would fix"
    unsafe_left = sum(1 for _, _, why in left if why.startswith("unsafe"))
    console.print(
        f"\n{len(changed)} files {'changed' if write else 'would change'}, {applied} findings {verb}, "
        f"{len(left)} left for a person" + (f" ({unsafe_left} have unsafe fixes: --unsafe-fixes)" if unsafe_left
                                             and not unsafe else "") + "."
    )
    if changed and not write:
        console.print("[dim]Nothing was written: rerun with --write to apply, or --patch FILE for git apply.[/]")
    return len(left)


def register(app: typer.Typer) -> None:
    app.command("fix")(fix_command)
