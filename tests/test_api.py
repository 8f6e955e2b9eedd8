"""`neuron_migrate.api`, the import surface for Python users: the README's example runs as printed, and the
calls behave as their commands do."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from neuron_migrate.api import Options, read_record, run_fix
from neuron_migrate.errors import InputFileError, UsageError
from neuron_migrate.model import ScanResult
from tests.conftest import ROOT


def _readme_example() -> str:
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("## Use from Python", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


def test_the_readme_example_runs(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", _readme_example()],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert re.fullmatch(r"[1-9]\d* findings in [1-9]\d* files", lines[0]), lines
    assert re.match(r"\S+\.py:\d+:\d+ NM\d{3} ", lines[1]), lines
    assert re.fullmatch(r"[1-9]\d* files would change", lines[4]), lines
    assert "migration" in lines[5] and lines[6] == "gate passed", lines
    assert proc.stderr == ""  # nothing drawn, nothing printed by the library


def test_a_missing_record_is_one_line_naming_the_flag(tmp_path):
    with pytest.raises(InputFileError, match=r"^--scan .*nope\.json: file not found$"):
        read_record(tmp_path / "nope.json", ScanResult, "--scan")


def test_run_fix_writes_nothing_and_names_a_missing_path(tmp_path):
    source = "import torch\ntorch.cuda.synchronize()\n"
    (tmp_path / "a.py").write_text(source)
    fixes = run_fix(Options(paths=(tmp_path,), root=tmp_path, cache=False, jobs=1))
    assert [fix.rel for fix in fixes if fix.new is not None] == ["a.py"]
    assert (tmp_path / "a.py").read_text() == source
    with pytest.raises(UsageError, match="no such file or directory"):
        run_fix(Options(paths=(tmp_path / "missing",)))


def test_the_api_imports_nothing_of_the_cli():
    code = (
        "import sys, neuron_migrate.api\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'rich', 'click', 'jinja2', "
        "'libcst') or m.startswith('neuron_migrate.commands')))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
