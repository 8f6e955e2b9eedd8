"""What `check` prints: the verdict as text lines, JUnit XML and a Markdown summary for CI."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from neuron_migrate.checks.gate import Verdict


def verdict_line(verdict: Verdict) -> str:
    state = "PASSED" if verdict.passed else f"FAILED ({len(verdict.problems)} problems)"
    native = verdict.coverage.share("native", "calls") if sum(verdict.coverage.calls.values()) else None
    ops = f", native op calls {native:.1%}" if native is not None else ""
    return f"neuron-migrate check {state}: {verdict.findings_checked} findings, {verdict.ops_checked} op uses{ops}"


def render_junit(verdict: Verdict) -> str:
    """One test case per problem (failed), or one passing `gate` case; CI systems show them as test results."""
    suite = ET.Element("testsuite", name="neuron-migrate check", tests=str(max(1, len(verdict.problems))),
                       failures=str(len(verdict.problems)), errors="0", skipped="0")
    if verdict.passed:
        ET.SubElement(suite, "testcase", classname="neuron-migrate", name="gate")
    for problem in verdict.problems:
        case = ET.SubElement(suite, "testcase", classname=f"neuron-migrate.{problem.kind}",
                             name=f"{problem.name} at {problem.location}")
        failure = ET.SubElement(case, "failure", message=problem.message, type=problem.kind)
        failure.text = f"{problem.location}: {problem.name}: {problem.message}"
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(verdict: Verdict) -> str:
    """A short summary for `$GITHUB_STEP_SUMMARY` or a pull-request comment."""
    icon = "✅" if verdict.passed else "❌"
    lines = [f"### {icon} {verdict_line(verdict)}", ""]
    if verdict.problems:
        lines += ["| what | where | why |", "|---|---|---|"]
        lines += [f"| `{_cell(p.name)}` | `{_cell(p.location)}` | {_cell(p.message)} |" for p in verdict.problems]
        lines.append("")
    if verdict.removable:
        lines += ["<details><summary>Fixed since the baseline (drop these entries)</summary>", ""]
        lines += [f"- {_cell(entry)}" for entry in verdict.removable] + ["", "</details>", ""]
    if verdict.allowed:
        lines += ["<details><summary>Allowed by policy</summary>", ""]
        lines += [f"- {_cell(entry)}" for entry in verdict.allowed] + ["", "</details>", ""]
    return "\n".join(lines)
