"""The traced side of `neuron-migrate trace`: runs in its own interpreter (`python -m
neuron_migrate.opdb.tracer.child REQUEST.json`), because registering a device is permanent for a process and
user code may crash or hang.

The request is a `TraceRequest` (options.py); the child writes one TraceResult JSON object per target (a
failed target carries `error` and `error_kind`) to the request's `result` path. Nothing here runs in the CLI
process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import resource
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from neuron_migrate import __version__
from neuron_migrate.errors import NeuronMigrateError, TargetError
from neuron_migrate.model import PHASES, Coverage, TraceResult, to_dict
from neuron_migrate.opdb.tracer.options import TraceOptions, TraceRequest
from neuron_migrate.opdb.tracer.verdicts import STAND_IN_PREFIX, kind_of

_CUDA_WORDS = ("cuda", "nccl", "nvidia", "cudnn")
_OOM_WORDS = ("can't allocate memory", "Cannot allocate memory", "bad_alloc", "out of memory")


class StepError(TargetError):
    """A target that failed, with the error kind (`verdicts.ERROR_KINDS`) the result records."""

    def __init__(self, message: str, kind: str = "target") -> None:
        super().__init__(message)
        self.kind = kind


class Backend:
    """Where ops run and how to ask which ran natively: the real torch-neuronx, a stand-in, or nothing
    (fake)."""

    def __init__(self, kind: str, module: Any) -> None:
        self.kind = kind  # "torch-neuronx" | "stand-in" | "stand-in-python" | "fake"
        self.module = module

    def clear(self) -> None:
        if self.module is not None:
            self.module.clear_op_tracking()

    def widened(self) -> dict[tuple[str, tuple[str, ...]], str]:
        """(op, dtypes) the stand-in computed in a wider dtype, with the note (none on a real device)."""
        get = getattr(self.module, "get_widened_ops", None)
        return get() if get is not None else {}

    def observed(self) -> tuple[Callable[[str], str | None] | None, tuple[str, ...]]:
        """`op -> observed status` and the sorted fallback names, from the device's tracking API."""
        if self.module is None:
            return None, ()
        from neuron_migrate.opdb.db import normalize_op

        if self.kind == "torch-neuronx":
            import torch

            torch.neuron.synchronize()  # execution is asynchronous: settle before reading the sets

        def names(ops: Any) -> set[str]:  # torch-neuronx may drop the `aten::` prefix on executed ops
            return {normalize_op(op if "::" in op else f"aten::{op}") for op in ops}

        fallback = names(self.module.get_fallback_ops())
        executed = names(self.module.get_executed_ops())
        unsupported = names(getattr(self.module, "get_unsupported_ops", set)())

        def status(op: str) -> str | None:
            if op in unsupported:
                return "unsupported"
            if op in fallback:
                return "cpu_fallback"
            return "native" if op in executed else None

        return status, tuple(sorted(fallback))


def select_backend(device: str, fake: bool, snapshot: Any) -> Backend:
    """Real torch-neuronx when asked for `neuron` and a device is visible, else the stand-in; fake on
    request."""
    import importlib.util

    import torch

    real = device == "neuron" and importlib.util.find_spec("torch_neuronx") is not None
    if real:
        import torch_neuronx

        if not (hasattr(torch, "neuron") and torch.neuron.is_available() and torch.neuron.device_count() > 0):
            raise TargetError(
                "torch-neuronx is installed but no Neuron device is visible (check `neuron-ls`); "
                "run on a Trn2/Trn3 instance, or pass --device stand-in"
            )
        return Backend("fake", None) if fake else Backend("torch-neuronx", torch_neuronx)
    from neuron_migrate.opdb.tracer import device as stand_in

    kind = stand_in.install(snapshot, keep_going=True)
    return Backend("fake", None) if fake else Backend(kind, stand_in)


# --- running one target -------------------------------------------------------------------------------------


def _default_loss(out: Any) -> Any:
    import torch

    loss = getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    for item in out.values() if isinstance(out, dict) else out if isinstance(out, (list, tuple)) else (out,):
        if isinstance(item, torch.Tensor):
            return item.sum()
    raise TargetError(f"the model returned {type(out).__name__} with no tensor; give a loss_fn in the target")


def _call(model: Any, inputs: Any) -> Any:
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (list, tuple)):
        return model(*inputs)
    return model(inputs)


