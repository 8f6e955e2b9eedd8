"""Turning findings into a rewritten text: choose the fixes, apply their edits, drop imports they made unused,
and prove the result still parses. Pure text in, text out; writing files is `fix_files`' job."""

from __future__ import annotations

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
from neuron_migrate.migrate.parsing import parse
from neuron_migrate.migrate.quotes import in_quotes, preferred_quote
from neuron_migrate.migrate.unused_imports import remove_unused_imports
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
