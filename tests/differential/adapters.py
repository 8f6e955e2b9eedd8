"""The two places where the harness meets the project's code; when either API moves, only this file changes.

- `rewrite(source, unsafe)`: the codemod, as `neuron-migrate fix` applies it to a file (all rules, repeated
  until nothing changes; `unsafe` adds the unsafe tier).
- `install_standin_device()`: registers the stand-in `neuron` device (process-wide and irreversible: only in a
  child process). The module is moving from `neuron_migrate.opdb.device` to
  `neuron_migrate.opdb.tracer.device`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

STANDIN_MODULES = ("neuron_migrate.opdb.tracer.device", "neuron_migrate.opdb.device")


def rewrite(source: str, unsafe: bool) -> str:
    """`source` after `neuron-migrate fix` (with `--unsafe-fixes` when `unsafe`)."""
    from neuron_migrate.migrate.fix_files import fix_until_stable
    from neuron_migrate.migrate.fixes import FixStyle
    from neuron_migrate.migrate.rule import load_rules

    text, _applied, _left = fix_until_stable(
        source, "snippet.py", tuple(load_rules()), FixStyle(unsafe=unsafe)
    )
    return text


def standin_device_module() -> ModuleType:
    """The module of the stand-in `neuron` device, wherever it lives today."""
    for name in STANDIN_MODULES:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name is None or not name.startswith(err.name):
                raise  # the module exists but one of its own imports failed
    raise ModuleNotFoundError(f"no stand-in neuron device at any of {', '.join(STANDIN_MODULES)}")


def install_standin_device() -> None:
    """Register the stand-in `neuron` device in this process (never in the test runner itself)."""
    standin_device_module().install()
