"""Running one snippet in one environment and describing what it did (`Outcome`).

A run executes the source as `__main__` in a fresh namespace, in a fresh working directory that holds a small
checkpoint for every `*.pt`-like file name the source mentions, with stdout captured and a clock that advances
one millisecond per reading (so timing code prints the same numbers each run). A rule example (a fragment)
also gets the stand-ins of `standins.py`, and each function it defines is then called with stand-in arguments
(a fragment that only defines a function would otherwise exercise nothing).

The outcome holds the device calls (under the CUDA emulation), the printed output, the error that ended the
run, a description of every value the namespace holds at the end (tensors with their device, dtype and values;
modules with where their parameters are; plain data as is; functions, classes and modules are left out), the
results of the calls to the fragment's functions, and process-wide settings a program changes (cuDNN and
matmul flags, deterministic algorithms, default dtype and device). Under the emulation an error that comes
from the CPU-only build itself ("Torch not compiled with CUDA enabled", ...) is an emulation gap, not a
result.
"""

from __future__ import annotations

import builtins
import contextlib
import inspect
import io
import math
import os
import re
import sys
import tempfile
import time
import traceback
import types
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from tests.differential.standins import ARGUMENTS, standins, start_process_group

#: messages of errors that only the CPU-only build raises: the emulation does not cover the API that raised
GAP_MARKERS = (
    "Torch not compiled with CUDA enabled",
    "Cannot initialize CUDA without ATen_cuda library",
    "PyTorch was compiled without CUDA support",
    "NVTX functions not installed",
    "Found no NVIDIA driver",
    "doesn't have NCCL built in",
    "no CUDA GPUs are available",
    "CUDA driver initialization failed",
    "Unsupported device type cuda",
)
_CHECKPOINT_NAME = re.compile(r"""["']([\w./-]+\.(?:pt|pth|ckpt|bin|tar))["']""")


@dataclass
class Outcome:
    """What one run did; every field is plain data (it crosses a process boundary as JSON)."""

    calls: list[list[str]] = field(default_factory=list)  # [canonical call, as spelled]
    stdout: str = ""
    error: str | None = None
    error_at: str = ""
    values: dict[str, str] = field(default_factory=dict)
    settings: dict[str, str] = field(default_factory=dict)
    gap: str | None = None
    missing: str | None = None
    not_called: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Outcome:
        return cls(**data)


def run_snippet(
    source: str, env: str, fragment: bool, name: str = "snippet", workdir: str | None = None
) -> Outcome:
    """Run `source` once in `env` ("cuda": under the emulation, "cpu", "neuron": whatever is installed), in
    `workdir` (a new temporary directory when None)."""
    outcome = Outcome()
    filename = f"<{name}>"
    workdir = workdir or tempfile.mkdtemp(prefix="nm-diff-")
    os.makedirs(workdir, exist_ok=True)
    os.chdir(workdir)
    _write_checkpoints(source)
    sys.argv = [f"{name}.py"]
    with contextlib.ExitStack() as stack:
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")
        stack.enter_context(_fixed_clock())
        recorder = None
        if env == "cuda":
            from tests.differential import emulation
            from tests.differential.cuda_state import _ACTIVE

            recorder = emulation.restart() if _ACTIVE else stack.enter_context(emulation.emulate_cuda())
        namespace: dict[str, Any] = {
            "__name__": "__main__",
            "__file__": os.path.join(workdir, f"{name}.py"),
            "__builtins__": builtins,
        }
        initial = standins(env) if fragment else {}
        namespace.update(initial)
        if fragment and "DistributedDataParallel" in source and "init_process_group" not in source:
            start_process_group(
                env, namespace
            )  # a DDP fragment runs where the script has already joined its job
        torch.manual_seed(0)
        if recorder is not None:
            recorder.calls.clear()  # making the stand-ins and the start seed are not the program's calls
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                exec(compile(source, filename, "exec"), namespace)
                if fragment:
                    _call_functions(
                        namespace, filename, {k: namespace.get(k, v) for k, v in initial.items()}, outcome
                    )
            except BaseException as err:
                outcome.error, outcome.error_at = _describe_error(err, filename, source)
        if recorder is not None:  # before describing the values (reading a device tensor is a transfer)
            outcome.calls = [[call.key, str(call)] for call in recorder.calls]
        outcome.stdout = out.getvalue()
        outcome.values.update(_describe_namespace(namespace))
        outcome.settings = _settings()
    raised = [f"{outcome.error_at}: {outcome.error}"] if outcome.error else []
    raised += [
        f"{name}: {value[len('raised ') :]}"
        for name, value in outcome.values.items()
        if value.startswith("raised ")
    ]
    if env == "cuda":
        outcome.gap = next(
            (error for error in raised if any(marker in error for marker in GAP_MARKERS)), None
        )
    if fragment:  # a fragment whose own names are undefined cannot say anything about its rewrite
        outcome.missing = next((error for error in raised if "NameError" in error), None)
    return outcome


