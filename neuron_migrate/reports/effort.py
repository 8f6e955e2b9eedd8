"""The effort model: each finding and each non-native op gets low / likely / high engineer-hours and a reason.

The weights live in one table (`DEFAULT_WEIGHTS`), can be overridden under `[tool.neuron-migrate.effort]`, and
are printed in every report, so an estimate can be argued with. Two adjustments, both explicit:

- learning curve: the first finding of a rule in a file costs the full weight; every further finding of the
  same rule in the same file costs `repeat-factor` times it (default 0.3: the pattern is known by then);
- frequency: an op that falls back to CPU costs its weight times `1 + log10(calls)`, calls summed over the
  traced steps (1 call x1, 10 calls x2, 1000 calls x4): a hot fallback must be fixed, a cold one can stay.

docs/report.md explains the table and how to read the estimate.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from neuron_migrate.errors import ConfigError
from neuron_migrate.migrate.rule import load_rules
from neuron_migrate.model import (
    CallSite,
    Effort,
    EffortItem,
    EffortTotal,
    EffortWeight,
    Finding,
    Lever,
    OpUse,
    TraceResult,
)
from neuron_migrate.reports.words import plural

#: bucket -> (low, likely, high engineer-hours, what it stands for); documented in docs/report.md
DEFAULT_WEIGHTS: dict[str, tuple[float, float, float, str]] = {
    "safe-fix": (0.05, 0.1, 0.25, "safe automatic fix: review the rewrite (minutes)"),
    "unsafe-fix": (
        0.25,
        0.5,
        1.0,
        "automatic fix that changes behaviour: review and test it (tens of minutes)",
    ),
    "tied-fix": (
        0.05,
        0.1,
        0.25,
        "automatic fix that waits for the CUDA code it is tied to: rerun `fix` once a person changed that "
        "code, and review the rewrite (minutes)",
    ),
    "no-equivalent": (1.0, 2.0, 6.0, "CUDA API with no automatic fix: rewrite by hand (hours)"),
    "note": (0.0, 0.0, 0.0, "information: works on Trainium as it is, no change needed"),
    "cuda-library": (8.0, 16.0, 40.0, "CUDA-only library: move to the named replacement (days)"),
    "custom-kernel": (
        16.0,
        40.0,
        80.0,
        "custom CUDA/Triton kernel: port to PyTorch ops or NKI (days per kernel)",
    ),
    "cpu-fallback": (
        2.0,
        4.0,
        8.0,
        "op that falls back to CPU: avoid it or add a kernel (hours, x frequency)",
    ),
    "unsupported-op": (
        8.0,
        16.0,
        40.0,
        "op Neuron does not support: replace it or write an NKI kernel (days)",
    ),
    "unknown-op": (0.5, 1.0, 2.0, "op no source has a status for: probe it on hardware (an hour)"),
    "unanalysed-file": (0.25, 0.5, 2.0, "file the scan could not read or parse: look at it by hand"),
}
DEFAULT_REPEAT_FACTOR = 0.3
DEFAULT_HOURS_PER_DAY = 8.0
_OP_BUCKET = {"cpu_fallback": "cpu-fallback", "unsupported": "unsupported-op", "unknown": "unknown-op"}
_OP_REASON = {
    "unsupported-op": "unsupported on Neuron: replace the op or write an NKI kernel",
    "unknown-op": "no source establishes its status: probe it on a Neuron device",
}
TOP_LEVERS = 5


@dataclass(frozen=True)
class EffortSettings:
    """The weights table and the two adjustments, after `[tool.neuron-migrate.effort]` is applied."""

    weights: dict[str, tuple[float, float, float]] = field(
        default_factory=lambda: {k: v[:3] for k, v in DEFAULT_WEIGHTS.items()}
    )
    repeat_factor: float = DEFAULT_REPEAT_FACTOR
    hours_per_day: float = DEFAULT_HOURS_PER_DAY
    overridden: frozenset[str] = frozenset()

    def table(self) -> tuple[EffortWeight, ...]:
        """The weights as report rows, in the documented order."""
        return tuple(
            EffortWeight(
                bucket,
                *self.weights[bucket],
                meaning=DEFAULT_WEIGHTS[bucket][3],
                overridden=bucket in self.overridden,
            )
            for bucket in DEFAULT_WEIGHTS
        )


def settings_from_config(raw: dict[str, Any], where: str = "[tool.neuron-migrate.effort]") -> EffortSettings:
    """Validate the raw `effort` table: buckets map to `[low, likely, high]` hours; plus `repeat-factor`
    (0 < f <= 1) and `hours-per-day` (> 0). Any mistake is a one-line ConfigError."""
    known = [*DEFAULT_WEIGHTS, "repeat-factor", "hours-per-day"]
    weights = {k: v[:3] for k, v in DEFAULT_WEIGHTS.items()}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in known:
            raise ConfigError(f"{where}: unknown key {key!r}; known keys: {', '.join(known)}")
        if key in DEFAULT_WEIGHTS:
            weights[key] = _hours_triple(key, value, where)
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ConfigError(f"{where}: {key} must be a number, got {value!r}")
        if key == "repeat-factor" and not 0 < value <= 1:
            raise ConfigError(f"{where}: repeat-factor must be > 0 and <= 1, got {value!r}")
        if key == "hours-per-day" and not 0 < value <= 24:
            raise ConfigError(f"{where}: hours-per-day must be > 0 and <= 24, got {value!r}")
        values[key.replace("-", "_")] = float(value)
    overridden = frozenset(k for k in raw if k in DEFAULT_WEIGHTS)
    return EffortSettings(weights=weights, overridden=overridden, **values)


def _hours_triple(key: str, value: Any, where: str) -> tuple[float, float, float]:
    ok = (
        isinstance(value, list)
        and len(value) == 3
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in value)
    )
    if not ok:
        raise ConfigError(
            f"{where}: {key} must be [low, likely, high] engineer-hours (numbers >= 0), got {value!r}"
        )
    low, likely, high = (float(v) for v in value)
    if not low <= likely <= high:
        raise ConfigError(f"{where}: {key} must satisfy low <= likely <= high, got {value!r}")
    return low, likely, high


# --- findings ---------------------------------------------------------------------------------------------


def finding_bucket(finding: Finding, kernel_sources: bool = False) -> str:
    """Which row of the table a finding costs: the row its rule names (`Rule.effort`), else by how it can be
    fixed (a fix that waits for the CUDA code it is tied to costs a review, like a safe one: the work is
    counted at that code).

    A rule that builds kernels (a CUDA extension) is the kernel port itself only when the scan saw no kernel
    source to count it at; otherwise it is the build wiring, hours of work, so one kernel is not counted
    twice.
    """
    rule = load_rules().get(finding.code)
    if rule is not None and rule.builds_kernels and kernel_sources:
        return "no-equivalent"
    if rule is not None and rule.effort is not None:
        return rule.effort
    if finding.severity == "info" and finding.fix is None:
        return "note"
    if finding.tied:
        return "tied-fix"
    return {"safe": "safe-fix", "unsafe": "unsafe-fix"}.get(finding.fix_safety, "no-equivalent")


def _finding_reason(finding: Finding, bucket: str) -> str:
    rule = load_rules().get(finding.code)
    if rule is not None and rule.builds_kernels and bucket == "no-equivalent":
        return "extension build wiring: make it CUDA-only (its kernels are counted at their .cu files)"
    if bucket == "cuda-library":
        return (
            f"CUDA-only library: move to {finding.replacement}"
            if finding.replacement
            else "CUDA-only library"
        )
    return {
        "safe-fix": "safe rewrite by `neuron-migrate fix`: review it",
        "unsafe-fix": "rewrite changes behaviour (`--unsafe-fixes`): review and test it",
        "tied-fix": "waits for the CUDA code it is tied to: `fix` rewrites it once that is done",
        "no-equivalent": "no automatic fix: rewrite by hand",
        "note": "information: no change needed",
        "custom-kernel": "custom kernel: port to PyTorch ops or an NKI kernel",
        "unanalysed-file": "not analysed: read the file by hand",
    }[bucket]


def estimate_findings(
    findings: tuple[Finding, ...] | list[Finding],
    settings: EffortSettings,
    help_uri: Callable[[str], str] = lambda code: "",
) -> list[EffortItem]:
    """One item per finding, in file and line order, with the learning-curve discount on repeats."""
    seen: dict[tuple[str, str], int] = defaultdict(int)
    rules = load_rules()
    kernel_sources = any(rules[f.code].file_level == "kernel-source" for f in findings if f.code in rules)
    items = []
    for finding in sorted(findings, key=lambda f: (f.path, f.cell or 0, f.line, f.col, f.code)):
        seen[finding.path, finding.code] += 1
        occurrence = seen[finding.path, finding.code]
        bucket = finding_bucket(finding, kernel_sources)
        factor = 1.0 if occurrence == 1 else settings.repeat_factor
        reason = _finding_reason(finding, bucket)
        if occurrence > 1:
            reason += f"; repeat #{occurrence} of {finding.code} in this file: x{settings.repeat_factor:g}"
        low, likely, high = (round(w * factor, 3) for w in settings.weights[bucket])
        items.append(
            EffortItem(
                subject="finding",
                code=finding.code,
                bucket=bucket,
                category=finding.category,
                path=finding.path,
                line=finding.line,
                low=low,
                likely=likely,
                high=high,
                reason=reason,
                message=finding.message,
                source=finding.source.strip(),
                help_uri=help_uri(finding.code),
                occurrence=occurrence,
                fixable=finding.fix_safety,
            )
        )
    return items


# --- ops --------------------------------------------------------------------------------------------------


def merge_ops(traces: list[TraceResult] | tuple[TraceResult, ...]) -> tuple[OpUse, ...]:
    """Fold every trace's OpUses into one per (op, phase, dtypes): counts and call sites add up."""
    merged: dict[tuple[str, str, tuple[str, ...]], OpUse] = {}
    rank = {"native": 0, "unknown": 1, "cpu_fallback": 2, "unsupported": 3}
    for trace in traces:
        for use in trace.ops:
            key = (use.op, use.phase, tuple(use.dtypes))
            prev = merged.get(key)
            if prev is None:
                merged[key] = use
                continue
            status = use.status if rank[use.status] > rank[prev.status] else prev.status
            merged[key] = replace(
                prev,
                count=prev.count + use.count,
                status=status,
                call_sites=_merge_sites(prev.call_sites + use.call_sites),
            )
    return tuple(sorted(merged.values(), key=lambda u: (u.op, u.phase, u.dtypes)))


