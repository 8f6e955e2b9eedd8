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
            cwd=cwd or tmp_path, capture_output=True, text=True, input=input, timeout=600,
        )

    return run
