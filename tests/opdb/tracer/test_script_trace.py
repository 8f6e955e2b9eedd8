"""`trace script.py` on a realistic training script, unmodified: DataLoader workers and pinned memory,
accelerator timing, a checkpoint round trip and torch.compile(backend="eager") all work on the stand-in, and
the trace stops once the op set is stable (or after --steps N, or at the end with --steps 0)."""

from __future__ import annotations

import pytest

from neuron_migrate.opdb.tracer.runner import TraceOptions, run_trace
from neuron_migrate.opdb.tracer.script import ScriptStopped, StepCounter
from neuron_migrate.opdb.tracer.targets import TargetSpec
from tests.opdb.tracer.conftest import FIXTURES, ROOT, marker_line

SCRIPT = "tests/opdb/tracer/fixtures/realistic_train.py"


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


class _Recorder:
    """What StepCounter reads of the recorder: the recorded keys and whether an optimizer step is running."""

    def __init__(self) -> None:
        self.calls: dict = {}
        self.in_optimizer = 0


def _run_steps(counter: StepCounter, recorder: _Recorder, new_keys_per_step: list[int]) -> int:
    """Feed the counter steps that add the given numbers of new keys; returns the steps run before it
    stopped."""
    for step, added in enumerate(new_keys_per_step, 1):
        recorder.calls.update({(step, i): 1 for i in range(added)})
        try:
            counter.after_step()
        except ScriptStopped:
            return step
    return len(new_keys_per_step)


def test_step_limits():
    recorder = _Recorder()
    auto = StepCounter(recorder, None)
    assert _run_steps(auto, recorder, [40, 3, 0, 0, 0]) == 3 and auto.stopped  # step 3 added nothing
    assert "stopped after step 3" in auto.note()
    recorder = _Recorder()
    three = StepCounter(recorder, 3)
    assert _run_steps(three, recorder, [40, 0, 0, 0, 0]) == 3 and "(--steps 3)" in three.note()
    recorder = _Recorder()
    whole = StepCounter(recorder, 0)
    assert _run_steps(whole, recorder, [40, 0, 0, 0]) == 4 and not whole.stopped
    assert whole.note() == "script ran to its end: 4 optimizer steps traced"


def test_a_nested_optimizer_step_is_not_counted():
    recorder = _Recorder()
    counter = StepCounter(recorder, 1)
    recorder.in_optimizer = 1  # an optimizer stepping inside another's step
    counter.after_step()
    assert counter.steps == 0
