"""Imports a fix made unused, and the torch-version switches that only existed to bind them.

After the edits, a name that the file used before and no longer uses loses its import (not one inside an
`if`/`try`: a conditional import is there on purpose). An `if` that only binds such names for torch versions,
espnet's

    if V(torch.__version__) >= V("1.6.0"):
        from torch.cuda.amp import autocast
    else:
        @contextmanager
        def autocast(enabled=True): ...

once every `autocast(False)` became `torch.amp.autocast(device_type, enabled=False)`, goes as a whole: its
test only asks about versions or availability, and its branches only import, define or assign the names the
fix stopped using (left, the import is an F401 and the shim dead code). The imports its test used go with it
when nothing else uses them.
"""

from __future__ import annotations

import re
from collections import Counter

import libcst as cst

from neuron_migrate.migrate.names import import_bindings
from neuron_migrate.migrate.parsing import parse
from neuron_migrate.migrate.walk import walk

#: what the test of a compatibility switch asks: a version, whether an API or a package is there
_SWITCH_TEST = re.compile(r"version|hasattr\(|_available\(", re.IGNORECASE)


def _referenced_names(module: cst.Module) -> Counter:
    """How often each bare name is referenced outside import statements."""
    counts: Counter = Counter()

    class Visitor(cst.CSTVisitor):
        def visit_Import(self, node: cst.Import) -> bool:
            return False

        def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
            return False

        def visit_Name(self, node: cst.Name) -> None:
            counts[node.value] += 1

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            walk(node.value, self)  # `x.attr`: only `x` is a reference
            return False

    walk(module, Visitor())
    return counts


class _DropImports(cst.CSTTransformer):
    """Drops the imports of `names`, except inside `if`/`try` blocks: a conditional import (a fallback for
    another torch version, an optional dependency) is there on purpose, whatever the rest of the file uses."""

    def __init__(self, names: set[str]) -> None:
        super().__init__()
        self.names = names
        self.conditional = 0

    def visit_If(self, node: cst.If) -> None:
        self.conditional += 1

    def leave_If(self, original: cst.If, updated: cst.If) -> cst.If:
        self.conditional -= 1
        return updated

    def visit_Try(self, node: cst.Try) -> None:
        self.conditional += 1

    def leave_Try(self, original: cst.Try, updated: cst.Try) -> cst.Try:
        self.conditional -= 1
        return updated

    def _keep(self, node: cst.Import | cst.ImportFrom) -> list[cst.ImportAlias]:
        kept = []
        for alias in node.names:  # type: ignore[union-attr]
            bound = import_bindings(
                node.with_changes(names=[alias.with_changes(comma=cst.MaybeSentinel.DEFAULT)])
            )
            if not bound or bound[0][0] not in self.names:
                kept.append(alias)
        return kept

    def leave_Import(self, original: cst.Import, updated: cst.Import):
        return self._rebuild(updated)

    def leave_ImportFrom(self, original: cst.ImportFrom, updated: cst.ImportFrom):
        if isinstance(updated.names, cst.ImportStar) or updated.relative:
            return updated
        return self._rebuild(updated)

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        """A removed import line's blank lines go to the statement after it (the blank line between a
        docstring and the imports stays)."""
        removed = [self._removed(statement) for statement in original.body]
        if len(updated.body) != removed.count(False):
            return updated  # not the statements this pass removes: leave the layout alone
        body, carry, survivors = [], None, iter(updated.body)
        for statement, gone in zip(original.body, removed, strict=True):
            if gone:
                carry = statement.leading_lines if carry is None else carry
                continue
            kept = next(survivors)
            if carry and not kept.leading_lines:
                kept = kept.with_changes(leading_lines=[line for line in carry if line.comment is None])
            body.append(kept)
            carry = None
        return updated.with_changes(body=body)

    def _removed(self, statement: cst.CSTNode) -> bool:
        """Whether every statement of a module-level line is an import this pass drops whole."""
        return isinstance(statement, cst.SimpleStatementLine) and all(
            isinstance(small, (cst.Import, cst.ImportFrom))
            and not isinstance(small.names, cst.ImportStar)
            and not getattr(small, "relative", None)
            and not self._keep(small)
            for small in statement.body
        )

    def _rebuild(self, node):
        if self.conditional:
            return node
        kept = self._keep(node)
        if len(kept) == len(node.names):
            return node
        if not kept:
            return cst.RemoveFromParent()
        kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return node.with_changes(names=kept)


def remove_unused_imports(before: str, after: str) -> str:
    """Drop imported names that `before` used and `after` no longer does (imports the fix made unused), and
    the compatibility switches that only bound such names (see the module docstring)."""
    try:
        old, new = parse(before), parse(after)
    except cst.ParserSyntaxError:
        return after
    old_refs, new_refs = _referenced_names(old), _referenced_names(new)
    kept = [s for s in new.body if not _dead_switch(s, old_refs, new_refs)]
    if len(kept) < len(new.body):
        new = new.with_changes(body=kept)
        new_refs = _referenced_names(new)
    bound: set[str] = set()

    class Collect(cst.CSTVisitor):
        def visit_Import(self, node: cst.Import) -> None:
            bound.update(local for local, _ in import_bindings(node))

        def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
            bound.update(local for local, _ in import_bindings(node))

    walk(new, Collect())
    unused = {name for name in bound if old_refs[name] and not new_refs[name]}
    if not unused:
        return new.code
    return new.visit(_DropImports(unused)).code


def _dead_switch(statement: cst.CSTNode, old_refs: Counter, new_refs: Counter) -> bool:
    """Whether `statement` is a module-level compatibility switch the fix left without a use (see the module
    docstring): some name it binds was used outside it before, none is now."""
    if not isinstance(statement, cst.If) or (names := _bound_by(statement)) is None:
        return False
    if not _SWITCH_TEST.search(cst.Module([]).code_for_node(statement.test)):
        return False
    inside = _referenced_names(cst.Module(body=[statement]))
    used_before = any(old_refs[name] > inside[name] for name in names)
    return used_before and not any(new_refs[name] > inside[name] for name in names)


def _bound_by(switch: cst.If) -> set[str] | None:
    """The names the branches of `switch` bind, when binding is all they do (imports, definitions, plain
    assignments, `pass`), else None."""
    names: set[str] = set()
    branch: cst.If | cst.Else | None = switch
    while branch is not None:
        for statement in branch.body.body:
            if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
                names.add(statement.name.value)
            elif isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(
                        getattr(small, "names", None), cst.ImportStar
                    ):
                        names.update(local for local, _ in import_bindings(small))
                    elif isinstance(small, cst.Assign) and all(
                        isinstance(t.target, cst.Name) for t in small.targets
                    ):
                        names.update(t.target.value for t in small.targets)
                    elif not isinstance(small, cst.Pass):
                        return None
            else:
                return None
        branch = branch.orelse if isinstance(branch, cst.If) else None
    return names or None
