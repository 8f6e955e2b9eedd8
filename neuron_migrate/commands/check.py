"""`neuron-migrate check`: the CI gate on new CUDA-only code and on op coverage."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from neuron_migrate.checks.baseline import Baseline, load_baseline, write_baseline
from neuron_migrate.checks.gate import evaluate
from neuron_migrate.checks.policy import policy_from
from neuron_migrate.checks.summary import render_junit, render_markdown, verdict_line
from neuron_migrate.commands.common import config_for, stderr_console
from neuron_migrate.commands.scan import run_scan
from neuron_migrate.errors import EXIT_FINDINGS, EXIT_OK, InputFileError
from neuron_migrate.model import ScanResult, TraceResult, from_json
from neuron_migrate.reports.output import write_output


def read_record(path: Path, kind: type):
    """A scan or trace JSON file, or one clear error line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputFileError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputFileError(f"{path}: cannot read ({err})") from None
    return from_json(text, kind, str(path))


def check_command(
    path: Optional[Path] = typer.Argument(None, help="Folder to scan when no --scan file is given (default: .)."),
    scan_file: Optional[Path] = typer.Option(None, "--scan", help="A `scan --format json` file instead of scanning."),
    trace_files: Optional[list[Path]] = typer.Option(None, "--trace", help="`trace --format json` files to gate on."),
    min_op_coverage: Optional[float] = typer.Option(None, "--min-op-coverage", help="Minimum native share, 0–1."),
    coverage_by: Optional[str] = typer.Option(None, "--coverage-by", help="ops | calls (default calls)."),
    max_fallback_ops: Optional[int] = typer.Option(None, "--max-fallback-ops", help="Most distinct CPU-fallback ops."),
    max_unsupported_ops: Optional[int] = typer.Option(None, "--max-unsupported-ops", help="Default 0."),
    max_unknown_ops: Optional[int] = typer.Option(None, "--max-unknown-ops", help="Most distinct unknown ops."),
    fail_on_findings: Optional[str] = typer.Option(None, "--fail-on-findings",
                                                   help="error | warning (default) | info | none | codes NM1,NM401."),
    allow_op: Optional[list[str]] = typer.Option(None, "--allow-op", help="OP[:DTYPE]=REASON, e.g. aten::linalg_qr=…"),
    allow_rule: Optional[list[str]] = typer.Option(None, "--allow-rule", help="CODE=REASON."),
    allow_path: Optional[list[str]] = typer.Option(None, "--allow-path", help="GLOB=REASON."),
    baseline: Optional[Path] = typer.Option(None, "--baseline", help="Fail only on what is not in this baseline."),
    write_baseline_to: Optional[Path] = typer.Option(None, "--write-baseline", help="Record today's state here."),
    update_baseline: bool = typer.Option(False, "--update-baseline", help="Let --write-baseline add entries."),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Write JUnit XML here."),
    markdown: Optional[Path] = typer.Option(None, "--markdown", help="Write the Markdown summary here."),
    config_file: Optional[Path] = typer.Option(None, "--config", help="pyproject.toml to read settings from."),
) -> None:
    """Fail CI on new CUDA-only code and on ops that fall back to CPU or are unsupported on Trainium."""
    root = path or Path(".")
    config = config_for([root], config_file)
    flags = {"min-op-coverage": min_op_coverage, "coverage-by": coverage_by, "max-fallback-ops": max_fallback_ops,
             "max-unsupported-ops": max_unsupported_ops, "max-unknown-ops": max_unknown_ops,
             "fail-on-findings": fail_on_findings, "allow-op": allow_op, "allow-rule": allow_rule,
             "allow-path": allow_path}
    policy = policy_from(config.check, flags, str(config.path or "pyproject.toml"))
    scan: ScanResult = read_record(scan_file, ScanResult) if scan_file else run_scan([root], config_file=config_file)
    traces: list[TraceResult] = [read_record(p, TraceResult) for p in trace_files or ()]
    ops = [use for trace in traces for use in trace.ops]
    findings = list(scan.findings)
    baseline_path = baseline or (Path(config.check["baseline"]) if "baseline" in config.check else None)
    if write_baseline_to is not None:
        write_baseline(write_baseline_to, Baseline.of(findings, ops), update_baseline)
        stderr_console().print(f"Baseline written to {write_baseline_to}: {len(findings)} findings, "
                               f"{sum(1 for u in ops if u.status != 'native')} non-native op uses.")
        raise typer.Exit(EXIT_OK)
    recorded = load_baseline(baseline_path) if baseline_path is not None else None
    verdict = evaluate(findings, ops, policy, recorded)
    _print_unfinished(traces)
    _print(verdict, baseline_path)
    if junit is not None:
        write_output(render_junit(verdict), junit)
    summary = markdown or (Path(os.environ["GITHUB_STEP_SUMMARY"]) if os.environ.get("GITHUB_STEP_SUMMARY") else None)
    if summary is not None:
        write_output(render_markdown(verdict), summary)
    raise typer.Exit(EXIT_OK if verdict.passed else EXIT_FINDINGS)


def _print_unfinished(traces: list[TraceResult]) -> None:
    """Traces that stopped early: the gate only saw their ops up to there; a stand-in limitation is no neuron
    failure."""
    console = stderr_console()
    for trace in traces:
        if trace.error:
            what = ("stand-in limitation, not a neuron failure" if trace.error_kind == "stand_in"
                    else "fails on neuron" if trace.error_kind == "neuron" else "did not finish")
            console.print(f"  trace {escape(trace.target)}: [yellow]{what}[/]: {escape(trace.error)}")


def _print(verdict, baseline_path: Path | None) -> None:
    console = stderr_console()
    for problem in verdict.problems:
        console.print(f"  {escape(problem.location)}  [red]{escape(problem.name)}[/] {escape(problem.message)}")
    if verdict.removable:
        console.print(f"{len(verdict.removable)} baseline entries are fixed and can be dropped: rerun with "
                      f"--write-baseline {baseline_path} to shrink it.")
        for entry in verdict.removable[:10]:
            console.print(f"  [dim]{escape(entry)}[/]")
    style = "green" if verdict.passed else "bold red"
    console.print(f"[{style}]{escape(verdict_line(verdict))}[/]")


def register(app: typer.Typer) -> None:
    app.command("check")(check_command)
