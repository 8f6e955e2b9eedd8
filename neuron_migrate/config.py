"""`[tool.neuron-migrate]` in pyproject.toml: read once, validated, merged with the flags by
`neuron_migrate.api`.

Keys (all optional): include, exclude, select, ignore (lists of strings), respect-gitignore (bool), jobs
(int), target-torch (str: the oldest torch `fix` may write for; by default the minimum the project's
packaging declares, `migrate.torch_floor`), and the sub-tables `effort` and `check`
that `report` and `check` validate themselves.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuron_migrate.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_LISTS = ("include", "exclude", "select", "ignore")
_KNOWN = {*_LISTS, "respect-gitignore", "jobs", "target-torch", "effort", "check"}


@dataclass(frozen=True)
class Config:
    """The project's settings; `path` is the pyproject.toml they came from (None: defaults)."""

    path: Path | None = None
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    respect_gitignore: bool = True
    jobs: int = 0
    target_torch: tuple[int, int] | None = None  # None: what the project declares (`torch_floor`)
    effort: dict[str, Any] = field(default_factory=dict)
    check: dict[str, Any] = field(default_factory=dict)


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above `start`."""
    start = start.absolute()
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def load_config(start: Path, explicit: Path | None = None) -> Config:
    """Settings from `explicit` or the nearest pyproject.toml; defaults when there is none or no table."""
    path = explicit or find_pyproject(start)
    if path is None:
        return Config()
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: config file not found; pass an existing pyproject.toml to --config"
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read config ({err})") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: invalid TOML ({err}); fix the file") from None
    table = document.get("tool", {}).get("neuron-migrate")
    if table is None:
        return Config(path=path)
    return _parse(table, path)


def _parse(table: dict[str, Any], path: Path) -> Config:
    where = f"{path}: [tool.neuron-migrate]"
    unknown = sorted(set(table) - _KNOWN)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; known keys: {', '.join(sorted(_KNOWN))}")
    values: dict[str, Any] = {"path": path}
    for key in _LISTS:
        if key in table:
            value = table[key]
            if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
                raise ConfigError(f"{where}: {key} must be a list of strings, got {value!r}")
            values[key] = tuple(value)
    checks = {"respect-gitignore": bool, "jobs": int, "target-torch": str, "effort": dict, "check": dict}
    for key, kind in checks.items():
        if key in table:
            if not isinstance(table[key], kind) or (kind is int and isinstance(table[key], bool)):
                raise ConfigError(f"{where}: {key} must be a {kind.__name__}, got {table[key]!r}")
            values[key.replace("-", "_")] = table[key]
    if "target_torch" in values:
        from neuron_migrate.migrate.api_versions import parse_version

        version = parse_version(values["target_torch"])
        if version is None or version < (2, 7):
            raise ConfigError(
                f"{where}: target-torch {values['target_torch']!r} is not a torch version the fixes "
                'can target; use "2.7" or newer (e.g. "2.9")'
            )
        values["target_torch"] = version
    return Config(**values)
