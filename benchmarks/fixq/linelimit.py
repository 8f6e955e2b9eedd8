"""A file's line limit: the `line-length` of the nearest ruff / black / flake8 configuration above it.

Ruff and black read `line-length` (ruff also from `ruff.toml` / `.ruff.toml`), flake8 `max-line-length` in
`setup.cfg`, `tox.ini` or `.flake8`. The search stops at a boundary folder: an installed package has no
configuration of its own, and walking further up from site-packages would find the virtualenv owner's
`pyproject.toml` and measure transformers by neuron-migrate's own limit.
"""

from __future__ import annotations

import configparser
import subprocess
from functools import cache
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the benchmark needs 3.11; neuron-migrate itself does not
    tomllib = None

DEFAULT_LINE_LENGTH = 88  # ruff's and black's default


def _toml(path: Path) -> dict:
    if tomllib is None:
        raise SystemExit("benchmarks/fix_quality.py needs Python 3.11 or newer (tomllib)")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}


def _int(value: object) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _flake8(path: Path) -> int | None:
    parser = configparser.ConfigParser()
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError):
        return None
    if not parser.has_section("flake8"):
        return None
    section = parser["flake8"]
    return _int(section.get("max-line-length", section.get("max_line_length")))


@cache
def folder_line_length(folder: Path) -> int | None:
    """The line length configured in this one folder, or None when it configures none."""
    for name in (".ruff.toml", "ruff.toml"):
        if (folder / name).is_file():
            value = _int(_toml(folder / name).get("line-length"))
            if value:
                return value
    if (folder / "pyproject.toml").is_file():
        tool = _toml(folder / "pyproject.toml").get("tool", {})
        for section in ("ruff", "black"):
            value = _int(tool.get(section, {}).get("line-length"))
            if value:
                return value
    for name in ("setup.cfg", "tox.ini", ".flake8"):
        if (folder / name).is_file() and (value := _flake8(folder / name)):
            return value
    return None


def line_length(file: Path, boundary: Path, default: int = DEFAULT_LINE_LENGTH) -> int:
    """The limit for `file`: the nearest configured folder from its own up to `boundary` (inclusive)."""
    boundary = boundary.resolve()
    folder = file.resolve().parent
    while folder == boundary or boundary in folder.parents:
        if (value := folder_line_length(folder)) is not None:
            return value
        folder = folder.parent
    return default


def search_boundary(target: Path) -> Path:
    """How far up to look for configuration: a folder's enclosing git work tree, else the folder itself. A
    folder the work tree ignores is not its code (`benchmarks/.trees/small/accelerate`, installed there for
    the benchmarks): like an installed package, it stops at itself."""
    target = target.resolve()
    for folder in (target, *target.parents):
        if (folder / ".git").exists():
            return target if _ignored(folder, target) else folder
    return target


def _ignored(work_tree: Path, path: Path) -> bool:
    if path == work_tree:
        return False
    check = subprocess.run(
        ["git", "-C", str(work_tree), "check-ignore", "-q", str(path)], capture_output=True, check=False
    )
    return check.returncode == 0
