"""`scan`: find files, skip those that cannot match, reuse cached results, analyse the rest in a process pool.

The per-file analysis (`file_scan.scan_file`) and the rules are imported only when a file needs analysis: a
scan whose results all come from the cache imports neither libcst nor a rule.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from neuron_migrate import __version__
from neuron_migrate.errors import UsageError
from neuron_migrate.migrate.cache import ScanCache, content_hash
from neuron_migrate.migrate.fixes import FixStyle
from neuron_migrate.migrate.kernel_modules import kernel_library, module_name
from neuron_migrate.migrate.layout import layout_for
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
from neuron_migrate.migrate.stale_imports import StaleImports
from neuron_migrate.migrate.torch_floor import (
    DEFAULT_TARGET_TORCH,
    TorchFloor,
    code_gates,
    dotted_release,
    median_gate,
    project_of,
    python_cap,
    torch_cap,
    torch_floor,
)
from neuron_migrate.model import FileError, Finding, ScanResult

if TYPE_CHECKING:
    from neuron_migrate.migrate.rule import Rule

#: the selected rules, by code, imported on first call (`open_cache`)
Rules = Callable[[], "dict[str, type[Rule]]"]

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


def style_for(source: SourceFile, options: ScanOptions, gates: dict | None = None) -> FixStyle:
    """How fixes in `source` are written: its project's layout, first-party modules, target torch (the
    `target-torch` setting, else the oldest torch the project declares, else the lower of the median of the
    floors its code implies (the release before one it tests torch's version against, one it states as
    required: `gates`, by project, `torch_floor.median_gate`) and the newest torch its oldest Python has
    (`torch_floor.python_cap`), else the default)."""
    folder = source.path.absolute().parent
    target, floor = options.target_torch, None
    if target is None:
        floor = torch_floor(folder)
        if floor is None:
            gate = median_gate((gates or {}).get(project_of(folder), []))
            said = [TorchFloor(*gate)] if gate is not None else []
            said += [cap] if (cap := python_cap(folder)) is not None else []
            floor = min((f for f in said if f.version < DEFAULT_TARGET_TORCH), default=None, key=_version)
        target = floor.version if floor else DEFAULT_TARGET_TORCH
    cap = torch_cap(folder)
    return FixStyle(
        layout=layout_for(folder),
        local_modules=local_modules(folder, options.root),
        target_torch=target,
        torch_floor=floor.source if floor else "",
        default_torch=options.target_torch is None and floor is None,
        torch_cap=f"{cap.source} (torch {dotted_release(cap.version)} at most)" if cap else "",
    )


def _version(floor: TorchFloor) -> tuple[int, int]:
    return floor.version


def _code_gates(source: SourceFile, data: bytes, options: ScanOptions, gates: dict) -> None:
    """Add to `gates` (per project) the torch releases the file tests torch's version against, when nothing
    else sets the target torch (the scan's `target-torch`, the project's metadata)."""
    folder = source.path.absolute().parent
    if options.target_torch is not None or not source.rel.endswith(".py") or torch_floor(folder) is not None:
        return
    if found := code_gates(data):
        project = gates.setdefault(project_of(folder), [])
        project.extend((gate.floor, gate.says(f"{source.rel}:{gate.line}")) for gate in found)


#: what a project writes where it guards code for TorchScript: its modules are meant to be scripted
_SCRIPTING = b"jit.is_scripting("
#: what a module writes where its device code goes through DeepSpeed's accelerator abstraction
_DEEPSPEED_ACCELERATOR = b"deepspeed.accelerator import"


def plan(options: ScanOptions, rules: Rules, cache: ScanCache, errors: list[FileError]) -> list[Planned]:
    """The scan's front half, shared by `scan` and `fix`: every selected file, with what is known cheaply."""
    for path in options.paths:
        if not path.exists() and not path.is_symlink():
            raise UsageError(f"{path}: no such file or directory; pass a file or folder to scan")
    planned = []
    sources = list(discover(list(options.paths), options.root, options.selection))
    # first the content hashes, and what is true of the whole project (part of every key): one file in
    # memory at a time; a file the cache misses is read again below
    digests: list[str | SourceProblem | None] = []
    imports = StaleImports()
    scripts, deepspeed, device_code = False, 0, 0
    kernels: list[tuple[str, str]] = []
    gates: dict = {}  # per project: the torch releases its code tests torch's version against, and where
    for source in sources:
        data = None if source.kind == "kernel" else read_bytes(source)
        digests.append(content_hash(data) if isinstance(data, bytes) else data)
        if isinstance(data, bytes):
            imports.read(source.path, data)
            scripts = scripts or _SCRIPTING in data
            if source.rel.endswith(".py") and (library := kernel_library(data)) is not None:
                kernels.append((module_name(source.rel), library))
            deepspeed += _DEEPSPEED_ACCELERATOR in data
            _code_gates(source, data, options, gates)
            device_code += b"cuda" in data
    # DeepSpeed's abstraction is the project's own when a good share of its device code imports it (123 of
    # DeepSpeed's 98 files that mention CUDA), not when one integration module does (1 of transformers' 144)
    own_deepspeed = deepspeed > 0 and 4 * deepspeed >= device_code
    project = {
        "torchscript": scripts,
        "deepspeed_accelerator": own_deepspeed,
        "kernel_modules": tuple(sorted(kernels)),
    }
    failing = imports.verdicts()
    styles: dict[Path, FixStyle] = {}  # by folder: what `style_for` reads is the folder's
    for source, digest in zip(sources, digests, strict=True):
        stale = failing.get(source.path.absolute(), ("", "", False))
        style = styles.get(source.path.parent)
        if style is None:
            style = styles[source.path.parent] = replace(style_for(source, options, gates), **project)
        item = Planned(source, replace(style, stale_import=stale))
        planned.append(item)
        if source.kind == "kernel":  # its finding depends on its kind alone: kept by path, for warm runs
            item.findings = cache.get(source.rel, "kernel")
            if item.findings is None:
                item.findings = _kernel_findings(source, rules)
                cache.put(source.rel, "kernel", item.findings)
            continue
        if isinstance(digest, SourceProblem):
            item.findings = _problem(source, digest, rules, errors)
            continue
        item.key = f"{digest}:{item.style.cache_key}"
        hit = cache.get(source.rel, item.key)
        if hit is not None:
            item.findings, item.cached = hit, True
            continue
        data = read_bytes(source)
        if isinstance(data, SourceProblem):
            item.findings = _problem(source, data, rules, errors)
            continue
        item.key = f"{content_hash(data)}:{item.style.cache_key}"  # the content analysed, if it just changed
        text = decode(source, data)  # cheap, and an undecodable file is reported whatever it contains
        if isinstance(text, SourceProblem):
            item.findings = _problem(source, text, rules, errors)
            cache.put(source.rel, item.key, item.findings)
            continue
        seen: dict[bytes, bool] = {}
        item.active = tuple(code for code, rule in rules().items() if _triggered(rule, data, seen))
        if not item.active:
            item.findings, item.prefiltered = [], True
            cache.put(source.rel, item.key, [])
            continue
        item.text = text
    return planned


