"""SARIF 2.1.0, for `scan` (findings: rule metadata with help, locations, stable fingerprints, safe fixes) and
for `report` (the same, plus one result per call site of a non-native op)."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

from neuron_migrate import __version__
from neuron_migrate.model import Edit, EffortItem, Finding, Report
from neuron_migrate.reports.build import DEFAULT_DOCS_URL, hours, op_docs_url

if TYPE_CHECKING:
    from neuron_migrate.migrate.rule import Rule

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
LEVEL = {"error": "error", "warning": "warning", "info": "note"}
_OP_LEVEL = {"cpu_fallback": "warning", "unsupported": "error", "unknown": "note"}


def rule_descriptor(rule: type[Rule], docs_url: str) -> dict:
    """The `reportingDescriptor` of one rule, with its full documentation as help."""
    sections = rule.doc_sections()
    markdown = "\n\n".join(f"**{head}**\n\n{body}" for head, body in sections.items())
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.message.replace("{name}", "…").replace("{short}", "…")},
        "fullDescription": {"text": sections.get("What it does", rule.message)},
        "help": {"text": markdown, "markdown": markdown},
        "helpUri": f"{docs_url}#{rule.code.lower()}",
        "defaultConfiguration": {"level": LEVEL[rule.severity]},
        "properties": {
            "category": rule.category(),
            "fix": rule.fix_safety,
            "tags": ["neuron-migrate", rule.category()],
        },
    }


def _region(line: int, col: int, end_line: int, end_col: int) -> dict:
    return {"startLine": line, "startColumn": col + 1, "endLine": end_line, "endColumn": end_col + 1}


def _fix(finding: Finding) -> list[dict]:
    fix = finding.fix
    if fix is None or fix.safety != "safe" or finding.cell is not None:
        return []
    edits: list[Edit] = list(fix.edits)
    return [
        {
            "description": {"text": fix.title},
            "artifactChanges": [
                {
                    "artifactLocation": {"uri": finding.path, "uriBaseId": "%SRCROOT%"},
                    "replacements": [
                        {
                            "deletedRegion": _region(e.line, e.col, e.end_line, e.end_col),
                            "insertedContent": {"text": e.text},
                        }
                        for e in edits
                    ],
                }
            ],
        }
    ]


def finding_result(finding: Finding, rule_index: dict[str, int]) -> dict:
    """One SARIF `result` for a finding."""
    region = _region(finding.line, finding.col, finding.end_line, finding.end_col)
    if finding.source:
        region["snippet"] = {"text": finding.source}
    result = {
        "ruleId": finding.code,
        "ruleIndex": rule_index[finding.code],
        "level": LEVEL[finding.severity],
        "message": {"text": finding.message},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": {"uri": finding.path, "uriBaseId": "%SRCROOT%"},
                    "region": region,
                }
            }
        ],
        "partialFingerprints": {"neuronMigrateFinding/v1": finding.fingerprint},
    }
    properties = {k: v for k, v in (("cell", finding.cell), ("guard", finding.guard)) if v is not None}
    if properties:
        result["properties"] = properties
    if fixes := _fix(finding):
        result["fixes"] = fixes
    return result


def sarif_log(
    findings: list[Finding] | tuple[Finding, ...],
    extra_results: list[dict] | None = None,
    extra_rules: list[dict] | None = None,
    docs_url: str = DEFAULT_DOCS_URL,
) -> dict:
    """A SARIF 2.1.0 log with one run; `extra_*` let other producers (trace ops) add their own
    rules/results."""
    from neuron_migrate.migrate.rule import load_rules

    rules = load_rules()
    descriptors = [rule_descriptor(rule, docs_url) for rule in rules.values()] + list(extra_rules or [])
    index = {d["id"]: i for i, d in enumerate(descriptors)}
    results = [finding_result(f, index) for f in findings] + list(extra_results or [])
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "neuron-migrate",
                        "version": __version__,
                        "informationUri": docs_url.rsplit("/docs/", 1)[0],
                        "rules": descriptors,
                    }
                },
                "columnKind": "unicodeCodePoints",
                "results": results,
            }
        ],
    }


def render_sarif(findings, **kwargs) -> str:
    """The scan's findings as a SARIF log (JSON text)."""
    return json.dumps(sarif_log(findings, **kwargs), indent=2, ensure_ascii=False) + "\n"


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
