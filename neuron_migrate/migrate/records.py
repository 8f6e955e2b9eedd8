"""A pending finding, once the walk and `settle` are done, as a `Finding` record with positioned edits."""

from __future__ import annotations

from dataclasses import replace

import libcst as cst
from libcst.metadata import CodeRange

from neuron_migrate.migrate.fixes import FixStyle, Insertion
from neuron_migrate.migrate.imports import alias_of, imported_locally, with_alias
from neuron_migrate.migrate.imports import insertion as import_insertion
from neuron_migrate.model import Edit, Finding, Fix


def finding_of(pending, positions, lines: list[str], ctx, style: FixStyle) -> Finding:
    rule = pending.rule
    where: CodeRange = positions[pending.node]
    fix = None
    if pending.fix is not None:
        edits = [_replacement_edit(r, positions, lines) for r in pending.fix.replacements]
        edits += [_insertion_edit(i, positions, lines) for i in pending.fix.insertions]
        imports = [name for name in pending.fix.imports if not imported_locally(name, pending.stack)]
        if "torch" in imports and (aliased := _through_alias(edits, ctx)) is not None:
            edits, imports = aliased, [name for name in imports if name != "torch"]
        edits += [edit for name in imports if (edit := _import_edit(name, ctx, positions, style))]
        fix = Fix(pending.fix.title, pending.fix.safety or rule.fix_safety, tuple(edits))
    line = where.start.line
    return Finding(
        code=rule.code,
        severity="info" if pending.no_change else rule.severity,
        category=rule.category(),
        path=ctx.path,
        line=line,
        col=where.start.column,
        end_line=where.end.line,
        end_col=where.end.column,
        message=_message(pending),
        source=lines[line - 1].strip() if 0 < line <= len(lines) else "",
        fix=fix,
        guard=pending.guard,
        replacement=pending.replacement,
        tied=pending.tied and fix is None and not pending.no_change,
    )


def _message(pending) -> str:
    """The rule's message with why its fix was withdrawn; for code that needs no change, the problem the rule
    names and why nothing needs doing (its advice no longer applies)."""
    if pending.no_change:
        return f"{problem(pending.message)}: {pending.no_change}"
    if pending.advice is not None:
        rest = [note for note in pending.notes if note != pending.advice]
        said = f"{problem(pending.message)}: {pending.advice}"
        return f"{said} ({'; '.join(rest)})" if rest else said
    if pending.notes:
        return f"{pending.message} ({'; '.join(pending.notes)})"
    return pending.message


def problem(message: str) -> str:
    """The part of a rule message before its advice: up to the first `: ` outside backticks and
    parentheses (`torch.cuda.device_count` is CUDA-only: use ...)."""
    depth, code = 0, False
    for index, char in enumerate(message):
        if char == "`":
            code = not code
        elif not code and char in "()":
            depth += 1 if char == "(" else -1
        elif not code and depth == 0 and message.startswith(": ", index):
            return message[:index]
    return message


def _replacement_edit(replacement, positions, lines: list[str]) -> Edit:
    """The edit of a replacement; one that leaves a bare name in parentheses of its own (`device or
    ("cuda" if ... else "cpu")` becoming `device or device_type`) takes the parentheses with it."""
    where: CodeRange = positions[replacement.node]
    text = replacement.text
    node = replacement.node
    if (
        text.isidentifier()
        and len(getattr(node, "lpar", ())) == 1
        and len(getattr(node, "rpar", ())) == 1
        and where.start.line == where.end.line
        and 0 < where.start.line <= len(lines)
    ):
        line = lines[where.start.line - 1]
        before = line[: where.start.column].rstrip(" ")
        after_start = len(line) - len(line[where.end.column :].lstrip(" "))
        if before.endswith("(") and line[after_start : after_start + 1] == ")":
            start, end = len(before) - 1, after_start + 1
            if line[start - 1 : start].isidentifier() or line[start - 1 : start].isdigit():
                text = " " + text  # `or(x)`: keep the words apart
            if line[end : end + 1].isidentifier():
                text += " "
            return Edit(where.start.line, start, where.end.line, end, text)
    return _edit(where, text)


def _edit(where: CodeRange, text: str) -> Edit:
    return Edit(where.start.line, where.start.column, where.end.line, where.end.column, text)


def _insertion_edit(insertion: Insertion, positions, lines: list[str]) -> Edit:
    """New lines above a statement: above its decorators and the comment lines directly over it."""
    statement = insertion.statement
    line = positions[statement].start.line
    for decorator in getattr(statement, "decorators", ()):
        line = min(line, positions[decorator].start.line)
    while line > 1 and lines[line - 2].strip().startswith("#"):
        line -= 1
    source = (
        lines[positions[statement].start.line - 1] if positions[statement].start.line <= len(lines) else ""
    )
    indent = source[: len(source) - len(source.lstrip())]
    text = "".join(f"{indent}{part}\n" for part in insertion.text.split("\n"))
    if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):  # the blank lines formatters keep before a def
        text += "\n" * (1 if indent else 2)
    return Edit(line, 0, line, 0, text)


def _through_alias(edits: list[Edit], ctx) -> list[Edit] | None:
    """`edits` with the new code naming torch by the alias the module imports it under (`import torch as th`:
    `th.accelerator...`), so the fix needs no second import; None when the module has no such alias."""
    alias = None if ctx.module_binds("torch") else alias_of("torch", ctx.scopes.module_table)
    if alias is None:
        return None
    aliased = [replace(edit, text=with_alias(edit.text, "torch", alias)) for edit in edits]
    return None if any(edit.text is None for edit in aliased) else aliased


def _import_edit(name: str, ctx, positions, style: FixStyle) -> Edit | None:
    """An edit adding `import name` in its import group, unless the module already imports it."""
    if ctx.module_binds(name):
        return None
    line, text = import_insertion(name, ctx.module, positions, style.local_modules)
    return Edit(line, 0, line, 0, text)
