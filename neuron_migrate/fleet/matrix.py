"""From raw per-architecture records to the fleet's answer: a verdict per architecture and mode (see
`fleet.verdicts`), the architecture x op matrix, the ranking of ops by how many architectures they block or
slow down, the order in which implementing ops would make the most architectures native, and the shares.

Shares, per mode: **runs** = (native + runs with CPU fallbacks) / architectures, **native** = native /
architectures, each over all architectures of the run and over those that build here. A result is computed
from `ArchResult`s alone, so a merge of shard results (`fleet merge`) computes exactly what one run would.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from neuron_migrate.fleet.verdicts import RUNS, VERDICT_LABELS, VERDICTS, verdict_of
from neuron_migrate.model import Coverage, TraceResult, _build

FLEET_SCHEMA = "neuron-migrate/fleet/2"
MODES = ("train", "inference")
_RANK = {"native": 0, "unknown": 1, "cpu_fallback": 2, "unsupported": 3}
DEFINITION = (
    "runs = the traced step ({phases}) completes on neuron, CPU fallbacks allowed (TorchNeuron falls back "
    "by default); native = it runs and every ATen op is native in opdb {opdb}; shares over all {total} "
    "architectures and over the {buildable} that build here"
)
__all__ = ["RUNS", "VERDICTS", "VERDICT_LABELS"]  # re-exported for the CLI and renderers


@dataclass(frozen=True)
class OpCell:
    """One matrix cell: what an architecture does with an op (worst status over dtypes and phases)."""

    status: str
    calls: int
    dtypes: tuple[str, ...]
    phases: tuple[str, ...]


@dataclass(frozen=True)
class ArchResult:
    """One architecture in one mode: verdict and why, the failure if any, and its row of the matrix."""

    model_type: str
    task: str
    mode: str
    architecture: str
    verdict: str
    reason: str
    stage: str
    outcome: str
    reproduce: str
    error_class: str | None = None
    error_line: str | None = None
    error_where: str | None = None
    error_kind: str | None = None
    cpu_error: str | None = None
    error_op: str | None = None  # the ATen op whose call raised on neuron, when the step failed inside one
    error_dtypes: tuple[str, ...] = ()
    error_status: str | None = None  # that op's status in the opdb
    seconds: float | None = None
    cached: bool = False
    device: str | None = None  # where the step ran: torch-neuronx, stand-in, stand-in-python, fake
    coverage: Coverage | None = None
    ops: dict[str, OpCell] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class OpRank:
    """An op that is not native somewhere: the architectures it blocks (unsupported, or the step raised inside
    it as TorchNeuron would), those it slows down (CPU fallback or unknown), the ones it alone keeps from
    native, and its place in the unlock order."""

    op: str
    blocks: int
    fails: int
    slows: int
    sole: int
    calls: int
    architectures: tuple[str, ...]
    unlock_step: int | None = None
    unlocks: int = 0
    cumulative_native: int | None = None


@dataclass(frozen=True)
class FleetSummary:
    """Verdict counts and shares of one mode, with the definition they were computed by."""

    mode: str
    total: int
    counts: dict[str, int]
    runs: int
    runs_share: float
    native_share: float
    buildable: int
    runs_share_of_buildable: float
    native_share_of_buildable: float
    native_if_all_unlocked: int
    definition: str


@dataclass(frozen=True)
class FleetResult:
    """Everything a fleet run (or a merge of shard runs) produced; rendered as JSON, Markdown and HTML."""

    task: str
    modes: tuple[str, ...]
    device: str
    versions: dict[str, str | None]
    opdb_version: str
    opdb_pre_release: bool
    summaries: dict[str, FleetSummary]
    architectures: tuple[ArchResult, ...]
    rankings: dict[str, tuple[OpRank, ...]]
    ops: tuple[str, ...]
    selection: tuple[str, ...] = ()  # every model type of the whole (unsharded) run, in order
    shard: str | None = None  # "I/N" when this covers one slice of `selection`
    traced: int = 0
    from_cache: int = 0
    backend: str = ""  # where ops ran: torch-neuronx (a real device) and/or the stand-in
    generated: str = ""
    schema: str = FLEET_SCHEMA

    @property
    def summary(self) -> FleetSummary:
        """The first mode's summary (train when the run had it)."""
        return self.summaries[self.modes[0]]

    @property
    def ranking(self) -> tuple[OpRank, ...]:
        return self.rankings[self.modes[0]]

    def of_mode(self, mode: str) -> list[ArchResult]:
        return [a for a in self.architectures if a.mode == mode]