def scan(options: ScanOptions, progress: Callable[[int, int], None] | None = None) -> ScanResult:
    """Scan the files under `options.paths` and return every finding, sorted by path and position."""
    cache, rules = open_cache(options)
    errors: list[FileError] = []
    planned = plan(options, rules, cache, errors)
    work = [item for item in planned if item.findings is None]
    tasks = [(item.source.rel, item.text, item.active, item.style) for item in work]
    sizes = [len(item.text.text) for item in work]
    results = []
    if work:  # imported here, before the pool starts, so that forked workers share it
        from neuron_migrate.migrate.file_scan import scan_file

        results = run_tasks(scan_file, tasks, options.jobs, progress, sizes)
    for item, result in zip(work, results, strict=True):
        for finding in result:
            if _kind(rules(), finding) in ("unparsable", "analysis-failure"):
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
        torch_caps=tuple(sorted({item.style.torch_cap for item in planned if item.style.torch_cap})),
    )


def _triggered(rule: type[Rule], data: bytes, seen: dict[bytes, bool] | None = None) -> bool:
    """Whether a file can hold a finding of `rule` (file-level rules are reported by the scanner itself).

    `seen`: what earlier rules' tests found in the same file (many rules share a string, such as `cuda`),
    so that each string is searched for once per file."""
    if rule.file_level:
        return False
    if seen is None:
        seen = {}

    def found(part: bytes) -> bool:
        known = seen.get(part)
        if known is None:
            known = seen[part] = part in data
        return known

    return not rule.triggers or any(
        all(found(part) for part in trigger) if isinstance(trigger, tuple) else found(trigger)
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
    from concurrent.futures import ProcessPoolExecutor  # a scan served from the cache starts no pool

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


def open_cache(options: ScanOptions) -> tuple[ScanCache, Rules]:
    """The scan cache of this selection of rules, and the selected rules, imported on first use.

    The cache is keyed by the selection as given (and by the rule-set version, which covers every rule's
    source), so a scan whose results all come from it needs no rule. A selection is checked (an unknown
    code is an error) by the run that writes its cache; where there is no cache yet, it is checked now."""

    @cache
    def rules() -> dict[str, type[Rule]]:
        from neuron_migrate.migrate.rule import select_rules

        return select_rules(options.select, options.ignore)

    key = f"select={','.join(options.select)};ignore={','.join(options.ignore)};torch {options.target_torch}"
    scan_cache = ScanCache(options.cache_dir, key)
    if not scan_cache.found:
        rules()
    return scan_cache, rules


def _kind(rules: dict, finding: Finding) -> str | None:
    rule = rules.get(finding.code)
    return rule.file_level if rule is not None else None


def _problem(
    source: SourceFile, problem: SourceProblem, rules: Rules, errors: list[FileError]
) -> list[Finding]:
    errors.append(FileError(source.rel, problem.reason))
    from neuron_migrate.migrate.rule import file_finding

    return file_finding(rules(), problem.kind, source.rel, problem.reason)


def _kernel_findings(source: SourceFile, rules: Rules) -> list[Finding]:
    from neuron_migrate.migrate.rule import file_finding, file_rule

    rule = file_rule(rules(), "kernel-source")
    return file_finding(rules(), "kernel-source", source.rel, rule.message) if rule is not None else []
