"""The `neuron-migrate` command line: parse, call, render. Logic lives in the packages and
`neuron_migrate.api`; commands live in `neuron_migrate/commands/`, one module per command or command group,
registered here.

The root callback builds the run's one frozen `Options` record (the context's `obj`); each command adds its
flags to it. Only typer is imported at start: each command imports what it uses when it runs.
"""

from __future__ import annotations

import importlib
import os
import sys

import typer

from neuron_migrate import __version__
from neuron_migrate.commands.common import HelpGroup
from neuron_migrate.errors import EXIT_INTERNAL, NeuronMigrateError
from neuron_migrate.options import Options

_HELP = "Move PyTorch code from NVIDIA GPUs to AWS Trainium (TorchNeuron): scan, fix, trace, report, check."


def _new_app() -> typer.Typer:
    made = typer.Typer(
        name="neuron-migrate",
        cls=HelpGroup,
        help=_HELP,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    made.callback()(_root)
    return made


def _version(value: bool) -> None:
    if value:
        typer.echo(f"neuron-migrate {__version__}")
        raise typer.Exit()


def _root(
    ctx: typer.Context,
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
    debug: bool = typer.Option(
        False, "--debug", help="Show the traceback of an error (anywhere on the command line)."
    ),
) -> None:
    ctx.obj = Options(debug=debug)


#: the commands, in the order `--help` lists them, each registered by its module in `neuron_migrate.commands`
COMMANDS = ("scan", "fix", "rules", "opdb", "trace", "check", "fleet", "report")

app = _new_app()


def _register(target: typer.Typer, names: tuple[str, ...]) -> None:
    """Add the commands `names` to `target` (importing a command module imports typer only)."""
    for name in names:
        importlib.import_module(f"neuron_migrate.commands.{name}").register(target)


def app_command(only: str | None = None):  # -> click's Group (typer vendors click; its class is typer's)
    """The app as the click command tree: every command, or the command `only` alone (all a run of it needs:
    building the parameters of eight commands was a sixth of a warm scan's time)."""
    if only is not None:
        single = _new_app()
        _register(single, (only,))
        return typer.main.get_command(single)
    if not app.registered_commands:
        _register(app, COMMANDS)
    return typer.main.get_command(app)


def invoked(args: list[str]) -> str | None:
    """The command `args` run, where its name comes before any other word (root options take no value)."""
    first = next((a for a in args if not a.startswith("-")), None)
    return first if first in COMMANDS and "--" not in args[: args.index(first)] else None


def _click_exceptions() -> tuple[type[Exception], ...]:
    """The usage-error base class typer raises: click's, or (typer >= 0.25, which vendors click) its own."""
    found = []
    for module in ("typer._click.exceptions", "click.exceptions"):
        try:
            found.append(importlib.import_module(module).ClickException)
        except (ImportError, AttributeError):
            continue
    return tuple(found)


def debug_first(args: list[str]) -> list[str]:
    """`--debug` is a root option; move it to the front wherever it was given (never past `--`, where a traced
    script's own arguments begin)."""
    end = args.index("--") if "--" in args else len(args)
    if "--debug" not in args[:end]:
        return args
    return ["--debug", *(a for a in args[:end] if a != "--debug"), *args[end:]]


def _program_name() -> str:
    """How the user started us, for usage lines: `neuron-migrate` or `python -m neuron_migrate`."""
    name = sys.argv[0].replace("\\", "/").rsplit("/", 1)[-1] if sys.argv and sys.argv[0] else ""
    return "python -m neuron_migrate" if name in ("__main__.py", "-m", "-c", "") else name


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app; a user error is one line on stderr and exit 2, a bug is exit 3. `--debug`
    (read from the run's options) shows the traceback instead."""
    args = debug_first(list(sys.argv[1:] if argv is None else argv))
    command = app_command(invoked(args))
    root: typer.Context | None = None
    try:
        with command.make_context(_program_name(), args) as root:
            code = command.invoke(root)
    except NeuronMigrateError as err:
        if _options(root).debug:
            raise
        typer.echo(f"neuron-migrate: error: {err}", err=True)
        sys.exit(err.exit_code)
    except (typer.Abort, EOFError):
        typer.echo("neuron-migrate: aborted", err=True)
        sys.exit(130)
    except typer.Exit as err:  # every command's way out, so before the clause that imports click
        sys.exit(err.exit_code)
    except _click_exceptions() as err:
        err.show()
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        typer.echo("neuron-migrate: interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:  # `neuron-migrate ... | head`: the reader left; say nothing more, as click does
        # left open until exit, so the interpreter's final flush of stdout is silent too
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        sys.exit(1)
    except Exception as err:  # a bug: say so plainly, keep the traceback for --debug
        if _options(root).debug:
            raise
        typer.echo(
            f"neuron-migrate: internal error: {type(err).__name__}: {err} (rerun with --debug for the "
            "traceback and report it)",
            err=True,
        )
        sys.exit(EXIT_INTERNAL)
    sys.exit(code if isinstance(code, int) else 0)


def _options(root: typer.Context | None) -> Options:
    """The options the root callback built; defaults when the error came before it ran."""
    return root.obj if root is not None and isinstance(root.obj, Options) else Options()
