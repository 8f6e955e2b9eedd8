"""`scan`: find files, skip those that cannot match, reuse cached results, analyse the rest in a process pool.

`scan_file` is the per-file runner: the pre-pass (`prepass.py`) drops the rules that cannot report in the
file, and `scan_text` (the full libcst analysis) runs only when one is left. Neither raises: whatever goes
wrong with one file becomes an NM9xx finding for that file and the run goes on.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import libcst as cst

from neuron_migrate import __version__
from neuron_migrate.errors import UsageError
from neuron_migrate.migrate.analyzer import analyze_module
from neuron_migrate.migrate.cache import ScanCache, content_hash
from neuron_migrate.migrate.fixes import FixStyle
from neuron_migrate.migrate.layout import layout_for
from neuron_migrate.migrate.parsing import parse
from neuron_migrate.migrate.prepass import candidates
from neuron_migrate.migrate.rule import Rule, file_rule, load_rules, select_rules
from neuron_migrate.migrate.sources import (
    Selection,
    SourceFile,
    SourceProblem,
    SourceText,
    decode,
    discover,
    local_modules,
    read_bytes,
)
from neuron_migrate.migrate.torch_floor import DEFAULT_TARGET_TORCH, torch_floor
from neuron_migrate.model import Edit, FileError, Finding, Fix, ScanResult

#: below this many files to parse, a process pool costs more than it saves
POOL_THRESHOLD = 24


@dataclass(frozen=True)
class ScanOptions:
    """Everything a scan (or a fix) needs; built once by the CLI (or a test) and passed down."""

    paths: tuple[Path, ...]
    root: Path
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    selection: Selection = field(default_factory=Selection)
    jobs: int = 0  # 0: one per CPU
    cache_dir: Path | None = None
    target_torch: tuple[int, int] | None = None  # None: each project's declared floor (`torch_floor`)


@dataclass
class Planned:
    """One file after the cheap steps: read, hashed, looked up in the cache, decoded, pre-filtered.

    `findings` is set when the result is known without analysis (cache hit, unreadable file, kernel source,
    no rule can match); otherwise `text` and `active` (the rules its bytes can trigger) say what to
    analyse."""

    source: SourceFile
    style: FixStyle
    key: str | None = None
    text: SourceText | None = None
    active: tuple[str, ...] = ()
    findings: list[Finding] | None = None
    cached: bool = False
    prefiltered: bool = False


def style_for(source: SourceFile, options: ScanOptions) -> FixStyle:
    """How fixes in `source` are written: its project's layout, first-party modules, target torch (the
    `target-torch` setting, else the oldest torch the project declares, else the default)."""
    folder = source.path.absolute().parent
    target, floor = options.target_torch, None
    if target is None:
        floor = torch_floor(folder)
        target = floor.version if floor else DEFAULT_TARGET_TORCH
    return FixStyle(
        layout=layout_for(folder),
        local_modules=local_modules(folder, options.root),
        target_torch=target,
        torch_floor=floor.source if floor else "",
    )


def plan(options: ScanOptions, rules: dict, cache: ScanCache, errors: list[FileError]) -> list[Planned]:
    """The scan's front half, shared by `scan` and `fix`: every selected file, with what is known cheaply."""
    for path in options.paths:
        if not path.exists() and not path.is_symlink():
            raise UsageError(f"{path}: no such file or directory; pass a file or folder to scan")
    planned = []
    for source in discover(list(options.paths), options.root, options.selection):
        item = Planned(source, style_for(source, options))
        planned.append(item)
        if source.kind == "kernel":
            item.findings = _kernel_findings(source, rules)
            continue
        data = read_bytes(source)
        if isinstance(data, SourceProblem):
            item.findings = _problem(source, data, rules, errors)
            continue
        item.key = f"{content_hash(data)}:{item.style.cache_key}"
        hit = cache.get(source.rel, item.key)
        if hit is not None:
            item.findings, item.cached = hit, True
            continue
        text = decode(source, data)  # cheap, and an undecodable file is reported whatever it contains
        if isinstance(text, SourceProblem):
            item.findings = _problem(source, text, rules, errors)
            cache.put(source.rel, item.key, item.findings)
            continue
        item.active = tuple(code for code, rule in rules.items() if _triggered(rule, data))
        if not item.active:
            item.findings, item.prefiltered = [], True
            cache.put(source.rel, item.key, [])
            continue
        item.text = text
    return planned


def scan(options: ScanOptions, progress: Callable[[int, int], None] | None = None) -> ScanResult:
    """Scan the files under `options.paths` and return every finding, sorted by path and position."""
    rules = select_rules(options.select, options.ignore)
    cache = ScanCache(options.cache_dir, f"{','.join(rules)};torch {options.target_torch}")
    errors: list[FileError] = []
    planned = plan(options, rules, cache, errors)
    work = [item for item in planned if item.findings is None]
    tasks = [(item.source.rel, item.text, item.active, item.style) for item in work]
    sizes = [len(item.text.text) for item in work]
    for item, result in zip(work, run_tasks(_scan_task, tasks, options.jobs, progress, sizes), strict=True):
        for finding in result:
            if _kind(rules, finding) in ("unparsable", "analysis-failure"):
                errors.append(FileError(item.source.rel, finding.message))
        cache.put(item.source.rel, item.key, result)
        item.findings = result
    cache.save()
    findings = [f for item in planned for f in item.findings or ()]
    findings.sort(key=lambda f: (f.path, f.cell or 0, f.line, f.col, f.code))
    return ScanResult(
        root=options.root.as_posix(),
        findings=tuple(findings),
        files_scanned=len(planned),
        files_skipped_by_prefilter=sum(item.prefiltered for item in planned),
        files_from_cache=sum(item.cached for item in planned),
        errors=tuple(errors),
        tool_version=__version__,
    )


