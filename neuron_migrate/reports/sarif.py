"""SARIF 2.1.0 for findings: rule metadata with help, locations, stable fingerprints, and safe fixes."""

from __future__ import annotations

import json

from neuron_migrate import __version__
from neuron_migrate.migrate.rule import Rule, load_rules
from neuron_migrate.model import Edit, Finding

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
DEFAULT_DOCS_URL = "https://github.com/neuron-migrate/neuron-migrate/blob/main/docs/rules.md"
LEVEL = {"error": "error", "warning": "warning", "info": "note"}


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
        "properties": {"category": rule.category(), "fix": rule.fix_safety, "tags": ["neuron-migrate", rule.category()]},
    }


def _region(line: int, col: int, end_line: int, end_col: int) -> dict:
    return {"startLine": line, "startColumn": col + 1, "endLine": end_line, "endColumn": end_col + 1}


def _fix(finding: Finding) -> list[dict]:
    fix = finding.fix
    if fix is None or fix.safety != "safe" or finding.cell is not None:
        return []
    edits: list[Edit] = list(fix.edits)
    return [{
        "description": {"text": fix.title},
        "artifactChanges": [{
            "artifactLocation": {"uri": finding.path, "uriBaseId": "%SRCROOT%"},
            "replacements": [
                {"deletedRegion": _region(e.line, e.col, e.end_line, e.end_col), "insertedContent": {"text": e.text}}
                for e in edits
            ],
        }],
    }]


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
        "locations": [{"physicalLocation": {
            "artifactLocation": {"uri": finding.path, "uriBaseId": "%SRCROOT%"}, "region": region}}],
        "partialFingerprints": {"neuronMigrateFinding/v1": finding.fingerprint},
    }
    properties = {k: v for k, v in (("cell", finding.cell), ("guard", finding.guard)) if v is not None}
    if properties:
        result["properties"] = properties
    if fixes := _fix(finding):
        result["fixes"] = fixes
    return result


def sarif_log(findings: list[Finding] | tuple[Finding, ...], extra_results: list[dict] | None = None,
              extra_rules: list[dict] | None = None, docs_url: str = DEFAULT_DOCS_URL) -> dict:
    """A SARIF 2.1.0 log with one run; `extra_*` let other producers (trace ops) add their own rules/results."""
    rules = load_rules()
    descriptors = [rule_descriptor(rule, docs_url) for rule in rules.values()] + list(extra_rules or [])
    index = {d["id"]: i for i, d in enumerate(descriptors)}
    results = [finding_result(f, index) for f in findings] + list(extra_results or [])
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "neuron-migrate",
                "version": __version__,
                "informationUri": docs_url.rsplit("/docs/", 1)[0],
                "rules": descriptors,
            }},
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    }


def render_sarif(findings, **kwargs) -> str:
    return json.dumps(sarif_log(findings, **kwargs), indent=2, ensure_ascii=False) + "\n"
