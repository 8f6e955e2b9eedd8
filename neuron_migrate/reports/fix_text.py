"""What `fix` prints on stderr: files it could not fix, what is left for a person, and the totals."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from neuron_migrate.migrate.api_versions import newest_in
from neuron_migrate.migrate.fix_files import FileFix
from neuron_migrate.migrate.torch_floor import (
    DEFAULT_TARGET_TORCH,
    HELD_BACK,
    TORCHNEURON_TORCH,
    cap_note,
    dotted_release,
)
from neuron_migrate.reports.words import plural


def render_fix_summary(
    fixes: list[FileFix], write: bool, unsafe: bool, console: Console, patch: str | None = None
) -> int:
    """Print what was fixed, what is left for a person, and the notes that need no change; returns how many
    findings are left to do (notes excluded). `patch`: where the patch went (`--patch FILE`), if anywhere."""
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
        where = "" if write or not changed else " (lines of the fixed files)"
        console.print(f"[bold]Left for a person{where}:[/]")
        for rel, finding, why in todo:
            where = f"{rel}[cell {finding.cell}]" if finding.cell else rel
            console.print(
                f"  {escape(where)}:{finding.line}:{finding.col + 1} {finding.code} "
                f"{escape(finding.message)} [dim]({escape(why)})[/]"
            )
    verb = "fixed" if write else "would fix"
    unsafe_left = sum(1 for _, _, why in todo if why.startswith("unsafe"))
    console.print(
        f"\n{plural(len(changed), 'file')} {'changed' if write else 'would change'}, "
        f"{plural(applied, 'finding')} {verb}, "
        f"{len(todo)} left for a person"
        + (f" ({unsafe_left} with an unsafe fix: --unsafe-fixes)" if unsafe_left and not unsafe else "")
        + (f", {_notes(notes)} (`neuron-migrate scan` lists them)" if notes else "")
        + "."
    )
    neuron = dotted_release(TORCHNEURON_TORCH)
    if held_back := sum(1 for _, finding, _ in todo if HELD_BACK in finding.message):
        console.print(
            f"{held_back} {'fix' if held_back == 1 else 'fixes'} held back: the project supports an older "
            "torch than they need, by its metadata or its code's version tests (each finding says where; "
            f"TorchNeuron itself needs torch {neuron} or newer). Raise that minimum, or set "
            + escape(f'`[tool.neuron-migrate] target-torch = "{neuron}"`, to write them.')
        )
    if defaulted := [f for f in changed if f.default_torch and f.applied]:
        texts = (
            edit.text for f in defaulted for finding in f.applied if finding.fix for edit in finding.fix.edits
        )
        needed, api = newest_in(texts)
        needs = f", and they need torch >= {dotted_release(needed)} (`{api}`)" if api else ""
        default = dotted_release(DEFAULT_TARGET_TORCH)
        console.print(
            "The project declares no torch minimum, its Python requirement (if any) allows any torch, and "
            f"its code tests no torch version: the fixes are written for torch {default}, the default"
            f"{escape(needs)} (TorchNeuron itself needs {neuron}). If it also supports an older torch, "
            "declare that minimum in its metadata or set "
            + escape("`[tool.neuron-migrate] target-torch`, and rerun: what that torch lacks is held back.")
        )
    if (capped := cap_note(f.torch_cap for f in fixes if f.torch_cap)) is not None:
        console.print(f"[yellow]{escape(capped)}[/]")
    if changed and not write and patch is not None:
        where = "on stdout" if patch == "-" else f"in {escape(patch)}"
        console.print(f"[dim]The sources are unchanged; the patch is {where} (`git apply` it).[/]")
    elif changed and not write:
        console.print(
            "[dim]Nothing was written: rerun with --write to apply, or --patch FILE for git apply.[/]"
        )
    return len(todo)


def _notes(count: int) -> str:
    return "1 note that needs no change" if count == 1 else f"{count} notes that need no change"
