"""`opdb probe`: run PyTorch's OpInfo samples per op and dtype on a `neuron` device, compare with CPU, and
write a snapshot of what was observed.

The work happens in a CHILD process (`python -m neuron_migrate.opdb.probe`): registering a device is
process-wide and permanent. The child uses the real device when torch_neuronx is importable and a device is
present, else the project's stand-in (`neuron_migrate.opdb.tracer.device`, installed with a chosen snapshot).
For each (op, dtype) sample it reads the device's tracking API around the op call and decides:

- the call raised -> `unsupported` for the op the error names (`aten::...`), else for the OpInfo's base name,
  with the first line of the error as the note (ops that ran before the failure keep their observed status);
- ran, result differs from CPU beyond the dtype's tolerance -> `unsupported`, note "wrong result: ...";
- ran and correct -> per tracked op: `cpu_fallback` if the tracking API reports a fallback, else `native`.

The tracking API names ops without dtypes, so every op seen during a sample is attributed to the dtype under
test. Per (op, dtype) the worst observation over samples wins (native < cpu_fallback < unsupported). An op's
own status is the common status of its probed dtypes, else `unknown` ("varies by dtype"); ops not probed are
`unknown` (no `unlisted` rule). On the stand-in the result proves the mechanism only: it reflects the snapshot
the stand-in was configured with, not hardware.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from neuron_migrate.errors import OpdbError
from neuron_migrate.opdb.db import (
    DtypeEntry,
    OpEntry,
    Snapshot,
    load_snapshot_file,
    normalize_dtype,
    normalize_op,
)

_RANK = {"native": 0, "cpu_fallback": 1, "unsupported": 2}
_ATEN = re.compile(r"aten::[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)?")
# Outputs that are random or uninitialised cannot be compared with CPU; only the tracking API decides for
# them.
_UNCOMPARABLE = re.compile(
    r"rand|dropout|bernoulli|normal|uniform|multinomial|empty|exponential|geometric|"
    r"cauchy|poisson|randperm"
)
# (rtol, atol) per dtype. float64 gets float32 tolerances: TorchNeuron documents computing it in float32.
TOLERANCES = {
    "float64": (1.3e-6, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "complex128": (1.3e-6, 1e-5),
    "complex64": (1.3e-6, 1e-5),
    "float16": (1e-3, 1e-3),
    "bfloat16": (1.6e-2, 1e-2),
    "complex32": (1e-3, 1e-3),
}


@dataclass(frozen=True)
class ProbeOptions:
    """What to probe and where. `ops` are OpInfo names (`add`, `nn.functional.relu`) or ATen names."""

    ops: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()
    limit: int | None = None
    samples: int = 3
    opdb: str | None = None  # snapshot the stand-in is configured with (version or path); None = newest
    stand_in: bool = False  # force the stand-in even when torch_neuronx and a device are present
    version: str | None = None


class SampleSkipped(Exception):
    """A sample that says nothing about an op (e.g. its inputs could not be moved to the device)."""


@dataclass(frozen=True)
class Observation:
    """One (op, dtype) outcome of one sample."""

    op: str
    dtype: str
    status: str
    note: str = ""
    all_overloads: bool = False


@dataclass
class ProbeRun:
    """Everything the snapshot needs besides the observations."""

    device_kind: str
    torch_version: str
    torch_neuronx_version: str
    pre_release: bool
    configured: str = ""
    date: str = field(default_factory=lambda: _dt.date.today().isoformat())
    skipped: list[str] = field(default_factory=list)


# --- pure parts: aggregation and selection (tested without a device) ---------------------------------------


def combine(observations: Iterable[Observation], run: ProbeRun, version: str | None = None) -> Snapshot:
    """Fold observations into a snapshot: worst status per (op, dtype); op status = common status or
    unknown."""
    worst: dict[tuple[str, str], Observation] = {}
    scope: dict[str, bool] = {}
    for ob in observations:
        key = (ob.op, ob.dtype)
        prev = worst.get(key)
        if prev is None or _RANK[ob.status] > _RANK[prev.status]:
            worst[key] = ob
        scope[ob.op] = scope.get(ob.op, False) or ob.all_overloads
    source = f"probe:{run.device_kind}:{run.date}:torch {run.torch_version}"
    by_op: dict[str, dict[str, DtypeEntry]] = {}
    for (op, dtype), ob in sorted(worst.items()):
        by_op.setdefault(op, {})[dtype] = DtypeEntry(ob.status, ob.note)
    ops = {}
    for op, dtypes in by_op.items():
        statuses = {d.status for d in dtypes.values()}
        status = statuses.pop() if len(statuses) == 1 else "unknown"
        note = f"probed dtypes: {', '.join(dtypes)} (others not observed)" + (
            "; varies by dtype" if status == "unknown" else ""
        )
        ops[op] = OpEntry(status, None, "probe", note, source, run.date, dtypes, all_overloads=scope[op])
    where = (
        "the stand-in device (proves the mechanism only; statuses follow its configured snapshot "
        f"{run.configured})"
        if run.device_kind == "stand-in"
        else f"a {run.device_kind} device"
    )
    return Snapshot(
        version=version or f"probe-{run.device_kind}-{run.date}",
        torch_neuronx_version=run.torch_neuronx_version,
        pre_release=run.pre_release,
        description=f"Observed by `neuron-migrate opdb probe` on {where}: OpInfo samples per op and dtype, "
        "compared with CPU. Ops not probed are unknown."
        + (f" Skipped: {len(run.skipped)}." if run.skipped else ""),
        ops=ops,
        unlisted=None,
        sources=[
            {
                "id": "probe",
                "path": source,
                "date": run.date,
                "what": f"OpInfo samples on {run.device_kind}; torch {run.torch_version}",
            }
        ],
    )


def select_opinfos(op_db: list[Any], names: Iterable[str], limit: int | None) -> list[Any]:
    """OpInfos whose name, aten_name or `aten::aten_name` is in `names` (all when empty), at most `limit`."""
    wanted = {n.strip() for n in names if n.strip()}
    bare = {
        normalize_op(n).split("::", 1)[1].split(".", 1)[0]
        for n in wanted
        if "::" in n or n.startswith("aten.")
    }
    picked = [
        o
        for o in op_db
        if not wanted
        or o.name in wanted
        or o.aten_name in bare
        or (o.variant_test_name and f"{o.name}.{o.variant_test_name}" in wanted)
    ]
    if wanted and not picked:
        raise OpdbError(
            f"no OpInfo matches --ops {','.join(sorted(wanted))}; use OpInfo names such as add, "
            "nn.functional.relu, or ATen names such as aten::add"
        )
    return picked[:limit] if limit else picked


def classify_tracked(executed: set[str], fallback: set[str], dtype: str) -> list[Observation]:
    """What the tracking API saw during one correct sample: fallback wins over executed for the same op."""
    out = [
        Observation(op, dtype, "cpu_fallback", "tracking API reported a CPU fallback")
        for op in sorted(fallback)
    ]
    out += [Observation(op, dtype, "native", "") for op in sorted(executed - fallback)]
    return out


def _norm_tracked(names: Iterable[str]) -> set[str]:
    # torch-neuronx's executed names may lack the `aten::` prefix (torchneuron-facts section 2).
    return {normalize_op(n if "::" in n else f"aten::{n}") for n in names}


# --- the child: device, samples, comparison -----------------------------------------------------------------


class _Device:
    """The device under probe and its tracking calls (real torch-neuronx or the stand-in)."""

    def __init__(self, opts: ProbeOptions) -> None:
        import torch

        self.torch = torch
        real = None if opts.stand_in else _real_neuronx()
        if real is not None:
            self.kind, self.api, self.pre_release, self.configured = "torch-neuronx", real, False, ""
            self.neuronx_version = getattr(real, "__version__", "unknown")
        else:
            from neuron_migrate.opdb.db import load_snapshot
            from neuron_migrate.opdb.tracer import device

            snap = load_snapshot(opts.opdb)
            self.kind = device.install(snap)
            self.api, self.pre_release = device, snap.pre_release
            self.configured = snap.version if opts.opdb is None else str(opts.opdb)
            self.neuronx_version = f"stand-in configured from opdb {snap.version}"

    def sync(self) -> None:
        mod = getattr(self.torch, "neuron", None)
        if mod is not None and hasattr(mod, "synchronize"):
            mod.synchronize()

    def clear(self) -> None:
        self.sync()
        self.api.clear_op_tracking()

    def tracked(self) -> tuple[set[str], set[str]]:
        self.sync()
        return _norm_tracked(self.api.get_executed_ops()), _norm_tracked(self.api.get_fallback_ops())


def _real_neuronx() -> Any:
    try:
        import torch
        import torch_neuronx
    except Exception:
        return None
    mod = getattr(torch, "neuron", None)
    try:
        return torch_neuronx if mod is not None and mod.device_count() > 0 else None
    except Exception:
        return None


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:300]


def _tree(value: Any, fn: Callable[[Any], Any]) -> Any:
    if isinstance(value, (list, tuple)):
        return type(value)(_tree(v, fn) for v in value)
    return fn(value)


def probe_sample(dev: _Device, opinfo: Any, sample: Any, dtype: str) -> list[Observation]:
    """Run one sample on CPU and on the device; the observations it yields (none if CPU itself fails)."""
    torch = dev.torch

    def keep(t: Any) -> Any:
        return t.clone() if isinstance(t, torch.Tensor) else t

    try:
        cpu = sample.transform(keep)
        expected = opinfo(cpu.input, *cpu.args, **cpu.kwargs)
    except Exception:
        return []  # the reference itself fails: nothing to learn about the device
    try:
        moved = sample.transform(lambda t: t.to("neuron") if isinstance(t, torch.Tensor) else t)
    except Exception as err:
        raise SampleSkipped(f"moving inputs to the device failed: {_first_line(err)}") from None
    dev.clear()
    base = f"aten::{opinfo.aten_name}"
    try:
        actual = opinfo(moved.input, *moved.args, **moved.kwargs)
        executed, fallback = dev.tracked()
    except Exception as err:
        executed, fallback = dev.tracked()
        named = _ATEN.findall(str(err))
        failed = Observation(
            named[0] if named else base, dtype, "unsupported", _first_line(err), all_overloads=not named
        )
        return [failed, *classify_tracked(executed - {failed.op}, fallback - {failed.op}, dtype)]
    seen = classify_tracked(executed, fallback, dtype)
    if _UNCOMPARABLE.search(opinfo.name):
        return seen
    problem = _compare(torch, actual, expected, dtype)
    if problem is None:
        return seen
    mains = [o.op for o in seen if o.op.split(".", 1)[0] == base] or [base]
    wrong = [
        Observation(
            op,
            dtype,
            "unsupported",
            f"wrong result: {problem}",
            all_overloads=op == base and op not in executed | fallback,
        )
        for op in mains
    ]
    return wrong + [o for o in seen if o.op not in mains]


def _compare(torch: Any, actual: Any, expected: Any, dtype: str) -> str | None:
    def to_cpu(t: Any) -> Any:
        return t.cpu() if isinstance(t, torch.Tensor) else t

    rtol, atol = TOLERANCES.get(dtype, (0.0, 0.0))
    try:
        torch.testing.assert_close(
            _tree(actual, to_cpu),
            expected,
            rtol=rtol,
            atol=atol,
            equal_nan=True,
            check_device=False,
            check_stride=False,
        )
    except Exception as err:
        lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
        return lines[0][:200] if lines else type(err).__name__
    return None


def run_child(opts: ProbeOptions, out: str, progress: bool = True) -> Snapshot:
    """The child's work: probe, combine, write the snapshot to `out`."""
    import warnings

    import torch

    # OpInfo samples exercise deprecated APIs on purpose; their warnings say nothing about the device.
    warnings.simplefilter("ignore")
    from torch.testing._internal.common_methods_invocations import op_db

    dev = _Device(opts)
    run = ProbeRun(dev.kind, torch.__version__, dev.neuronx_version, dev.pre_release, dev.configured)
    wanted = {normalize_dtype(d) for d in opts.dtypes}
    observations: list[Observation] = []
    infos = select_opinfos(op_db, opts.ops, opts.limit)
    for i, info in enumerate(infos, 1):
        if progress:
            print(f"probe: {i}/{len(infos)} {info.name}", file=sys.stderr, flush=True)
        for dt in sorted(info.supported_dtypes("cpu"), key=str):
            name = str(dt).removeprefix("torch.")
            if wanted and name not in wanted:
                continue
            try:
                samples = list(info.sample_inputs("cpu", dt))[: opts.samples]
            except Exception as err:
                run.skipped.append(f"{info.name}[{name}]: samples failed: {_first_line(err)}")
                continue
            for sample in samples:
                try:
                    observations.extend(probe_sample(dev, info, sample, name))
                except SampleSkipped as err:
                    run.skipped.append(f"{info.name}[{name}]: {err}")
    snap = combine(observations, run, opts.version)
    from neuron_migrate.opdb.db import dump_snapshot

    dump_snapshot(snap, out)
    return snap


