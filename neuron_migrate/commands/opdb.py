"""`neuron-migrate opdb ...`: look up, list, diff, import and probe operator-support snapshots.

Thin: parse flags, call `neuron_migrate.opdb`, render. Tables go to stdout (rich), summaries to stderr.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import typer

from neuron_migrate.commands.common import HelpGroup
from neuron_migrate.errors import UsageError
from neuron_migrate.model import STATUSES

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

opdb_app = typer.Typer(
    cls=HelpGroup,
    no_args_is_help=True,
    help="The operator database: what torch-neuronx does with each ATen op and dtype.",
)
import_app = typer.Typer(
    cls=HelpGroup,
    no_args_is_help=True,
    help="Build a snapshot from a source (compatibility table, installed registrations).",
)
opdb_app.add_typer(import_app, name="import")

OPDB_HELP = "Snapshot version (see `opdb versions`) or path to a snapshot .json; default: the newest shipped."


def register(app: typer.Typer) -> None:
    """Add the `opdb` command group to the main app."""
    app.add_typer(opdb_app, name="opdb")


def _out() -> Console:
    from rich.console import Console

    return Console(file=sys.stdout, width=max(Console(file=sys.stdout).width, 120), soft_wrap=False)


def _table(*columns: str) -> Table:
    """A rich table with these columns (rich is imported only when a command draws one)."""
    from rich.table import Table

    return Table(*columns)


def _err(text: str) -> None:
    typer.echo(text, err=True)


def _banner(snap) -> str:
    tag = "PRE-RELEASE state, verify on a real install" if snap.pre_release else "release"
    return f"opdb {snap.version} (torch-neuronx {snap.torch_neuronx_version}; {tag})"


def _load(version: str | None):
    from neuron_migrate.opdb.db import load_snapshot

    return load_snapshot(version)


@opdb_app.command("versions")
def versions() -> None:
    """List the shipped snapshots (newest last)."""
    from neuron_migrate.opdb.db import available_versions

    table = _table("version", "torch-neuronx", "pre-release", "ops", "unlisted ops")
    for v in available_versions():
        snap = _load(v)
        rule = snap.unlisted.status if snap.unlisted else "unknown"
        table.add_row(
            v, snap.torch_neuronx_version, "yes" if snap.pre_release else "no", str(len(snap.entries())), rule
        )
    _out().print(table)


@opdb_app.command("show")
def show(
    op: str = typer.Argument(..., help="aten::add.Tensor, aten.add.Tensor, or a base name (aten::add)."),
    opdb: str | None = typer.Option(None, "--opdb", help=OPDB_HELP),
) -> None:
    """Show what the snapshot says about an op: every overload for a base name, per-dtype rows, provenance."""
    from neuron_migrate.opdb.db import base_name, normalize_op

    snap = _load(opdb)
    name = normalize_op(op if "::" in op or "." in op else f"aten::{op}")
    entries = snap.entries()
    keys = [
        k for k in entries if k == name or (("." not in name.split("::", 1)[-1]) and base_name(k) == name)
    ]
    console = _out()
    console.print(_banner(snap))
    table = _table("op", "dtype", "status", "class", "route", "note")
    cited: list[str] = []
    if not keys:
        s = snap.lookup(name)
        why = "snapshot rule for unlisted ops" if snap.unlisted else "no source"
        table.add_row(name, "*", s.status, s.klass or "", s.route, f"({why}) {s.note}")
        if s.source:
            cited.append(f"{name}: {s.source} ({s.date})")
    for key in keys:
        e = entries[key]
        scope = " (all overloads)" if e.all_overloads else ""
        table.add_row(key + scope, "*", e.status, e.klass or "", e.route, e.note)
        cited.append(f"{key}: {e.source} ({e.date})")
        for dt, d in e.dtypes.items():
            table.add_row("", dt, d.status, "", "", d.note)
            if d.source:
                cited.append(f"{key} [{dt}]: {d.source} ({d.date})")
    console.print(table)
    for line in cited:
        console.print(f"source {line}", soft_wrap=True, highlight=False)


@opdb_app.command("list")
def list_ops(
    status: str | None = typer.Option(None, "--status", help="native | cpu_fallback | unsupported | unknown"),
    dtype: str | None = typer.Option(None, "--dtype", help="Answer for this dtype (float32, bfloat16...)."),
    fmt: str = typer.Option("text", "--format", help="text | json"),
    opdb: str | None = typer.Option(None, "--opdb", help=OPDB_HELP),
) -> None:
    """List the ops a snapshot lists, with their status (for --dtype if given), filtered by --status."""
    if status is not None and status not in STATUSES:
        raise UsageError(f"--status {status!r} is not one of {', '.join(STATUSES)}")
    if fmt not in ("text", "json"):
        raise UsageError(f"--format {fmt!r} is not text or json")
    snap = _load(opdb)
    rows = []
    for op in snap.entries():
        s = snap.lookup(op, dtype)
        if status is None or s.status == status:
            rows.append(
                {
                    "op": op,
                    "status": s.status,
                    "klass": s.klass,
                    "route": s.route,
                    "note": s.note,
                    "source": s.source,
                    "date": s.date,
                }
            )
    if fmt == "json":
        from neuron_migrate.opdb.db import list_json

        typer.echo(list_json(snap, rows, dtype, status))
        return
    table = _table("op", "status", "class", "route", "note")
    for r in rows:
        table.add_row(r["op"], r["status"], r["klass"] or "", r["route"], r["note"][:100])
    console = _out()
    console.print(_banner(snap))
    console.print(table)
    _err(
        f"{len(rows)} ops" + (f" with status {status}" if status else "") + (f" for {dtype}" if dtype else "")
    )


@opdb_app.command("diff")
def diff(
    a: str = typer.Argument(..., help="Version or path of the older snapshot."),
    b: str = typer.Argument(..., help="Version or path of the newer snapshot."),
    fmt: str = typer.Option("text", "--format", help="text | json"),
) -> None:
    """Ops whose status changed from A to B, and ops added or removed."""
    from neuron_migrate.opdb.db import diff_json, diff_snapshots

    if fmt not in ("text", "json"):
        raise UsageError(f"--format {fmt!r} is not text or json")
    sa, sb = _load(a), _load(b)
    changes = diff_snapshots(sa, sb)
    if fmt == "json":
        typer.echo(diff_json(sa, sb, changes))
        return
    table = _table("op", "change", "A", "B", "per dtype")
    for c in changes:
        table.add_row(c.op, c.kind, c.before, c.after, c.detail)
    console = _out()
    console.print(f"A = {_banner(sa)}\nB = {_banner(sb)}")
    console.print(table)
    kinds = {k: sum(c.kind == k for c in changes) for k in ("changed", "added", "removed")}
    _err(", ".join(f"{v} {k}" for k, v in kinds.items()))


def _write(snap, out: str | None, what: str) -> None:
    from neuron_migrate.opdb.db import dump_snapshot

    text = dump_snapshot(snap, out)
    if out is None:
        sys.stdout.write(text)
    counts = dict.fromkeys(STATUSES, 0)
    for e in snap.entries().values():
        counts[e.status] += 1
    summary = ", ".join(f"{v} {k}" for k, v in counts.items() if v)
    _err(f"{what}: {len(snap.entries())} ops ({summary})" + (f" -> {out}" if out else ""))


@import_app.command("compat-table")
def import_compat_table(
    file: str = typer.Argument(..., help="torch_api_compatibility.md"),
    version: str | None = typer.Option(None, "--version", help="torch-neuronx version."),
    out: str | None = typer.Option(None, "--out", help="Write here (default: stdout)."),
    source: str | None = typer.Option(None, "--source", help="URL to cite (default: file)."),
    date: str | None = typer.Option(None, "--date", help="Date of the table (YYYY-MM-DD)."),
) -> None:
    """Import TorchNeuron's API compatibility table (Y / CPU_FALLBACK / N per public API)."""
    from neuron_migrate.opdb.importers.compat_table import import_compat_table as run

    snap, stats = run(file, version=version, source=source, date=date)
    _write(snap, out, f"compat table {snap.version}: {stats.rows} rows")
    if stats.unmapped:
        _err(
            f"{len(stats.unmapped)} rows name no ATen op and were skipped: {', '.join(stats.unmapped[:8])}"
            + (" ..." if len(stats.unmapped) > 8 else "")
        )


