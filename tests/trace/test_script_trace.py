"""`trace script.py` on a realistic training script, unmodified: DataLoader workers and pinned memory,
accelerator timing, a checkpoint round trip and torch.compile(backend="eager") all work on the stand-in, and
the trace stops once the op set is stable (or after --steps N, or at the end with --steps 0)."""

from __future__ import annotations

import pytest

from neuron_migrate.opdb.tracer.runner import TraceOptions, run_trace
from neuron_migrate.opdb.tracer.targets import TargetSpec
from tests.trace.conftest import FIXTURES, ROOT, marker_line

SCRIPT = "tests/trace/fixtures/realistic_train.py"


@pytest.fixture(scope="module")
def default_trace():
    return run_trace(TargetSpec("script", SCRIPT, ("--epochs", "50")), TraceOptions(root=str(ROOT)))


def test_realistic_script_traces_unmodified(default_trace):
    result = default_trace
    assert result.error is None and result.device == "stand-in"
    assert set(result.phases) == {"forward", "backward", "optimizer"}
    line = marker_line(FIXTURES / "realistic_train.py", "loss")
    sites = {(s.path, s.line) for u in result.ops if u.phase == "forward" for s in u.call_sites}
    assert (SCRIPT, line) in sites


def test_stops_once_the_op_set_is_stable(default_trace):
    (note,) = [n for n in default_trace.notes if n.startswith("script traced for")]
    steps = int(note.split()[3])
    assert 2 <= steps < 50 * 8, note  # 8 batches an epoch: it stopped long before the script's end


def test_steps_option_bounds_and_zero_runs_to_the_end():
    three = run_trace(TargetSpec("script", SCRIPT, ("--epochs", "2")), TraceOptions(root=str(ROOT), steps=3))
    assert any("3 optimizer steps (--steps 3)" in n for n in three.notes), three.notes
    whole = run_trace(TargetSpec("script", SCRIPT, ("--epochs", "1", "--workers", "0")),
                      TraceOptions(root=str(ROOT), steps=0))
    assert any(n == "script ran to its end: 8 optimizer steps traced" for n in whole.notes), whole.notes
