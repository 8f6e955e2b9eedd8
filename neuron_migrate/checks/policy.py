"""The gate's policy: thresholds and allow-lists from `[tool.neuron-migrate.check]`, overridden by flags."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

from neuron_migrate.errors import ConfigError, UsageError
from neuron_migrate.model import SEVERITIES, Finding, OpUse

_THRESHOLDS = {
    "min-op-coverage": float,
    "max-fallback-ops": int,
    "max-unsupported-ops": int,
    "max-unknown-ops": int,
}
_KNOWN = {*_THRESHOLDS, "coverage-by", "fail-on-findings", "baseline", "allow"}


@dataclass(frozen=True)
class Allowance:
    """One allow-list entry: an op (optionally one dtype), a rule code or prefix, or a path glob, and why."""

    kind: str  # "op" | "rule" | "path"
    value: str
    reason: str
    dtype: str | None = None

    def covers_op(self, use: OpUse) -> bool:
        return (
            self.kind == "op"
            and _same_op(self.value, use.op)
            and (self.dtype is None or self.dtype in use.dtypes)
        )

    def covers_finding(self, finding: Finding) -> bool:
        if self.kind == "rule":
            return finding.code.startswith(self.value.upper())
        if self.kind == "path":
            return fnmatch.fnmatch(finding.path, self.value) or finding.path.startswith(
                self.value.rstrip("/") + "/"
            )
        return False

    def describe(self) -> str:
        what = f"{self.value}:{self.dtype}" if self.dtype else self.value
        return f"{self.kind} {what} — {self.reason}"


def _same_op(pattern: str, op: str) -> bool:
    """`aten::linalg_qr` matches every overload; `aten::add.Tensor` only itself."""
    pattern = pattern if "::" in pattern else f"aten::{pattern}"
    return op == pattern or ("." not in pattern.split("::", 1)[1] and op.split(".")[0] == pattern)


@dataclass(frozen=True)
class Policy:
    """What makes `check` fail."""

    min_op_coverage: float | None = None
    coverage_by: str = "calls"
    max_fallback_ops: int | None = None
    max_unsupported_ops: int | None = 0
    max_unknown_ops: int | None = None
    fail_on_severity: str | None = "warning"  # findings at or above this severity fail
    fail_on_codes: tuple[str, ...] = ()  # or: findings with these codes/prefixes fail
    allow: tuple[Allowance, ...] = field(default_factory=tuple)

    def finding_fails(self, finding: Finding) -> bool:
        if self.fail_on_codes:
            return any(finding.code.startswith(code) for code in self.fail_on_codes)
        if self.fail_on_severity is None:
            return False
        return SEVERITIES.index(finding.severity) <= SEVERITIES.index(self.fail_on_severity)


def parse_allowance(kind: str, text: str) -> Allowance:
    """`aten::linalg_qr:float32=why` / `NM410=why` / `vendor/**=why` (the reason is required)."""
    value, sep, reason = text.partition("=")
    if not sep or not reason.strip() or not value.strip():
        raise UsageError(
            f"--allow-{kind} {text!r}: write VALUE=REASON (a reason is required, e.g. "
            f"'aten::linalg_qr:float32=QR runs once per epoch')"
        )
    dtype = None
    if kind == "op" and value.count(":") in (1, 3):  # aten::op:dtype, or op:dtype
        value, dtype = value.rsplit(":", 1)
    return Allowance(kind, value.strip(), reason.strip(), dtype)


def parse_fail_on(value: str) -> tuple[str | None, tuple[str, ...]]:
    """`warning` -> severity; `none` -> nothing fails; `NM1,NM401` -> codes."""
    value = value.strip()
    if value.lower() in SEVERITIES:
        return value.lower(), ()
    if value.lower() == "none":
        return None, ()
    codes = tuple(part.strip().upper() for part in value.split(",") if part.strip())
    if not codes or not all(code.startswith("NM") for code in codes):
        raise UsageError(
            f"--fail-on-findings {value!r}: give a severity (error, warning, info), none, "
            "or rule codes like NM1,NM401"
        )
    return None, codes


def policy_from(config: dict[str, Any], flags: dict[str, Any], where: str) -> Policy:
    """Merge `[tool.neuron-migrate.check]` (validated) with flags (non-None flags win)."""
    unknown = sorted(set(config) - _KNOWN)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key {unknown[0]!r} in [tool.neuron-migrate.check]; known: "
            f"{', '.join(sorted(_KNOWN))}"
        )
    values: dict[str, Any] = {}
    for key, kind in _THRESHOLDS.items():
        raw = flags.get(key) if flags.get(key) is not None else config.get(key)
        if raw is None:
            continue
        if (
            isinstance(raw, bool)
            or not isinstance(raw, (int, float))
            or (kind is int and not float(raw).is_integer())
        ):
            raise ConfigError(f"{where}: check.{key} must be a {kind.__name__}, got {raw!r}")
        if raw < 0 or (key == "min-op-coverage" and raw > 1):
            raise UsageError(
                f"{key} {raw}: out of range" + (" (0 to 1)" if key == "min-op-coverage" else " (>= 0)")
            )
        values[key.replace("-", "_")] = kind(raw)
    coverage_by = flags.get("coverage-by") or config.get("coverage-by", "calls")
    if coverage_by not in ("ops", "calls"):
        raise UsageError(f"--coverage-by {coverage_by!r}: choose ops or calls")
    fail_on = flags.get("fail-on-findings") or config.get("fail-on-findings")
    if fail_on is not None:
        values["fail_on_severity"], values["fail_on_codes"] = parse_fail_on(str(fail_on))
    allow = [_config_allowance(entry, where) for entry in config.get("allow", [])]
    for kind in ("op", "rule", "path"):
        allow += [parse_allowance(kind, text) for text in flags.get(f"allow-{kind}") or ()]
    return Policy(coverage_by=coverage_by, allow=tuple(allow), **values)


def _config_allowance(entry: Any, where: str) -> Allowance:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: check.allow entries must be tables like {{op = '...', reason = '...'}}")
    kinds = [k for k in ("op", "rule", "path") if k in entry]
    reason = entry.get("reason")
    if len(kinds) != 1 or not isinstance(reason, str) or not reason.strip():
        raise ConfigError(
            f"{where}: check.allow entry {entry!r} needs exactly one of op/rule/path and a reason"
        )
    return Allowance(kinds[0], str(entry[kinds[0]]), reason.strip(), entry.get("dtype"))