@import_app.command("registrations")
def import_registrations(
    version: str | None = typer.Option(None, "--version", help="Override the version."),
    out: str | None = typer.Option(None, "--out", help="Write here (default: stdout)."),
) -> None:
    """Import the PrivateUse1 registrations of the installed torch_neuronx (an upper bound on native support)."""  # noqa: E501 - typer keeps the docstring's line breaks in --help
    from neuron_migrate.opdb.importers.registrations import import_registrations as run

    _write(run(version), out, "registrations (upper bound)")


@opdb_app.command("probe")
def probe(
    device: str = typer.Option("neuron", "--device", help="Device to probe (neuron)."),
    ops: str | None = typer.Option(None, "--ops", help="Comma-separated OpInfo or ATen names; default all."),
    dtypes: str | None = typer.Option(None, "--dtypes", help="Comma-separated dtypes; default all."),
    out: str | None = typer.Option(None, "--out", help="Write the snapshot here (default: stdout)."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="Probe at most N OpInfos."),
    samples: int = typer.Option(3, "--samples", min=1, help="Samples per op and dtype."),
    opdb: str | None = typer.Option(None, "--opdb", help="Snapshot the stand-in is configured with."),
    stand_in: bool = typer.Option(False, "--stand-in", help="Use the stand-in even if a device is present."),
    version: str | None = typer.Option(None, "--version", help="Version name of the written snapshot."),
    timeout: float | None = typer.Option(None, "--timeout", help="Give up after this many seconds."),
) -> None:
    """Run OpInfo samples per op and dtype on the device, compare with CPU, write the observed snapshot."""
    from neuron_migrate.opdb.probe import ProbeOptions, run_probe

    if device != "neuron":
        raise UsageError(f"--device {device!r} is not supported; use --device neuron")

    def split(s: str | None) -> tuple[str, ...]:
        return tuple(p.strip() for p in s.split(",") if p.strip()) if s else ()

    opts = ProbeOptions(
        ops=split(ops),
        dtypes=split(dtypes),
        limit=limit,
        samples=samples,
        opdb=opdb,
        stand_in=stand_in,
        version=version,
    )
    snap = run_probe(opts, timeout=timeout)
    _write(snap, out, f"probe on {snap.sources[0]['path'] if snap.sources else device}")