def run_step(work: Any, recorder: Any, inference: bool) -> None:
    """One recorded step: forward (+ loss), then backward and the optimizer step unless `inference`."""
    import torch

    from neuron_migrate.opdb.tracer.recorder import recording

    if inference:
        work.model.eval()
        with torch.no_grad(), recording(recorder, autograd=False):
            _call(work.model, work.inputs)
        return
    work.model.train()
    optimizer = work.optimizer or torch.optim.AdamW(work.model.parameters(), lr=1e-3)
    loss_fn = work.loss_fn or _default_loss
    with recording(recorder):
        loss = loss_fn(_call(work.model, work.inputs))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def limit_text(options: TraceOptions) -> str:
    limit = options.max_memory_mb
    return f" (limit --max-memory {limit} MB)" if limit else ""


def _user_error(spec: Any, err: BaseException, options: TraceOptions) -> StepError:
    """One line for an exception in user code: where it happened, what kind of failure it is, and the fix."""
    from neuron_migrate.opdb.tracer.recorder import SiteFinder

    finder = SiteFinder(options.root)
    where = ""
    for frame, line in traceback.walk_tb(err.__traceback__):
        shown = finder.display_name(frame.f_code.co_filename)
        if shown is not None and not shown.startswith("<"):
            where = f"{shown}:{line}"
    message = " ".join(str(err).split())[:400] or type(err).__name__
    kind = kind_of(message)
    if kind == "target" and ("NeuronTensor" in message or _inside_python_stand_in(err)):
        # the wrapper tensors of the pure-Python stand-in are not plain tensors (.tolist(), formatting, ...)
        kind, message = (
            "stand_in",
            f"{STAND_IN_PREFIX}the pure-Python stand-in failed inside its wrapper: {message}",
        )
    if kind == "target" and any(word in message for word in _OOM_WORDS):
        return StepError(
            f"{spec.label}: ran out of memory{limit_text(options)} at {where or '?'}; raise "
            "--max-memory or trace with --fake",
            "memory",
        )
    if kind == "target" and any(word in message.lower() for word in _CUDA_WORDS):
        fix = f"neuron-migrate fix {spec.ref}" if spec.kind == "script" else "neuron-migrate fix"
        return StepError(
            f"{where or spec.label}: the code asks for CUDA ({message}); make it device-agnostic "
            f"with `{fix}` and trace again"
        )
    return StepError(
        f"{spec.label}: {type(err).__name__}: {message}" + (f" (at {where})" if where else ""), kind
    )


def _inside_python_stand_in(err: BaseException) -> bool:
    """Whether the exception was raised inside the pure-Python stand-in's own code (a message naming its
    wrapper class, NeuronTensor, is the other sign)."""
    frames = [frame.f_code.co_filename for frame, _ in traceback.walk_tb(err.__traceback__)]
    return bool(frames) and frames[-1].endswith(os.path.join("tracer", "python_device.py"))


def trace_one(
    spec: Any, options: TraceOptions | dict[str, Any], backend: Backend, snapshot: Any
) -> TraceResult:
    """Trace one target; user errors come back as StepError (a TargetError), data-dependent stops as notes."""
    import torch

    from neuron_migrate.opdb.tracer.recorder import OpRecorder

    options = TraceOptions.coerce(options)
    inference = options.inference and spec.kind != "script"
    recorder = OpRecorder(snapshot, options.root, device_type="neuron")
    backend.clear()
    torch.manual_seed(0)
    fake_mode = None
    if backend.kind == "fake":
        from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

        from neuron_migrate.opdb.tracer.device import allow_foreach

        allow_foreach(FakeTensor)  # fake parameters on neuron take the optimizer path real ones take
        fake_mode = recorder.fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    with fake_mode if fake_mode is not None else contextlib.nullcontext():
        _run_target(spec, options, backend, recorder, inference)
    if not recorder.calls:
        raise TargetError(
            f"{spec.label}: ran no op on the neuron device; it picks its device some other way "
            "(torch.cuda.is_available(), 'cpu'): make it device-agnostic with `neuron-migrate fix`"
        )
    observed, fallbacks = backend.observed()
    ops = tuple(_with_widening(recorder.uses(snapshot, observed, options.top_sites), backend.widened()))
    if spec.kind == "script":
        phases = tuple(p for p in PHASES if p in {use.phase for use in ops})
    else:
        phases = ("forward",) if inference else PHASES
    notes = list(recorder.notes)
    unsupported = sorted({u.op for u in ops if u.status == "unsupported"})
    if unsupported:
        notes.insert(
            0,
            f"unsupported on neuron: {', '.join(unsupported)}; on TorchNeuron the run stops at the "
            "first call of these (the stand-in computes them so that the trace lists them all)",
        )
    return TraceResult(
        target=spec.label,
        device=backend.kind,
        phases=phases,
        opdb_version=snapshot.version,
        opdb_pre_release=bool(snapshot.pre_release),
        ops=ops,
        coverage=Coverage.of(ops),
        observed_fallbacks=fallbacks,
        notes=tuple(notes),
        tool_version=__version__,
    )


