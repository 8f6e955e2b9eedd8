"""The human view of a scan: findings grouped by file with their source line, then a summary by category."""

from __future__ import annotations

from collections import Counter
from itertools import groupby

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from neuron_migrate.migrate.torch_floor import cap_note
from neuron_migrate.model import ScanResult
from neuron_migrate.reports.words import plural

_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
_FIX = {"safe": "[green]fixable[/]", "unsafe": "[yellow]fixable (unsafe)[/]", "none": "[dim]manual[/]"}
#: a finding whose fix waits for the CUDA code it is tied to (`Finding.tied`): fixable once that is changed
_WAITS = "[dim]waits[/]"


def render_scan_text(result: ScanResult, console: Console, show_source: bool = True) -> None:
    """Print findings by file, then totals by category and severity.

    Each file's lines are rendered as `console.print` would render them one by one, and printed at once: a
    print call costs far more than the text it prints (a warm scan of 140 findings spent a third of its time
    here)."""
    for path, group in groupby(result.findings, key=lambda f: f.path):
        lines = [console.render_str(f"[bold]{escape(path)}[/]")]
        for f in group:
            where = f"cell {f.cell}, " if f.cell is not None else ""
            lines.append(
                console.render_str(
                    f"  {where}{f.line}:{f.col + 1}  [{_STYLE[f.severity]}]{f.code}[/] {escape(f.message)}  "
                    f"{_WAITS if f.tied else _FIX[f.fix_safety]}"
                )
            )
            if show_source and f.source:
                lines.append(console.render_str(f"      [dim]{escape(f.source)}[/]", highlight=False))
            if f.guard:
                lines.append(console.render_str(f"      [dim]already guarded by `{escape(f.guard)}`[/]"))
        console.print(Text("\n").join(lines))
    render_scan_summary(result, console)


def scan_text(result: ScanResult) -> str:
    """The same view as plain text for a file: no colour, 120 columns."""
    import io

    buffer = io.StringIO()
    render_scan_text(result, Console(file=buffer, no_color=True, width=120, emoji=False))
    return buffer.getvalue()


def render_scan_summary(result: ScanResult, console: Console) -> None:
    """Totals by category, fixability and severity, and what the run skipped."""
    findings = result.findings
    if findings:
        table = Table(title="Findings by category", show_edge=False, pad_edge=False)
        for column in ("category", "findings", "fixable", "manual", "files"):
            table.add_column(column, justify="right" if column != "category" else "left")
        by_category = Counter(f.category for f in findings)
        for category, count in by_category.most_common():
            items = [f for f in findings if f.category == category]
            fixable = sum(1 for f in items if f.fix_safety != "none")
            table.add_row(
                category, str(count), str(fixable), str(count - fixable), str(len({f.path for f in items}))
            )
        console.print()
        console.print(table)
    severities = Counter(f.severity for f in findings)
    fixable = sum(1 for f in findings if f.fix_safety == "safe")
    console.print(
        f"\n{plural(len(findings), 'finding')} ({plural(severities['error'], 'error')}, "
        f"{plural(severities['warning'], 'warning')}, {severities['info']} info) in "
        f"{len({f.path for f in findings})} of {result.files_scanned} files; "
        f"{fixable} safely fixable with `neuron-migrate fix`."
    )
    if result.errors:
        console.print(
            f"[red]{plural(len(result.errors), 'file')} could not be analysed[/] (NM9xx findings above)."
        )
    if (capped := cap_note(result.torch_caps)) is not None:
        console.print(f"[yellow]{escape(capped)}[/]")
    console.print(
        f"[dim]{plural(result.files_skipped_by_prefilter, 'file')} skipped by the pre-filter, "
        f"{result.files_from_cache} from cache.[/]"
    )
