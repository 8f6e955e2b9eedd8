"""One architecture's verdict: what a Trainium user would see when running this step on `neuron`.

- `native` and `fallbacks` together are **runs**: the step completes on `neuron` (CPU fallbacks allowed, as
  TorchNeuron falls back by default); `native` when every op it ran is native in the opdb snapshot.
- `fails_on_neuron`: an op the opdb calls `unsupported` (TorchNeuron stops at it), named with its dtypes; or
  the step raised on `neuron` outside any op (library code that rejects the device) while it runs on plain
  CPU; or, on a real torch-neuronx device, any failure of the step that plain CPU does not share.
- `stand_in_limitation`: the step stopped because of the CPU stand-in itself, not of TorchNeuron: it raised
  inside an op the opdb calls native or unknown (a CPU kernel lacking a dtype the device computes, e.g.
  `aten::histc` on int32), in the stand-in's own code, or the stand-in timed out, ran out of memory or crashed
  where plain CPU steps fine. An op the opdb calls `cpu_fallback` runs the same CPU kernel on TorchNeuron, so
  its CPU dtype gaps are real: those are `fails_on_neuron`.
- `does_not_build`: there is no runnable tiny instance here, with the one-line reason: the config or the
  construction failed, a needed optional package is missing (named as such), the step fails on plain CPU too,
  or it was killed (time or memory bound) before a CPU check could say.

The stand-in tells the kind of a failure itself through `error_kind` (`neuron`, `stand_in`, `target`,
`timeout`, `memory`, `crash`) when it does; without it the evidence recorded by the worker decides: the op
the step raised in, its opdb status, the frame that raised, and the CPU check.
"""

from __future__ import annotations

import re
from typing import Any

VERDICTS: tuple[str, ...] = (
    "native",
    "fallbacks",
    "fails_on_neuron",
    "stand_in_limitation",
    "does_not_build",
)
RUNS = ("native", "fallbacks")
VERDICT_LABELS = {
    "native": "runs natively",
    "fallbacks": "runs with CPU fallbacks",
    "fails_on_neuron": "fails on neuron",
    "stand_in_limitation": "stand-in limitation",
    "does_not_build": "does not build here",
}
_MISSING = (
    re.compile(r"pip install (?:-U )?`?([A-Za-z0-9_.\-\[\]]+)"),
    re.compile(r"No module named '([^'.]+)"),
    re.compile(r"requires the (\w+) library"),
)
_DTYPE_GAP = re.compile(r"not implemented for '[^']+'")
# the stand-in's tensors are a Python subclass; a real neuron tensor is not, so an API refusing a subclass
# (`.tolist() is not supported for tensor subclasses, got NeuronTensor`) is the stand-in's limit
_SUBCLASS = re.compile(r"tensor subclass|NeuronTensor")
_STAND_IN_FRAMES = ("neuron_migrate/opdb/",)


def missing_package(record: dict[str, Any]) -> str | None:
    """The optional package a failed build asked for (ImportError / ModuleNotFoundError), if any."""
    if record.get("error_class") not in ("ImportError", "ModuleNotFoundError"):
        return None
    text = f"{record.get('error_line') or ''} {record.get('error') or ''}"
    for pattern in _MISSING:
        hit = pattern.search(text)
        if hit:
            return hit.group(1).strip("`")
    return None


def failure_kind(record: dict[str, Any]) -> str:
    """`neuron`, `stand_in`, `target`, `timeout`, `memory` or `crash` for a step that did not complete."""
    kind = record.get("error_kind") or (record.get("trace") or {}).get("error_kind")
    if kind:
        return kind
    if record.get("cpu_checked") and record.get("cpu_error"):
        return "target"
    if record.get("recorder_error"):
        return (
            "stand_in"  # plain CPU steps, CPU under the tracer's recorder does not: the harness is at fault
        )
    if record.get("outcome") in ("timeout", "memory", "crash"):
        return record["outcome"]
    status = record.get("error_status")
    if record.get("error_op"):
        if status == "unsupported":
            return "neuron"
        if status == "cpu_fallback" and _DTYPE_GAP.search(record.get("error_line") or ""):
            return "neuron"  # TorchNeuron's fallback runs this very CPU kernel: the dtype gap is real there
        return "stand_in"  # an op TorchNeuron runs natively stopped only here
    where = record.get("error_where") or ""
    line = record.get("error_line") or ""
    if any(frame in where for frame in _STAND_IN_FRAMES) or _DTYPE_GAP.search(line) or _SUBCLASS.search(line):
        return "stand_in"
    return "neuron"


