"""The one options record of a run: what the user asked for, before `[tool.neuron-migrate]` is merged in.

The CLI's root callback builds it (`--debug`), each command adds its own flags with `dataclasses.replace`, and
`neuron_migrate.api` merges it with the config once. It is frozen, so nothing downstream can change a run's
settings. A Python caller builds one directly: `Options(paths=(Path("src"),))`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: `progress(done, total)`, called as files are scanned or fixed; the CLI draws a bar with it
Progress = Callable[[int, int], None]

DEFAULT_CACHE_DIR = Path(".neuron-migrate-cache")


@dataclass(frozen=True)
class Options:
    """Flags as given; an empty tuple or None means "not given: use the config, then the default"."""

    debug: bool = False
    paths: tuple[Path, ...] = ()  # files or folders to scan; () is the current folder
    root: Path | None = None  # finding paths are relative to it (default: see `api.scan_root`)
    config_file: Path | None = None  # default: the nearest pyproject.toml above the first path
    select: tuple[str, ...] = ()  # rule codes or prefixes; replaces the config's
    ignore: tuple[str, ...] = ()  # added to the config's
    include: tuple[str, ...] = ()  # path globs; replace the config's
    exclude: tuple[str, ...] = ()  # added to the config's
    respect_gitignore: bool = True  # False: also files .gitignore excludes, whatever the config says
    jobs: int | None = None  # worker processes, 0 one per CPU; None: the config's
    cache: bool = True  # read and write the scan cache
    cache_dir: Path | None = None  # default DEFAULT_CACHE_DIR

    @property
    def scan_paths(self) -> tuple[Path, ...]:
        """The paths to scan: the current folder when none were given."""
        return self.paths or (Path("."),)
