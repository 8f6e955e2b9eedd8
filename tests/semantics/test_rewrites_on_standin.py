"""The rewritten scripts run on the stand-in `neuron` device (neuron_migrate/opdb/tracer/device.py) unchanged.

Each runs in a child interpreter that first calls `neuron_migrate.opdb.tracer.device.install()` and then runs
the script with runpy, so the script's own `torch.accelerator` code picks `neuron`. Its losses must match the
CPU reference closely (the stand-in computes on CPU, but composite ops decompose the PrivateUse1 way) and it
must report its tensors on `neuron`.
"""

from __future__ import annotations

import importlib.util
import math
from functools import partial

import pytest

from tests.semantics.harness import NAMES, STANDIN_WRAPPER, Gap, run, run_all

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("neuron_migrate.opdb.tracer.device") is None,
        reason="the stand-in neuron device (neuron_migrate/opdb/tracer/device.py) is not there yet",
    ),
    pytest.mark.xdist_group("semantics"),
    pytest.mark.usefixtures("standin_extension"),  # build the C++ stand-in before the scripts start
]

#: Where the stand-in itself falls short (none since the C++ stand-in: synchronize, events, allocator
#: statistics and pinned memory work; the pure-Python fallback's gaps are covered in
#: tests/opdb/tracer/test_device.py)
STANDIN_GAPS: dict[str, Gap] = {}
#: float16 autocast on the device vs on CPU: same casts for linear/matmul, different policy lists elsewhere
REL_TOL = {"amp_trainer": 1e-4}
#: which reference a script's run on neuron is compared with
REFERENCE = {"amp_trainer": "amp_trainer_fp16", "benchmark": "benchmark_device_rng"}
#: what the script prints about its tensors on neuron
DEVICE_LINE = {"amp_trainer": "device neuron logits torch.float16"}


@pytest.fixture(scope="module")
def standin_runs(workspace):
    return run_all(
        {name: partial(run, ["-c", STANDIN_WRAPPER, f"{name}.py"], workspace.rewritten_dir) for name in NAMES}
    )


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=STANDIN_GAPS[n].mark()) if n in STANDIN_GAPS else n for n in NAMES]
)
def test_rewritten_script_runs_on_standin_neuron(workspace, standin_runs, name):
    on_neuron = standin_runs[name]
    # The mixed-precision script really autocasts on an accelerator: compare with the float16 reference.
    # The benchmark draws its batch on the device: from the device's own generator, as on CUDA.
    reference = workspace.references[REFERENCE.get(name, name)]
    if on_neuron.returncode != 0 and name in STANDIN_GAPS:
        STANDIN_GAPS[name].check(on_neuron.stderr)
    assert on_neuron.returncode == 0, on_neuron.describe()
    assert on_neuron.device_line is not None, on_neuron.describe()
    assert on_neuron.device_line.startswith(DEVICE_LINE.get(name, "device neuron")), on_neuron.describe()
    steps = [step for step, _ in on_neuron.losses]
    assert steps == [step for step, _ in reference.losses], on_neuron.describe()
    for (step, got), (_, want) in zip(on_neuron.losses, reference.losses, strict=True):
        assert math.isclose(float(got), float(want), rel_tol=REL_TOL.get(name, 1e-5), abs_tol=1e-6), (
            f"step {step}: neuron {got} vs CPU reference {want}{on_neuron.describe()}"
        )
