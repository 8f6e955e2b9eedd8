"""The records every part of neuron-migrate shares.

Plain frozen dataclasses. Each top-level record serialises to JSON with a
`"schema": "neuron-migrate/<kind>/<n>"` tag so a scan or trace written today can be read by `report` and
`check` tomorrow. Paths inside records are relative to the scanned root and use `/` separators.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from neuron_migrate.errors import InputFileError

Severity = Literal["error", "warning", "info"]
FixSafety = Literal["safe", "unsafe", "none"]
Status = Literal["native", "cpu_fallback", "unsupported", "unknown"]
Phase = Literal["forward", "backward", "optimizer"]

SEVERITIES: tuple[str, ...] = ("error", "warning", "info")
STATUSES: tuple[str, ...] = ("native", "cpu_fallback", "unsupported", "unknown")
PHASES: tuple[str, ...] = ("forward", "backward", "optimizer")

SCAN_SCHEMA = "neuron-migrate/scan/1"
TRACE_SCHEMA = "neuron-migrate/trace/1"


@dataclass(frozen=True)
class Edit:
    """Replace the text between two positions (1-based lines, 0-based character columns) with `text`.

    In notebooks, `cell` is the 1-based code-cell number and lines are relative to that cell.
    """

    line: int
    col: int
    end_line: int
    end_col: int
    text: str
    cell: int | None = None


@dataclass(frozen=True)
class Fix:
    """A rewrite for one finding: what it does (`title`), how safe it is, and the edits."""

    title: str
    safety: FixSafety
    edits: tuple[Edit, ...] = ()


@dataclass(frozen=True)
class Finding:
    """One construct that ties code to CUDA, at an exact location.

    `cell` is the 1-based code-cell number for notebooks (lines are then relative to the cell). `guard` names
    the CUDA-only condition the code already sits under (e.g. `torch.cuda.is_available()`), if any;
    `replacement` what to move to, for a finding whose remedy is another library or API (NM701). `tied`: its
    automatic fix waits for CUDA code beside it that a person changes first (the message says which), and
    `fix` rewrites it once that is done.
    """

    code: str
    severity: Severity
    category: str
    path: str
    line: int
    col: int
    end_line: int
    end_col: int
    message: str
    source: str = ""
    fix: Fix | None = None
    cell: int | None = None
    guard: str | None = None
    replacement: str | None = None
    tied: bool = False

    @property
    def fix_safety(self) -> FixSafety:
        """How safely `fix` can rewrite this finding: its fix's safety, "none" without one."""
        return self.fix.safety if self.fix is not None else "none"

    @property
    def location(self) -> str:
        """`path:line:col`, or `path[cell N]:line:col` for notebooks (col 1-based for humans)."""
        where = f"{self.path}[cell {self.cell}]" if self.cell is not None else self.path
        return f"{where}:{self.line}:{self.col + 1}"

    @property
    def fingerprint(self) -> str:
        """A location-independent identity: rule, file and the normalised source text (survives line
        moves)."""
        text = re.sub(r"\s+", " ", self.source).strip()
        digest = hashlib.sha256(f"{self.code}\0{self.path}\0{text}".encode()).hexdigest()
        return digest[:16]


@dataclass(frozen=True)
class FileError:
    """A file the scan could not analyse; it also appears as an NM9xx finding."""

    path: str
    reason: str


@dataclass(frozen=True)
class ScanResult:
    """Everything one `scan` run found."""

    root: str
    findings: tuple[Finding, ...]
    files_scanned: int
    files_skipped_by_prefilter: int = 0
    files_from_cache: int = 0
    errors: tuple[FileError, ...] = ()
    tool_version: str = ""
    schema: str = SCAN_SCHEMA
    #: the projects' torch requirements that stop below the torch TorchNeuron needs, and where
    torch_caps: tuple[str, ...] = ()