def _merge_sites(sites: tuple[CallSite, ...]) -> tuple[CallSite, ...]:
    """Sum calls per path:line (and function), most calls first."""
    total: dict[tuple[str, int, str], int] = defaultdict(int)
    for site in sites:
        total[site.path, site.line, site.function] += site.count
    merged = [CallSite(path, line, function, count) for (path, line, function), count in total.items()]
    return tuple(sorted(merged, key=lambda s: (-s.count, s.path, s.line)))


def _worst(statuses: list[str]) -> str:
    rank = {"native": 0, "unknown": 1, "cpu_fallback": 2, "unsupported": 3}
    return max(statuses, key=rank.__getitem__)


def estimate_ops(
    ops: tuple[OpUse, ...],
    settings: EffortSettings,
    snippet: Callable[[str, int], str] = lambda path, line: "",
) -> list[EffortItem]:
    """One item per non-native ATen overload (phases and dtypes folded together: one fix covers them)."""
    by_op: dict[str, list[OpUse]] = defaultdict(list)
    for use in ops:
        if use.status != "native":
            by_op[use.op].append(use)
    items = []
    for op, uses in sorted(by_op.items()):
        status = _worst([u.status for u in uses])
        bucket = _OP_BUCKET[status]
        calls = sum(u.count for u in uses)
        sites = _merge_sites(tuple(s for u in uses for s in u.call_sites))
        factor, reason = 1.0, _OP_REASON.get(bucket, "")
        if bucket == "cpu-fallback":
            factor = 1 + math.log10(max(calls, 1))
            runs = plural(calls, "call")
            reason = f"falls back to CPU, {runs} per traced run: x{factor:.1f} (1 + log10 calls)"
        low, likely, high = (round(w * factor, 3) for w in settings.weights[bucket])
        top = sites[0] if sites else CallSite("", 0)
        dtypes = tuple(sorted({d for u in uses for d in u.dtypes}))
        note = next((u.note for u in uses if u.note), "")
        items.append(
            EffortItem(
                subject="op",
                code=op,
                bucket=bucket,
                category=status,
                path=top.path,
                line=top.line,
                low=low,
                likely=likely,
                high=high,
                reason=reason,
                message=note,
                source=snippet(top.path, top.line) if top.path else "",
                calls=calls,
                dtypes=dtypes,
                call_sites=sites,
            )
        )
    return items