def cells(trace: TraceResult) -> dict[str, OpCell]:
    """An architecture's matrix row: each op's worst status, total calls, dtypes and phases."""
    row: dict[str, dict[str, Any]] = {}
    for use in trace.ops:
        cell = row.setdefault(use.op, {"status": use.status, "calls": 0, "dtypes": set(), "phases": set()})
        if _RANK[use.status] > _RANK[cell["status"]]:
            cell["status"] = use.status
        cell["calls"] += use.count
        cell["dtypes"].update(use.dtypes)
        cell["phases"].add(use.phase)
    return {
        op: OpCell(c["status"], c["calls"], tuple(sorted(c["dtypes"])), tuple(sorted(c["phases"])))
        for op, c in sorted(row.items())
    }


def reproduce(record: dict[str, Any], inference: bool) -> str:
    """The `trace` command that gives this architecture's trace on its own."""
    flags = [f"--hf {record['model_type']}"]
    extra = record.get("hf_config") or {}
    scalars = {k: v for k, v in extra.items() if not isinstance(v, (list, dict))}
    if scalars:
        flags.append("--hf-config " + ",".join(f"{k}={v}" for k, v in scalars.items()))
    if inference:
        flags.append("--inference")
    rest = sorted(set(extra) - set(scalars))  # --hf-config has no spelling for lists
    return (
        "neuron-migrate trace "
        + " ".join(flags)
        + (f" (+ config values {', '.join(rest)}, which --hf-config cannot spell)" if rest else "")
    )


def arch_result(record: dict[str, Any], mode: str = "train", device: str = "stand-in") -> ArchResult:
    """Turn one raw record (see fleet.worker / fleet.runner) into an ArchResult."""
    trace = _build(TraceResult, record["trace"], record["model_type"]) if record.get("trace") else None
    row = cells(trace) if trace else {}
    ran_on = trace.device if trace else device
    verdict, reason = verdict_of(record, row, ran_on)
    failed_inside = verdict in ("fails_on_neuron", "stand_in_limitation")
    return ArchResult(
        model_type=record["model_type"],
        task=record["task"],
        mode=mode,
        architecture=record["architecture"],
        verdict=verdict,
        reason=reason,
        stage=record.get("stage", "start"),
        outcome=record.get("outcome", "ok"),
        reproduce=record.get("reproduce") or reproduce(record, mode == "inference"),
        error_class=record.get("error_class"),
        error_line=record.get("error_line"),
        error_where=record.get("error_where") or None,
        error_kind=record.get("error_kind"),
        cpu_error=record.get("cpu_error"),
        error_op=record.get("error_op") if failed_inside else None,
        error_dtypes=tuple(record.get("error_dtypes") or ()) if failed_inside else (),
        error_status=record.get("error_status") if failed_inside else None,
        seconds=record.get("seconds"),
        cached=bool(record.get("cached")),
        device=ran_on,
        coverage=trace.coverage if trace else None,
        ops=row,
        notes=trace.notes if trace else (),
    )


def rank_ops(archs: list[ArchResult], unlock_limit: int = 50) -> list[OpRank]:
    """Ops ranked by architectures blocked (unsupported, or the step raised inside the op on neuron), then
    blocked + slowed, then alone-blocking; with the greedy unlock order over the architectures whose trace
    completed (each step implements the op that makes the most remaining architectures native). A stand-in
    limitation blocks nothing: TorchNeuron runs that op."""
    affected: dict[str, dict[str, str]] = {}
    calls: Counter = Counter()
    for arch in archs:
        for op, cell in arch.ops.items():
            if cell.status != "native":
                affected.setdefault(op, {})[arch.model_type] = cell.status
                calls[op] += cell.calls
    failing: dict[str, set[str]] = {}
    for arch in archs:
        if arch.error_op and arch.verdict == "fails_on_neuron":
            failing.setdefault(arch.error_op, set()).add(arch.model_type)
    missing = {a.model_type: {op for op, c in a.ops.items() if c.status != "native"} for a in archs if a.ops}
    missing = {mt: ops for mt, ops in missing.items() if ops}
    sole = Counter(next(iter(ops)) for ops in missing.values() if len(ops) == 1)
    unlock = greedy_unlock(missing, unlock_limit)
    ranks = []
    for op in set(affected) | set(failing):
        where, failed = affected.get(op, {}), failing.get(op, set())
        blocks = sum(1 for s in where.values() if s == "unsupported")
        step = unlock.get(op)
        ranks.append(
            OpRank(
                op=op,
                blocks=blocks,
                fails=len(failed),
                slows=len(where) - blocks,
                sole=sole[op],
                calls=calls[op],
                architectures=tuple(sorted(set(where) | failed)),
                unlock_step=step[0] if step else None,
                unlocks=step[1] if step else 0,
                cumulative_native=step[2] if step else None,
            )
        )
    return sorted(
        ranks, key=lambda r: (-(r.blocks + r.fails), -(r.blocks + r.fails + r.slows), -r.sole, r.op)
    )


