"""`neuron-migrate report` end to end: scan or scan file, traces, formats, config weights, input errors."""

from __future__ import annotations

import json

from neuron_migrate.model import ScanResult, to_json
from tests.support.records import example_trace, finding
from tests.support.sarif import sarif_problems

CUDA_CODE = "import torch\nx = torch.zeros(3).cuda()\ny = torch.ones(3).cuda()\n"


def project(tmp_path, name, effort_table=""):
    """A one-file CUDA project with an optional `[tool.neuron-migrate.effort]` table."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "train.py").write_text(CUDA_CODE)
    (folder / "pyproject.toml").write_text(f"[tool.neuron-migrate.effort]\n{effort_table}\n")
    return folder


def report_json(run_cli, folder):
    result = run_cli("report", ".", "--format", "json", "--no-cache", cwd=folder)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_weight_from_config_changes_the_report(run_cli, tmp_path):
    default = report_json(run_cli, project(tmp_path, "default"))
    custom = report_json(run_cli, project(tmp_path, "custom", "safe-fix = [1, 2, 4]\nrepeat-factor = 0.5"))
    assert [i["code"] for i in default["effort"]["items"]] == ["NM103", "NM103"]
    assert default["effort"]["likely"] == 0.13  # 0.1 h for the first, x0.3 for the repeat
    assert custom["effort"]["likely"] == 3.0  # 2 h for the first, x0.5 for the repeat
    rows = {w["bucket"]: w for w in custom["effort"]["weights"]}
    assert rows["safe-fix"]["likely"] == 2 and rows["safe-fix"]["overridden"]


def test_bad_effort_config_is_one_line_and_exit_2(run_cli, tmp_path):
    folder = project(tmp_path, "bad", "safe-fix = [3, 2, 1]")
    result = run_cli("report", ".", "--format", "md", "--no-cache", cwd=folder)
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "low <= likely <= high" in result.stderr


def test_scan_and_trace_files_make_an_html_and_sarif_report(run_cli, tmp_path):
    scan = ScanResult(
        root=str(tmp_path),
        findings=(finding("NM101", "examples/cuda_project/model.py", 40),),
        files_scanned=1,
    )
    (tmp_path / "scan.json").write_text(to_json(scan))
    (tmp_path / "trace.json").write_text(to_json(example_trace()))
    html = run_cli(
        "report",
        "--scan",
        "scan.json",
        "--trace",
        "trace.json",
        "--trace",
        "trace.json",
        "--output",
        "report.html",
    )
    assert html.returncode == 0, html.stderr
    assert "report written to report.html" in html.stderr and "pre-release" in html.stderr
    assert "aten::split.Tensor" in (tmp_path / "report.html").read_text()
    sarif = run_cli("report", "--scan", "scan.json", "--trace", "trace.json", "--format", "sarif")
    assert sarif.returncode == 0 and sarif_problems(json.loads(sarif.stdout)) == []


def test_input_mistakes_are_one_line_errors(run_cli, tmp_path):
    (tmp_path / "scan.json").write_text('{"schema": "neuron-migrate/trace/1"}')
    cases = [
        (("report", "--trace", "missing.json"), "--trace missing.json: file not found"),
        (("report", "--scan", "scan.json"), "not a neuron-migrate scan file"),
        (("report", ".", "--scan", "scan.json"), "PATH and --scan both given"),
        (("report", "--format", "pdf"), "--format 'pdf'"),
    ]
    for args, fragment in cases:
        result = run_cli(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert fragment in result.stderr and "Traceback" not in result.stderr
