"""`neuron-migrate trace`: run a model step on the `neuron` device and report which ATen ops run natively."""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from neuron_migrate.commands.common import stderr_console
from neuron_migrate.errors import UsageError
from neuron_migrate.model import STATUSES, OpUse, TraceResult, to_json

_WHERE = {
    "torch-neuronx": "a real Neuron device (torch-neuronx tracking API)",
    "stand-in": "the stand-in neuron device (C++ PrivateUse1 backend on the CPU; its native set is the opdb "
                "snapshot's)",
    "stand-in-python": "the pure-Python stand-in neuron device (the C++ one could not be built here; its native "
                       "set is the opdb snapshot's)",
    "fake": "FakeTensorMode on neuron (no data, nothing executed: ops are predicted, not observed)",
}


def register(app: typer.Typer) -> None:
    """Add the `trace` command to the app."""
    app.command(
        "trace",
        help="Trace the ATen ops a model runs on `neuron` (forward, backward, AdamW step) and look each up in the "
             "opdb. TARGET is package.module:function, path/file.py:function or script.py (script arguments "
             "after --); or use --hf MODEL_TYPE. See docs/trace.md.",
    )(trace_command)


def trace_command(
    target: str | None = typer.Argument(None, help="module:function, file.py:function, or script.py"),
    script_args: list[str] | None = typer.Argument(None, help="arguments for a script, after --"),
    hf: str | None = typer.Option(None, "--hf", help="trace a tiny random-weight transformers model"),
    hf_config: str | None = typer.Option(None, "--hf-config", help="config overrides, KEY=VALUE,..."),
    inference: bool = typer.Option(False, "--inference", help="forward only (no backward, no optimizer step)"),
    device: str = typer.Option("neuron", "--device",
                               help="neuron (real torch-neuronx if present, else the stand-in) or stand-in"),
    fake: bool = typer.Option(False, "--fake", help="run under FakeTensorMode: any size, no memory, no data"),
    opdb: str | None = typer.Option(None, "--opdb", help="opdb snapshot version or .json path (default newest)"),
    timeout: float = typer.Option(600.0, "--timeout", help="seconds before the traced process is killed"),
    max_memory: int | None = typer.Option(None, "--max-memory", help="address-space limit of the traced "
                                             "process, in MB"),
    steps: int | None = typer.Option(None, "--steps", help="scripts: stop after N optimizer steps (0: run to "
                                     "the end; default: once a step adds no new op)"),
    output_format: str = typer.Option("text", "--format", help="text (summary on stderr) or json"),
    output: Path | None = typer.Option(None, "--output", "-o", help="write the JSON result to this file"),
    top: int = typer.Option(10, "--top", help="how many non-native ops to list in the text summary"),
) -> None:
    from neuron_migrate.opdb.tracer.targets import TargetSpec
    from neuron_migrate.opdb.tracer.runner import TraceFailed, TraceOptions, run_trace

    if output_format not in ("text", "json"):
        raise UsageError(f"--format {output_format}: use text or json")
    if top < 0:
        raise UsageError(f"--top {top}: give 0 or more")
    spec = TargetSpec.parse(target, tuple(script_args or ()), hf, hf_config)
    if steps is not None and spec.kind != "script":
        raise UsageError(f"--steps only applies to scripts; {spec.label} is traced for one step")
    options = TraceOptions(device=device, fake=fake, inference=inference, opdb=opdb, timeout=timeout,
                           max_memory_mb=max_memory, root=".", steps=steps)
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
            raise UsageError(f"{output}: cannot write the result ({err.strerror}); choose another --output") from None
    elif output_format == "json":
        sys.stdout.write(text)
    if output_format == "text":
        render_summary(result, console, top)


def failure_line(message: str, kind: str | None) -> str:
    """The one line for a trace that did not finish, saying whether it is a neuron failure."""
    if kind == "stand_in":
        return (f"{message} — a limitation of the stand-in device, not of Trainium: the trace says nothing "
                "about neuron past this point")
    return message


def render_summary(result: TraceResult, console: Console, top: int = 10) -> None:
    """The human summary: where it ran, the opdb, coverage by status, and the non-native ops by calls."""
    console.print(f"[bold]trace[/] {result.target}: ran on {_WHERE.get(result.device, result.device)}; "
                  f"phases {', '.join(result.phases)}")
    console.print(f"opdb {result.opdb_version}")
    if result.opdb_pre_release:
        console.print("[bold yellow]PRE-RELEASE opdb snapshot[/]: its statuses come from a development build of "
                      "torch-neuronx; check them on a real install (`neuron-migrate opdb`) before relying on them")
    table = Table(title="coverage", title_justify="left")
    for column in ("status", "distinct ops", "share", "op calls", "share"):
        table.add_column(column, justify="left" if column == "status" else "right")
    cov = result.coverage
    for status in STATUSES:
        table.add_row(status, str(cov.ops.get(status, 0)), f"{cov.share(status, 'ops'):.1%}",
                      str(cov.calls.get(status, 0)), f"{cov.share(status, 'calls'):.1%}")
    console.print(table)
    ranked = _non_native(result.ops)
    if ranked and top:
        ops = Table(title=f"non-native ops by calls (top {min(top, len(ranked))} of {len(ranked)})",
                    title_justify="left")
        for column in ("op", "status", "dtypes", "calls", "phases", "top call sites"):
            ops.add_column(column, overflow="fold", no_wrap=column == "op")
        for op, status, dtypes, calls, phases, sites in ranked[:top]:
            ops.add_row(op, status, ",".join(dtypes), str(calls), ",".join(phases), "\n".join(sites) or "(no user frame)")
        console.print(ops)
    elif not ranked:
        console.print("every recorded op is native in this opdb snapshot")
    for note in result.notes:
        console.print(f"note: {note}", highlight=False)


def _non_native(uses: tuple[OpUse, ...]) -> list[tuple[str, str, list[str], int, list[str], list[str]]]:
    """Non-native ops merged over dtypes and phases, most calls first, each with its three busiest sites."""
    merged: dict[tuple[str, str], dict] = defaultdict(lambda: {"dtypes": set(), "calls": 0, "phases": set(),
                                                               "sites": defaultdict(int)})
    for use in uses:
        if use.status == "native":
            continue
        item = merged[(use.op, use.status)]
        item["dtypes"].update(use.dtypes)
        item["calls"] += use.count
        item["phases"].add(use.phase)
        for site in use.call_sites:
            item["sites"][site.location] += site.count
    rows = []
    for (op, status), item in merged.items():
        sites = sorted(item["sites"].items(), key=lambda kv: (-kv[1], kv[0]))[:3]
        rows.append((op, status, sorted(item["dtypes"]), item["calls"], sorted(item["phases"]),
                     [f"{loc} ({n})" for loc, n in sites]))
    return sorted(rows, key=lambda r: (-r[3], r[0]))
