"""`report`'s data: one Report record built from a scan and traces, before any rendering.

Data first, rendering second (as coverage.py does it): `build_report` does every computation (the effort,
the coverage, the verdict line), the renderers in `reports.render` and `reports.sarif` only format.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from neuron_migrate import __version__
from neuron_migrate.model import Coverage, OpSource, Report, ScanResult, TraceResult
from neuron_migrate.reports.effort import EffortSettings, build_effort, merge_ops

DEFAULT_DOCS_URL = "https://github.com/neuron-migrate/neuron-migrate/blob/main/docs/rules.md"
STATUS_LABEL = {
    "native": "native",
    "cpu_fallback": "CPU fallback",
    "unsupported": "unsupported",
    "unknown": "unknown",
}


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