@dataclass(frozen=True)
class CallSite:
    """A line of user code that caused an op, with how many calls came from it."""

    path: str
    line: int
    function: str = ""
    count: int = 1

    @property
    def location(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class OpUse:
    """One ATen overload a traced model executed, with dtypes, where and how often, and what the opdb says."""

    op: str
    dtypes: tuple[str, ...]
    count: int
    phase: Phase
    call_sites: tuple[CallSite, ...] = ()
    status: Status = "unknown"
    note: str = ""
    source: str = ""
    observed: Status | None = None


@dataclass(frozen=True)
class Coverage:
    """How many distinct ops and how many op calls fall in each status."""

    ops: dict[str, int] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)

    @staticmethod
    def of(uses: tuple[OpUse, ...] | list[OpUse]) -> Coverage:
        """Count distinct ops by their worst status over dtypes and phases, and calls by status."""
        rank = {s: i for i, s in enumerate(("native", "unknown", "cpu_fallback", "unsupported"))}
        worst: dict[str, str] = {}
        calls = dict.fromkeys(STATUSES, 0)
        for use in uses:
            calls[use.status] += use.count
            prev = worst.get(use.op)
            if prev is None or rank[use.status] > rank[prev]:
                worst[use.op] = use.status
        ops = dict.fromkeys(STATUSES, 0)
        for status in worst.values():
            ops[status] += 1
        return Coverage(ops=ops, calls=calls)

    def share(self, status: str, by: Literal["ops", "calls"] = "calls") -> float:
        counts = self.ops if by == "ops" else self.calls
        total = sum(counts.values())
        return counts.get(status, 0) / total if total else 1.0


@dataclass(frozen=True)
class TraceResult:
    """What one `trace` run of one target recorded."""

    target: str
    device: str  # "torch-neuronx" | "stand-in" (C++) | "stand-in-python" | "fake"
    phases: tuple[str, ...]
    opdb_version: str
    opdb_pre_release: bool
    ops: tuple[OpUse, ...]
    coverage: Coverage
    observed_fallbacks: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    error: str | None = None
    tool_version: str = ""
    schema: str = TRACE_SCHEMA
    # set with `error`: "neuron" (stops where Trainium stops), "stand_in" (a limitation of the stand-in, never
    # a neuron failure), "target" (the user's code or model), "timeout" / "memory" / "crash" (the bounded
    # child)
    error_kind: str | None = None


# --- JSON round trip -------------------------------------------------------------------------------------


def to_dict(record: Any) -> Any:
    """A JSON-ready dict of any record above, keeping field order."""
    if dataclasses.is_dataclass(record):
        return {f.name: to_dict(getattr(record, f.name)) for f in dataclasses.fields(record)}
    if isinstance(record, (list, tuple)):
        return [to_dict(item) for item in record]
    if isinstance(record, dict):
        return {key: to_dict(value) for key, value in record.items()}
    return record


def to_json(record: Any) -> str:
    """Serialise a record; the schema tag comes first."""
    data = to_dict(record)
    if isinstance(data, dict) and "schema" in data:
        data = {"schema": data.pop("schema"), **data}
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _build(cls: type, data: Any, where: str) -> Any:
    """Rebuild a dataclass from JSON data, nested records included."""
    hints = {f.name: f for f in dataclasses.fields(cls)}
    nested = {
        Finding: {"fix": Fix},
        Fix: {"edits": Edit},
        ScanResult: {"findings": Finding, "errors": FileError},
        OpUse: {"call_sites": CallSite},
        TraceResult: {"ops": OpUse, "coverage": Coverage},
    }.get(cls, {})
    if not isinstance(data, dict):
        raise InputFileError(f"{where}: expected an object for {cls.__name__}, got {type(data).__name__}")
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        if name not in hints:
            continue  # newer minor fields are ignored, not fatal
        sub = nested.get(name)
        if sub is not None and value is not None:
            if isinstance(value, list):
                value = tuple(_build(sub, item, where) for item in value)
            else:
                value = _build(sub, value, where)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except TypeError as err:
        raise InputFileError(f"{where}: not a valid {cls.__name__} record ({err})") from None


