"""GitHub Actions workflow-command annotations (`::error file=…,line=…::message`)."""

from __future__ import annotations

from neuron_migrate.model import Finding

_COMMAND = {"error": "error", "warning": "warning", "info": "notice"}


def _escape(value: str, prop: bool = False) -> str:
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return value.replace(":", "%3A").replace(",", "%2C") if prop else value


def render_github(findings: list[Finding] | tuple[Finding, ...]) -> str:
    """One annotation line per finding (notebook cells are named in the title)."""
    lines = []
    for f in findings:
        title = f"{f.code}" + (f" (cell {f.cell})" if f.cell is not None else "")
        props = (
            f"file={_escape(f.path, True)},line={f.line},col={f.col + 1},endLine={f.end_line},"
            f"endColumn={f.end_col + 1},title={_escape(title, True)}"
        )
        lines.append(f"::{_COMMAND[f.severity]} {props}::{_escape(f.message)}")
    return "\n".join(lines) + ("\n" if lines else "")
