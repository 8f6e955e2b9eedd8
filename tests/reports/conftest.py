"""Shared fixtures: one scan of the bundled example and the report built from it and the trace fixture."""

from __future__ import annotations

from dataclasses import replace

import pytest

from neuron_migrate.migrate.scanner import ScanOptions, scan
from neuron_migrate.reports.render import build_report
from tests.conftest import EXAMPLE, ROOT
from tests.support.records import example_trace


@pytest.fixture(scope="session")
def example_scan():
    """The example project scanned with paths relative to the repository (as the trace's call sites are)."""
    return scan(ScanOptions(paths=(EXAMPLE,), root=ROOT, jobs=1))


@pytest.fixture(scope="session")
def example_report(example_scan):
    """The report of the example: its scan plus the trace fixture, volatile fields scrubbed."""
    report = build_report(example_scan, [example_trace()], source_root=ROOT, generated="<GENERATED>")
    return replace(report, root="<ROOT>", tool_version="<VERSION>")
