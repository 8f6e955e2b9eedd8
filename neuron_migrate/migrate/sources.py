"""Finding the files to scan and reading them without ever raising: every problem becomes a `SourceProblem`.

Python files are decoded the way Python does (PEP 263 cookie, BOM); notebooks become one virtual module made
of their code cells (IPython magics blanked, line count kept) with a map back to (cell, line).
"""

from __future__ import annotations

import fnmatch
import io
import json
import os
import re
import subprocess
import tokenize
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

MAX_BYTES = 5 * 1024 * 1024
SOURCE_SUFFIXES = (".py", ".ipynb")
KERNEL_SUFFIXES = (".cu", ".cuh")
SKIP_DIRS = {
    ".git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    "__pycache__",
    "node_modules",
    ".neuron-migrate-cache",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".ipynb_checkpoints",
}
_MAGIC = re.compile(r"^\s*([%!]|\?|[\w.]+\?\s*$)")


@dataclass(frozen=True)
class SourceFile:
    """A file chosen for scanning: its absolute path and its path relative to the scan root (with `/`)."""

    path: Path
    rel: str

    @property
    def kind(self) -> str:
        suffix = self.path.suffix.lower()
        return "notebook" if suffix == ".ipynb" else "kernel" if suffix in KERNEL_SUFFIXES else "python"


@dataclass
class SourceText:
    """Decoded text ready to parse; for notebooks `cells[i]` is the (cell number, line in cell) of line
    i+1."""

    text: str
    encoding: str = "utf-8"
    cells: list[tuple[int, int]] | None = None
    #: modules imported elsewhere (earlier notebook cells), so fixes do not import them again
    bound_modules: frozenset[str] = frozenset()


@dataclass(frozen=True)
class SourceProblem:
    """Why a file could not be read or decoded (`kind` "unreadable") or parsed ("unparsable"); the scanner
    reports it as a finding of the file-level rule of that kind."""

    kind: str
    reason: str


@dataclass
class Selection:
    """Which files a run looks at: include/exclude globs (relative to the root) and .gitignore handling."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    respect_gitignore: bool = True
    extra_skip_dirs: set[str] = field(default_factory=set)

    def wants(self, rel: str) -> bool:
        if self.include and not any(_glob(rel, pattern) for pattern in self.include):
            return False
        return not any(_glob(rel, pattern) for pattern in self.exclude)


def _glob(rel: str, pattern: str) -> bool:
    pattern = pattern.rstrip("/")
    return (
        fnmatch.fnmatch(rel, pattern)
        or fnmatch.fnmatch(rel, f"{pattern}/*")
        or fnmatch.fnmatch(rel, f"*/{pattern}")
        or fnmatch.fnmatch(rel, f"*/{pattern}/*")
    )


def discover(paths: list[Path], root: Path, selection: Selection) -> list[SourceFile]:
    """The source files under `paths` (files given explicitly are always taken), sorted, without
    duplicates."""
    found: dict[str, SourceFile] = {}
    ignored = _git_ignored(root) if selection.respect_gitignore else None
    for given in paths:
        if given.is_file() or (given.is_symlink() and not given.is_dir()):
            rel = _rel(given, root)
            found[rel] = SourceFile(given, rel)
            continue
        # a folder the user names explicitly is scanned even if .gitignore covers it (e.g. site-packages)
        honour = ignored if ignored is not None and _rel(given, root) + "/" not in ignored else None
        for dirpath, dirnames, filenames in os.walk(given):
            dirnames[:] = sorted(
                d
                for d in dirnames
                if d not in SKIP_DIRS | selection.extra_skip_dirs and not (Path(dirpath, d).is_symlink())
            )
            for name in filenames:
                if not name.endswith(SOURCE_SUFFIXES + KERNEL_SUFFIXES):
                    continue
                path = Path(dirpath, name)
                rel = _rel(path, root)
                if honour is not None and rel in honour:
                    continue
                if selection.wants(rel):
                    found[rel] = SourceFile(path, rel)
    return [found[rel] for rel in sorted(found)]


def _rel(path: Path, root: Path) -> str:
    try:
        return path.absolute().relative_to(root.absolute()).as_posix()
    except ValueError:
        return path.as_posix()


def _git_ignored(root: Path) -> set[str] | None:
    """Files git ignores under `root` (None when `root` is not in a git work tree or git is missing)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--others", "--ignored", "--exclude-standard", "--directory", "-z"],
            cwd=root,
            capture_output=True,
            timeout=60,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    entries = [e for e in out.decode("utf-8", "replace").split("\0") if e]
    return _IgnoredSet(entries)


