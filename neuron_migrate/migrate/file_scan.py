"""One file's analysis, the part of a scan that needs libcst: `scan_file` runs the pre-pass (`prepass.py`),
which drops the rules that cannot report in the file, and `scan_text` (the full libcst analysis) when one is
left. Neither raises: whatever goes wrong with one file becomes an NM9xx finding for that file.

Kept apart from `scanner.py` (which finds files, reads the cache and runs the pool), so that a scan whose
results all come from the cache imports neither libcst nor a rule.
"""

from __future__ import annotations

import ast
import gc
import re
import symtable
from dataclasses import replace

import libcst as cst

from neuron_migrate.migrate.analyzer import analyze_module
from neuron_migrate.migrate.fixes import FixStyle
from neuron_migrate.migrate.parsing import parse
from neuron_migrate.migrate.prepass import candidates
from neuron_migrate.migrate.rule import file_finding, load_rules
from neuron_migrate.migrate.sources import SourceText
from neuron_migrate.model import Edit, Finding, Fix

_DEFAULT_STYLE = FixStyle()


def scan_file(
    rel: str, text: SourceText, codes: tuple[str, ...], style: FixStyle = _DEFAULT_STYLE
) -> list[Finding]:
    """`_scan_file`, with the cyclic garbage collector off while it runs and the youngest generation
    collected after it. A libcst tree is hundreds of thousands of objects without cycles, freed by reference
    counting when the file is done; while it lived, the collector traversed it again and again (a tenth of
    accelerate's scan). The cycles the analysis makes (classes and closures defined per call) are all
    younger than the file, and one collection of the youngest generation frees them: memory stays flat."""
    if not gc.isenabled():
        return _scan_file(rel, text, codes, style)
    gc.disable()
    try:
        return _scan_file(rel, text, codes, style)
    finally:
        gc.enable()
        gc.collect(0)


def _scan_file(rel: str, text: SourceText, codes: tuple[str, ...], style: FixStyle) -> list[Finding]:
    """What `scan_text` returns, paying for libcst only for the rules the pre-pass keeps; never raises.

    The pre-pass reasons about valid Python, so its verdict counts only when Python's parser accepts the
    file; a file it rejects (a syntax error, or syntax newer than this interpreter that libcst may still
    read) gets the full analysis, which reports the error as before. Where rules are left, the `ast` tree
    is reused for positions; where none is, the parser's verdict is all that is needed (`_parses`)."""
    try:
        active = candidates(text.text, codes)
    except Exception:  # a pre-pass bug must not lose findings: analyse as if it did not exist
        return scan_text(rel, text, codes, style)
    if active == tuple(codes):
        return scan_text(rel, text, codes, style)
    if not active:  # only the verdict needs checking: no tree is kept
        return [] if _parses(text.text) else scan_text(rel, text, codes, style)
    try:
        tree = ast.parse(text.text)
    except _INVALID:
        return scan_text(rel, text, codes, style)
    return scan_text(rel, text, active, style, tree=tree)


#: what parsing invalid (or pathologically nested) source raises
_INVALID = (SyntaxError, ValueError, RecursionError, MemoryError)


def _parses(source: str) -> bool:
    """Whether Python's parser accepts `source`, without building the `ast` objects nobody will read: the
    symbol table is built from the same parser's tree at about 60% of `ast.parse`'s cost. It also rejects a
    few programs `ast` accepts (a name both global and a parameter); those get the full analysis, which is
    what a rejected file always gets."""
    try:
        symtable.symtable(source, "<source>", "exec")
    except _INVALID:
        return False
    return True


def scan_text(
    rel: str,
    text: SourceText,
    codes: tuple[str, ...],
    style: FixStyle = _DEFAULT_STYLE,
    tree: ast.Module | None = None,
) -> list[Finding]:
    """Findings of the rules `codes` in one decoded file, their fixes shaped by `style`; never raises.

    `tree`: the file's `ast` parse, when the caller has it (positions need it)."""
    rules = load_rules()
    try:
        module = parse(text.text)
    except cst.ParserSyntaxError as err:
        hint = "; it looks like Python 2" if _looks_like_python2(text.text) else ""
        # libcst's native parser reports the token after the error; its message has the real place
        at = re.search(r"error at (\d+):(\d+)", str(err.message))
        line, col = (int(at.group(1)), int(at.group(2))) if at else (err.editor_line, err.editor_column - 1)
        return file_finding(
            rules, "unparsable", rel, f"cannot parse: syntax error at line {line}{hint}", line, col
        )
    except (RecursionError, MemoryError) as err:
        return file_finding(rules, "unparsable", rel, f"cannot parse: {type(err).__name__}")
    try:
        findings = analyze_module(
            module,
            rel,
            [rules[code] for code in codes if code in rules],
            text.bound_modules,
            source=text.text,
            style=style,
            tree=tree,
        )
    except Exception as err:  # a rule bug must not lose the rest of the run
        return file_finding(rules, "analysis-failure", rel, f"analysis failed: {type(err).__name__}: {err}")
    if text.cells is not None:
        findings = [_to_cell(f, text.cells) for f in findings]
    return findings


def _looks_like_python2(text: str) -> bool:
    return bool(re.search(r"^\s*print\s+[^(=\s]|^\s*exec\s+\"|except\s+\w+\s*,\s*\w+\s*:", text, re.M))


def _to_cell(finding: Finding, cells: list[tuple[int, int]]) -> Finding:
    """Move a finding from virtual-module lines to (cell, line in cell)."""
    cell, line = cells[min(finding.line, len(cells)) - 1]
    end_cell, end_line = cells[min(finding.end_line, len(cells)) - 1]
    fix = finding.fix
    if fix is not None:
        edits = []
        for edit in fix.edits:
            start, end = cells[min(edit.line, len(cells)) - 1], cells[min(edit.end_line, len(cells)) - 1]
            if start[0] != end[0]:  # cannot happen for valid cells; drop the fix rather than guess
                edits = None
                break
            edits.append(Edit(start[1], edit.col, end[1], edit.end_col, edit.text, cell=start[0]))
        fix = Fix(fix.title, fix.safety, tuple(edits)) if edits is not None else None
    return replace(finding, cell=cell, line=line, end_line=end_line if end_cell == cell else line, fix=fix)
