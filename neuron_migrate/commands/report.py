"""`neuron-migrate report`: the effort estimate as HTML, Markdown, JSON or SARIF, from a scan and traces."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from neuron_migrate.commands.common import config_for, stderr_console
from neuron_migrate.errors import InputFileError, UsageError
from neuron_migrate.model import Report, ScanResult, TraceResult, from_json
from neuron_migrate.reports.effort import plural, settings_from_config
from neuron_migrate.reports.output import write_output
from neuron_migrate.reports.render import RENDERERS, build_report, hours

FORMATS = tuple(RENDERERS)


def read_record(path: Path, kind: type, flag: str):
    """A scan or trace JSON file as its record; a missing or malformed file is one clear error line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputFileError(f"{flag} {path}: file not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputFileError(f"{flag} {path}: cannot read it ({err})") from None
    return from_json(text, kind, f"{flag} {path}")


def make_report(
    path: Path | None,
    scan_file: Path | None,
    trace_files: list[Path],
    config_file: Path | None = None,
    no_cache: bool = False,
) -> Report:
    """Read or run the scan, read the traces, apply `[tool.neuron-migrate.effort]`, and build the Report."""
    from neuron_migrate.commands.scan import run_scan

    if path is not None and not path.exists():
        raise UsageError(f"PATH {path}: no such file or folder")
    config = config_for([path or Path(".")], config_file)
    where = f"{config.path}: [tool.neuron-migrate.effort]" if config.path else "[tool.neuron-migrate.effort]"
    settings = settings_from_config(config.effort, where)
    traces: list[TraceResult] = [read_record(t, TraceResult, "--trace") for t in trace_files]
    if scan_file is not None:
        scan: ScanResult = read_record(scan_file, ScanResult, "--scan")
    else:
        scan = run_scan([path] if path else [], config_file=config_file, no_cache=no_cache, progress=True)
    source_root = Path(scan.root) if Path(scan.root).is_dir() else Path.cwd()
    return build_report(scan, traces, settings, source_root=source_root)


def report_command(
    path: Optional[Path] = typer.Argument(None, help="Folder or file to scan (default: the current folder)."),
    scan_file: Optional[Path] = typer.Option(
        None, "--scan", help="Use this `scan --format json` file instead of scanning."
    ),
    trace_files: Optional[list[Path]] = typer.Option(
        None, "--trace", help="A `trace --format json` file; repeat to merge several."
    ),
    output_format: str = typer.Option("html", "--format", help="html | md | json | sarif."),
    output: Optional[Path] = typer.Option(
        None, "--output", "-o", help="Write the report here (default stdout)."
    ),
    config_file: Optional[Path] = typer.Option(
        None, "--config", help="pyproject.toml to read settings from."
    ),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the scan cache."),
) -> None:
    """Estimate the migration effort (low / likely / high engineer-hours) from a scan and traces."""
    if output_format not in FORMATS:
        raise UsageError(f"--format {output_format!r}: choose one of {', '.join(FORMATS)}")
    if scan_file is not None and path is not None:
        raise UsageError("PATH and --scan both given: pass a folder to scan or a scan file, not both")
    report = make_report(path, scan_file, list(trace_files or []), config_file, no_cache)
    write_output(RENDERERS[output_format](report), output)
    effort = report.effort
    console = stderr_console()
    console.print(f"{report.verdict}.", markup=False)
    span = f"{hours(effort.low, effort.hours_per_day)} to {hours(effort.high, effort.hours_per_day)}"
    console.print(
        f"{plural(len(effort.items), 'item')}, likely {hours(effort.likely, effort.hours_per_day)} ({span})"
        + (f"; report written to {output}" if output else ""),
        markup=False,
    )
    if report.opdb_pre_release:
        console.print(
            "warning: op data comes from a pre-release opdb snapshot; confirm on a Trainium device",
            markup=False,
        )


def register(app: typer.Typer) -> None:
    app.command("report")(report_command)
