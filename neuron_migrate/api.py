"""neuron-migrate from Python: what the commands call, and the import surface for users.

Every function takes one `Options` record (see `neuron_migrate.options`), loads `[tool.neuron-migrate]` once,
merges it with the options here and nowhere else, and returns records from `neuron_migrate.model` (or the
gate's `Verdict`, or `fix`'s per-file results). Progress is a callback `progress(done, total)`; nothing here
prints, draws or imports the CLI, so the same calls work in a notebook, a script or a service::

    from pathlib import Path
    from neuron_migrate.api import Options, run_scan

    result = run_scan(Options(paths=(Path("src"),)))
    for finding in result.findings:
        print(finding.location, finding.code, finding.message)

The heavy parts (libcst, jinja2) are imported inside the functions that need them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from neuron_migrate.config import Config, load_config
from neuron_migrate.errors import InputFileError, UsageError
from neuron_migrate.model import OpUse, Report, ScanResult, TraceResult, from_json
from neuron_migrate.options import DEFAULT_CACHE_DIR, Options, Progress

if TYPE_CHECKING:
    from neuron_migrate.checks.baseline import Baseline
    from neuron_migrate.checks.gate import Verdict
    from neuron_migrate.migrate.fix_files import FileFix
    from neuron_migrate.migrate.scanner import ScanOptions

__all__ = [
    "CheckInputs",
    "CheckResult",
    "Options",
    "load_settings",
    "make_report",
    "read_record",
    "record_baseline",
    "run_check",
    "run_fix",
    "run_scan",
    "scan_options",
    "scan_root",
]

Record = TypeVar("Record")


def read_record(path: Path, kind: type[Record], flag: str = "") -> Record:
    """A `scan`, `trace` or `report` JSON file as its record; a missing or malformed file is one clear error
    line naming `flag` (e.g. `--scan`) and the file."""
    where = f"{flag} {path}" if flag else str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputFileError(f"{where}: file not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputFileError(f"{where}: cannot read it ({err})") from None
    return from_json(text, kind, where)


def load_settings(options: Options) -> Config:
    """`[tool.neuron-migrate]` from `options.config_file` or the pyproject.toml nearest the first path."""
    start = options.scan_paths[0]
    return load_config(start if start.is_dir() else start.parent, options.config_file)


def scan_root(paths: Sequence[Path], root: Path | None = None) -> Path:
    """Where finding paths are relative to: `root`, else the working directory when every path is inside it,
    else the nearest folder that holds them all."""
    if root is not None:
        if not root.is_dir():
            raise UsageError(f"--root {root}: not a folder")
        return root.absolute()
    cwd = Path.cwd()
    absolute = [p.absolute() for p in paths]
    if all(p == cwd or cwd in p.parents for p in absolute):
        return cwd
    common = Path(os.path.commonpath([str(p) for p in absolute]))
    return common if common.is_dir() else common.parent


def scan_options(options: Options, config: Config | None = None) -> ScanOptions:
    """The options merged with the config: the one place `scan`, `fix`, `report` and `check` get their file
    selection and rule set. Flags replace the config's select and include, and add to its ignore and
    exclude."""
    from neuron_migrate.migrate.scanner import ScanOptions
    from neuron_migrate.migrate.sources import Selection

    if options.jobs is not None and options.jobs < 0:
        raise UsageError(f"--jobs {options.jobs}: must be 0 (one per CPU) or more")
    config = config or load_settings(options)
    paths = options.scan_paths
    selection = Selection(
        include=options.include or config.include,
        exclude=config.exclude + options.exclude,
        respect_gitignore=config.respect_gitignore and options.respect_gitignore,
    )
    return ScanOptions(
        paths=paths,
        root=scan_root(paths, options.root),
        select=options.select or config.select,
        ignore=config.ignore + options.ignore,
        selection=selection,
        jobs=options.jobs if options.jobs is not None else config.jobs,
        cache_dir=(options.cache_dir or DEFAULT_CACHE_DIR) if options.cache else None,
        target_torch=config.target_torch,
    )


def run_scan(options: Options, progress: Progress | None = None, config: Config | None = None) -> ScanResult:
    """Scan `options.paths` for CUDA-specific code."""
    from neuron_migrate.migrate.scanner import scan

    return scan(scan_options(options, config), progress=progress)


def run_fix(
    options: Options, unsafe: bool = False, progress: Progress | None = None, include_generated: bool = False
) -> list[FileFix]:
    """The rewrites of every selected file, computed but not written (`migrate.fix_files.write_fixed` writes
    one); `unsafe` adds the fixes that need a person's review, `include_generated` the files another tool
    generates (`# ... DO NOT EDIT`, `@generated`), which are otherwise left to their generator."""
    from neuron_migrate.migrate.fix_files import fix_tree

    for path in options.scan_paths:
        if not path.exists():
            raise UsageError(f"{path}: no such file or directory; pass a file or folder to fix")
    return fix_tree(scan_options(options), unsafe, progress, include_generated)


def make_report(
    options: Options,
    scan_file: Path | None = None,
    trace_files: Sequence[Path] = (),
    progress: Progress | None = None,
) -> Report:
    """Read the scan from `scan_file` (or scan `options.paths`), read the traces, apply
    `[tool.neuron-migrate.effort]`, and build the Report that every report format renders."""
    from neuron_migrate.reports.build import build_report
    from neuron_migrate.reports.effort import settings_from_config

    if scan_file is not None and options.paths:
        raise UsageError("PATH and --scan both given: pass a folder to scan or a scan file, not both")
    for path in options.paths:
        if not path.exists():
            raise UsageError(f"PATH {path}: no such file or folder")
    config = load_settings(options)
    where = f"{config.path}: [tool.neuron-migrate.effort]" if config.path else "[tool.neuron-migrate.effort]"
    settings = settings_from_config(config.effort, where)
    traces = [read_record(path, TraceResult, "--trace") for path in trace_files]
    if scan_file is not None:
        scan = read_record(scan_file, ScanResult, "--scan")
    else:
        scan = run_scan(options, progress, config)
    source_root = Path(scan.root) if Path(scan.root).is_dir() else Path.cwd()
    return build_report(scan, traces, settings, source_root=source_root)


@dataclass(frozen=True)
class CheckInputs:
    """What the gate looks at: one scan and any number of traces."""

    scan: ScanResult
    traces: tuple[TraceResult, ...]

    @property
    def ops(self) -> list[OpUse]:
        """Every traced op use, trace after trace."""
        return [use for trace in self.traces for use in trace.ops]


@dataclass(frozen=True)
class CheckResult:
    """The gate's verdict, the inputs it judged, and the baseline it compared with (None: no baseline)."""

    verdict: Verdict
    inputs: CheckInputs
    baseline: Path | None