def from_json(text: str, expected: type, where: str) -> Any:
    """Parse a scan or trace JSON document, checking its schema tag; errors name the file and the fix."""
    schema = {ScanResult: SCAN_SCHEMA, TraceResult: TRACE_SCHEMA}[expected]
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputFileError(
            f"{where}: not valid JSON ({err.msg} at line {err.lineno}); regenerate it"
        ) from None
    got = data.get("schema") if isinstance(data, dict) else None
    kind = schema.split("/")[1]
    if got is None or got.rsplit("/", 1)[0] != schema.rsplit("/", 1)[0]:
        raise InputFileError(
            f"{where}: not a neuron-migrate {kind} file (schema {got!r}, expected {schema!r}); "
            f"write one with `neuron-migrate {kind} --format json`"
        )
    return _build(expected, data, where)


# --- effort and report (reports.effort and reports.build build them, reports.render renders them) -----------

REPORT_SCHEMA = "neuron-migrate/report/1"


@dataclass(frozen=True)
class EffortWeight:
    """One row of the effort table: a bucket of work, its engineer-hours range, and what the bucket means."""

    bucket: str
    low: float
    likely: float
    high: float
    meaning: str
    overridden: bool = False


@dataclass(frozen=True)
class EffortItem:
    """The estimate for one finding (`subject="finding"`, `code` = rule code) or one non-native op
    (`subject="op"`, `code` = ATen overload, `category` = its status), with the reason in one line.

    `occurrence` counts findings of the same rule in the same file (1 = the first, at full weight);
    `calls` and `call_sites` are the op's calls summed over every merged trace.
    """

    subject: Literal["finding", "op"]
    code: str
    bucket: str
    category: str
    path: str
    line: int
    low: float
    likely: float
    high: float
    reason: str
    message: str = ""
    source: str = ""
    help_uri: str = ""
    occurrence: int = 1
    fixable: FixSafety = "none"
    calls: int = 0
    dtypes: tuple[str, ...] = ()
    call_sites: tuple[CallSite, ...] = ()


@dataclass(frozen=True)
class EffortTotal:
    """A sum of items grouped by a key (a category, a file or an op), ranked by likely hours."""

    key: str
    low: float
    likely: float
    high: float
    items: int
    detail: str = ""


@dataclass(frozen=True)
class Lever:
    """One change and what it unblocks: the findings and fallback/unsupported calls it removes."""

    action: str
    removes_findings: int
    removes_calls: int
    low: float
    likely: float
    high: float


@dataclass(frozen=True)
class Effort:
    """Every item's estimate, the totals and rankings, and the weights that produced them."""

    low: float
    likely: float
    high: float
    hours_per_day: float
    repeat_factor: float
    weights: tuple[EffortWeight, ...]
    items: tuple[EffortItem, ...]
    by_category: tuple[EffortTotal, ...]
    by_file: tuple[EffortTotal, ...]
    by_op: tuple[EffortTotal, ...]
    unblocks: tuple[Lever, ...]


@dataclass(frozen=True)
class OpSource:
    """Where the op data of a report came from: one trace run and the opdb snapshot it looked ops up in."""

    target: str
    device: str
    opdb_version: str
    opdb_pre_release: bool
    ops: int
    calls: int
    error: str | None = None
    notes: tuple[str, ...] = ()
    error_kind: str | None = (
        None  # as in TraceResult: "stand_in" is a stand-in limitation, not a neuron failure
    )


@dataclass(frozen=True)
class Report:
    """What `report` renders: the verdict, the scan's findings, the merged traces' ops, and the effort."""

    root: str
    verdict: str
    summary: str
    files_scanned: int
    findings: tuple[Finding, ...]
    ops: tuple[OpUse, ...]
    coverage: Coverage | None
    op_sources: tuple[OpSource, ...]
    opdb_pre_release: bool
    effort: Effort
    generated: str = ""
    tool_version: str = ""
    schema: str = REPORT_SCHEMA
