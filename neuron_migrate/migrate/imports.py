"""Where a fix's new `import torch` goes: in the third-party group, in sorted place, as isort and ruff place
it.

The module's top-level imports (after the docstring and `from __future__` imports) are read as groups
separated by blank lines, each classified standard library / third party / first party (relative imports, or a
module that exists next to the file or at the scan root). Within the third-party group, plain `import x`
statements come before `from x import y`, each sorted case-insensitively (the isort and ruff default). With no
third-party group the import starts one, after the standard-library group, separated by blank lines.

A module that imports torch only under another name (`import torch as th`, stable-baselines3's style) gets
no second import: the new code says `th.accelerator` (`alias_of`, `with_alias`).
"""

from __future__ import annotations

import io
import re
import sys
import tokenize
from dataclasses import dataclass

import libcst as cst

from neuron_migrate.migrate.names import dotted

_STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}


@dataclass(frozen=True)
class ImportLine:
    """One top-level import statement: its first and last line, its top module, and whether it is
    `import x`."""

    start: int
    end: int
    module: str
    plain: bool
    group: str  # stdlib | third | first


def _top_module(stmt: cst.CSTNode) -> tuple[str, bool] | None:
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    if isinstance(small, cst.Import):
        name = dotted(small.names[0].name) or ""
        return name, True
    if isinstance(small, cst.ImportFrom):
        if small.relative:
            return ".", False
        return (dotted(small.module) or "") if small.module is not None else "", False
    return None


def classify(module: str, local_modules: frozenset[str]) -> str:
    head = module.split(".")[0]
    if module == "." or head in local_modules:
        return "first"
    return "stdlib" if head in _STDLIB else "third"


def import_lines(module: cst.Module, positions, local_modules: frozenset[str]) -> list[ImportLine]:
    """The module's leading run of top-level import statements (docstring skipped), in order."""
    found: list[ImportLine] = []
    for index, stmt in enumerate(module.body):
        first = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and stmt.body else None
        if (
            index == 0
            and isinstance(first, cst.Expr)
            and isinstance(first.value, (cst.SimpleString, cst.ConcatenatedString))
        ):
            continue
        top = _top_module(stmt)
        if top is None:
            break
        where = positions[stmt]
        found.append(
            ImportLine(where.start.line, where.end.line, top[0], top[1], classify(top[0], local_modules))
        )
    return found


def insertion(name: str, module: cst.Module, positions, local_modules: frozenset[str]) -> tuple[int, str]:
    """(line, text): insert `text` at the start of `line` to import `name` in its place."""
    text = f"import {name}\n"
    lines = import_lines(module, positions, local_modules)
    if not lines:
        return _after_header(module, positions), text
    third = [imp for imp in lines if imp.group == "third"]
    key = name.lower()
    if third:
        plain = [imp for imp in third if imp.plain]
        later = [imp for imp in plain if imp.module.lower() >= key]  # `import torch` before `... as th`
        if later:
            return later[0].start, text
        if plain:
            return plain[-1].end + 1, text
        return third[0].start, text
    stdlib = [imp for imp in lines if imp.group == "stdlib" and imp.module != "__future__"]
    if stdlib:
        after = stdlib[-1].end + 1
        first_party_follows = any(imp.group == "first" and imp.start > stdlib[-1].end for imp in lines)
        return after, "\n" + text + ("\n" if first_party_follows and _next_is_import(lines, after) else "")
    first = [imp for imp in lines if imp.group == "first"]
    if first:
        return first[0].start, text + "\n"
    return lines[-1].end + 1, text


def _next_is_import(lines: list[ImportLine], line: int) -> bool:
    """Whether an import starts right at `line` (no blank line to separate a new group from it)."""
    return any(imp.start == line for imp in lines)


def _after_header(module: cst.Module, positions) -> int:
    """The first line after the docstring and the `from __future__` imports."""
    body = module.body
    line = positions[body[0]].start.line if body else 1
    for index, stmt in enumerate(body):
        first = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) else None
        is_doc = (
            index == 0
            and isinstance(first, cst.Expr)
            and isinstance(first.value, (cst.SimpleString, cst.ConcatenatedString))
        )
        is_future = isinstance(first, cst.ImportFrom) and getattr(first.module, "value", None) == "__future__"
        if not (is_doc or is_future):
            break
        line = positions[stmt].end.line + 1
    return line


