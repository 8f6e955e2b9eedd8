"""The benchmark's record (JSON) first, then the table rendered from it, so a saved record can be compared."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path

from .bench import TreeResult
from .records import INFORMATION, METRICS, Tally

SCHEMA = 1


def _version(module: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(module)
    except PackageNotFoundError:
        return "not installed"


def _commit() -> str:
    """The neuron-migrate checkout being measured (before/after records differ here)."""
    import neuron_migrate

    folder = Path(neuron_migrate.__file__).resolve().parent
    proc = subprocess.run(
        ["git", "describe", "--always", "--dirty"], cwd=folder, capture_output=True, text=True, check=False
    )
    return proc.stdout.strip() or "unknown"


def _metrics(tallies: dict[str, Tally], examples: int) -> dict:
    return {
        m: {"count": t.count, "examples": [e.as_dict() for e in t.spread(examples)]}
        for m, t in tallies.items()
    }


def record(results: list[TreeResult], unsafe: bool, examples: int, argv: list[str]) -> dict:
    """Everything a reader needs to trust or reproduce the numbers, per tree and in total."""
    total = {m: Tally() for m in METRICS}
    for result in results:
        for metric, tally in result.tallies.items():
            total[metric].merge(tally)
    trees = {}
    for r in results:
        trees[r.target.name] = {
            "folder": str(r.target.folder),
            "files": r.files,
            "fix_wall_s": round(r.run.wall, 1),
            "fix_invocations": r.run.invocations,
            "load_1min": [round(x, 2) for x in r.load],
            "cli_summary": {"files_changed": r.run.cli_files_changed, "findings_fixed": r.run.sites},
            "not_fixed": [{"file": f, "why": w} for f, w in r.run.not_fixed],
            "metrics": _metrics(r.tallies, examples),
        }
    return {
        "schema": SCHEMA,
        "run": {
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": argv,
            "unsafe_fixes": unsafe,
            "neuron_migrate": f"{_version('neuron-migrate')} ({_commit()})",
            "torch": _version("torch"),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
        "packages": trees,
        "total": {
            "files": sum(r.files for r in results),
            "fix_wall_s": round(sum(r.run.wall for r in results), 1),
            "metrics": _metrics(total, examples),
        },
    }


def _cell(data: dict, metric: str, baseline: dict | None, tree: str | None) -> str:
    """A count, `?` when the CLI summary could not be read, `old→new` against a baseline record."""
    section = data["total"] if tree is None else data["packages"][tree]
    count = section["metrics"][metric]["count"]
    if metric == "rewritten_sites" and tree is not None and section["cli_summary"]["findings_fixed"] is None:
        count = "?"
    if baseline is None:
        return str(count)
    old_section = baseline.get("total") if tree is None else baseline.get("packages", {}).get(tree)
    old = (old_section or {}).get("metrics", {}).get(metric, {}).get("count", "-")
    return f"{old}→{count}"


def table(data: dict, baseline: dict | None = None) -> str:
    """Metrics as rows, trees and the total as columns."""
    trees = list(data["packages"])
    head = ["metric", *trees, "total"]
    rows = [
        [
            METRICS[m] + ("" if m in INFORMATION else " *"),
            *(_cell(data, m, baseline, t) for t in trees),
            _cell(data, m, baseline, None),
        ]
        for m in METRICS
    ]
    rows.append(
        ["python files", *(str(data["packages"][t]["files"]) for t in trees), str(data["total"]["files"])]
    )
    rows.append(
        [
            "fix wall time (s)",
            *(str(data["packages"][t]["fix_wall_s"]) for t in trees),
            str(data["total"]["fix_wall_s"]),
        ]
    )
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
    lines = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in [head, *rows]
    ]
    lines.insert(1, "-" * len(lines[0]))
    lines.append("* target: 0" + ("   (cells: baseline→this run)" if baseline else ""))
    return "\n".join(lines)


def examples_text(data: dict) -> str:
    """The examples of every non-zero defect metric: file:line and the offending line."""
    out = []
    for metric, label in METRICS.items():
        found = data["total"]["metrics"][metric]
        if metric in INFORMATION or not found["count"]:
            continue
        out.append(f"\n{label.strip()} ({found['count']}):")
        out += [f"  {e['file']}:{e['line']}: {e['text']}" for e in found["examples"]]
    return "\n".join(out)
