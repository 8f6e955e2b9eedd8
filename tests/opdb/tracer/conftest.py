"""Helpers for the trace tests: every use of the stand-in device happens in a fresh interpreter, because
registering a PrivateUse1 device is permanent for a process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def run_python(code: str, cwd: Path = ROOT, timeout: float = 300, standin: str = "auto") -> dict:
    """Run `code` in a new interpreter; it must print one JSON object as its last stdout line. `standin`
    picks the stand-in device the code installs (auto, cpp, python)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
        "NEURON_MIGRATE_STANDIN": standin,
    }
    # end like the trace child does (os._exit after the output): torch can abort in teardown after the
    # stand-in ran autograd, which says nothing about the code under test
    code = textwrap.dedent(code) + "\nimport os as _os, sys as _sys\n_sys.stdout.flush()\n_os._exit(0)\n"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def marker_line(path: Path, marker: str) -> int:
    """The 1-based line of `# MARK:<marker>` in a fixture."""
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if f"# MARK:{marker}" in line:
            return number
    raise AssertionError(f"no marker {marker} in {path}")


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session", autouse=True)
def _built_standin(standin_extension):
    """Every test here may start a stand-in child: build the C++ extension first, once."""
    return standin_extension