def _write_checkpoints(source: str) -> None:
    """A checkpoint (the state dict of a Linear(2, 2)) under each file name the source loads from."""
    names = set(_CHECKPOINT_NAME.findall(source))
    if not names:
        return
    torch.manual_seed(1)
    state = torch.nn.Linear(2, 2).state_dict()
    for path in names:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        torch.save(state, path)


@contextlib.contextmanager
def _fixed_clock():
    """time.time / perf_counter / monotonic advance 1 ms per reading, so timing code is deterministic."""
    ticks = iter(range(1, 1 << 40))
    real = {name: getattr(time, name) for name in ("time", "perf_counter", "monotonic")}
    for name in real:
        setattr(time, name, lambda: 1_000_000.0 + next(ticks) / 1000)
    try:
        yield
    finally:
        for name, function in real.items():
            setattr(time, name, function)


def _call_functions(
    namespace: dict[str, Any], filename: str, values: dict[str, Any], outcome: Outcome
) -> None:
    """Call each function the fragment defines, with stand-in arguments (parameters with a default keep
    it)."""
    for fname, function in list(namespace.items()):
        code = getattr(getattr(function, "__wrapped__", function), "__code__", None)
        if not isinstance(function, types.FunctionType) or code is None or code.co_filename != filename:
            continue
        positional, missing = [], []
        for param in inspect.signature(function).parameters.values():
            if (
                param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.KEYWORD_ONLY)
                or param.default is not param.empty
            ):
                continue
            if param.name in ARGUMENTS or param.name in values:
                positional.append(ARGUMENTS[param.name] if param.name in ARGUMENTS else values[param.name])
            else:
                missing.append(param.name)
        if missing:
            outcome.not_called.append(f"{fname}: no stand-in for {', '.join(missing)}")
            continue
        try:
            outcome.values[f"{fname}()"] = describe(
                function(*positional)
            )  # positionally, as decorators expect
        except Exception as err:
            outcome.values[f"{fname}()"] = "raised " + _describe_error(err, filename, "")[0]


def _describe_error(err: BaseException, filename: str, source: str) -> tuple[str, str]:
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename == filename]
    where = ""
    if frames:
        line = frames[-1].lineno or 0
        text = (
            source.splitlines()[line - 1].strip() if source and 0 < line <= len(source.splitlines()) else ""
        )
        where = f"line {line}: {text}" if text else f"line {line}"
    message = str(err).split("\n")[0][:300]
    return f"{type(err).__name__}: {message}", where


def _describe_namespace(namespace: dict[str, Any]) -> dict[str, str]:
    described = {}
    for name, value in namespace.items():
        if (
            name.startswith("__")
            or isinstance(value, (types.ModuleType, types.FunctionType, type))
            or inspect.isbuiltin(value)
            or inspect.ismethod(value)
        ):
            continue
        described[name] = describe(value)
    return described


