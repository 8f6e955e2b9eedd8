"""`neuron-migrate trace`: run a model step on the `neuron` device and report which ATen ops run natively."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from neuron_migrate.commands.common import stderr_console
from neuron_migrate.errors import UsageError


def register(app: typer.Typer) -> None:
    """Add the `trace` command to the app."""
    app.command(
        "trace",
        help="Trace the ATen ops a model runs on `neuron` (forward, backward, AdamW step) and look each up "
        "in the opdb. TARGET is package.module:function, path/file.py:function or script.py (script "
        "arguments after --); or use --hf MODEL_TYPE. See docs/trace.md.",
    )(trace_command)


def trace_command(
    target: str | None = typer.Argument(None, help="module:function, file.py:function, or script.py"),
    script_args: list[str] | None = typer.Argument(None, help="arguments for a script, after --"),
    hf: str | None = typer.Option(None, "--hf", help="trace a tiny random-weight transformers model"),
    hf_config: str | None = typer.Option(None, "--hf-config", help="config overrides, KEY=VALUE,..."),
    inference: bool = typer.Option(
        False, "--inference", help="forward only (no backward, no optimizer step)"
    ),
    device: str = typer.Option(
        "neuron", "--device", help="neuron (real torch-neuronx if present, else the stand-in) or stand-in"
    ),
    fake: bool = typer.Option(False, "--fake", help="run under FakeTensorMode: any size, no memory, no data"),
    opdb: str | None = typer.Option(
        None, "--opdb", help="opdb snapshot version or .json path (default newest)"
    ),
    timeout: float = typer.Option(600.0, "--timeout", help="seconds before the traced process is killed"),
    max_memory: int | None = typer.Option(
        None, "--max-memory", help="address-space limit of the traced process, in MB"
    ),
    steps: int | None = typer.Option(
        None,
        "--steps",
        help="scripts: stop after N optimizer steps (0: run to the end; default: once a step adds no new op)",
    ),
    output_format: str = typer.Option("text", "--format", help="text (summary on stderr) or json"),
    output: Path | None = typer.Option(None, "--output", "-o", help="write the JSON result to this file"),
    top: int = typer.Option(10, "--top", help="how many non-native ops to list in the text summary"),
) -> None:
    from neuron_migrate.model import to_json
    from neuron_migrate.opdb.tracer.runner import TraceFailed, TraceOptions, run_trace
    from neuron_migrate.opdb.tracer.targets import TargetSpec
    from neuron_migrate.reports.trace_text import failure_line, render_summary

    if output_format not in ("text", "json"):
        raise UsageError(f"--format {output_format}: use text or json")
    if top < 0:
        raise UsageError(f"--top {top}: give 0 or more")
    spec = TargetSpec.parse(target, tuple(script_args or ()), hf, hf_config)
    if steps is not None and spec.kind != "script":
        raise UsageError(f"--steps only applies to scripts; {spec.label} is traced for one step")
    options = TraceOptions(
        device=device,
        fake=fake,
        inference=inference,
        opdb=opdb,
        timeout=timeout,
        max_memory_mb=max_memory,
        root=".",
        steps=steps,
    )
    console = stderr_console()
    try:
        if console.is_terminal:
            with console.status(f"tracing {spec.label} …"):
                result = run_trace(spec, options)
        else:
            result = run_trace(spec, options)
    except TraceFailed as err:
        raise TraceFailed(failure_line(str(err), err.kind), err.kind) from None
    text = to_json(result)
    if output is not None:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as err:
            raise UsageError(
                f"{output}: cannot write the result ({err.strerror}); choose another --output"
            ) from None
    elif output_format == "json":
        sys.stdout.write(text)
    if output_format == "text":
        render_summary(result, console, top)
