"""Synthetic raw fleet records (the shape fleet.worker / fleet.runner produce) for the fast tests."""

from __future__ import annotations

from typing import Any


def use(
    op: str, status: str, count: int = 1, phase: str = "forward", dtype: str = "float32"
) -> dict[str, Any]:
    return {
        "op": op,
        "dtypes": [dtype],
        "count": count,
        "phase": phase,
        "call_sites": [],
        "status": status,
        "note": "",
        "source": "",
        "observed": None,
    }


def traced(model_type: str, uses: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """A record whose trace completed."""
    trace = {
        "schema": "neuron-migrate/trace/1",
        "target": f"hf:{model_type}",
        "device": "stand-in",
        "phases": ["forward"],
        "opdb_version": "test",
        "opdb_pre_release": True,
        "ops": uses,
        "coverage": {"ops": {}, "calls": {}},
        "notes": [],
        "error": None,
        "tool_version": "0",
    }
    return {
        "key": model_type,
        "model_type": model_type,
        "task": "causal-lm",
        "architecture": f"{model_type}LM",
        "stage": "done",
        "outcome": "ok",
        "error": None,
        "trace": trace,
        "cpu_error": None,
        "cpu_checked": False,
        "seconds": 1.0,
        "hf_config": {},
        **extra,
    }


def failed(
    model_type: str,
    stage: str,
    error_class: str = "RuntimeError",
    line: str = "boom",
    cpu_error: str | None = None,
    cpu_checked: bool = False,
    outcome: str = "ok",
) -> dict[str, Any]:
    """A record whose trace did not complete."""
    return {
        "key": model_type,
        "model_type": model_type,
        "task": "causal-lm",
        "architecture": f"{model_type}LM",
        "stage": stage,
        "outcome": outcome,
        "error": f"{error_class}: {line}",
        "error_class": error_class,
        "error_line": line,
        "error_where": "transformers/x.py:1",
        "trace": None,
        "cpu_error": cpu_error,
        "cpu_checked": cpu_checked,
        "seconds": 2.0,
        "hf_config": {},
    }
