"""`neuron-migrate check` on the bundled example, as CI runs it: baseline, new items, ratchet, exit codes."""

from __future__ import annotations

import shutil

import pytest

from neuron_migrate.model import CallSite, Coverage, OpUse, TraceResult, to_json
from tests.conftest import EXAMPLE


def trace_file(path, ops):
    record = TraceResult(
        "examples/cuda_project/trace_target.py:build",
        "stand-in",
        ("forward",),
        "v",
        True,
        tuple(ops),
        Coverage.of(ops),
    )
    path.write_text(to_json(record))
    return path


NATIVE = OpUse("aten::mm", ("float32",), 12, "forward", (CallSite("model.py", 60),), status="native")
FALLBACK = OpUse(
    "aten::linalg_qr", ("float32",), 2, "forward", (CallSite("model.py", 99),), status="cpu_fallback"
)


@pytest.fixture
def project(tmp_path):
    shutil.copytree(EXAMPLE, tmp_path / "proj")
    return tmp_path / "proj"


def test_baseline_workflow_on_the_example(run_cli, project):
    base_trace = trace_file(project / "trace.json", [NATIVE])
    assert (
        run_cli("check", ".", "--trace", base_trace, "--write-baseline", "bl.json", cwd=project).returncode
        == 0
    )
    passing = run_cli(
        "check", ".", "--trace", base_trace, "--baseline", "bl.json", "--junit", "j.xml", cwd=project
    )
    assert passing.returncode == 0, passing.stderr
    assert "PASSED" in passing.stderr and 'name="gate"' in (project / "j.xml").read_text()

    train = project / "train.py"
    original = train.read_text()
    train.write_text(original + "\n\ndef wait():\n    torch.cuda.synchronize()\n")
    new_code = run_cli(
        "check", ".", "--trace", base_trace, "--baseline", "bl.json", "--markdown", "s.md", cwd=project
    )
    assert new_code.returncode == 1
    assert "train.py:" in new_code.stderr and "NM401" in new_code.stderr and "new finding" in new_code.stderr
    assert "NM401" in (project / "s.md").read_text()
    train.write_text(original)

    new_op = trace_file(project / "trace2.json", [NATIVE, FALLBACK])
    fallback = run_cli("check", ".", "--trace", new_op, "--baseline", "bl.json", cwd=project)
    assert (
        fallback.returncode == 1 and "aten::linalg_qr" in fallback.stderr and "model.py:99" in fallback.stderr
    )
    allowed = run_cli(
        "check",
        ".",
        "--trace",
        new_op,
        "--baseline",
        "bl.json",
        "--allow-op",
        "aten::linalg_qr=runs once per epoch",
        cwd=project,
    )
    assert allowed.returncode == 0

    train.write_text(original.replace("torch.backends.cudnn.benchmark = True", "pass"))
    fixed = run_cli("check", ".", "--trace", base_trace, "--baseline", "bl.json", cwd=project)
    assert fixed.returncode == 0
    assert "can be dropped" in fixed.stderr and "NM410" in fixed.stderr
    grow = run_cli("check", ".", "--trace", new_op, "--write-baseline", "bl.json", cwd=project)
    assert grow.returncode == 2 and "only shrinks" in grow.stderr
    assert (
        run_cli(
            "check", ".", "--trace", new_op, "--write-baseline", "bl.json", "--update-baseline", cwd=project
        ).returncode
        == 0
    )


def test_thresholds_from_flags_and_config(run_cli, project):
    traced = trace_file(project / "t.json", [NATIVE, FALLBACK])
    assert run_cli("check", ".", "--trace", traced, "--fail-on-findings", "none", cwd=project).returncode == 0
    assert (
        run_cli(
            "check",
            ".",
            "--trace",
            traced,
            "--fail-on-findings",
            "none",
            "--max-fallback-ops",
            "0",
            cwd=project,
        ).returncode
        == 1
    )
    (project / "pyproject.toml").write_text(
        "[tool.neuron-migrate.check]\nmin-op-coverage = 0.99\nfail-on-findings = 'none'\n"
    )
    proc = run_cli("check", ".", "--trace", traced, cwd=project)
    assert proc.returncode == 1 and "below 99.0%" in proc.stderr


def one_line(proc) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_input_errors_are_one_line_exit_2(run_cli, tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "bad.json").write_text("{oops")
    (tmp_path / "scan.json").write_text(
        '{"schema": "neuron-migrate/scan/1", "root": ".", "findings": [], "files_scanned": 0}'
    )
    assert "bad.json" in one_line(run_cli("check", ".", "--baseline", "bad.json"))
    assert "bad.json" in one_line(run_cli("check", ".", "--trace", "bad.json"))
    assert "not a neuron-migrate trace" in one_line(run_cli("check", ".", "--trace", "scan.json"))
    assert "missing.json" in one_line(run_cli("check", ".", "--baseline", "missing.json"))
    assert "reason is required" in one_line(run_cli("check", ".", "--allow-op", "aten::x"))
    assert "--fail-on-findings" in one_line(run_cli("check", ".", "--fail-on-findings", "loud"))


def test_scan_file_instead_of_scanning(run_cli, tmp_path):
    (tmp_path / "a.py").write_text("import torch\ntorch.cuda.synchronize()\n")
    scan = run_cli("scan", ".", "--format", "json", "--output", "scan.json")
    assert scan.returncode == 1
    (tmp_path / "a.py").write_text("x = 1\n")  # the file is not rescanned
    assert run_cli("check", "--scan", "scan.json").returncode == 1


def test_internal_error_is_exit_3(monkeypatch, tmp_path, capsys):
    from neuron_migrate import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.py").write_text("x = 1\n")
    monkeypatch.setattr("neuron_migrate.checks.gate.evaluate", lambda *a, **k: 1 / 0)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["check", "."])
    assert exit_info.value.code == 3
    assert "internal error: ZeroDivisionError" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args", [["--debug", "check", "."], ["check", ".", "--debug"], ["check", "--debug", "."]]
)
def test_debug_anywhere_shows_the_traceback(monkeypatch, tmp_path, args):
    from neuron_migrate import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.py").write_text("x = 1\n")
    monkeypatch.setattr("neuron_migrate.checks.gate.evaluate", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        cli.main(args)


def test_debug_after_a_double_dash_is_left_to_the_script():
    from neuron_migrate.cli import debug_first

    assert debug_first(["trace", "s.py", "--", "--debug"]) == ["trace", "s.py", "--", "--debug"]
    assert debug_first(["trace", "s.py", "--debug", "--", "-x"]) == ["--debug", "trace", "s.py", "--", "-x"]
