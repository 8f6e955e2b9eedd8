"""Running a user's training script under the recorder, and stopping it once its op set is stable.

A script is traced as it is: run as `__main__` with its arguments. Tracing it to its end would take as long as
training; instead, the global optimizer-step post hook counts steps and, after each, compares the recorded
(op, dtypes, phase) keys with those before the step. By default the script stops after the first step that
adds none (the op set is stable: further steps repeat it); `steps=N` stops after N steps, `steps=0` never
stops it. Stopping raises `ScriptStopped`, a BaseException, so the script's own `except Exception` does not
swallow it.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path
from typing import Any

from neuron_migrate.errors import TargetError


class ScriptStopped(BaseException):
    """Raised from the optimizer-step hook to end the script early; caught by `run_script`."""


class StepCounter:
    """Counts optimizer steps of a script and decides when its op set is stable."""

    def __init__(self, recorder: Any, steps: int | None) -> None:
        self.recorder = recorder
        self.limit = steps
        self.steps = 0
        self.seen = 0
        self.stopped = False

    def after_step(self, *_: Any) -> None:
        """Optimizer-step post hook: stop when the limit is reached or the step added no new op key."""
        if self.recorder.in_optimizer > 0:
            return  # an optimizer inside an optimizer step: count the outer one only
        self.steps += 1
        keys = len(self.recorder.calls)
        stable = keys == self.seen and self.steps > 1
        self.seen = keys
        if (self.limit is None and stable) or (self.limit and self.steps >= self.limit):
            self.stopped = True
            raise ScriptStopped

    def note(self) -> str:
        """What the trace covered, for the result's notes."""
        if self.stopped and self.limit is None:
            return (
                f"script traced for {self.steps} optimizer steps: stopped after step {self.steps}, which "
                "added no new (op, dtypes, phase); pass --steps 0 to run it to its end"
            )
        if self.stopped:
            return f"script traced for {self.steps} optimizer steps (--steps {self.limit}), then stopped"
        return f"script ran to its end: {self.steps} optimizer steps traced"


def run_script(spec: Any, recorder: Any, steps: int | None) -> StepCounter:
    """Run a script as __main__ with its arguments under the recorder; returns the step count."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from neuron_migrate.opdb.tracer.recorder import recording

    path = Path(spec.ref).resolve()
    counter = StepCounter(recorder, steps)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [spec.ref, *spec.args]
    sys.path.insert(0, str(path.parent))
    try:
        with recording(recorder):
            # registered inside `recording`, so it runs after the recorder's own post hook (phase is reset)
            handle = register_optimizer_step_post_hook(counter.after_step)
            try:
                runpy.run_path(str(path), run_name="__main__")
            finally:
                handle.remove()
    except ScriptStopped:
        pass
    except SystemExit as exit_:
        if exit_.code not in (None, 0):
            raise TargetError(f"{spec.ref} exited with status {exit_.code}") from None
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return counter