class _IgnoredSet(set):
    """Ignored paths as git lists them: files, and directories with a trailing `/` covering what is inside."""

    def __init__(self, entries: list[str]) -> None:
        super().__init__(e for e in entries if not e.endswith("/"))
        self.dirs = tuple(e for e in entries if e.endswith("/"))

    def __contains__(self, rel: object) -> bool:
        return set.__contains__(self, rel) or (isinstance(rel, str) and rel.startswith(self.dirs))


@lru_cache(maxsize=512)
def _modules_in(folder: Path) -> frozenset[str]:
    try:
        names = os.listdir(folder)
    except OSError:
        return frozenset()
    found = {name[:-3] for name in names if name.endswith(".py")}
    found |= {name for name in names if (folder / name / "__init__.py").is_file()}
    return frozenset(found)


def local_modules(folder: Path, root: Path) -> frozenset[str]:
    """Module names that are the project's own for a file in `folder`: modules and packages next to it and at
    the scan root (first-party imports, for placing a new import in its group)."""
    return _modules_in(folder) | _modules_in(root.absolute())


def read_bytes(source: SourceFile) -> bytes | SourceProblem:
    """The file's bytes, or why they cannot be had (broken symlink, loop, permissions, size)."""
    path = source.path
    try:
        size = path.stat().st_size
    except OSError as err:
        if path.is_symlink():
            return SourceProblem("unreadable", f"broken or looping symlink ({err.strerror})")
        return SourceProblem("unreadable", f"cannot stat file ({err.strerror})")
    if size > MAX_BYTES:
        return SourceProblem(
            "unreadable",
            f"file is {size // 1024 // 1024} MiB, over the {MAX_BYTES // 1024 // 1024} MiB limit",
        )
    try:
        return path.read_bytes()
    except OSError as err:
        return SourceProblem("unreadable", f"cannot read file ({err.strerror})")


def decode(source: SourceFile, data: bytes) -> SourceText | SourceProblem:
    """Text of a Python file or notebook, or why it cannot be decoded."""
    if b"\0" in data:
        return SourceProblem("unreadable", "file contains NUL bytes (binary or corrupted)")
    if source.kind == "notebook":
        return _notebook_text(data)
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError) as err:
        return SourceProblem("unreadable", f"cannot decode as Python source ({err})")
    return SourceText(text.removeprefix("\ufeff"), encoding)


def _notebook_text(data: bytes) -> SourceText | SourceProblem:
    try:
        notebook = json.loads(data.decode("utf-8-sig"))
        cells = notebook["cells"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as err:
        return SourceProblem("unparsable", f"not a valid Jupyter notebook ({type(err).__name__}: {err})")
    lines: list[str] = []
    where: list[tuple[int, int]] = []
    number = 0
    for cell in cells:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        number += 1
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else str(source)
        cell_lines = text.split("\n")
        cell_magic = bool(cell_lines) and cell_lines[0].lstrip().startswith("%%")
        for index, line in enumerate(cell_lines, start=1):
            lines.append("" if cell_magic or _MAGIC.match(line) else line)
            where.append((number, index))
    return SourceText("\n".join(lines) + "\n", "utf-8", where)


def notebook_cells(data: bytes) -> list[str]:
    """The source text of each code cell, in order (for writing fixes back)."""
    notebook = json.loads(data.decode("utf-8-sig"))
    out = []
    for cell in notebook["cells"]:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            source = cell.get("source", "")
            out.append("".join(source) if isinstance(source, list) else str(source))
    return out
