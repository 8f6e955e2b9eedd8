"""`fleet`'s pages: a FleetResult as JSON (the full matrix), Markdown, and one self-contained, autoescaped
HTML page.

Data first, rendering second: `fleet.matrix` computes everything; the templates
(`reports/templates/fleet.{md,html}.j2`, package data) only format, through the one environment of
`reports.templating`. Every text that comes from a model or an op goes through its escaping filters (`md`:
pipes, backslashes, `<` and `>`; `mdcode`: a code span), so no name can break a table or smuggle HTML into a
PR comment.
"""

from __future__ import annotations

from neuron_migrate.fleet.matrix import VERDICT_LABELS, VERDICTS, ArchResult, FleetResult
from neuron_migrate.model import to_json
from neuron_migrate.reports.templating import render_template

VERDICT_COLORS = {
    "native": "#2f855a",
    "fallbacks": "#d97706",
    "fails_on_neuron": "#c53030",
    "stand_in_limitation": "#6b46c1",
    "does_not_build": "#8a94a6",
}
STATUS_COLORS = {
    "native": "#c6f6d5",
    "cpu_fallback": "#fbd38d",
    "unsupported": "#feb2b2",
    "unknown": "#e2e8f0",
}
STATUS_SHORT = {"native": "N", "cpu_fallback": "F", "unsupported": "U", "unknown": "?"}
FORMATS = ("text", "json", "md", "html")


def matrix_ops(result: FleetResult, limit: int) -> list[str]:
    """The matrix columns shown in a page: the top `limit` ranked (non-native somewhere) ops of the first
    mode."""
    return [rank.op for rank in result.ranking[:limit]]


def _bar(result: FleetResult, mode: str, width: int = 600) -> list[dict]:
    """Segments of the stacked verdict bar (x, width, colour, label) for the inline SVG."""
    summary = result.summaries[mode]
    total = summary.total or 1
    x, segments = 0.0, []
    for verdict in VERDICTS:
        count = summary.counts[verdict]
        w = width * count / total
        if count:
            segments.append(
                {
                    "x": round(x, 2),
                    "w": round(w, 2),
                    "color": VERDICT_COLORS[verdict],
                    "label": f"{VERDICT_LABELS[verdict]}: {count}",
                }
            )
        x += w
    return segments


def rows(result: FleetResult) -> list[dict]:
    """One row per model type: its class and, per mode, its ArchResult (side by side)."""
    table: dict[str, dict] = {}
    for arch in result.architectures:
        row = table.setdefault(
            arch.model_type, {"model_type": arch.model_type, "architecture": arch.architecture, "modes": {}}
        )
        row["modes"][arch.mode] = arch
    return list(table.values())


def _first(result: FleetResult) -> list[ArchResult]:
    return result.of_mode(result.modes[0])


def _context(result: FleetResult, columns: int) -> dict:
    return {
        "r": result,
        "modes": result.modes,
        "S": result.summaries,
        "verdicts": VERDICTS,
        "labels": VERDICT_LABELS,
        "vcolors": VERDICT_COLORS,
        "scolors": STATUS_COLORS,
        "short": STATUS_SHORT,
        "columns": matrix_ops(result, columns),
        "bars": {m: _bar(result, m) for m in result.modes},
        "rows": rows(result),
        "first": _first(result),
    }


def render_json(result: FleetResult) -> str:
    """The whole result: summaries, rankings, and per architecture and mode its verdict and matrix row."""
    return to_json(result)


def render_markdown(result: FleetResult, columns: int = 12) -> str:
    """A Markdown page: shares and definition, verdict counts, the op ranking, architectures, a matrix
    excerpt."""
    return render_template("fleet.md.j2", **_context(result, columns))


def render_html(result: FleetResult, columns: int = 40) -> str:
    """One self-contained HTML page (inline CSS and SVG, no script, nothing fetched), autoescaped."""
    return render_template("fleet.html.j2", **_context(result, columns))


def render(result: FleetResult, fmt: str) -> str:
    """Dispatch on `fmt` (json, md, html)."""
    return {"json": render_json, "md": render_markdown, "html": render_html}[fmt](result)