def _triggered(rule: type[Rule], data: bytes) -> bool:
    """Whether a file can hold a finding of `rule` (file-level rules are reported by the scanner itself)."""
    if rule.file_level:
        return False
    return not rule.triggers or any(
        all(part in data for part in trigger) if isinstance(trigger, tuple) else trigger in data
        for trigger in rule.triggers
    )


def run_tasks(
    function: Callable,
    tasks: list[tuple],
    jobs: int,
    progress: Callable[[int, int], None] | None,
    sizes: list[int] | None = None,
) -> list:
    """`function(*task)` for every task, in a process pool when there are enough of them; results in order.

    With `sizes` (a cost estimate per task, such as its file's length) the pool takes the largest tasks first,
    one at a time, so that no worker is left with a large file at the end while the others idle."""
    jobs = jobs or os.cpu_count() or 1
    if jobs == 1 or len(tasks) < POOL_THRESHOLD:
        results: list = []
        for done, task in enumerate(tasks, start=1):
            results.append(function(*task))
            if progress:
                progress(done, len(tasks))
        return results
    order = submission_order(len(tasks), sizes)
    ordered: list = [None] * len(tasks)
    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks))) as pool:
        jobs_in_order = [(function, tasks[i]) for i in order]
        for done, (index, result) in enumerate(
            zip(order, pool.map(_call, jobs_in_order, chunksize=1 if sizes else 8), strict=True), start=1
        ):
            ordered[index] = result
            if progress:
                progress(done, len(tasks))
    return ordered


def submission_order(count: int, sizes: list[int] | None) -> list[int]:
    """Task indexes, largest first when sizes are known (ties keep their order), else as given."""
    return sorted(range(count), key=lambda i: -sizes[i]) if sizes else list(range(count))


def _call(job: tuple[Callable, tuple]):
    function, task = job
    return function(*task)


def _scan_task(rel: str, text: SourceText, codes: tuple[str, ...], style: FixStyle) -> list[Finding]:
    return scan_file(rel, text, codes, style)


_DEFAULT_STYLE = FixStyle()


def scan_file(
    rel: str, text: SourceText, codes: tuple[str, ...], style: FixStyle = _DEFAULT_STYLE
) -> list[Finding]:
    """What `scan_text` returns, paying for libcst only for the rules the pre-pass keeps; never raises.

    The pre-pass reasons about valid Python, so its verdict counts only when `ast` parses the file; a file
    `ast` rejects (a syntax error, or syntax newer than this interpreter that libcst may still read) gets
    the full analysis, which reports the error as before. The `ast` tree is reused for positions."""
    try:
        active = candidates(text.text, codes)
    except Exception:  # a pre-pass bug must not lose findings: analyse as if it did not exist
        return scan_text(rel, text, codes, style)
    if active == tuple(codes):
        return scan_text(rel, text, codes, style)
    try:
        tree = ast.parse(text.text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return scan_text(rel, text, codes, style)
    return scan_text(rel, text, active, style, tree=tree) if active else []


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
        return _internal(
            rules, "unparsable", rel, f"cannot parse: syntax error at line {line}{hint}", line, col
        )
    except (RecursionError, MemoryError) as err:
        return _internal(rules, "unparsable", rel, f"cannot parse: {type(err).__name__}")
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
        return _internal(rules, "analysis-failure", rel, f"analysis failed: {type(err).__name__}: {err}")
    if text.cells is not None:
        findings = [_to_cell(f, text.cells) for f in findings]
    return findings


def _looks_like_python2(text: str) -> bool:
    return bool(re.search(r"^\s*print\s+[^(=\s]|^\s*exec\s+\"|except\s+\w+\s*,\s*\w+\s*:", text, re.M))


def _internal(rules: dict, kind: str, rel: str, message: str, line: int = 1, col: int = 0) -> list[Finding]:
    """The finding of the file-level rule of `kind` (`rule.FILE_KINDS`) for file `rel`, if that rule is
    selected."""
    rule = file_rule(rules, kind)
    if rule is None:
        return []
    line = max(line, 1)
    return [Finding(rule.code, rule.severity, rule.category(), rel, line, col, line, col, message)]


def _kind(rules: dict, finding: Finding) -> str | None:
    rule = rules.get(finding.code)
    return rule.file_level if rule is not None else None


def _problem(
    source: SourceFile, problem: SourceProblem, rules: dict, errors: list[FileError]
) -> list[Finding]:
    errors.append(FileError(source.rel, problem.reason))
    return _internal(rules, problem.kind, source.rel, problem.reason)


def _kernel_findings(source: SourceFile, rules: dict) -> list[Finding]:
    rule = file_rule(rules, "kernel-source")
    return _internal(rules, "kernel-source", source.rel, rule.message) if rule is not None else []


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
