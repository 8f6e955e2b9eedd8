"""Qualified-name resolution for the names a file imports, scope by scope.

A lighter stand-in for libcst's `QualifiedNameProvider` (which needs the full `ScopeProvider` and costs two to
three times a parse): we only need to know what imported names and attribute chains refer to. It sees
`import torch.cuda as tc`, `from torch.cuda.amp import autocast as ac`, `from torch import cuda` and imports
local to a function. A name bound by no import resolves to itself, so `torch.cuda.x` in a notebook cell whose
import sits in an earlier cell still resolves.
"""

from __future__ import annotations

import re

import libcst as cst

from neuron_migrate.migrate.lexicon import DYNAMIC_IMPORT


def dotted(node: cst.BaseExpression) -> str | None:
    """`a.b.c` for a Name/Attribute chain, else None. (`type() is` rather than `isinstance`, here and in a
    few other functions asked about every node of a file: libcst's classes are ABCs, whose `isinstance` is
    a Python-level call where it fails, and none of its concrete classes has a subclass.)"""
    parts: list[str] = []
    while type(node) is cst.Attribute:
        parts.append(node.attr.value)
        node = node.value
    if type(node) is cst.Name:
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


_DYNAMIC_IMPORT = re.compile(rf"^(?:{DYNAMIC_IMPORT})$")


def dynamic_importer(name: str) -> bool:
    """Whether a function of this name imports the module its first argument names (see `_DYNAMIC_IMPORT`)."""
    return _DYNAMIC_IMPORT.match(name) is not None


def is_dynamic_import(call: cst.Call) -> bool:
    """`importlib.import_module(...)`, `optional_import(...)` and the like (not `__import__`, which gives the
    top package)."""
    return dynamic_importer((dotted(call.func) or "").rsplit(".", 1)[-1])


def dynamic_import_bindings(assign: cst.Assign) -> list[tuple[str, str]]:
    """The (local name, qualified name) pair a module-level assignment from a dynamic import binds:
    `cp, has_cp = optional_import("cupy")` binds `cp` to `cupy` (the first name of a tuple target: the
    helpers return the module first), `trt = importlib.import_module("tensorrt")`, and with `name="x"` the
    module's attribute."""
    call = assign.value
    if not isinstance(call, cst.Call) or len(assign.targets) != 1 or not call.args:
        return []
    first = call.args[0]
    if (
        not is_dynamic_import(call)
        or first.keyword is not None
        or not isinstance(first.value, cst.SimpleString)
    ):
        return []
    module = first.value.raw_value
    attribute = next((a.value for a in call.args if a.keyword and a.keyword.value == "name"), None)
    if isinstance(attribute, cst.SimpleString) and attribute.raw_value:
        module = f"{module}.{attribute.raw_value}"
    target = assign.targets[0].target
    if isinstance(target, (cst.Tuple, cst.List)) and target.elements:
        target = target.elements[0].value
    return [(target.value, module)] if isinstance(target, cst.Name) and module else []


def _add_bindings(table: dict[str, str], pairs: list[tuple[str, str]]) -> None:
    """Add the module-level bindings `pairs` to `table`. A name that another branch of a version or `try`
    import binds to the device-generic API keeps it over `torch.cuda`'s (torchrl: `if HAS_DEVICE: from
    torch.amp import GradScaler` / `else: from torch.cuda.amp import GradScaler`): the code that uses the
    name is written for the generic one, and reading it as CUDA's made a fix pass the device type as
    `init_scale`."""
    for local, qualified in pairs:
        known = table.get(local)
        if known is not None and not known.startswith("torch.cuda.") and qualified.startswith("torch.cuda."):
            continue
        table[local] = qualified


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
                        _add_bindings(table, import_bindings(small))
                    elif isinstance(small, cst.Assign):
                        _add_bindings(table, dynamic_import_bindings(small))
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
        if type(node) is cst.Decorator:
            node = node.decorator
        chain = dotted(node)  # None for a call, and for anything but a Name/Attribute chain
        if chain is None:
            return None
        head, _, rest = chain.partition(".")
        resolved = self.resolve_name(head)
        return f"{resolved}.{rest}" if rest else resolved
