"""Render a FleetResult: JSON (the full matrix), Markdown, and one self-contained, autoescaped HTML page.

Data first, rendering second: `fleet.matrix` computes everything; the templates
(`reports/templates/fleet.{md,html}.j2`, package data) only format.
"""

from __future__ import annotations

import jinja2

from neuron_migrate.fleet.matrix import VERDICT_LABELS, VERDICTS, FleetResult
from neuron_migrate.model import to_json

VERDICT_COLORS = {"native": "#2f855a", "fallbacks": "#d97706", "fails_on_neuron": "#c53030",
                  "fails_to_build": "#8a94a6"}
STATUS_COLORS = {"native": "#c6f6d5", "cpu_fallback": "#fbd38d", "unsupported": "#feb2b2", "unknown": "#e2e8f0"}
STATUS_SHORT = {"native": "N", "cpu_fallback": "F", "unsupported": "U", "unknown": "?"}
FORMATS = ("text", "json", "md", "html")


def _environment(html: bool) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("neuron_migrate.reports", "templates"),
                             autoescape=html, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["pct"] = lambda value: f"{value:.1%}"
    env.filters["md"] = lambda text: str(text).replace("|", "\\|").replace("\n", " ")
    return env


def matrix_ops(result: FleetResult, limit: int) -> list[str]:
    """The matrix columns shown in a page: the top `limit` ranked (non-native somewhere) ops."""
    return [rank.op for rank in result.ranking[:limit]]


def _bar(result: FleetResult, width: int = 600) -> list[dict]:
    """Segments of the stacked verdict bar (x, width, colour, label) for the inline SVG."""
    total = result.summary.total or 1
    x, segments = 0.0, []
    for verdict in VERDICTS:
        count = result.summary.counts[verdict]
        w = width * count / total
        if count:
            segments.append({"x": round(x, 2), "w": round(w, 2), "color": VERDICT_COLORS[verdict],
                             "label": f"{VERDICT_LABELS[verdict]}: {count}"})
        x += w
    return segments


def _context(result: FleetResult, columns: int) -> dict:
    return {"r": result, "s": result.summary, "verdicts": VERDICTS, "labels": VERDICT_LABELS,
            "vcolors": VERDICT_COLORS, "scolors": STATUS_COLORS, "short": STATUS_SHORT,
            "columns": matrix_ops(result, columns), "bar": _bar(result)}


def render_json(result: FleetResult) -> str:
    """The whole result: summary, ranking, and per architecture its verdict and matrix row."""
    return to_json(result)


def render_markdown(result: FleetResult, columns: int = 12) -> str:
    """A Markdown page: shares and definition, verdict counts, the op ranking, architectures, a matrix excerpt."""
    return _environment(False).get_template("fleet.md.j2").render(**_context(result, columns))


def render_html(result: FleetResult, columns: int = 40) -> str:
    """One self-contained HTML page (inline CSS and SVG, no script, nothing fetched), autoescaped."""
    return _environment(True).get_template("fleet.html.j2").render(**_context(result, columns))


def render(result: FleetResult, fmt: str) -> str:
    """Dispatch on `fmt` (json, md, html)."""
    return {"json": render_json, "md": render_markdown, "html": render_html}[fmt](result)
