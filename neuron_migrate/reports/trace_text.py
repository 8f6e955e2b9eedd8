"""`trace`'s human view on stderr (rich): where it ran, the opdb, coverage by status, the non-native ops."""

from __future__ import annotations

from collections import defaultdict

from rich.console import Console
from rich.table import Table

from neuron_migrate.model import STATUSES, OpUse, TraceResult

_WHERE = {
    "torch-neuronx": "a real Neuron device (torch-neuronx tracking API)",
    "stand-in": "the stand-in neuron device (C++ PrivateUse1 backend on the CPU; its native set is the opdb "
    "snapshot's)",
    "stand-in-python": "the pure-Python stand-in neuron device (the C++ one could not be built here; its "
    "native set is the opdb snapshot's)",
    "fake": "FakeTensorMode on neuron (no data, nothing executed: ops are predicted, not observed)",
}


def failure_line(message: str, kind: str | None) -> str:
    """The one line for a trace that did not finish, saying whether it is a neuron failure."""
    if kind == "stand_in":
        return (
            f"{message} — a limitation of the stand-in device, not of Trainium: the trace says nothing "
            "about neuron past this point"
        )
    return message


def render_summary(result: TraceResult, console: Console, top: int = 10) -> None:
    """The human summary: where it ran, the opdb, coverage by status, and the non-native ops by calls."""
    console.print(
        f"[bold]trace[/] {result.target}: ran on {_WHERE.get(result.device, result.device)}; "
        f"phases {', '.join(result.phases)}"
    )
    console.print(f"opdb {result.opdb_version}")
    if result.opdb_pre_release:
        console.print(
            "[bold yellow]PRE-RELEASE opdb snapshot[/]: its statuses come from a development build of "
            "torch-neuronx; check them on a real install (`neuron-migrate opdb`) before relying on them"
        )
    table = Table(title="coverage", title_justify="left")
    for column in ("status", "distinct ops", "share", "op calls", "share"):
        table.add_column(column, justify="left" if column == "status" else "right")
    cov = result.coverage
    for status in STATUSES:
        table.add_row(
            status,
            str(cov.ops.get(status, 0)),
            f"{cov.share(status, 'ops'):.1%}",
            str(cov.calls.get(status, 0)),
            f"{cov.share(status, 'calls'):.1%}",
        )
    console.print(table)
    ranked = _non_native(result.ops)
    if ranked and top:
        ops = Table(
            title=f"non-native ops by calls (top {min(top, len(ranked))} of {len(ranked)})",
            title_justify="left",
        )
        for column in ("op", "status", "dtypes", "calls", "phases", "top call sites"):
            ops.add_column(column, overflow="fold", no_wrap=column == "op")
        for op, status, dtypes, calls, phases, sites in ranked[:top]:
            ops.add_row(
                op,
                status,
                ",".join(dtypes),
                str(calls),
                ",".join(phases),
                "\n".join(sites) or "(no user frame)",
            )
        console.print(ops)
    elif not ranked:
        console.print("every recorded op is native in this opdb snapshot")
    for note in result.notes:
        console.print(f"note: {note}", highlight=False)


def _non_native(uses: tuple[OpUse, ...]) -> list[tuple[str, str, list[str], int, list[str], list[str]]]:
    """Non-native ops merged over dtypes and phases, most calls first, each with its three busiest sites."""
    merged: dict[tuple[str, str], dict] = defaultdict(
        lambda: {"dtypes": set(), "calls": 0, "phases": set(), "sites": defaultdict(int)}
    )
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
        rows.append(
            (
                op,
                status,
                sorted(item["dtypes"]),
                item["calls"],
                sorted(item["phases"]),
                [f"{loc} ({n})" for loc, n in sites],
            )
        )
    return sorted(rows, key=lambda r: (-r[3], r[0]))
