"""Shared test helpers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cuda_project"


@pytest.fixture
def run_cli(tmp_path):
    """Run `python -m neuron_migrate ARGS` in a fresh process; returns CompletedProcess (text)."""
    import subprocess

    def run(*args: str, cwd: Path | None = None, input: str | None = None):
        return subprocess.run(
            [sys.executable, "-m", "neuron_migrate", *map(str, args)],
            cwd=cwd or tmp_path,
            capture_output=True,
            text=True,
            input=input,
            timeout=600,
        )

    return run


@pytest.fixture(scope="session")
def standin_extension():
    """Build the C++ stand-in once per test session (and per source hash: the build is cached on disk), so no
    test pays or times the compile. Skips nothing: without a compiler the pure-Python stand-in is used and the
    tests that need the C++ one say so."""
    import subprocess

    from neuron_migrate.opdb.tracer import extension

    if extension.is_built() or extension.missing_tools():
        return extension.is_built()
    proc = subprocess.run(
        [sys.executable, "-m", "neuron_migrate.opdb.tracer.extension"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return True
