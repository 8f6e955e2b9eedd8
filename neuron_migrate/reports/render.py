"""`report`'s pages: the Report record as HTML, Markdown or JSON (SARIF is in `reports.sarif`).

The HTML and Markdown templates are package data under `reports/templates/`, rendered through the one
environment of `reports.templating`; HTML is one self-contained file (inline CSS and SVG, no script, nothing
fetched) and autoescaped. `build_report` and `hours` are re-exported for callers of the old module.
"""

from __future__ import annotations

from neuron_migrate.model import Coverage, EffortItem, Report, to_json
from neuron_migrate.reports.build import STATUS_LABEL, build_report, hours, op_docs_url
from neuron_migrate.reports.sarif import render_report_sarif
from neuron_migrate.reports.templating import render_template
from neuron_migrate.reports.words import plural

__all__ = [
    "RENDERERS",
    "build_report",
    "hours",
    "render_html",
    "render_json",
    "render_markdown",
    "render_report_sarif",
    "report_summary",
]

STATUS_COLOR = {
    "native": "#2f855a",
    "cpu_fallback": "#d97706",
    "unsupported": "#c53030",
    "unknown": "#8a94a6",
}


def _view(report: Report) -> dict:
    """What both templates share: the report, helpers, and derived numbers for the charts and tables."""
    effort = report.effort
    per_day = effort.hours_per_day
    findings_by_file: dict[str, list[EffortItem]] = {}
    for item in effort.items:
        if item.subject == "finding":
            findings_by_file.setdefault(item.path, []).append(item)
    op_items = sorted((i for i in effort.items if i.subject == "op"), key=lambda i: (-i.likely, i.code))
    return {
        "r": report,
        "e": effort,
        "per_day": per_day,
        "h": lambda v: hours(v, per_day),
        "span": lambda t: f"{hours(t.low, per_day)} – {hours(t.high, per_day)}",
        "category_label": _category_label,
        "status_label": STATUS_LABEL,
        "status_color": STATUS_COLOR,
        "op_items": op_items,
        "findings_by_file": findings_by_file,
        "file_order": [t.key for t in effort.by_file if t.key in findings_by_file],
        "safe": sum(f.fix_safety == "safe" for f in report.findings),
        "op_docs": op_docs_url(),
        "pre_release_versions": sorted({s.opdb_version for s in report.op_sources if s.opdb_pre_release}),
        "category_chart": _category_chart(effort.by_category),
        "coverage_bars": _coverage_bars(report.coverage) if report.coverage else [],
        "op_effort": {t.key[4:]: t.likely for t in effort.by_category if t.key.startswith("op: ")},
        "max_file": max((t.high for t in effort.by_file), default=1) or 1,
    }


def _category_chart(totals) -> dict:
    """Bar geometry for the SVG chart of effort by category: likely as a bar, low-high as a whisker."""
    top = max((t.high for t in totals), default=1) or 1
    width, label_w, row = 560, 150, 30
    scale = (width - label_w - 80) / top
    bars = [
        {
            "label": _category_label(t.key),
            "status": t.key[4:] if t.key.startswith("op: ") else "",
            "y": 10 + i * row,
            "likely": t.likely * scale,
            "low": t.low * scale,
            "high": t.high * scale,
            "total": t,
        }
        for i, t in enumerate(totals)
    ]
    return {"bars": bars, "width": width, "label_w": label_w, "height": 20 + row * len(bars)}


def _category_label(key: str) -> str:
    return f"ops: {STATUS_LABEL[key[4:]]}" if key.startswith("op: ") and key[4:] in STATUS_LABEL else key


def _coverage_bars(coverage: Coverage) -> list[dict]:
    """Two stacked bars (distinct ops, op calls) split by status, widths in percent."""
    bars = []
    for by, counts in (("ops", coverage.ops), ("calls", coverage.calls)):
        total = sum(counts.values()) or 1
        x, parts = 0.0, []
        for status in ("native", "cpu_fallback", "unsupported", "unknown"):
            share = 100 * counts.get(status, 0) / total
            parts.append({"status": status, "x": x, "w": share, "n": counts.get(status, 0)})
            x += share
        bars.append({"by": by, "total": sum(counts.values()), "parts": parts})
    return bars


def render_html(report: Report) -> str:
    """One self-contained HTML page (autoescaped)."""
    return render_template("report.html.j2", **_view(report))


def render_markdown(report: Report, top: int = 5, max_items: int = 200) -> str:
    """A short Markdown summary for a PR comment or `$GITHUB_STEP_SUMMARY`, details folded away."""
    return render_template("report.md.j2", top=top, max_items=max_items, **_view(report))


def render_json(report: Report) -> str:
    """The full Report record, schema tag first, fields in declaration order."""
    return to_json(report)


RENDERERS = {"html": render_html, "md": render_markdown, "json": render_json, "sarif": render_report_sarif}


def report_summary(report: Report, output: object = None) -> list[str]:
    """The lines `report` prints on stderr: the verdict, the effort and its range, a pre-release warning."""
    effort = report.effort
    per_day = effort.hours_per_day
    span = f"{hours(effort.low, per_day)} to {hours(effort.high, per_day)}"
    lines = [
        f"{report.verdict}.",
        f"{plural(len(effort.items), 'item')}, likely {hours(effort.likely, per_day)} ({span})"
        + (f"; report written to {output}" if output else ""),
    ]
    if report.opdb_pre_release:
        lines.append("warning: op data comes from a pre-release opdb snapshot; confirm on a Trainium device")
    return lines