def describe(value: Any, depth: int = 0) -> str:
    """A deterministic description of a value, with what matters on a device (where tensors live)."""
    if depth > 3:
        return "..."
    if isinstance(value, torch.Tensor):
        data = value.detach().flatten()[:8]
        numbers = (
            [round(float(v), 5) if value.is_floating_point() else int(v) for v in data.cpu().tolist()]
            if not value.is_complex() and value.dtype != torch.bool
            else data.tolist()
        )
        return (
            f"tensor(shape={list(value.shape)}, dtype={value.dtype}, device={value.device}, "
            f"requires_grad={value.requires_grad}, values={numbers})"
        )
    if isinstance(value, torch.nn.Module):
        params = list(value.parameters())
        where = sorted({str(p.device) for p in params})
        total = round(float(sum(p.detach().double().sum().cpu() for p in params)), 5) if params else 0
        return (
            f"{type(value).__name__}(on={where}, dtypes={sorted({str(p.dtype) for p in params})}, "
            f"sum={total})"
        )
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(round(value, 6))
    if value is None or isinstance(value, (bool, int, str, bytes, torch.device, torch.dtype)):
        return repr(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        inner = ", ".join(describe(v, depth + 1) for v in list(items)[:20])
        return f"{type(value).__name__}[{inner}]"
    if isinstance(value, dict):  # compared as Python compares dicts: without their order
        items = sorted(value.items(), key=lambda item: repr(item[0]))[:20]
        inner = ", ".join(f"{k!r}: {describe(v, depth + 1)}" for k, v in items)
        return f"{type(value).__name__}{{{inner}}}"
    if isinstance(value, torch.amp.GradScaler):
        return f"GradScaler(device={value._device!r}, enabled={value.is_enabled()})"
    if isinstance(value, torch.amp.autocast_mode.autocast):
        return f"autocast({value.device!r}, {value.fast_dtype}, enabled={value._enabled})"
    if isinstance(value, torch.utils.data.DataLoader):
        return f"DataLoader(batch_size={value.batch_size}, pin_memory={value.pin_memory})"
    if isinstance(value, types.SimpleNamespace):
        return (
            "namespace("
            + ", ".join(f"{k}={describe(v, depth + 1)}" for k, v in sorted(vars(value).items()))
            + ")"
        )
    if type(value).__repr__ is not object.__repr__ and type(value).__module__.startswith(
        ("tests.differential", "torch")
    ):
        text = repr(value)
        return text if " at 0x" not in text else type(value).__qualname__
    return type(value).__qualname__


def _cpu_matmul_precision() -> str:
    """oneDNN's fp32 matmul precision; "none" at a level means "inherit", and the root default is "ieee"."""
    for level in (torch.backends.mkldnn.matmul, torch.backends.mkldnn, torch.backends):
        if level.fp32_precision != "none":
            return level.fp32_precision
    return "ieee"


def _settings() -> dict[str, str]:
    """Process-wide settings a program may change (each read may raise: then the error is the value)."""
    readers = {
        "cudnn.benchmark": lambda: torch.backends.cudnn.benchmark,
        "cudnn.deterministic": lambda: torch.backends.cudnn.deterministic,
        "cudnn.allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
        "cudnn.enabled": lambda: torch.backends.cudnn.enabled,
        "cuda.matmul.allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
        "cuda.matmul.allow_fp16_reduced_precision_reduction": lambda: (
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction
        ),
        "float32_matmul_precision": torch.get_float32_matmul_precision,
        "mkldnn.matmul.fp32_precision (effective)": _cpu_matmul_precision,
        "deterministic_algorithms": lambda: (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
        ),
        "default_dtype": torch.get_default_dtype,
        "default_device": torch.get_default_device,
    }
    settings = {}
    for name, read in readers.items():
        try:
            settings[name] = repr(read())
        except Exception as err:
            settings[name] = f"raises {type(err).__name__}: {err}"
    return settings
