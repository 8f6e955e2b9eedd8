"""What several commands share: the run's options from the root callback, flag parsing, the stderr console and
the progress bar. rich is imported only when a command draws something."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import typer
from typer.core import TyperGroup

from neuron_migrate.options import Options, Progress

if TYPE_CHECKING:
    from rich.console import Console


def root_options(ctx: typer.Context) -> Options:
    """The options record the root callback built (a bare Options when a command runs on its own)."""
    root = ctx.find_root().obj
    return root if isinstance(root, Options) else Options()


def stderr_console() -> Console:
    """Summaries go to stderr; colour only on a terminal."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)


def split_codes(values: list[str] | None) -> tuple[str, ...]:
    """`--select NM1,NM401 --select NM2` -> ("NM1", "NM401", "NM2")."""
    out: list[str] = []
    for value in values or []:
        out.extend(part.strip().upper() for part in value.split(",") if part.strip())
    return tuple(out)


def is_tty() -> bool:
    return sys.stderr.isatty()


@contextmanager
def progress_bar(label: str) -> Iterator[Progress | None]:
    """A `progress(done, total)` callback drawing a transient bar on a terminal; None when not a TTY."""
    if not is_tty():
        yield None
        return
    from rich.progress import Progress as Bar

    with Bar(transient=True, console=stderr_console()) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def _plain_flags(params: list) -> list:
    """Show flags (`--write`, `--help`, `--inference/--train`) without a value placeholder: typer 0.29's help
    prints their type (`--help <bool>`), which reads as if they took a value."""
    for param in params:
        is_flag = getattr(param, "is_flag", False) or getattr(param, "count", False)
        if is_flag and param.metavar is None:
            param.metavar = ""
    return params


class HelpGroup(TyperGroup):
    """The group class of the app and its command groups: help shows flags as flags, in every command."""

    def get_params(self, ctx):
        return _plain_flags(super().get_params(ctx))

    def get_command(self, ctx, cmd_name):
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            _plain_flags(command.get_params(ctx))
        return command
