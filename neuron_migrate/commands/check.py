"""`neuron-migrate check`: the CI gate on new CUDA-only code and on op coverage."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import typer

from neuron_migrate.commands.common import root_options, stderr_console
from neuron_migrate.errors import EXIT_FINDINGS, EXIT_OK


def check_command(
    ctx: typer.Context,
    path: Path | None = typer.Argument(
        None, help="Folder to scan when no --scan file is given (default: .)."
    ),
    scan_file: Path | None = typer.Option(
        None, "--scan", help="A `scan --format json` file instead of scanning."
    ),
    trace_files: list[Path] | None = typer.Option(
        None, "--trace", help="`trace --format json` files to gate on."
    ),
    min_op_coverage: float | None = typer.Option(
        None, "--min-op-coverage", help="Minimum native share, 0–1."
    ),
    coverage_by: str | None = typer.Option(None, "--coverage-by", help="ops | calls (default calls)."),
    max_fallback_ops: int | None = typer.Option(
        None, "--max-fallback-ops", help="Most distinct CPU-fallback ops."
    ),
    max_unsupported_ops: int | None = typer.Option(
        None, "--max-unsupported-ops", help="Most distinct unsupported ops (default 0)."
    ),
    max_unknown_ops: int | None = typer.Option(None, "--max-unknown-ops", help="Most distinct unknown ops."),
    fail_on_findings: str | None = typer.Option(
        None, "--fail-on-findings", help="error | warning (default) | info | none | codes NM1,NM401."
    ),
    allow_op: list[str] | None = typer.Option(
        None, "--allow-op", help="OP[:DTYPE]=REASON, e.g. aten::linalg_qr=…"
    ),
    allow_rule: list[str] | None = typer.Option(None, "--allow-rule", help="CODE=REASON."),
    allow_path: list[str] | None = typer.Option(None, "--allow-path", help="GLOB=REASON."),
    baseline: Path | None = typer.Option(
        None, "--baseline", help="Fail only on what is not in this baseline."
    ),
    write_baseline_to: Path | None = typer.Option(
        None, "--write-baseline", help="Record today's state here."
    ),
    update_baseline: bool = typer.Option(
        False, "--update-baseline", help="Let --write-baseline add entries."
    ),
    junit: Path | None = typer.Option(None, "--junit", help="Write JUnit XML here."),
    markdown: Path | None = typer.Option(None, "--markdown", help="Write the Markdown summary here."),
    config_file: Path | None = typer.Option(None, "--config", help="pyproject.toml to read settings from."),
) -> None:
    """Fail CI on new CUDA-only code and on ops that fall back to CPU or are unsupported on Trainium."""
    from neuron_migrate.api import record_baseline, run_check
    from neuron_migrate.reports.check_summary import render_check_text, render_junit, render_markdown
    from neuron_migrate.reports.output import write_output

    options = replace(root_options(ctx), paths=(path,) if path else (), config_file=config_file)
    gate = {
        "min-op-coverage": min_op_coverage,
        "coverage-by": coverage_by,
        "max-fallback-ops": max_fallback_ops,
        "max-unsupported-ops": max_unsupported_ops,
        "max-unknown-ops": max_unknown_ops,
        "fail-on-findings": fail_on_findings,
        "allow-op": allow_op,
        "allow-rule": allow_rule,
        "allow-path": allow_path,
    }
    traces = tuple(trace_files or ())
    if write_baseline_to is not None:
        _, inputs = record_baseline(options, write_baseline_to, update_baseline, gate, scan_file, traces)
        non_native = sum(1 for use in inputs.ops if use.status != "native")
        stderr_console().print(
            f"Baseline written to {write_baseline_to}: {len(inputs.scan.findings)} "
            f"findings, {non_native} non-native op uses."
        )
        raise typer.Exit(EXIT_OK)
    result = run_check(options, gate, scan_file, traces, baseline)
    render_check_text(result.verdict, result.inputs.traces, result.baseline, stderr_console())
    if junit is not None:
        write_output(render_junit(result.verdict), junit, "--junit")
    summary = markdown or (
        Path(os.environ["GITHUB_STEP_SUMMARY"]) if os.environ.get("GITHUB_STEP_SUMMARY") else None
    )
    if summary is not None:
        write_output(
            render_markdown(result.verdict), summary, "--markdown" if markdown else "GITHUB_STEP_SUMMARY"
        )
    raise typer.Exit(EXIT_OK if result.verdict.passed else EXIT_FINDINGS)


def register(app: typer.Typer) -> None:
    app.command("check")(check_command)
