"""Renderers: golden Markdown and JSON, structurally valid SARIF, autoescaped HTML, the pre-release warning.

Regenerate the golden files after an intended change with `UPDATE_GOLDEN=1 pytest tests/reports`, and read
the diff before committing it.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from neuron_migrate.model import REPORT_SCHEMA, ScanResult
from neuron_migrate.reports.render import (
    build_report,
    hours,
    render_html,
    render_json,
    render_markdown,
    render_report_sarif,
)
from tests.support.records import MODEL, example_trace, finding, line_of
from tests.support.sarif import sarif_problems

GOLDEN = Path(__file__).parent / "golden"


def check_golden(name: str, text: str) -> None:
    """Compare with golden/<name>; UPDATE_GOLDEN=1 rewrites it instead."""
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} is missing: run UPDATE_GOLDEN=1 pytest tests/reports"
    expected = path.read_text(encoding="utf-8")
    assert text == expected, (
        f"{name} differs from its golden file; if intended: UPDATE_GOLDEN=1 pytest tests/reports"
    )


def test_markdown_golden(example_report):
    check_golden("example.md", render_markdown(example_report))


def test_json_golden(example_report):
    text = render_json(example_report)
    check_golden("example.json", text)
    data = json.loads(text)
    assert list(data)[:3] == ["schema", "root", "verdict"] and data["schema"] == REPORT_SCHEMA


def test_markdown_is_short_with_details_folded(example_report):
    text = render_markdown(example_report)
    head, _, details = text.partition("<details>")
    assert example_report.verdict in head and "Pre-release op data" in head
    assert len(head.splitlines()) < 60 and "</details>" in details
    assert len(text) < 65_000  # GitHub's limit for a PR comment


def test_sarif_is_valid_and_locates_ops_at_call_sites(example_report):
    log = json.loads(render_report_sarif(example_report))
    assert sarif_problems(log) == []
    results = log["runs"][0]["results"]
    ops = [r for r in results if r["ruleId"].startswith("NM-OP-")]
    sites = {
        (r["properties"]["op"], r["locations"][0]["physicalLocation"]["region"]["startLine"]) for r in ops
    }
    split, log_softmax = line_of(".split(C, dim=2)"), line_of("F.log_softmax(logits.double()")
    assert ("aten::split.Tensor", split) in sites and ("aten::_log_softmax", log_softmax) in sites
    assert all(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == MODEL for r in ops)
    assert {r["ruleId"] for r in ops} == {"NM-OP-CPU-FALLBACK", "NM-OP-UNSUPPORTED", "NM-OP-UNKNOWN"}
    findings = [r for r in results if not r["ruleId"].startswith("NM-OP-")]
    assert len(findings) == len(example_report.findings)
    assert any("fixes" in r for r in findings)  # safe rewrites travel with their findings


def test_html_escapes_hostile_names():
    hostile = finding("NM101", path="<script>alert(1)</script>.py", message="use `<img src=x onerror=y>`")
    report = build_report(ScanResult(root=".", findings=(hostile,), files_scanned=1), [])
    html = render_html(report)
    assert "<script" not in html.lower() and "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;.py" in html
    assert "<code>&lt;img src=x onerror=y&gt;</code>" in html  # code spans become <code> only after escaping
    md = render_markdown(report)
    outside_code = re.sub(
        r"(`+).*?\1", "", md
    )  # Markdown shows code spans verbatim: only text outside matters
    assert "<script" not in outside_code and "<img" not in outside_code
    assert "`<script>alert(1)</script>.py`" in md


def test_pre_release_warning_shows_only_for_pre_release_data(example_scan):
    stable = build_report(example_scan, [example_trace(pre_release=False)])
    pre = build_report(example_scan, [example_trace(pre_release=False), example_trace(pre_release=True)])
    assert "Pre-release op data" not in render_html(stable) + render_markdown(stable)
    assert "Pre-release op data" in render_html(pre) and "Pre-release op data" in render_markdown(pre)


def test_report_without_trace_says_so(example_scan):
    report = build_report(example_scan, [])
    assert report.coverage is None and "no trace given" in report.summary
    assert "No trace was given" in render_html(report)


def test_unsupported_ops_are_named_in_the_headline_summary(example_report):
    assert "1 unsupported op blocks the model" in example_report.summary


def test_clean_project_is_ready():
    report = build_report(ScanResult(root=".", findings=(), files_scanned=3), [])
    assert report.verdict.startswith("Ready for Trainium") and report.effort.items == ()
    assert "Ready for Trainium" in render_html(report)


@pytest.mark.parametrize(("value", "text"), [(0.1, "6 min"), (2.5, "2.5 h"), (3.0, "3 h"), (20, "2.5 d")])
def test_hours_are_readable(value, text):
    assert hours(value, 8) == text


def test_html_is_self_contained(example_report):
    html = render_html(example_report)
    assert re.search(r"<script|<link|@import|url\(|\bsrc\s*=", html, re.IGNORECASE) is None
    assert html.count("<svg") >= 3 and "<style>" in html
    hrefs = re.findall(r'href="([^"]*)"', html)
    assert hrefs and all(h.startswith(("https://", "#")) for h in hrefs)  # links to docs only, no resources


def test_scan_text_golden(example_scan):
    """The terminal view of a scan, as plain text (`scan_text`: no colour, 120 columns)."""
    from neuron_migrate.reports.scan_text import scan_text

    check_golden("example_scan.txt", scan_text(example_scan))