def _error(record: dict[str, Any]) -> str:
    return f"{record.get('error_class')}: {record.get('error_line')}"


def verdict_of(record: dict[str, Any], row: dict[str, Any], device: str) -> tuple[str, str]:
    """(verdict, one-line reason) of one raw record, given its matrix row (op -> cell with .status/.dtypes)
    and the device the step ran on (`torch-neuronx`, `stand-in`, `stand-in-python`, `fake`)."""
    if record.get("trace") is not None:
        return _completed(row)
    stage = record.get("stage", "start")
    builds_on_cpu = record.get("cpu_checked") and not record.get("cpu_error")
    if stage in ("start", "build") and not builds_on_cpu:
        package = missing_package(record)
        if package:
            return (
                "does_not_build",
                f"needs the optional package `{package}`, not installed here (pip install {package})",
            )
        if record.get("outcome") in ("timeout", "memory"):
            return "does_not_build", f"building the tiny model hit the bound: {_error(record)}"
        return "does_not_build", f"building the tiny model failed: {_error(record)}"
    kind = failure_kind(record)
    if kind == "target":
        return (
            "does_not_build",
            f"the tiny model's step fails on plain CPU too ({record.get('cpu_error') or _error(record)})",
        )
    op = record.get("error_op")
    where = f" in `{op}` ({'/'.join(record.get('error_dtypes') or ()) or 'no tensor'})" if op else ""
    real = device == "torch-neuronx"
    if kind == "neuron" or real:
        return "fails_on_neuron", f"the step stopped on neuron{where}: {_error(record)}" + (
            "; it steps on plain CPU" if record.get("cpu_checked") else ""
        )
    if stage == "cpu-check" and not record.get("cpu_checked"):
        return (
            "does_not_build",
            f"the step failed on neuron ({_error(record)}) and the CPU check did not finish",
        )
    if kind in ("timeout", "memory", "crash"):
        happened = {"timeout": "timed out", "memory": "ran out of memory", "crash": "crashed"}[kind]
        if not record.get("cpu_checked"):  # killed before the CPU check: no evidence either way
            return (
                "does_not_build",
                f"the step {happened} on the stand-in before a CPU check ({_error(record)})",
            )
        return "stand_in_limitation", f"the stand-in {happened} ({_error(record)}); plain CPU steps fine"
    if record.get("recorder_error"):
        return "stand_in_limitation", (
            f"the tracer's recorder breaks this step{where}: under it CPU fails too, "
            f"without it CPU steps fine ({_error(record)})"
        )
    status = record.get("error_status")
    return "stand_in_limitation", (
        f"the stand-in stopped{where}, which opdb calls {status}: {_error(record)}"
        if op and status
        else f"the stand-in stopped: {_error(record)}"
    ) + "; plain CPU steps fine" * bool(record.get("cpu_checked"))


def _completed(row: dict[str, Any]) -> tuple[str, str]:
    by_status: dict[str, list[str]] = {}
    for op, cell in row.items():
        by_status.setdefault(cell.status, []).append(op)
    if by_status.get("unsupported"):
        named = [f"{op} ({'/'.join(row[op].dtypes) or 'no tensor'})" for op in by_status["unsupported"]]
        return "fails_on_neuron", f"unsupported on neuron: {', '.join(named)}"
    on_cpu, unknown = sorted(by_status.get("cpu_fallback", [])), sorted(by_status.get("unknown", []))
    parts = []
    if on_cpu:
        parts.append(f"{len(on_cpu)} op(s) run on CPU: {_first_six(on_cpu)}")
    if unknown:
        named = _first_six(unknown)
        parts.append(f"{len(unknown)} op(s) the opdb knows nothing of (check on a device): {named}")
    if parts:
        return "fallbacks", "; ".join(parts)
    return "native", "every op native"


def _first_six(ops: list[str]) -> str:
    return ", ".join(ops[:6]) + (", ..." if len(ops) > 6 else "")
