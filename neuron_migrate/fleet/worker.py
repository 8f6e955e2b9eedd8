"""What one forked child of the fleet server does: register the device, trace one architecture, write a
record.

It reuses the `trace` machinery unchanged (`opdb.tracer.child.select_backend` and `trace_one`,
`opdb.tracer.targets` for the tiny config), so a fleet entry is the same TraceResult `trace --hf MODEL_TYPE`
gives. Two additions:

- the stage (build / step / cpu-check) is written to a file before each stage, so the server can say where a
  child that timed out or crashed was;
- when the step fails on `neuron`, the same tiny model is built and stepped on plain CPU: if that fails too,
  the fault is the tiny instance (config, inputs), not the device.

Everything here runs only in a forked child; the process ends with `os._exit`.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from neuron_migrate.errors import NeuronMigrateError
from neuron_migrate.fleet.enumerate import DIFFUSERS, TASKS
from neuron_migrate.model import to_dict


def _set_stage(path: Path, stage: str) -> None:
    path.write_text(stage, encoding="utf-8")


def build_for_task(model_type: str, overrides: dict[str, Any], device: Any, task: str) -> Any:
    """A tiny model of `model_type` built by the task's Auto class, through the same `opdb.hf_inputs.build`
    that `trace --hf` uses (so the config and inputs are the same; only the head differs when the classes
    do)."""
    from neuron_migrate.opdb import hf_inputs
    from neuron_migrate.opdb.tracer import targets

    if task == DIFFUSERS:
        from neuron_migrate.fleet import diffusers_models

        model, inputs, loss_fn = diffusers_models.build(model_type, device)
        return targets.Workload(targets._model_to(model, device), inputs, loss_fn)
    model, inputs = hf_inputs.build(model_type, overrides, device, TASKS[task][1])
    return targets.Workload(targets._model_to(model, device), inputs)


_ORIGINAL_BUILD: Any = None


def _error_fields(err: BaseException) -> dict[str, Any]:
    """Error class, last line and innermost library frame of an exception (of the one behind a
    TargetError)."""
    cause = err
    if isinstance(
        err, NeuronMigrateError
    ):  # trace_one re-raises user errors `from None`: the original is context
        cause = err.__cause__ or err.__context__ or err
    lines = [line.strip() for line in str(cause).splitlines() if line.strip()]
    model_line = raised = ""
    for frame, line in traceback.walk_tb(cause.__traceback__):
        name = _short(frame.f_code.co_filename)
        raised = f"{name}:{line}"
        if not name.startswith(("torch/", "neuron_migrate/")):
            model_line = raised  # the innermost line of the model's (library's) own code
    where = model_line if model_line == raised or not model_line else f"{model_line} (raised in {raised})"
    return {
        "error_class": type(cause).__name__,
        "error_line": (lines[-1] if lines else "")[:300],
        "error_where": where or raised,
        **_failing_op(cause),
    }


def _error_kind(err: BaseException) -> dict[str, Any]:
    """The stand-in's own word on a failure (`error_kind`, issue 11), when the tracer attaches one."""
    for item in (err, err.__cause__, err.__context__):
        kind = getattr(item, "error_kind", None)
        if kind:
            return {"error_kind": kind}
    return {}


def _failing_op(err: BaseException) -> dict[str, Any]:
    """The ATen op (and input dtypes) whose call raised, read from the innermost `__torch_dispatch__` frame of
    the traceback (the device's or the recorder's); empty when the error did not come from inside an op."""
    found: dict[str, Any] = {}
    for frame, _ in traceback.walk_tb(err.__traceback__):
        func = frame.f_locals.get("func") if frame.f_code.co_name == "__torch_dispatch__" else None
        if func is None:
            continue
        from neuron_migrate.opdb.tracer.recorder import op_dtypes, op_name

        name = op_name(func)
        if name:
            args, kwargs = frame.f_locals.get("args") or (), frame.f_locals.get("kwargs") or {}
            found = {"error_op": name, "error_dtypes": list(op_dtypes(args, kwargs))}
    return found


def _short(filename: str) -> str:
    """`.../site-packages/transformers/x.py` -> `transformers/x.py`; our own files relative to the package."""
    if "site-packages/" in filename:
        return filename.split("site-packages/", 1)[1]
    marker = "/neuron_migrate/"
    return "neuron_migrate/" + filename.split(marker, 1)[1] if marker in filename else filename


def _plain_step(work: Any, inference: bool) -> None:
    """The step `opdb.tracer.child.run_step` records, with nothing recording it: plain eager PyTorch."""
    import torch

    from neuron_migrate.opdb.tracer.child import _call, _default_loss

    if inference:
        work.model.eval()
        with torch.no_grad():
            _call(work.model, work.inputs)
        return
    work.model.train()
    optimizer = work.optimizer or torch.optim.AdamW(work.model.parameters(), lr=1e-3)
    loss = (work.loss_fn or _default_loss)(_call(work.model, work.inputs))
    loss.backward()
    optimizer.step()