# --- the parent: spawn the child, read its snapshot ---------------------------------------------------------


def run_probe(opts: ProbeOptions, *, timeout: float | None = None, python: str | None = None) -> Snapshot:
    """Run the probe in a child process and return its snapshot; one OpdbError line if the child fails."""
    with tempfile.TemporaryDirectory(prefix="nm-probe-") as tmp:
        out = os.path.join(tmp, "probe.json")
        status = os.path.join(tmp, "status.json")
        cmd = [
            python or sys.executable,
            "-m",
            "neuron_migrate.opdb.probe",
            json.dumps(asdict(opts)),
            out,
            status,
        ]
        try:
            proc = subprocess.run(
                cmd, check=False, timeout=timeout, stdout=subprocess.DEVNULL, env=_child_env()
            )
        except subprocess.TimeoutExpired:
            raise OpdbError(
                f"opdb probe took more than {timeout:.0f}s; probe fewer ops (--ops, --limit)"
            ) from None
        if Path(status).exists():
            raise OpdbError(json.loads(Path(status).read_text())["error"])
        if proc.returncode != 0 or not Path(out).exists():
            raise OpdbError(
                f"opdb probe child process failed (exit code {proc.returncode}); rerun with --debug"
            )
        return load_snapshot_file(out)


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # so the child imports this same neuron_migrate
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _child_main(argv: list[str]) -> int:
    raw, out, status = argv
    data = json.loads(raw)
    opts = ProbeOptions(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})
    try:
        run_child(opts, out, progress=sys.stderr.isatty())
    except ImportError as err:
        Path(status).write_text(
            json.dumps(
                {"error": f"opdb probe needs torch and expecttest ({err}); install neuron-migrate[trace]"}
            )
        )
        return 2
    except OpdbError as err:
        Path(status).write_text(json.dumps({"error": str(err)}))
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