# --- totals, rankings and levers --------------------------------------------------------------------------


def _total(key: str, items: list[EffortItem], detail: str = "") -> EffortTotal:
    return EffortTotal(
        key,
        round(sum(i.low for i in items), 2),
        round(sum(i.likely for i in items), 2),
        round(sum(i.high for i in items), 2),
        len(items),
        detail,
    )


def _ranked(
    groups: dict[str, list[EffortItem]], detail: Callable[[list[EffortItem]], str]
) -> tuple[EffortTotal, ...]:
    totals = [_total(key, items, detail(items)) for key, items in groups.items()]
    return tuple(sorted(totals, key=lambda t: (-t.likely, -t.high, t.key)))


def _file_detail(items: list[EffortItem]) -> str:
    findings = sum(i.subject == "finding" for i in items)
    ops = len(items) - findings
    parts = [plural(findings, "finding")] if findings else []
    return ", ".join(parts + ([plural(ops, "op")] if ops else []))


def _sites_detail(items: list[EffortItem]) -> str:
    sites = items[0].call_sites
    shown = ", ".join(f"{s.location} ({s.count})" for s in sites[:3])
    return shown + (f", +{len(sites) - 3} more" if len(sites) > 3 else "")


def levers(items: list[EffortItem], top: int = TOP_LEVERS) -> tuple[Lever, ...]:
    """The few changes that remove the most findings and blocked (non-native) op calls, best first.

    Score = share of all findings removed + share of all blocked calls removed, so a lever that clears half of
    either counts 0.5; ties go to the cheaper lever.
    """
    findings = [i for i in items if i.subject == "finding"]
    total_findings = max(len(findings), 1)
    total_calls = max(sum(i.calls for i in items if i.subject == "op" and i.category != "unknown"), 1)
    scored = []
    for action, group, calls in _lever_candidates(items):
        removed = sum(i.subject == "finding" for i in group)
        cost = _total(action, group)
        lever = Lever(action, removed, calls, cost.low, cost.likely, cost.high)
        scored.append((-(removed / total_findings + calls / total_calls), cost.likely, action, lever))
    return tuple(lever for *_, lever in sorted(scored, key=lambda s: s[:3])[:top])


