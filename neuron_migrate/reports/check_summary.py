"""What `check` shows: the verdict as text on stderr (rich), JUnit XML and a Markdown summary for CI."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING

from neuron_migrate.checks.gate import Verdict
from neuron_migrate.model import TraceResult
from neuron_migrate.reports.templating import md_code, md_text

if TYPE_CHECKING:
    from rich.console import Console


def verdict_line(verdict: Verdict) -> str:
    """The one-line outcome: passed or failed, and what was checked."""
    state = "PASSED" if verdict.passed else f"FAILED ({len(verdict.problems)} problems)"
    native = verdict.coverage.share("native", "calls") if sum(verdict.coverage.calls.values()) else None
    ops = f", native op calls {native:.1%}" if native is not None else ""
    return (
        f"neuron-migrate check {state}: {verdict.findings_checked} findings, "
        f"{verdict.ops_checked} op uses{ops}"
    )


def render_junit(verdict: Verdict) -> str:
    """One test case per problem (failed), or one passing `gate` case; CI systems show them as test
    results."""
    suite = ET.Element(
        "testsuite",
        name="neuron-migrate check",
        tests=str(max(1, len(verdict.problems))),
        failures=str(len(verdict.problems)),
        errors="0",
        skipped="0",
    )
    if verdict.passed:
        ET.SubElement(suite, "testcase", classname="neuron-migrate", name="gate")
    for problem in verdict.problems:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"neuron-migrate.{problem.kind}",
            name=f"{problem.name} at {problem.location}",
        )
        failure = ET.SubElement(case, "failure", message=problem.message, type=problem.kind)
        failure.text = f"{problem.location}: {problem.name}: {problem.message}"
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def render_markdown(verdict: Verdict) -> str:
    """A short summary for `$GITHUB_STEP_SUMMARY` or a pull-request comment."""
    icon = "✅" if verdict.passed else "❌"
    lines = [f"### {icon} {verdict_line(verdict)}", ""]
    if verdict.problems:
        lines += ["| what | where | why |", "|---|---|---|"]
        lines += [
            f"| {md_code(p.name)} | {md_code(p.location)} | {md_text(p.message)} |" for p in verdict.problems
        ]
        lines.append("")
    if verdict.removable:
        lines += ["<details><summary>Fixed since the baseline (drop these entries)</summary>", ""]
        lines += [f"- {md_text(entry)}" for entry in verdict.removable] + ["", "</details>", ""]
    if verdict.allowed:
        lines += ["<details><summary>Allowed by policy</summary>", ""]
        lines += [f"- {md_text(entry)}" for entry in verdict.allowed] + ["", "</details>", ""]
    return "\n".join(lines)


def render_check_text(
    verdict: Verdict, traces: tuple[TraceResult, ...], baseline: Path | None, console: Console
) -> None:
    """Traces that stopped early, every problem, the baseline entries that can go, and the verdict line."""
    from rich.markup import escape

    for trace in traces:
        # the gate only saw a stopped trace's ops up to there; a stand-in limitation is no neuron failure
        if trace.error:
            what = (
                "stand-in limitation, not a neuron failure"
                if trace.error_kind == "stand_in"
                else "fails on neuron"
                if trace.error_kind == "neuron"
                else "did not finish"
            )
            console.print(f"  trace {escape(trace.target)}: [yellow]{what}[/]: {escape(trace.error)}")
    for problem in verdict.problems:
        console.print(
            f"  {escape(problem.location)}  [red]{escape(problem.name)}[/] {escape(problem.message)}"
        )
    if verdict.removable:
        console.print(
            f"{len(verdict.removable)} baseline entries are fixed and can be dropped: rerun with "
            f"--write-baseline {baseline} to shrink it."
        )
        for entry in verdict.removable[:10]:
            console.print(f"  [dim]{escape(entry)}[/]")
    style = "green" if verdict.passed else "bold red"
    console.print(f"[{style}]{escape(verdict_line(verdict))}[/]")
