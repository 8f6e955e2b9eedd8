"""Qualified-name resolution for the names a file imports, scope by scope.

A lighter stand-in for libcst's `QualifiedNameProvider` (which needs the full `ScopeProvider` and costs two to
three times a parse): we only need to know what imported names and attribute chains refer to. It sees
`import torch.cuda as tc`, `from torch.cuda.amp import autocast as ac`, `from torch import cuda` and imports
local to a function. A name bound by no import resolves to itself, so `torch.cuda.x` in a notebook cell whose
import sits in an earlier cell still resolves.
"""

from __future__ import annotations

import libcst as cst


def dotted(node: cst.BaseExpression) -> str | None:
    """`a.b.c` for a Name/Attribute chain, else None."""
    parts: list[str] = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name):
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


def import_bindings(node: cst.Import | cst.ImportFrom) -> list[tuple[str, str]]:
    """The (local name, qualified name) pairs an import statement binds."""
    pairs: list[tuple[str, str]] = []
    if isinstance(node, cst.Import):
        for alias in node.names:
            full = dotted(alias.name)
            if full is None:
                continue
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                pairs.append((alias.asname.name.value, full))
            else:
                head = full.split(".")[0]
                pairs.append((head, head))
        return pairs
    if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
        return pairs
    module = dotted(node.module)
    if module is None:
        return pairs
    for alias in node.names:
        if not isinstance(alias.name, cst.Name):
            continue
        local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else None
        pairs.append((local or alias.name.value, f"{module}.{alias.name.value}"))
    return pairs


class Scopes:
    """A stack of name -> qualified-name tables: the module's, then one per enclosing function or class."""

    def __init__(self, module: cst.Module) -> None:
        self._stack: list[dict[str, str]] = [self._module_imports(module)]

    @staticmethod
    def _module_imports(module: cst.Module) -> dict[str, str]:
        # Top-level imports, including those under top-level `try`/`if` (optional imports), are known before
        # the traversal so that a function defined above an import still resolves it.
        table: dict[str, str] = {}
        pending: list[cst.CSTNode] = list(module.body)
        while pending:
            stmt = pending.pop(0)
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, (cst.Import, cst.ImportFrom)):
                        table.update(import_bindings(small))
            elif isinstance(stmt, (cst.Try, cst.TryStar)):
                pending.extend(stmt.body.body)
                for handler in stmt.handlers:
                    pending.extend(handler.body.body)
                if stmt.orelse:
                    pending.extend(stmt.orelse.body.body)
            elif isinstance(stmt, cst.If):
                pending.extend(stmt.body.body)
                if isinstance(stmt.orelse, cst.Else):
                    pending.extend(stmt.orelse.body.body)
        return table

    @property
    def module_table(self) -> dict[str, str]:
        """The module's own import table (local name -> qualified name)."""
        return self._stack[0]

    @property
    def depth(self) -> int:
        """1 at module level, one more per enclosing function or class."""
        return len(self._stack)

    def imports(self, name: str) -> bool:
        """Whether an import in any enclosing scope binds `name`."""
        return any(name in table for table in self._stack)

    def push(self) -> None:
        self._stack.append({})

    def pop(self) -> None:
        self._stack.pop()

    def bind_import(self, node: cst.Import | cst.ImportFrom) -> None:
        self._stack[-1].update(import_bindings(node))

    def resolve_name(self, name: str) -> str:
        for table in reversed(self._stack):
            if name in table:
                return table[name]
        return name

    def qualified_name(self, node: cst.CSTNode) -> str | None:
        """The qualified name of a Name/Attribute chain (`tc.synchronize` -> `torch.cuda.synchronize`)."""
        if isinstance(node, cst.Decorator):
            node = node.decorator
        if isinstance(node, cst.Call):
            return None
        chain = dotted(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
        if chain is None:
            return None
        head, _, rest = chain.partition(".")
        resolved = self.resolve_name(head)
        return f"{resolved}.{rest}" if rest else resolved
