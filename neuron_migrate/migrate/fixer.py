"""Turning findings into a rewritten text: choose the fixes, apply their edits, drop imports they made unused,
and prove the result still parses. Pure text in, text out; writing files is `fix_files`' job."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import libcst as cst

from neuron_migrate.migrate.edits import (
    OverlappingEdits,
    apply_edits,
    drop_pointers_to_removed,
    drop_repeats,
    nested,
)
from neuron_migrate.migrate.guard_layout import tidy_new_guards
from neuron_migrate.migrate.layout import Layout, reflow
from neuron_migrate.migrate.names import import_bindings
from neuron_migrate.migrate.parsing import parse
from neuron_migrate.migrate.quotes import in_quotes, preferred_quote
from neuron_migrate.migrate.walk import walk
from neuron_migrate.model import Edit, Finding


@dataclass
class FixOutcome:
    """The new text, the findings whose fixes went in, and the ones left for a person (with why)."""

    text: str
    applied: list[Finding] = field(default_factory=list)
    left: list[tuple[Finding, str]] = field(default_factory=list)


_DEFAULT_LAYOUT = Layout()


def fix_text(
    text: str,
    findings: list[Finding],
    unsafe: bool = False,
    layout: Layout = _DEFAULT_LAYOUT,
    path: Path | None = None,
) -> FixOutcome:
    """Apply the fixes of `findings` (safe ones; unsafe ones too when `unsafe`) to a Python source text, then
    drop statements the fixes made repeat their neighbour (and comments that pointed up at statements they
    removed), write new literals in the file's quotes (`quotes`), make new guards read well (`guard_layout`)
    and wrap the lines they made too long (`layout`; `path` lets the project's formatter find its
    configuration)."""
    outcome = FixOutcome(text)
    accepted: list[Edit] = []
    for finding in findings:
        reason = _why_not(finding, unsafe)
        if reason:
            outcome.left.append((finding, reason))
            continue
        try:
            apply_edits(text, [*accepted, *finding.fix.edits])
        except OverlappingEdits:
            merged = nested(text, accepted, finding.fix.edits)  # inside code an accepted fix keeps verbatim
            if merged is None:
                outcome.left.append((finding, "overlaps another fix; run `fix` again"))
                continue
            accepted[:] = merged
        else:
            accepted.extend(finding.fix.edits)
        outcome.applied.append(finding)
    if not accepted:
        return outcome
    if (quote := preferred_quote(text)) != '"':
        accepted = [replace(edit, text=in_quotes(edit.text, quote)) for edit in accepted]
    new_text = remove_unused_imports(text, apply_edits(text, accepted))
    new_text = drop_pointers_to_removed(text, drop_repeats(text, new_text))
    new_text = reflow(text, tidy_new_guards(text, new_text), layout, path)
    try:
        parse(new_text)
    except cst.ParserSyntaxError as err:  # a bug in a rule's fix: keep the file as it was
        outcome.left.extend(
            (f, f"fix would not parse ({err.message}); left unchanged") for f in outcome.applied
        )
        outcome.applied = []
        return outcome
    outcome.text = new_text
    return outcome


def _why_not(finding: Finding, unsafe: bool) -> str:
    if finding.tied:
        return "`fix` rewrites it once that is done"
    if finding.fix is None:
        return "no automatic fix"
    if finding.fix.safety == "unsafe" and not unsafe:
        return "unsafe fix: review it, then rerun with --unsafe-fixes"
    if finding.fix.safety == "none":
        return "no automatic fix"
    return ""


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
    """Drop imported names that `before` used and `after` no longer does (imports the fix made unused)."""
    try:
        old, new = parse(before), parse(after)
    except cst.ParserSyntaxError:
        return after
    old_refs, new_refs = _referenced_names(old), _referenced_names(new)
    bound: set[str] = set()

    class Collect(cst.CSTVisitor):
        def visit_Import(self, node: cst.Import) -> None:
            bound.update(local for local, _ in import_bindings(node))

        def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
            bound.update(local for local, _ in import_bindings(node))

    walk(new, Collect())
    unused = {name for name in bound if old_refs[name] and not new_refs[name]}
    if not unused:
        return after
    return new.visit(_DropImports(unused)).code
