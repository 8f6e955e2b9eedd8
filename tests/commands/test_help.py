"""`--help` of every command and command group reads like any CLI's: it renders, flags take no placeholder,
and every option says what it does."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from neuron_migrate.cli import app, app_command, invoked, main


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


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["scan", "src"], "scan"),
        (["--debug", "fix", "--select", "NM1"], "fix"),
        (["opdb", "show", "aten::add"], "opdb"),
        (["--version"], None),
        (["--help"], None),
        (["scna", "src"], None),  # a typo: the whole app answers "No such command", with the choices
        ([], None),
    ],
)
def test_a_run_builds_only_the_command_it_runs(args, expected):
    """Building all eight commands' parameters was a sixth of a warm scan: a run names its command first."""
    assert invoked(args) == expected
    if expected is not None:
        assert set(app_command(expected).commands) == {expected}


def test_the_whole_app_still_answers_a_mistyped_command(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["scna"])
    assert exited.value.code == 2
    assert "No such command 'scna'. Did you mean 'scan'?" in capsys.readouterr().err
