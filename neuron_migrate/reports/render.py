"""`report`: build one Report record from a scan and traces, then render it as HTML, Markdown, JSON or SARIF.

Data first, rendering second (as coverage.py does it): `build_report` does every computation, the renderers
only format. The HTML and Markdown templates are jinja2 package data under `reports/templates/`; HTML is one
self-contained file (inline CSS and SVG, no script, nothing fetched) and autoescaped.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timezone
from pathlib import Path

import jinja2
import markupsafe

from neuron_migrate import __version__
from neuron_migrate.model import (
    Coverage,
    EffortItem,
    OpSource,
    Report,
    ScanResult,
    TraceResult,
    to_json,
)
from neuron_migrate.reports.effort import EffortSettings, build_effort, merge_ops
from neuron_migrate.reports.sarif import DEFAULT_DOCS_URL, sarif_log

STATUS_LABEL = {
    "native": "native",
    "cpu_fallback": "CPU fallback",
    "unsupported": "unsupported",
    "unknown": "unknown",
}
STATUS_COLOR = {
    "native": "#2f855a",
    "cpu_fallback": "#d97706",
    "unsupported": "#c53030",
    "unknown": "#8a94a6",
}
_OP_LEVEL = {"cpu_fallback": "warning", "unsupported": "error", "unknown": "note"}


# --- building ---------------------------------------------------------------------------------------------


def op_docs_url(docs_url: str = DEFAULT_DOCS_URL) -> str:
    """Where op statuses are explained (docs/report.md next to docs/rules.md)."""
    return docs_url.rsplit("/", 1)[0] + "/report.md#op-statuses"


class _Snippets:
    """Source lines of call sites, read once per file from the scanned root (missing files give '')."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: dict[str, list[str]] = {}

    def __call__(self, path: str, line: int) -> str:
        if path not in self.files:
            try:
                self.files[path] = (
                    (self.root / path).read_text(encoding="utf-8", errors="replace").splitlines()
                )
            except OSError:
                self.files[path] = []
        lines = self.files[path]
        return lines[line - 1].strip() if 0 < line <= len(lines) else ""


def build_report(
    scan: ScanResult | None,
    traces: list[TraceResult],
    settings: EffortSettings | None = None,
    source_root: Path | None = None,
    docs_url: str = DEFAULT_DOCS_URL,
    generated: str | None = None,
) -> Report:
    """Merge the scan and the traces, estimate the effort, write the verdict: all that a renderer needs."""
    settings = settings or EffortSettings()
    findings = scan.findings if scan else ()
    ops = merge_ops(traces)
    root = Path(source_root or (scan.root if scan else ".")).absolute()
    effort = build_effort(
        findings, ops, settings, help_uri=lambda code: f"{docs_url}#{code.lower()}", snippet=_Snippets(root)
    )
    coverage = Coverage.of(ops) if traces else None
    verdict, summary = _verdict(
        effort.likely, effort.low, effort.high, settings.hours_per_day, findings, coverage, bool(traces)
    )
    sources = tuple(
        OpSource(
            target=t.target,
            device=t.device,
            opdb_version=t.opdb_version,
            opdb_pre_release=t.opdb_pre_release,
            ops=len({u.op for u in t.ops}),
            calls=sum(u.count for u in t.ops),
            error=t.error,
            notes=t.notes,
            error_kind=t.error_kind,
        )
        for t in traces
    )
    return Report(
        root=str(root),
        verdict=verdict,
        summary=summary,
        files_scanned=scan.files_scanned if scan else 0,
        findings=tuple(findings),
        ops=ops,
        coverage=coverage,
        op_sources=sources,
        opdb_pre_release=any(t.opdb_pre_release for t in traces),
        effort=effort,
        generated=generated or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        tool_version=__version__,
    )


def _verdict(
    likely: float, low: float, high: float, per_day: float, findings, coverage: Coverage | None, traced: bool
) -> tuple[str, str]:
    """A one-line headline (size of the job and its range) and a one-line summary of what drives it."""
    if not findings and not (coverage and coverage.ops.get("native", 0) < sum(coverage.ops.values())):
        ops = "; every traced op runs natively" if coverage else ""
        return "Ready for Trainium: nothing to migrate", f"No CUDA-specific code found{ops}."
    # sizes in working days of one engineer: up to a day, a week, a month, more
    size = next(
        word
        for limit, word in (
            (per_day, "Small"),
            (5 * per_day, "Moderate"),
            (20 * per_day, "Large"),
            (float("inf"), "Very large"),
        )
        if likely <= limit
    )
    unit, scale = next(
        (u, s)
        for limit, u, s in (
            (per_day, "engineer-days", per_day),
            (1.0, "engineer-hours", 1.0),
            (0.0, "engineer-minutes", 1 / 60),
        )
        if likely >= limit
    )
    verdict = (
        f"{size} migration: about {_num(likely / scale)} {unit} "
        f"(range {_num(low / scale)} to {_num(high / scale)})"
    )
    return verdict, _summary(findings, coverage, traced)


def _summary(findings, coverage: Coverage | None, traced: bool) -> str:
    files = len({f.path for f in findings})
    safe = sum(f.fix_safety == "safe" for f in findings)
    parts = [
        (
            f"{len(findings)} CUDA-specific finding{'s' * (len(findings) != 1)} in {files} file"
            f"{'s' * (files != 1)}, {safe} fixed safely by `neuron-migrate fix`"
        )
    ]
    if coverage:
        others = ", ".join(
            f"{coverage.ops[s]} {STATUS_LABEL[s]}"
            for s in ("cpu_fallback", "unsupported", "unknown")
            if coverage.ops.get(s)
        )
        parts.append(
            f"{coverage.ops.get('native', 0)} of {sum(coverage.ops.values())} traced ops run natively"
            + (f"; {others}" if others else "")
        )
        blocked = coverage.ops.get("unsupported", 0)
        if blocked:
            parts.append(
                f"{blocked} unsupported op{'s' * (blocked != 1)} block{'s' * (blocked == 1)} "
                "the model on Trainium"
            )
    elif not traced:
        parts.append("no trace given, so op coverage is not included")
    return "; ".join(parts) + "."