def _lever_candidates(items: list[EffortItem]) -> list[tuple[str, list[EffortItem], int]]:
    """(action, the items it resolves, the blocked calls it removes) for: every safe fix at once; each other
    rule everywhere; each non-native op; each source line that causes two or more non-native ops."""
    findings = [i for i in items if i.subject == "finding"]
    ops = [i for i in items if i.subject == "op"]
    candidates = []
    safe = [i for i in findings if i.bucket == "safe-fix"]
    if safe:
        action = f"Apply the safe rewrites: `neuron-migrate fix --write` ({plural(len(safe), 'finding')})"
        candidates.append((action, safe, 0))
    by_rule: dict[str, list[EffortItem]] = defaultdict(list)
    for item in findings:
        if item.bucket != "safe-fix":
            by_rule[item.code].append(item)
    for code, group in by_rule.items():
        files = plural(len({i.path for i in group}), "file")
        candidates.append((f"Resolve {code} ({len(group)} in {files})", group, 0))
    blocked = {op.code: op.calls if op.category != "unknown" else 0 for op in ops}
    for op in ops:
        where = f" at {op.call_sites[0].location}" if op.call_sites else ""
        verb = "Probe" if op.category == "unknown" else "Replace or get a kernel for"
        candidates.append((f"{verb} `{op.code}`{where}", [op], blocked[op.code]))
    by_line: dict[str, list[tuple[EffortItem, int]]] = defaultdict(list)
    for op in ops:
        for site in op.call_sites:
            by_line[site.location].append((op, site.count if blocked[op.code] else 0))
    for location, pairs in by_line.items():
        if len(pairs) >= 2:
            action = f"Rewrite {location} ({len(pairs)} non-native ops)"
            candidates.append((action, [op for op, _ in pairs], sum(n for _, n in pairs)))
    return candidates


def build_effort(
    findings: tuple[Finding, ...],
    ops: tuple[OpUse, ...],
    settings: EffortSettings,
    help_uri: Callable[[str], str] = lambda code: "",
    snippet: Callable[[str, int], str] = lambda path, line: "",
) -> Effort:
    """Estimate every finding and non-native op, then total and rank them."""
    items = estimate_findings(findings, settings, help_uri) + estimate_ops(ops, settings, snippet)
    by_category: dict[str, list[EffortItem]] = defaultdict(list)
    by_file: dict[str, list[EffortItem]] = defaultdict(list)
    for item in items:
        by_category[item.category if item.subject == "finding" else f"op: {item.category}"].append(item)
        by_file[item.path or "(no call site)"].append(item)
    op_groups = {i.code: [i] for i in items if i.subject == "op"}
    total = _total("total", items)
    return Effort(
        low=total.low,
        likely=total.likely,
        high=total.high,
        hours_per_day=settings.hours_per_day,
        repeat_factor=settings.repeat_factor,
        weights=settings.table(),
        items=tuple(items),
        by_category=_ranked(by_category, lambda group: ""),
        by_file=_ranked(by_file, _file_detail),
        by_op=_ranked(op_groups, _sites_detail),
        unblocks=levers(items),
    )
