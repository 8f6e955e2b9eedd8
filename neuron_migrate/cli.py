"""The `neuron-migrate` command line: parse, call, render. Logic lives in the packages; commands live in
`neuron_migrate/commands/`, one module per command or command group, registered here."""

from __future__ import annotations

import importlib
import os
import sys

import typer

from neuron_migrate import __version__
from neuron_migrate.errors import EXIT_INTERNAL, NeuronMigrateError

app = typer.Typer(
    name="neuron-migrate",
    help="Move PyTorch code from NVIDIA GPUs to AWS Trainium (TorchNeuron): scan, fix, trace, report, check.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"neuron-migrate {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors (also NEURON_MIGRATE_DEBUG=1)."),
) -> None:
    if debug:
        os.environ["NEURON_MIGRATE_DEBUG"] = "1"


def _register_commands() -> None:
    from neuron_migrate.commands import check, fix, fleet, opdb, report, rules, scan, trace

    scan.register(app)
    fix.register(app)
    rules.register(app)
    opdb.register(app)
    trace.register(app)
    check.register(app)
    fleet.register(app)
    report.register(app)


def _click_exceptions() -> tuple[type[Exception], ...]:
    """The usage-error base class typer raises: click's, or (typer >= 0.25, which vendors click) its own."""
    found = []
    for module in ("typer._click.exceptions", "click.exceptions"):
        try:
            found.append(importlib.import_module(module).ClickException)
        except (ImportError, AttributeError):
            continue
    return tuple(found)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app; a user error is one line on stderr and exit 2, a bug is exit 3."""
    _register_commands()
    debug = os.environ.get("NEURON_MIGRATE_DEBUG") == "1" or "--debug" in (argv or sys.argv[1:])
    try:
        code = app(args=argv, standalone_mode=False)
    except NeuronMigrateError as err:
        if debug:
            raise
        typer.echo(f"neuron-migrate: error: {err}", err=True)
        sys.exit(err.exit_code)
    except typer.Abort:
        typer.echo("neuron-migrate: aborted", err=True)
        sys.exit(130)
    except _click_exceptions() as err:
        err.show()
        sys.exit(err.exit_code)
    except typer.Exit as err:
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        typer.echo("neuron-migrate: interrupted", err=True)
        sys.exit(130)
    except Exception as err:  # a bug: say so plainly, keep the traceback for --debug
        if debug:
            raise
        typer.echo(
            f"neuron-migrate: internal error: {type(err).__name__}: {err} (rerun with --debug for the traceback "
            "and report it)",
            err=True,
        )
        sys.exit(EXIT_INTERNAL)
    sys.exit(code if isinstance(code, int) else 0)