def alias_of(name: str, table: dict[str, str]) -> str | None:
    """The name a module's imports (`table`: local name -> qualified name) give module `name` when none binds
    it as itself (`import torch as th` -> `th`); None when `name` is bound, or not imported at all."""
    if name in table:
        return None
    aliases = sorted(local for local, qualified in table.items() if qualified == name)
    return aliases[0] if aliases else None


def with_alias(text: str, name: str, alias: str) -> str | None:
    """`text` (code a fix writes) with every reference to module `name` (`torch.accelerator`) written through
    `alias` (`th.accelerator`), in f-string fields too; other string literals, comments and attributes that
    happen to be called `name` (`self.torch.x`) stay. None when `text` is not Python tokens."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    edits: list[tuple[int, int, str]] = []  # (start, end, new text), in order
    for before, tok, after in zip([None, *tokens], tokens, [*tokens[1:], None], strict=False):
        start = starts[tok.start[0] - 1] + tok.start[1]
        if tok.type == tokenize.NAME and tok.string == name and after is not None and after.string == ".":
            if before is None or before.string != ".":
                edits.append((start, start + len(name), alias))
        elif tok.type == tokenize.STRING and "f" in tok.string.split("'")[0].split('"')[0].lower():
            fields = _FIELD.sub(lambda m: _reference(name).sub(alias, m.group()), tok.string)  # Python < 3.12
            if fields != tok.string:
                edits.append((start, start + len(tok.string), fields))
    for start, end, new in reversed(edits):
        text = text[:start] + new + text[end:]
    return text


#: a replacement field of an f-string (`{expression}`, not the `{{` of a literal brace)
_FIELD = re.compile(r"(?<!\{)\{(?!\{)[^{}]*\}")


def _reference(name: str) -> re.Pattern:
    """`name.` as the head of a dotted name (not an attribute `x.name.`)."""
    return re.compile(rf"(?<![\w.]){re.escape(name)}(?=\s*\.)")


def imported_locally(name: str, stack: tuple[cst.CSTNode, ...]) -> bool:
    """Whether a function around the fix imports `name` itself (`def f(): import torch; ...`), also in a
    `try`, `if` or `with` block of its body (espnet's `try: import torch` with an `ImportError` fallback)."""
    return any(isinstance(node, cst.FunctionDef) and _imports_in(name, node.body) for node in stack)


def _imports_in(name: str, block: cst.CSTNode) -> bool:
    """Whether the statements of `block` (and of the blocks of its compound statements, not of nested
    functions or classes) hold `import name`."""
    for stmt in getattr(block, "body", ()):
        if isinstance(stmt, cst.SimpleStatementLine):
            if any(
                isinstance(small, cst.Import)
                and any(getattr(a.name, "value", None) == name and a.asname is None for a in small.names)
                for small in stmt.body
            ):
                return True
        elif isinstance(stmt, (cst.Try, cst.If, cst.With)) and any(
            _imports_in(name, inner.body if isinstance(inner, cst.ExceptHandler) else inner)
            for inner in (stmt.body, *getattr(stmt, "handlers", ()))
        ):
            return True
    return False


#: an `import torch` (or `from torch ...`) inside a block: the module loads torch when code needs it
_INDENTED_IMPORT = re.compile(r"^[ \t]+(?:import|from)[ \t]+(?P<name>[\w.]+)", re.M)


def lazy_import(name: str, ctx, stack: tuple[cst.CSTNode, ...]) -> str | None:
    """For a fix that needs `import name` where the module imports it only inside functions (an optional or
    heavy dependency: skrl's `__init__` serves JAX users without torch, GLiNER's CLI defers its imports): the
    first such import, as written; a new top-level import would load it whenever the module is imported.
    None where the module imports it at its top (under any alias) or the fix's function imports it."""
    if ctx.module_binds(name) or alias_of(name, ctx.scopes.module_table) is not None:
        return None
    if imported_locally(name, stack):
        return None
    for found in _INDENTED_IMPORT.finditer(ctx.source):
        if found.group("name") == name or found.group("name").startswith(name + "."):
            return found.group(0).strip()
    return None