def greedy_unlock(missing: dict[str, set[str]], limit: int) -> dict[str, tuple[int, int, int]]:
    """op -> (step, architectures it makes native at that step, native total after it), greedily."""
    remaining = {mt: set(ops) for mt, ops in missing.items()}
    order: dict[str, tuple[int, int, int]] = {}
    total = 0
    while remaining and len(order) < limit:
        gains = Counter(next(iter(ops)) for ops in remaining.values() if len(ops) == 1)
        presence = Counter(op for ops in remaining.values() for op in ops)
        # most architectures made native now; else the op needed by most (progress towards several)
        op = min(presence, key=lambda o: (-gains[o], -presence[o], o))
        for ops in remaining.values():
            ops.discard(op)
        done = [mt for mt, ops in remaining.items() if not ops]
        for mt in done:
            del remaining[mt]
        total += len(done)
        order[op] = (len(order) + 1, len(done), total)
    return order


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def summarize(archs: list[ArchResult], mode: str, opdb: str) -> FleetSummary:
    """Verdict counts and shares of one mode (see the module docstring)."""
    counts = {v: sum(1 for a in archs if a.verdict == v) for v in VERDICTS}
    total = len(archs)
    buildable = total - counts["does_not_build"]
    runs = sum(counts[v] for v in RUNS)
    phases = "forward" if mode == "inference" else "forward, backward, AdamW step"
    unlockable = counts["native"] + sum(
        1 for a in archs if a.ops and a.verdict in ("fallbacks", "fails_on_neuron")
    )
    return FleetSummary(
        mode=mode,
        total=total,
        counts=counts,
        runs=runs,
        runs_share=_share(runs, total),
        native_share=_share(counts["native"], total),
        buildable=buildable,
        runs_share_of_buildable=_share(runs, buildable),
        native_share_of_buildable=_share(counts["native"], buildable),
        native_if_all_unlocked=unlockable,
        definition=DEFINITION.format(phases=phases, opdb=opdb, total=total, buildable=buildable),
    )


def assemble(
    archs: list[ArchResult],
    *,
    task: str,
    modes: tuple[str, ...],
    device: str,
    versions: dict[str, str | None],
    opdb_version: str,
    opdb_pre_release: bool,
    selection: tuple[str, ...],
    shard: str | None = None,
    traced: int = 0,
    from_cache: int = 0,
) -> FleetResult:
    """A FleetResult from ArchResults, ordered by `selection` then mode: what a run and a merge both call."""
    position = {mt: i for i, mt in enumerate(selection)}
    archs = sorted(
        archs,
        key=lambda a: (
            position.get(a.model_type, len(position)),
            a.model_type,
            modes.index(a.mode) if a.mode in modes else len(modes),
        ),
    )
    by_mode = {mode: [a for a in archs if a.mode == mode] for mode in modes}
    return FleetResult(
        task=task,
        modes=modes,
        device=device,
        versions=dict(versions),
        opdb_version=opdb_version,
        opdb_pre_release=opdb_pre_release,
        summaries={mode: summarize(by_mode[mode], mode, opdb_version) for mode in modes},
        architectures=tuple(archs),
        rankings={mode: tuple(rank_ops(by_mode[mode])) for mode in modes},
        ops=tuple(sorted({op for a in archs for op in a.ops})),
        selection=tuple(selection),
        shard=shard,
        traced=traced,
        from_cache=from_cache,
        backend=", ".join(sorted({a.device for a in archs if a.coverage is not None and a.device})),
        generated=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )


def build_result(run: Any, task: str, modes: tuple[str, ...], device: str) -> FleetResult:
    """The FleetResult of a `fleet.runner.FleetRun` (records keyed by (model_type, mode))."""
    ran_on = getattr(run, "ran_on", "stand-in")  # what a record without a trace ran on
    archs = [arch_result(record, mode, ran_on) for (_, mode), record in run.records.items()]
    return assemble(
        archs,
        task=task,
        modes=modes,
        device=device,
        versions=run.versions,
        opdb_version=run.opdb_version,
        opdb_pre_release=run.opdb_pre_release,
        selection=tuple(run.selection or (a.model_type for a in run.architectures)),
        shard=run.shard,
        traced=run.traced,
        from_cache=run.from_cache,
    )
