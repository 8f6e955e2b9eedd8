"""Run the installed `neuron-migrate fix --write` on a copy of a source tree, the way a user runs it.

Only the CLI is used (the codemod's internals are being rewritten), and a crash never stops the benchmark:
when a whole run fails, the copy is restored and the files are bisected until each crashing file is alone.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

SUMMARY = re.compile(r"(\d+) files? changed, (\d+) findings? fixed")
NOT_FIXED = re.compile(r"^(.+?): not fixed: (.*)$", re.MULTILINE)


@dataclass
class FixRun:
    """What the fix runs over one tree reported: sites fixed, files it could not fix, crashes, time."""

    sites: int | None = 0  # None: a summary line was missing (the CLI changed its wording)
    cli_files_changed: int | None = 0
    crashes: list[tuple[str, str]] = field(default_factory=list)
    not_fixed: list[tuple[str, str]] = field(default_factory=list)
    wall: float = 0.0
    invocations: int = 0

    def absorb(self, stderr: str) -> None:
        """Add one successful invocation's summary and per-file failures."""
        match = SUMMARY.search(stderr)
        if match is None or self.sites is None:
            self.sites = self.cli_files_changed = None
        else:
            self.cli_files_changed += int(match.group(1))
            self.sites += int(match.group(2))
        for rel, why in NOT_FIXED.findall(stderr):
            (self.crashes if why.startswith("fix failed") else self.not_fixed).append((rel, why))


def default_command() -> list[str]:
    """The `neuron-migrate fix` of the running interpreter's environment."""
    exe = Path(sys.executable).parent / "neuron-migrate"
    found = str(exe) if exe.exists() else shutil.which("neuron-migrate")
    if found is None:
        raise SystemExit("neuron-migrate is not installed in this environment: run `make install` first")
    return [found, "fix"]


#: the files that configure a line length (`linelimit`) or neuron-migrate itself: copied with the sources, so
#: `fix` in the copy reads the limit the measurement reads
CONFIG_FILES = ("pyproject.toml", "ruff.toml", ".ruff.toml", "setup.cfg", "tox.ini", ".flake8")


def copy_sources(source: Path, dest: Path) -> list[str]:
    """Copy the .py files of `source` to `dest/<source name>/`, with the configuration files among them;
    returns the .py files' paths relative to `dest`."""
    rels = []
    configs = [p for name in CONFIG_FILES for p in source.rglob(name)]
    for path in sorted(source.rglob("*.py")) + configs:
        if "__pycache__" in path.parts or not path.is_file():
            continue
        rel = Path(source.name) / path.relative_to(source)
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest / rel)
        if path.suffix == ".py":
            rels.append(rel.as_posix())
    return rels


def _restore(source_parent: Path, root: Path, rels: list[str]) -> None:
    for rel in rels:
        shutil.copyfile(source_parent / rel, root / rel)


def _invoke(
    command: list[str], root: Path, targets: list[str], unsafe: bool, timeout: float
) -> subprocess.CompletedProcess | None:
    """One CLI run; None when it crashed or hung (exit 1 only means findings are left)."""
    args = [*command, *targets, "--write", "--root", "."] + (["--unsafe-fixes"] if unsafe else [])
    try:
        proc = subprocess.run(args, cwd=root, capture_output=True, text=True, check=False, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return proc if proc.returncode in (0, 1) else None


def _bisect(
    run: FixRun,
    command: list[str],
    root: Path,
    source_parent: Path,
    rels: list[str],
    unsafe: bool,
    timeout: float,
) -> None:
    run.invocations += 1
    proc = _invoke(command, root, rels, unsafe, timeout)
    if proc is not None:
        run.absorb(proc.stderr)
        return
    _restore(source_parent, root, rels)
    if len(rels) == 1:
        run.crashes.append((rels[0], "the fix run crashed or timed out on this file alone"))
        return
    half = len(rels) // 2
    for part in (rels[:half], rels[half:]):
        _bisect(run, command, root, source_parent, part, unsafe, timeout)


def run_fix(
    root: Path,
    source: Path,
    rels: list[str],
    unsafe: bool = False,
    command: list[str] | None = None,
    timeout: float = 3600.0,
) -> FixRun:
    """Fix the copy `root/<source name>` in place; the original tree `source` is only read (to restore)."""
    command = command or default_command()
    run = FixRun(invocations=1)
    start = time.perf_counter()
    proc = _invoke(command, root, [source.name], unsafe, timeout)
    if proc is not None:
        run.absorb(proc.stderr)
    else:
        _restore(source.parent, root, rels)
        _bisect(run, command, root, source.parent, rels, unsafe, timeout)
    run.wall = time.perf_counter() - start
    return run
