"""`--help` of every command and command group reads like any CLI's: it renders, flags take no placeholder,
and every option says what it does."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from neuron_migrate.cli import app, app_command


def _tree(command, path=()):
    """(path, command) for the app and every command and group below it."""
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _tree(sub, (*path, name))


COMMANDS = list(_tree(app_command()))


def test_the_tree_holds_every_command():
    names = {" ".join(path) for path, _ in COMMANDS}
    assert {
        "scan",
        "fix",
        "rules",
        "trace",
        "check",
        "report",
        "opdb import compat-table",
        "fleet hf",
        "fleet merge",
    } <= names


@pytest.mark.parametrize(
    ("path", "command"), COMMANDS, ids=[" ".join(path) or "neuron-migrate" for path, _ in COMMANDS]
)
def test_help_renders_without_placeholders_on_flags(path, command):
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
    assert "<bool>" not in result.output
    options = [p for p in command.params if p.param_type_name == "option"]
    for option in options:
        assert option.help, f"{' '.join(path)} {option.opts[0]} has no help text"
        assert option.opts[0] in result.output