def _cpu_check(job: dict[str, Any], options: dict[str, Any], snapshot: Any) -> dict[str, Any]:
    """Build and step the same tiny model on plain CPU, then (if that runs) on CPU under the tracer's
    recorder: `cpu_error` is the plain failure (the tiny model itself is broken), `recorder_error` a failure
    only the recorder causes (the tracing harness, not the device, is at fault)."""
    import torch

    from neuron_migrate.opdb.tracer.child import run_step
    from neuron_migrate.opdb.tracer.recorder import OpRecorder

    def attempt(step: Any) -> str | None:
        try:
            torch.manual_seed(0)
            step(build_for_task(job["model_type"], job["hf_config"], "cpu", job["task"]))
        except Exception as err:
            fields = _error_fields(err)
            return f"{fields['error_class']}: {fields['error_line']}"
        return None

    plain = attempt(lambda work: _plain_step(work, options["inference"]))
    if plain is not None:
        return {"cpu_error": plain}
    recorded = attempt(
        lambda work: run_step(
            work, OpRecorder(snapshot, options["root"], device_type="cpu"), options["inference"]
        )
    )
    return {"cpu_error": None, "recorder_error": recorded}


def trace_job(
    job: dict[str, Any], options: dict[str, Any], snapshot: Any, stage_file: Path
) -> dict[str, Any]:
    """Trace one architecture in this (forked) process; always returns a record, never raises."""
    global _ORIGINAL_BUILD
    from neuron_migrate.opdb.tracer import child, targets

    if "inference" in job:  # `--mode both` sends each architecture twice, once per mode
        options = {**options, "inference": job["inference"]}

    record: dict[str, Any] = {
        "key": job["key"],
        "model_type": job["model_type"],
        "task": job["task"],
        "architecture": job["architecture"],
        "stage": "build",
        "error": None,
        "trace": None,
        "cpu_error": None,
        "cpu_checked": False,
    }
    if job["task"] == DIFFUSERS:  # no `trace` spelling for these: the fleet itself reproduces one
        record["reproduce"] = f"neuron-migrate fleet diffusers --models {job['model_type']} --mode " + (
            "inference" if options["inference"] else "train"
        )
    started = time.perf_counter()
    _set_stage(stage_file, "build")
    if _ORIGINAL_BUILD is None:
        _ORIGINAL_BUILD = targets.build_hf

    def build(model_type: str, overrides: dict[str, Any], device: Any) -> Any:
        # trace_one builds through targets.build_hf; this child-only wrapper picks the task's head and marks
        # the moment the build is over, so a failure can be told apart as a build or a step failure.
        work = build_for_task(model_type, overrides, device, job["task"])
        record["architecture"] = type(work.model).__name__
        record["stage"] = "step"
        _set_stage(stage_file, "step")
        return work

    targets.build_hf = build
    spec = targets.TargetSpec("hf", job["model_type"], (), dict(job["hf_config"]))
    try:
        backend = child.select_backend(options["device"], False, snapshot)
        result = child.trace_one(spec, options, backend, snapshot)
        record["trace"] = to_dict(result)
        record["stage"] = "done"
        if getattr(result, "error", None):  # a tracer that returns its failure instead of raising it
            record.update(
                trace=None,
                stage="step",
                error=result.error,
                error_class="TraceError",
                error_line=result.error[:300],
                error_kind=getattr(result, "error_kind", None),
            )
    except NeuronMigrateError as err:
        record["error"] = str(err)
        record.update(_error_fields(err), **_error_kind(err))
        if record.get("error_op"):
            dtypes = record.get("error_dtypes") or [None]
            record["error_status"] = snapshot.lookup(record["error_op"], dtypes[0]).status
        if record["stage"] in ("build", "step"):  # a build on neuron can fail where CPU builds, too
            _set_stage(stage_file, "cpu-check")
            record["cpu_checked"] = True
            record.update(_cpu_check(job, options, snapshot))
    finally:
        targets.build_hf = _ORIGINAL_BUILD
    record["seconds"] = round(time.perf_counter() - started, 3)
    return record


def child_main(job: dict[str, Any], options: dict[str, Any], snapshot: Any, job_dir: Path) -> None:
    """Body of a forked child: own session, own log, one thread, trace, write the record atomically, exit."""
    import signal

    os.setsid()  # the server kills the whole group on timeout, helpers included
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the server's handler is not ours
    log = os.open(job_dir / f"{job['key']}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    code = 0
    try:
        import torch

        torch.set_num_threads(1)  # --jobs children share the cores; more threads only contend
        record = trace_job(job, options, snapshot, job_dir / f"{job['key']}.stage")
        tmp = job_dir / f"{job['key']}.json.tmp"
        tmp.write_text(json.dumps(record), encoding="utf-8")
        os.replace(tmp, job_dir / f"{job['key']}.json")
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