def _num(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".") if value < 10 else f"{value:.0f}"


def hours(value: float, per_day: float = 8.0) -> str:
    """Engineer-hours for people: `6 min`, `2.5 h`, `3.4 d` (days of `per_day` hours)."""
    if value < 1:
        return f"{max(round(value * 60), 1) if value else 0} min"
    if value < per_day:
        return f"{value:.1f}".rstrip("0").rstrip(".") + " h"
    return f"{value / per_day:.1f}".rstrip("0").rstrip(".") + " d"


# --- rendering --------------------------------------------------------------------------------------------


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("neuron_migrate.reports", "templates"),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",), default_for_string=False),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["ticks"] = _html_ticks
    env.filters["md"] = _md_text
    env.filters["mdcode"] = _md_code
    return env


def _html_ticks(text: object) -> markupsafe.Markup:
    """Escape `text`, then show its `code spans` as <code> (safe: the markup is added after escaping)."""
    escaped = str(markupsafe.escape(str(text)))
    return markupsafe.Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped))


def _md_text(text: object) -> str:
    """Text that cannot break a Markdown table or smuggle HTML into a PR comment."""
    return (
        str(text)
        .replace("\\", "\\\\")
        .replace("|", "\\|")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("\n", " ")
    )


def _md_code(text: object) -> str:
    """A Markdown code span holding `text` verbatim, usable inside a table cell."""
    text = str(text).replace("\n", " ").replace("|", "\\|")
    fence = "`"
    while fence in text:
        fence += "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}" if text else ""


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
    return _environment().get_template("report.html.j2").render(**_view(report))


def render_markdown(report: Report, top: int = 5, max_items: int = 200) -> str:
    """A short Markdown summary for a PR comment or `$GITHUB_STEP_SUMMARY`, details folded away."""
    return _environment().get_template("report.md.j2").render(top=top, max_items=max_items, **_view(report))


def render_json(report: Report) -> str:
    """The full Report record, schema tag first, fields in declaration order."""
    return to_json(report)


def render_report_sarif(report: Report, docs_url: str = DEFAULT_DOCS_URL) -> str:
    """SARIF 2.1.0: the scan's findings (with safe fixes) plus one result per non-native op call site."""
    statuses = sorted({i.category for i in report.effort.items if i.subject == "op"})
    rules = [_op_rule(status, docs_url) for status in statuses]
    results = [
        _op_result(item, site, report.effort.hours_per_day)
        for item in report.effort.items
        if item.subject == "op"
        for site in item.call_sites
    ]
    log = sarif_log(report.findings, extra_results=results, extra_rules=rules, docs_url=docs_url)
    index = {rule["id"]: i for i, rule in enumerate(log["runs"][0]["tool"]["driver"]["rules"])}
    for result in log["runs"][0]["results"]:
        result.setdefault("ruleIndex", index[result["ruleId"]])
    return json.dumps(log, indent=2, ensure_ascii=False) + "\n"


def _op_rule_id(status: str) -> str:
    return "NM-OP-" + status.upper().replace("_", "-")


def _op_rule(status: str, docs_url: str) -> dict:
    text = {
        "cpu_fallback": "ATen op falls back to CPU on Neuron",
        "unsupported": "ATen op is not supported on Neuron",
        "unknown": "ATen op has no known Neuron status",
    }[status]
    return {
        "id": _op_rule_id(status),
        "name": f"op-{status.replace('_', '-')}",
        "shortDescription": {"text": text},
        "fullDescription": {"text": text + " (from `neuron-migrate trace`)."},
        "helpUri": op_docs_url(docs_url),
        "defaultConfiguration": {"level": _OP_LEVEL[status]},
        "properties": {"category": "op", "tags": ["neuron-migrate", "op"]},
    }


def _op_result(item: EffortItem, site, per_day: float) -> dict:
    """One result per call site of a non-native op, located at the user's line."""
    digest = hashlib.sha256(f"{item.code}\0{site.path}\0{site.function}".encode()).hexdigest()[:16]
    dtypes = ", ".join(item.dtypes)
    verb = {
        "cpu_fallback": "falls back to CPU",
        "unsupported": "is not supported",
        "unknown": "has no known status",
    }
    action = "" if item.category == "cpu_fallback" else f"; {item.reason.split(': ', 1)[-1]}"
    message = (
        f"`{item.code}`{f' ({dtypes})' if dtypes else ''} {verb[item.category]} on Neuron: "
        f"{site.count} of its {item.calls} calls come from here; estimate {hours(item.likely, per_day)} "
        f"({hours(item.low, per_day)} to {hours(item.high, per_day)}){action}"
    )
    return {
        "ruleId": _op_rule_id(item.category),
        "level": _OP_LEVEL[item.category],
        "message": {"text": message},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": {"uri": site.path, "uriBaseId": "%SRCROOT%"},
                    "region": {"startLine": max(site.line, 1)},
                }
            }
        ],
        "partialFingerprints": {"neuronMigrateOp/v1": digest},
        "properties": {
            "op": item.code,
            "calls": site.count,
            "effort_hours": [item.low, item.likely, item.high],
        },
    }


RENDERERS = {"html": render_html, "md": render_markdown, "json": render_json, "sarif": render_report_sarif}