def _with_widening(uses: list[Any], widened: dict[tuple[str, tuple[str, ...]], str]) -> list[Any]:
    """Add the stand-in's note to each op use it computed in a wider dtype (status stays the opdb's)."""
    if not widened:
        return uses
    out = []
    for use in uses:
        note = widened.get((use.op, tuple(use.dtypes)))
        if note:
            use = dataclasses.replace(use, note="; ".join(filter(None, (use.note, note))))
        out.append(use)
    return out


def _run_target(spec: Any, options: TraceOptions, backend: Backend, recorder: Any, inference: bool) -> None:
    """Build and run the target under the recorder; any failure of user code becomes one StepError line."""
    from neuron_migrate.opdb.tracer import targets
    from neuron_migrate.opdb.tracer.recorder import TraceStopped
    from neuron_migrate.opdb.tracer.script import run_script

    try:
        if spec.kind == "script":
            if recorder.fake_mode is not None:
                raise TargetError(
                    "--fake traces a build function or --hf model, not a script (scripts load "
                    "data and print values a fake run does not have)"
                )
            recorder.note(run_script(spec, recorder, options.steps).note())
            return
        work = (
            targets.build_hf(spec.ref, spec.hf_config, "neuron")
            if spec.kind == "hf"
            else targets.build_function(spec.ref, "neuron")
        )
        backend.clear()  # construction (weight init) is not part of the step
        run_step(work, recorder, inference)
    except TraceStopped:
        pass  # the recorder left a note; keep what was recorded
    except NeuronMigrateError:
        raise
    except MemoryError:
        raise StepError(
            f"{spec.label}: ran out of memory{limit_text(options)}; raise --max-memory or trace with --fake",
            "memory",
        ) from None
    except Exception as err:
        raise _user_error(spec, err, options) from None


def failed_result(spec: Any, backend_kind: str, snapshot: Any, err: NeuronMigrateError) -> TraceResult:
    """The TraceResult of a target that did not finish."""
    return TraceResult(
        target=spec.label,
        device=backend_kind,
        phases=(),
        opdb_version=snapshot.version,
        opdb_pre_release=bool(snapshot.pre_release),
        ops=(),
        coverage=Coverage.of(()),
        error=str(err),
        error_kind=getattr(err, "kind", "target"),
        tool_version=__version__,
    )


def run_request(request: TraceRequest) -> list[dict[str, Any]]:
    """Trace every target of a request in this process; one result dict per target."""
    from neuron_migrate.opdb.db import load_snapshot

    options = request.options
    snapshot = load_snapshot(options.opdb)
    backend = select_backend(options.device, options.fake, snapshot)
    results = []
    for spec in request.targets:
        try:
            result = trace_one(spec, options, backend, snapshot)
        except NeuronMigrateError as err:
            result = failed_result(spec, backend.kind, snapshot, err)
        results.append(to_dict(result))
    return results


def main(argv: list[str]) -> int:
    """Entry point of the child: limit memory, trace, write the result file. Exit 0 when the file is
    written."""
    request = TraceRequest.from_json(Path(argv[1]).read_text(encoding="utf-8"))
    if request.options.max_memory_mb:
        size = int(request.options.max_memory_mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size, size))
    os.chdir(request.options.root)
    try:
        results = run_request(request)
    except NeuronMigrateError as err:  # backend selection or opdb: nothing was traced
        results = [{"error": str(err), "error_kind": getattr(err, "kind", "target")}]
    Path(request.result).write_text(json.dumps(results), encoding="utf-8")
    return 0


if __name__ == "__main__":
    status = main(sys.argv)
    # The result file is written: skip interpreter teardown, where torch sometimes aborts ("terminate called
    # without an active exception", SIGABRT) once a PrivateUse1 device has run autograd — that turned complete
    # traces into reported crashes, now and then.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
