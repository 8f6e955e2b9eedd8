"""From raw per-architecture records to the fleet's answer: a verdict per architecture, the architecture x op
matrix, the ranking of ops by how many architectures they block or slow down, the order in which implementing
ops would make the most architectures native, and the native share.

Definitions (also in docs/fleet.md and in every output):

- `native`: the tiny instance builds, the traced step (forward; with --train also backward and the AdamW
  step) completes on `neuron`, and every ATen op it ran is `native` in the opdb snapshot (no `cpu_fallback`,
  no `unknown`, no `unsupported`).
- `fallbacks`: it completes, and at least one op is `cpu_fallback` or `unknown` (the stand-in runs unknown ops
  through the CPU fallback, as TorchNeuron does with an op it has no kernel for); none is `unsupported`.
- `fails_on_neuron`: an op is `unsupported` (TorchNeuron would stop there), or the step raised / timed out /
  crashed on `neuron` while the same tiny model steps fine on plain CPU (or the CPU check did not finish).
- `fails_to_build`: no runnable tiny instance: the config was rejected, construction failed, or the step
  fails on plain CPU too (a harness or config problem, not a device one).

"Runs out of the box" = `native`. The share is native / all architectures of the run; the share that runs at
all (native + fallbacks) and the shares over buildable architectures are given next to it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from neuron_migrate.model import Coverage, TraceResult, _build

FLEET_SCHEMA = "neuron-migrate/fleet/1"
VERDICTS: tuple[str, ...] = ("native", "fallbacks", "fails_on_neuron", "fails_to_build")
VERDICT_LABELS = {"native": "native", "fallbacks": "runs with fallbacks", "fails_on_neuron": "fails on neuron",
                  "fails_to_build": "fails to build"}
_RANK = {"native": 0, "unknown": 1, "cpu_fallback": 2, "unsupported": 3}
DEFINITION = ("native = builds, the traced step ({phases}) completes on neuron, and every ATen op it ran is native "
              "in opdb {opdb} (no cpu_fallback, unknown or unsupported op); share = native / all {total} "
              "architectures of the run")


@dataclass(frozen=True)
class OpCell:
    """One matrix cell: what an architecture does with an op (worst status over dtypes and phases)."""

    status: str
    calls: int
    dtypes: tuple[str, ...]
    phases: tuple[str, ...]


@dataclass(frozen=True)
class ArchResult:
    """One architecture's outcome: verdict and why, the failure if any, and its row of the matrix."""

    model_type: str
    task: str
    architecture: str
    verdict: str
    reason: str
    stage: str
    outcome: str
    reproduce: str
    error_class: str | None = None
    error_line: str | None = None
    error_where: str | None = None
    cpu_error: str | None = None
    error_op: str | None = None  # the ATen op whose call raised on neuron, when the step failed inside one
    error_dtypes: tuple[str, ...] = ()
    seconds: float | None = None
    cached: bool = False
    coverage: Coverage | None = None
    ops: dict[str, OpCell] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class OpRank:
    """An op that is not native somewhere: the architectures it blocks (unsupported), those whose step raised
    inside it on neuron while running on CPU (`fails`), those it slows down (CPU fallback or unknown), the ones
    it alone keeps from native, and its place in the unlock order."""

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
    """Verdict counts and the shares, with the definition they were computed by."""

    total: int
    counts: dict[str, int]
    native_share: float
    runs_share: float
    buildable: int
    native_share_of_buildable: float
    native_if_all_unlocked: int
    definition: str


@dataclass(frozen=True)
class FleetResult:
    """Everything a fleet run produced; rendered as JSON, Markdown and HTML."""

    task: str
    mode: str
    device: str
    versions: dict[str, str | None]
    opdb_version: str
    opdb_pre_release: bool
    summary: FleetSummary
    architectures: tuple[ArchResult, ...]
    ranking: tuple[OpRank, ...]
    ops: tuple[str, ...]
    traced: int = 0
    from_cache: int = 0
    backend: str = ""  # where ops ran: torch-neuronx (a real device) and/or stand-in (CPU stand-in)
    generated: str = ""
    schema: str = FLEET_SCHEMA


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
    return {op: OpCell(c["status"], c["calls"], tuple(sorted(c["dtypes"])), tuple(sorted(c["phases"])))
            for op, c in sorted(row.items())}


