"""Modules that cannot be imported: one whose top imports a module of its own package from a package the
project does not have, or imports such a module, or sits in a package whose `__init__.py` does.

ColossalAI kept `legacy/inference/` after the code it imports moved away: `pipeline/schedule/generate.py`
imports `colossalai.inference.engine.microbatch_manager`, and `colossalai/inference/engine/` is gone; the
engine of `legacy/inference/hybridengine/` imports that module, the package's `__init__.py` imports the
engine, and every module of the package runs that `__init__.py` first. So they all fail at import, and so
would any fix in them (review 21's maintainers rejected the hunks there as dead code).

Only a missing *package* counts (a component of the module path other than the last), and not a private one:
a missing last component may be a file the build writes (setuptools-scm's `_version.py`), a private one a
compiled extension not built yet (`mypkg._C.nn`). A compiled module or a stub (`.pyi`) in the tree is a
module. The top-level package's own
`__init__.py` is not followed as an implicit import: were it to fail, every module would, which means the
build generates a package, not that the project is dead.

The scanner reads each file's unindented `import` / `from ... import` lines (`read`, on bytes, before any
parse) and records what fails in the file's `FixStyle`, so it is part of the cache key; for an import of the
file's own, the analysis only counts it when libcst confirms the import is a statement at the module's top
(`settle`), not an example in a docstring. Kept free of libcst: the scanner imports it for warm runs too.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from pathlib import Path

#: an import statement at the start of a line (module level): the module of `from M import ...` (with its
#: leading dots) or the first module of `import M, ...`; after a newline, each searched on its own (a literal
#: start makes the search three times faster than one `^` pattern), and at the file's start
_FROM = rb"from[ \t]+(\.*[\w.]*)[ \t]+import\b"
_IMPORT = rb"import[ \t]+([\w.]+)"
_TOP_IMPORTS = (re.compile(b"\n" + _FROM), re.compile(b"\n" + _IMPORT))
_FIRST_IMPORT = re.compile(b"(?:" + _FROM + b"|" + _IMPORT + b")")


@dataclass(frozen=True)
class _Import:
    """One module a file imports: as written (`..engine`), or the dotted package for the implicit import of
    an enclosing package's `__init__.py`; the file it resolves to (None: unknown); whether it is missing.
    Paths are strings here (`os.path`): `pathlib` costs more than the rest on a warm scan of a large tree."""

    written: str
    target: str | None
    missing: bool = False
    implicit: bool = False


class StaleImports:
    """The modules of one scan that cannot be imported: `read` each file, then ask `verdicts`."""

    def __init__(self) -> None:
        self._packages: dict[str, tuple[str, str] | None] = {}
        self._exists: dict[str, bool] = {}
        self._imports: dict[str, list[_Import]] = {}
        self._enclosing: dict[str, list[_Import]] = {}
        self._resolved: dict[tuple[str, bytes], _Import | None] = {}

    def read(self, path: Path, data: bytes) -> None:
        """Record what the source `data` of `path` imports of its own package, the implicit imports of the
        packages around it included."""
        file = os.path.abspath(path)
        folder = os.path.dirname(file)
        package = self._package_of(folder)
        if package is None:
            return
        found = [i for i in self._enclosing_packages(folder, *package) if i.target != file]
        if b"import" in data:
            for written in _top_imports(data):
                key = (folder if written.startswith(b".") else "", written)
                if key not in self._resolved:
                    text = written.decode("ascii", "replace")
                    start = self._start(text, *package, folder)
                    self._resolved[key] = None if start is None else self._resolve(text, *start)
                if (resolved := self._resolved[key]) is not None:
                    found.append(resolved)
        if found:
            self._imports[file] = found

    def verdicts(self) -> dict[Path, tuple[str, str, bool]]:
        """Per file that cannot be imported (by absolute path): (the import that fails, as
        `_Import.written`; the missing module it leads to, as written where it is imported; whether the
        failing import is an enclosing package's implicit one)."""
        failing: dict[str, tuple[str, str, bool]] = {}
        for file, imports in self._imports.items():
            missing = next((i for i in imports if i.missing), None)
            if missing is not None:
                failing[file] = (missing.written, missing.written, False)
        changed = bool(failing)
        while changed:
            changed = False
            for file, imports in self._imports.items():
                if file in failing:
                    continue
                reason = next((i for i in imports if i.target in failing), None)
                if reason is not None:
                    failing[file] = (reason.written, failing[reason.target][1], reason.implicit)
                    changed = True
        return {Path(file): why for file, why in failing.items()}

    def _package_of(self, folder: str) -> tuple[str, str] | None:
        """(top-level package name, the folder that holds it) for a module in `folder`, None outside one."""
        if folder not in self._packages:
            top = None
            at = folder
            while self._is_file(os.path.join(at, "__init__.py")):
                top = at
                parent = os.path.dirname(at)
                if parent == at:
                    break
                at = parent
            self._packages[folder] = (os.path.basename(top), os.path.dirname(top)) if top else None
        return self._packages[folder]

    def _enclosing_packages(self, folder: str, name: str, base: str) -> list[_Import]:
        """The `__init__.py` of every package from `folder` up, but the top-level one: importing a module in
        `folder` runs them first."""
        if folder not in self._enclosing:
            top = os.path.join(base, name)
            found = []
            at = folder
            while at != top and os.path.dirname(at) != at:
                dotted = os.path.relpath(at, base).replace(os.sep, ".")
                found.append(_Import(dotted, os.path.join(at, "__init__.py"), implicit=True))
                at = os.path.dirname(at)
            self._enclosing[folder] = found
        return self._enclosing[folder]

    def _start(self, written: str, package: str, base: str, folder: str) -> tuple[str, list[str]] | None:
        """Where resolving `written` starts and the components left to find; None for another package's
        module, or a relative import that climbs out of the package."""
        dots = len(written) - len(written.lstrip("."))
        parts = [part for part in written[dots:].split(".") if part]
        if dots == 0:
            if not parts or parts[0] != package:
                return None
            return os.path.join(base, package), parts[1:]
        at = folder
        for _ in range(dots - 1):
            at = os.path.dirname(at)
            if not self._is_file(os.path.join(at, "__init__.py")):
                return None
        return at, parts

    def _resolve(self, written: str, at: str, parts: list[str]) -> _Import:
        """What module path `parts` below `at` is: a package's `__init__.py`, a module's file, missing (a
        public package on the way is neither a folder nor a module), or unknown (not found otherwise)."""
        for index, part in enumerate(parts):
            below = os.path.join(at, part)
            if self._is_dir(below):
                at = below
                continue
            module = self._module(at, part)  # a module: the rest are its own submodules (an extension's)
            missing = module is None and index < len(parts) - 1 and not part.startswith("_")
            return _Import(written, module, missing=missing)
        return _Import(written, os.path.join(at, "__init__.py"))

    def _module(self, folder: str, name: str) -> str | None:
        """The source, stub or compiled module `name` in `folder` (`x.py`, `x.pyi`, `x.cpython-311-*.so`)."""
        source = os.path.join(folder, f"{name}.py")
        if self._is_file(source):
            return source
        pattern = os.path.join(glob.escape(folder), f"{name}.*")
        if pattern not in self._exists:
            self._exists[pattern] = bool(glob.glob(pattern))
        return pattern if self._exists[pattern] else None

    def _is_dir(self, path: str) -> bool:
        if path not in self._exists:
            self._exists[path] = os.path.isdir(path)
        return self._exists[path]

    def _is_file(self, path: str) -> bool:
        if path not in self._exists:
            self._exists[path] = os.path.isfile(path)
        return self._exists[path]


def _top_imports(data: bytes) -> list[bytes]:
    """The modules the import statements at the start of a line in `data` name, in order."""
    found = [(match.start(), match.group(1)) for pattern in _TOP_IMPORTS for match in pattern.finditer(data)]
    first = _FIRST_IMPORT.match(data)
    if first is not None:
        found.append((-1, first.group(1) or first.group(2)))
    return [written for _, written in sorted(found)]
