"""`neuron-migrate scan` and `rules` as a user runs them: formats, exit codes, one-line errors."""

from __future__ import annotations

import json

from neuron_migrate.migrate.rule_docs import rules_markdown
from tests.conftest import EXAMPLE, ROOT
from tests.support.sarif import sarif_problems

SYNC = "import torch\ntorch.cuda.synchronize()\n"


def test_text_output_groups_by_file_and_exits_1(run_cli, tmp_path):
    (tmp_path / "a.py").write_text(SYNC)
    proc = run_cli("scan", ".", "--no-cache")
    assert proc.returncode == 1
    assert "a.py" in proc.stderr and "NM401" in proc.stderr and "torch.cuda.synchronize()" in proc.stderr
    assert "1 finding (1 error, 0 warnings, 0 info) in 1 of 1 files" in proc.stderr


def test_clean_tree_exits_0_and_exit_zero_forces_0(run_cli, tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    assert run_cli("scan", ".", "--no-cache").returncode == 0
    (tmp_path / "b.py").write_text(SYNC)
    assert run_cli("scan", ".", "--no-cache", "--exit-zero").returncode == 0


def test_json_is_the_schema_tagged_record(run_cli, tmp_path):
    (tmp_path / "a.py").write_text(SYNC)
    proc = run_cli("scan", ".", "--format", "json", "--no-cache")
    data = json.loads(proc.stdout)
    assert data["schema"] == "neuron-migrate/scan/1"
    assert [(f["path"], f["line"], f["code"]) for f in data["findings"]] == [("a.py", 2, "NM401")]
    assert data["findings"][0]["fix"]["safety"] == "safe"


def test_sarif_of_the_example_is_valid_for_github(run_cli):
    proc = run_cli("scan", "examples/cuda_project", "--format", "sarif", "--no-cache", cwd=ROOT)
    log = json.loads(proc.stdout)
    assert sarif_problems(log) == []
    results = log["runs"][0]["results"]
    assert results and all(
        r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].startswith("examples/cuda_project/")
        for r in results
    )
    rule = log["runs"][0]["tool"]["driver"]["rules"][0]
    assert rule["helpUri"].endswith("#" + rule["id"].lower()) and rule["help"]["markdown"]
    assert any("fixes" in r for r in results)


def test_sarif_check_catches_broken_logs():
    assert sarif_problems({"version": "2.0.0", "runs": []})
    bad = {
        "$schema": "x/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": "t", "rules": [{"id": "A", "shortDescription": {"text": "a"}}]}},
                "results": [
                    {
                        "ruleId": "B",
                        "message": {"text": "m"},
                        "locations": [
                            {
                                "physicalLocation": {
                                    "artifactLocation": {"uri": "/abs.py"},
                                    "region": {"startLine": 0},
                                }
                            }
                        ],
                    }
                ],
            }
        ],
    }
    problems = sarif_problems(bad)
    assert any("ruleId B" in p for p in problems) and any("relative" in p for p in problems)
    assert any("startLine" in p for p in problems) and any("partialFingerprints" in p for p in problems)


def test_github_annotations(run_cli, tmp_path):
    (tmp_path / "a.py").write_text(SYNC)
    proc = run_cli("scan", ".", "--format", "github", "--no-cache")
    assert proc.stdout.startswith("::error file=a.py,line=2,col=1,")
    assert "title=NM401::" in proc.stdout


def test_output_file_is_written(run_cli, tmp_path):
    (tmp_path / "a.py").write_text(SYNC)
    proc = run_cli("scan", ".", "--format", "json", "--output", "out.json", "--no-cache")
    assert proc.stdout == "" and json.loads((tmp_path / "out.json").read_text())["findings"]


def test_select_and_ignore(run_cli, tmp_path):
    (tmp_path / "a.py").write_text(SYNC + "ok = torch.cuda.is_available()\n")
    select = json.loads(run_cli("scan", ".", "--format", "json", "--select", "NM4", "--no-cache").stdout)
    ignore = json.loads(run_cli("scan", ".", "--format", "json", "--ignore", "NM401", "--no-cache").stdout)
    assert {f["code"] for f in select["findings"]} == {"NM401"}
    assert "NM401" not in {f["code"] for f in ignore["findings"]}


def one_line_error(proc) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_bad_input_is_one_line_exit_2(run_cli, tmp_path):
    assert "no such file" in one_line_error(run_cli("scan", "missing_dir"))
    assert "NMX" in one_line_error(run_cli("scan", ".", "--select", "NMX"))
    assert "--format" in one_line_error(run_cli("scan", ".", "--format", "xml"))
    (tmp_path / "pyproject.toml").write_text("[tool.neuron-migrate]\nselect = 'NM1'\n")
    assert "must be a list of strings" in one_line_error(run_cli("scan", "."))
    (tmp_path / "pyproject.toml").write_text("[tool.neuron-migrate]\nbogus = 1\n")
    assert "unknown key 'bogus'" in one_line_error(run_cli("scan", "."))
    (tmp_path / "pyproject.toml").write_text("[tool.neuron-migrate\n")
    assert "invalid TOML" in one_line_error(run_cli("scan", "."))


def test_config_exclude_and_select(run_cli, tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.neuron-migrate]\nexclude = ["vendor"]\nselect = ["NM4"]\n'
    )
    (tmp_path / "vendor").mkdir()
    (tmp_path / "vendor" / "v.py").write_text(SYNC)
    (tmp_path / "a.py").write_text(SYNC + "ok = torch.cuda.is_available()\n")
    data = json.loads(run_cli("scan", ".", "--format", "json", "--no-cache").stdout)
    assert [(f["path"], f["code"]) for f in data["findings"]] == [("a.py", "NM401")]


def test_rules_lists_every_rule_and_docs_are_current(run_cli):
    proc = run_cli("rules", cwd=ROOT)
    assert proc.returncode == 0 and "NM401" in proc.stdout and "NM106" in proc.stdout
    one = run_cli("rules", "NM401", cwd=ROOT)
    assert "Why it matters on Trainium" in one.stdout
    docs = (ROOT / "docs" / "rules.md").read_text()
    assert docs == rules_markdown(), "docs/rules.md is stale: run `make docs`"


def test_scan_of_the_example_names_the_seeded_constructs(run_cli):
    proc = run_cli("scan", str(EXAMPLE), "--no-cache", cwd=ROOT)
    assert proc.returncode == 1
    for needle in ("train.py", "bench.py", "NM401", "cell "):
        assert needle in proc.stderr


def test_a_machine_format_scan_imports_no_console_library(tmp_path):
    """A JSON scan served from the cache (an editor's or CI's re-scan) spent a sixth of its time importing
    rich for a one-line summary."""
    import subprocess
    import sys

    (tmp_path / "a.py").write_text("import torch\nx = torch.zeros(2).cuda()\n")
    program = (
        "import sys\nfrom neuron_migrate.cli import main\n"
        "try:\n"
        f"    main(['scan', {str(tmp_path / 'a.py')!r}, '--format', 'json', '--no-cache', '-o',"
        f" {str(tmp_path / 'out.json')!r}])\n"
        "except SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'rich'))\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
    assert done.stderr.strip() == "1 findings in 1 files."
    assert json.loads((tmp_path / "out.json").read_text())["findings"][0]["code"] == "NM103"