def verdict_of(record: dict[str, Any], row: dict[str, OpCell]) -> tuple[str, str]:
    """(verdict, one-line reason) for one raw record and its matrix row."""
    error = f"{record.get('error_class')}: {record.get('error_line')}"
    if record.get("trace") is None:
        stage = record.get("stage", "start")
        if stage in ("start", "build"):
            return "fails_to_build", f"building the tiny model failed: {error}"
        if record.get("cpu_checked") and record.get("cpu_error"):
            return "fails_to_build", f"the step fails on plain CPU too ({record['cpu_error']})"
        if stage == "cpu-check":
            return "fails_on_neuron", f"the step failed on neuron ({error}); the CPU check did not finish"
        suffix = "; it steps fine on CPU" if record.get("cpu_checked") else ""
        return "fails_on_neuron", f"the step failed on neuron: {error}{suffix}"
    by_status: dict[str, list[str]] = {}
    for op, cell in row.items():
        by_status.setdefault(cell.status, []).append(op)
    if by_status.get("unsupported"):
        return "fails_on_neuron", f"unsupported on neuron: {', '.join(by_status['unsupported'])}"
    slow = by_status.get("cpu_fallback", []) + by_status.get("unknown", [])
    if slow:
        return "fallbacks", f"{len(slow)} op(s) not native: {', '.join(sorted(slow)[:6])}" + (
            ", ..." if len(slow) > 6 else "")
    return "native", "every op native"


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
    return "neuron-migrate trace " + " ".join(flags) + (f" (+ config values {', '.join(rest)}, which --hf-config cannot spell)" if rest else "")


def arch_result(record: dict[str, Any], inference: bool) -> ArchResult:
    """Turn one raw record (see fleet.worker / fleet.runner) into an ArchResult."""
    trace = _build(TraceResult, record["trace"], record["model_type"]) if record.get("trace") else None
    row = cells(trace) if trace else {}
    verdict, reason = verdict_of(record, row)
    return ArchResult(
        model_type=record["model_type"], task=record["task"], architecture=record["architecture"],
        verdict=verdict, reason=reason, stage=record.get("stage", "start"), outcome=record.get("outcome", "ok"),
        reproduce=reproduce(record, inference), error_class=record.get("error_class"),
        error_line=record.get("error_line"), error_where=record.get("error_where") or None,
        cpu_error=record.get("cpu_error"), seconds=record.get("seconds"), cached=bool(record.get("cached")),
        error_op=record.get("error_op") if verdict == "fails_on_neuron" else None,
        error_dtypes=tuple(record.get("error_dtypes") or ()),
        coverage=trace.coverage if trace else None, ops=row, notes=trace.notes if trace else (),
    )


def rank_ops(archs: list[ArchResult], unlock_limit: int = 50) -> list[OpRank]:
    """Ops ranked by architectures blocked (unsupported, or the step raised inside the op), then blocked +
    slowed, then alone-blocking; with the greedy unlock order over the architectures whose trace completed (each
    step implements the op that makes the most remaining architectures native)."""
    affected: dict[str, dict[str, str]] = {}
    calls: Counter = Counter()
    for arch in archs:
        for op, cell in arch.ops.items():
            if cell.status != "native":
                affected.setdefault(op, {})[arch.model_type] = cell.status
                calls[op] += cell.calls
    failing: dict[str, set[str]] = {}
    for arch in archs:
        if arch.error_op:
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
        ranks.append(OpRank(op=op, blocks=blocks, fails=len(failed), slows=len(where) - blocks, sole=sole[op],
                            calls=calls[op], architectures=tuple(sorted(set(where) | failed)),
                            unlock_step=step[0] if step else None, unlocks=step[1] if step else 0,
                            cumulative_native=step[2] if step else None))
    return sorted(ranks, key=lambda r: (-(r.blocks + r.fails), -(r.blocks + r.fails + r.slows), -r.sole, r.op))


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


def summarize(archs: list[ArchResult], inference: bool, opdb: str) -> FleetSummary:
    """Verdict counts and shares (see the module docstring for the definitions)."""
    counts = {v: sum(1 for a in archs if a.verdict == v) for v in VERDICTS}
    total = len(archs)
    buildable = total - counts["fails_to_build"]
    phases = "forward" if inference else "forward, backward, AdamW step"
    unlockable = counts["native"] + sum(1 for a in archs if a.ops and a.verdict in ("fallbacks", "fails_on_neuron"))
    return FleetSummary(
        total=total, counts=counts, native_share=counts["native"] / total if total else 0.0,
        runs_share=(counts["native"] + counts["fallbacks"]) / total if total else 0.0, buildable=buildable,
        native_share_of_buildable=counts["native"] / buildable if buildable else 0.0,
        native_if_all_unlocked=unlockable,
        definition=DEFINITION.format(phases=phases, opdb=opdb, total=total),
    )


def build_result(run: Any, task: str, inference: bool, device: str) -> FleetResult:
    """The FleetResult of a `fleet.runner.FleetRun`, architectures in enumeration order."""
    archs = [arch_result(run.records[a.model_type], inference) for a in run.architectures
             if a.model_type in run.records]
    ranking = rank_ops(archs)
    ops = tuple(sorted({op for a in archs for op in a.ops}))
    return FleetResult(
        task=task, mode="inference" if inference else "train", device=device, versions=dict(run.versions),
        opdb_version=run.opdb_version, opdb_pre_release=run.opdb_pre_release,
        summary=summarize(archs, inference, run.opdb_version), architectures=tuple(archs),
        ranking=tuple(ranking), ops=ops, traced=run.traced, from_cache=run.from_cache,
        backend=", ".join(sorted({r["trace"]["device"] for r in run.records.values() if r.get("trace")})),
        generated=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
