"""Options and helpers shared by several commands."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rich.console import Console

from neuron_migrate.config import Config, load_config
from neuron_migrate.errors import UsageError


def stderr_console() -> Console:
    """Summaries go to stderr; colour only on a terminal."""
    return Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)


def split_codes(values: list[str] | None) -> tuple[str, ...]:
    """`--select NM1,NM401 --select NM2` -> ("NM1", "NM401", "NM2")."""
    out: list[str] = []
    for value in values or []:
        out.extend(part.strip().upper() for part in value.split(",") if part.strip())
    return tuple(out)


def scan_root(paths: list[Path], root: Path | None) -> Path:
    """Where finding paths are relative to: --root, else the working directory when every path is inside it,
    else the nearest folder that holds them all."""
    if root is not None:
        if not root.is_dir():
            raise UsageError(f"--root {root}: not a folder")
        return root.absolute()
    cwd = Path.cwd()
    absolute = [p.absolute() for p in paths]
    if all(p == cwd or cwd in p.parents for p in absolute):
        return cwd
    common = Path(os.path.commonpath([str(p) for p in absolute]))
    return common if common.is_dir() else common.parent


def config_for(paths: list[Path], config_file: Path | None) -> Config:
    start = paths[0] if paths else Path.cwd()
    return load_config(start if start.is_dir() else start.parent, config_file)


def is_tty() -> bool:
    return sys.stderr.isatty()
