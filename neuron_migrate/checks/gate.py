"""The CI gate: one pure function from findings, traced ops, a policy and an optional baseline to a
verdict."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from neuron_migrate.checks.baseline import Baseline, finding_key, op_key
from neuron_migrate.checks.policy import Policy
from neuron_migrate.model import Coverage, Finding, OpUse


@dataclass(frozen=True)
class Problem:
    """One reason the gate failed, with where it is (a file position, an op's call site, or a threshold)."""

    kind: str  # "finding" | "op" | "threshold"
    name: str  # rule code, op name, or threshold name
    location: str
    message: str


@dataclass(frozen=True)
class Verdict:
    passed: bool
    problems: tuple[Problem, ...]
    removable: tuple[str, ...]  # baseline entries that are gone: drop them
    allowed: tuple[str, ...]  # allow-list entries that matched something, with their reasons
    coverage: Coverage
    findings_checked: int
    ops_checked: int


def _op_location(use: OpUse) -> str:
    return use.call_sites[0].location if use.call_sites else "(no user call site)"


def evaluate(
    findings: list[Finding], ops: list[OpUse], policy: Policy, baseline: Baseline | None = None
) -> Verdict:
    """Apply thresholds to everything and, with a baseline, fail on what is new; allow-listed items never
    fail."""
    problems: list[Problem] = []
    used: set[str] = set()

    def allowed(item, test) -> bool:
        hits = [a for a in policy.allow if test(a, item)]
        used.update(a.describe() for a in hits)
        return bool(hits)

    live_findings = [f for f in findings if not allowed(f, lambda a, f: a.covers_finding(f))]
    live_ops = [u for u in ops if not allowed(u, lambda a, u: a.covers_op(u))]

    seen: Counter = Counter()
    for finding in live_findings:
        key = finding_key(finding)
        seen[key] += 1
        is_new = baseline is None or seen[key] > baseline.findings.get(key, 0)
        if is_new and policy.finding_fails(finding):
            label = "new finding" if baseline is not None else "finding"
            problems.append(Problem("finding", finding.code, finding.location, f"{label}: {finding.message}"))

    coverage = Coverage.of(live_ops)
    by_op: dict[tuple[str, str], list[OpUse]] = defaultdict(list)
    for use in live_ops:
        by_op[op_key(use)].append(use)
    if baseline is not None:
        for (op, status), uses in sorted(by_op.items()):
            if status in ("cpu_fallback", "unsupported") and (op, status) not in baseline.ops:
                calls = sum(u.count for u in uses)
                problems.append(
                    Problem(
                        "op", op, _op_location(uses[0]), f"new {status.replace('_', ' ')} op ({calls} calls)"
                    )
                )
    problems += _thresholds(coverage, policy)

    removable: list[str] = []
    if baseline is not None:
        now = Counter(finding_key(f) for f in findings)
        for (code, path, source), count in sorted(baseline.findings.items()):
            if now[(code, path, source)] < count:
                removable.append(f"{code} {path}: {source}")
        present = {op_key(u) for u in ops}
        removable += [f"{op} ({status})" for op, status in sorted(baseline.ops - present)]
    return Verdict(
        not problems,
        tuple(problems),
        tuple(removable),
        tuple(sorted(used)),
        coverage,
        len(findings),
        len(ops),
    )


def _thresholds(coverage: Coverage, policy: Policy) -> list[Problem]:
    out: list[Problem] = []
    if policy.min_op_coverage is not None and sum(coverage.calls.values()):
        share = coverage.share("native", policy.coverage_by)
        if share < policy.min_op_coverage:
            out.append(
                Problem(
                    "threshold",
                    "min-op-coverage",
                    "traces",
                    f"native op coverage by {policy.coverage_by} is {share:.1%}, below "
                    f"{policy.min_op_coverage:.1%}",
                )
            )
    limits = (
        ("max-fallback-ops", "cpu_fallback", policy.max_fallback_ops),
        ("max-unsupported-ops", "unsupported", policy.max_unsupported_ops),
        ("max-unknown-ops", "unknown", policy.max_unknown_ops),
    )
    for name, status, limit in limits:
        count = coverage.ops.get(status, 0)
        if limit is not None and count > limit:
            out.append(
                Problem(
                    "threshold",
                    name,
                    "traces",
                    f"{count} distinct {status.replace('_', ' ')} ops, more than {limit}",
                )
            )
    return out
