"""The baseline: today's findings and non-native ops, so CI fails only on what is new.

Findings match on rule, file and the normalised text of the source line (not the line number), counted, so a
moved line still matches and a second copy of an old line is new. Ops match on overload and status. The
baseline only shrinks: writing one that would grow needs `--update-baseline`.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from neuron_migrate.errors import InputFileError, UsageError
from neuron_migrate.model import Finding, OpUse
from neuron_migrate.reports.output import write_output

BASELINE_SCHEMA = "neuron-migrate/baseline/1"


def finding_key(finding: Finding) -> tuple[str, str, str]:
    """(rule, path, normalised source text): survives line moves and edits elsewhere in the file."""
    return finding.code, finding.path, re.sub(r"\s+", " ", finding.source).strip()


def op_key(use: OpUse) -> tuple[str, str]:
    return use.op, use.status


@dataclass(frozen=True)
class Baseline:
    """Counted finding keys and op keys recorded at some point in time."""

    findings: Counter
    ops: frozenset[tuple[str, str]]

    @staticmethod
    def of(findings: list[Finding], ops: list[OpUse]) -> Baseline:
        return Baseline(
            Counter(finding_key(f) for f in findings),
            frozenset(op_key(u) for u in ops if u.status != "native"),
        )

    def to_json(self) -> str:
        rows = [
            {"code": c, "path": p, "source": s, "count": n} for (c, p, s), n in sorted(self.findings.items())
        ]
        ops = [{"op": o, "status": s} for o, s in sorted(self.ops)]
        return json.dumps({"schema": BASELINE_SCHEMA, "findings": rows, "ops": ops}, indent=2) + "\n"

    def grows_beyond(self, old: Baseline) -> bool:
        """Whether this baseline holds anything `old` did not (a ratchet may only shrink)."""
        return bool(self.findings - old.findings) or bool(self.ops - old.ops)


def load_baseline(path: Path) -> Baseline:
    """Read a baseline file; a missing or malformed one is one clear error line."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputFileError(
            f"{path}: baseline not found; create it with `neuron-migrate check --write-baseline {path}`"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputFileError(
            f"{path}: not a readable baseline ({err}); regenerate it with --write-baseline"
        ) from None
    if not isinstance(data, dict) or data.get("schema") != BASELINE_SCHEMA:
        raise InputFileError(
            f"{path}: not a neuron-migrate baseline (expected schema {BASELINE_SCHEMA!r}); "
            "regenerate it with --write-baseline"
        )
    try:
        findings = Counter({(r["code"], r["path"], r["source"]): int(r["count"]) for r in data["findings"]})
        ops = frozenset((r["op"], r["status"]) for r in data["ops"])
    except (KeyError, TypeError, ValueError) as err:
        raise InputFileError(
            f"{path}: malformed baseline entry ({type(err).__name__}: {err}); "
            "regenerate it with --write-baseline"
        ) from None
    return Baseline(findings, ops)


def write_baseline(path: Path, new: Baseline, allow_growth: bool) -> None:
    """Write `new` to `path`; refuse to add entries to an existing baseline unless `allow_growth`."""
    if path.exists() and not allow_growth:
        old = load_baseline(path)
        if new.grows_beyond(old):
            added = len(new.findings - old.findings) + len(new.ops - old.ops)
            raise UsageError(
                f"{path}: the new baseline would add {added} entries; a baseline only shrinks — "
                "pass --update-baseline to accept them"
            )
    write_output(new.to_json(), path, "--write-baseline")