def run_check(
    options: Options,
    gate: dict[str, Any] | None = None,
    scan_file: Path | None = None,
    trace_files: Sequence[Path] = (),
    baseline: Path | None = None,
) -> CheckResult:
    """Apply the gate (`[tool.neuron-migrate.check]`, overridden by the non-None `gate` values, keyed as the
    config keys: `min-op-coverage`, `allow-op`, …) to a scan and traces, against `baseline` or the
    config's baseline file."""
    from neuron_migrate.checks.baseline import load_baseline
    from neuron_migrate.checks.gate import evaluate

    config = load_settings(options)
    policy = _policy(config, gate)
    inputs = _check_inputs(options, config, scan_file, trace_files)
    baseline = baseline or (Path(config.check["baseline"]) if "baseline" in config.check else None)
    recorded = load_baseline(baseline) if baseline is not None else None
    verdict = evaluate(list(inputs.scan.findings), inputs.ops, policy, recorded)
    return CheckResult(verdict, inputs, baseline)


def record_baseline(
    options: Options,
    path: Path,
    allow_growth: bool = False,
    gate: dict[str, Any] | None = None,
    scan_file: Path | None = None,
    trace_files: Sequence[Path] = (),
) -> tuple[Baseline, CheckInputs]:
    """Write today's findings and non-native ops to the baseline `path` (which only shrinks unless
    `allow_growth`); the gate settings are validated as for `run_check`."""
    from neuron_migrate.checks.baseline import Baseline, write_baseline

    config = load_settings(options)
    _policy(config, gate)
    inputs = _check_inputs(options, config, scan_file, trace_files)
    recorded = Baseline.of(list(inputs.scan.findings), inputs.ops)
    write_baseline(path, recorded, allow_growth)
    return recorded, inputs


def _policy(config: Config, gate: dict[str, Any] | None):
    from neuron_migrate.checks.policy import policy_from

    return policy_from(config.check, gate or {}, str(config.path or "pyproject.toml"))


def _check_inputs(
    options: Options, config: Config, scan_file: Path | None, trace_files: Sequence[Path]
) -> CheckInputs:
    scan = read_record(scan_file, ScanResult, "--scan") if scan_file else run_scan(options, config=config)
    return CheckInputs(scan, tuple(read_record(path, TraceResult, "--trace") for path in trace_files))
