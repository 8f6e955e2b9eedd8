"""One error hierarchy for the whole tool, and the exit codes the CLI maps it to.

A `NeuronMigrateError` is a user-facing problem: its message is one line saying what is wrong, where, and how
to fix it. The CLI prints that line and exits with `exit_code`; anything else is a bug (exit 3).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1  # scan found something, fix would change something, or the check gate failed
EXIT_USAGE = 2  # bad flags, bad config, unreadable or malformed input files
EXIT_INTERNAL = 3  # a bug in neuron-migrate


class NeuronMigrateError(Exception):
    """A problem the user can fix; `str(err)` is the one line we show them."""

    exit_code = EXIT_USAGE


class UsageError(NeuronMigrateError):
    """A flag or argument that cannot work (unknown rule code, missing path, conflicting options)."""


class ConfigError(NeuronMigrateError):
    """`[tool.neuron-migrate]` in pyproject.toml is malformed or names something unknown."""


class InputFileError(NeuronMigrateError):
    """A file we were asked to read (scan JSON, trace JSON, baseline, compat table) is missing or
    malformed."""


class TargetError(NeuronMigrateError):
    """The model or script to trace could not be loaded or run (bad target, crash, timeout, out of memory)."""


class OpdbError(NeuronMigrateError):
    """An opdb snapshot is missing, unknown or malformed."""
