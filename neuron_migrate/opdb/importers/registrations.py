"""Import the dispatcher registrations of an installed torch_neuronx as an opdb snapshot (an UPPER BOUND).

`import torch_neuronx` registers its kernels for the PrivateUse1 dispatch key;
`torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")` then lists them (the same call as the
project's own `tools/list-implemented-ops`). A registered kernel is not proof the op runs on the device: it
may reject the inputs or fail to compile and fall back at run time, and CompositeImplicitAutograd ops
decompose before reaching it. So every registered op is `native` with a note saying it is an upper bound;
every other op goes to the boxed CPU fallback. The import runs in a child process: registering the device is
process-wide and permanent, and a broken install must not take the CLI down.
"""

from __future__ import annotations

import datetime as _dt
import json
import subprocess
import sys

from neuron_migrate.errors import OpdbError
from neuron_migrate.opdb.db import OpEntry, Snapshot, Support, normalize_op

UPPER_BOUND_NOTE = "registered kernel: upper bound (may still fall back at run time)"
_CHILD = r"""
import json, sys
try:
    import torch, torch_neuronx
except Exception as err:  # report, do not crash: the parent turns this into one error line
    print(json.dumps({"error": f"{type(err).__name__}: {err}".splitlines()[0]})); sys.exit(0)
regs = torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")
print(json.dumps({"registrations": sorted(regs), "torch": torch.__version__,
                  "torch_neuronx": getattr(torch_neuronx, "__version__", "unknown")}))
"""


def parse_registrations(names: list[str]) -> list[str]:
    """Dispatcher registration strings -> sorted unique overload names. Registrations look like
    `aten::add.Tensor` or `aten::relu` (default overload); blanks and the boxed fallback's empty name are
    dropped."""
    ops = {normalize_op(n) for n in names if n and n.strip() and "::" in n}
    return sorted(ops)


def build_snapshot(
    names: list[str], *, version: str, torch_version: str, date: str | None = None
) -> Snapshot:
    """A snapshot where every registered op is native (upper bound) and the rest falls back to CPU."""
    date = date or _dt.date.today().isoformat()
    source = f"registrations:torch_neuronx {version}:torch {torch_version}:{date}"
    ops = {
        op: OpEntry("native", None, "registered", UPPER_BOUND_NOTE, source, date)
        for op in parse_registrations(names)
    }
    unlisted = Support(
        "cpu_fallback",
        None,
        "boxed-fallback",
        "no PrivateUse1 registration: boxed CPU fallback (or a core composite kernel runs first)",
        source,
        date,
    )
    return Snapshot(
        version=f"{version}-registrations",
        torch_neuronx_version=version,
        pre_release=False,
        description=(
            "Dispatcher registrations of an installed torch_neuronx for PrivateUse1: an UPPER BOUND on "
            "native support (a registered kernel may still fall back to CPU at run time)."
        ),
        ops=ops,
        unlisted=unlisted,
        sources=[
            {
                "id": "registrations",
                "path": "torch._C._dispatch_get_registrations_for_dispatch_key('PrivateUse1')",
                "date": date,
                "what": f"torch_neuronx {version} on torch {torch_version}",
            }
        ],
    )


def read_installed(python: str | None = None, timeout: float = 300.0) -> dict:
    """Run the child that imports torch_neuronx; returns its JSON. One OpdbError line if that is
    impossible."""
    try:
        proc = subprocess.run(
            [python or sys.executable, "-c", _CHILD],
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise OpdbError(f"importing torch_neuronx took more than {timeout:.0f}s; check the install") from None
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise OpdbError(f"reading torch_neuronx registrations failed in the child process: {tail}")
    data = json.loads(lines[-1])
    if "error" in data:
        raise OpdbError(
            f"torch_neuronx is not importable here ({data['error']}); run this on a Trainium "
            "host with torch-neuronx installed"
        )
    return data


def import_registrations(version: str | None = None, python: str | None = None) -> Snapshot:
    """Snapshot of the installed torch_neuronx's registrations (`version` overrides the installed version)."""
    data = read_installed(python)
    return build_snapshot(
        data["registrations"], version=version or data["torch_neuronx"], torch_version=data["torch"]
    )
