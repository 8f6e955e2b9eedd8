"""The CI recipes shipped in the repo work as written: pre-commit hooks and the GitHub Actions example."""

from __future__ import annotations

import shlex

import yaml

from tests.conftest import ROOT

SYNC = "import torch\ntorch.cuda.synchronize()\n"


def test_pre_commit_hooks_run(run_cli, tmp_path):
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert {h["id"] for h in hooks} == {"neuron-migrate-scan", "neuron-migrate-fix"}
    (tmp_path / "bad.py").write_text(SYNC)
    (tmp_path / "good.py").write_text("x = 1\n")
    for hook in hooks:
        args = shlex.split(hook["entry"])[1:]
        assert run_cli(*args, "bad.py").returncode == 1, hook["id"]
        assert run_cli(*args, "good.py").returncode == 0, hook["id"]
    assert (tmp_path / "bad.py").read_text() == SYNC  # check mode never writes


def test_fix_check_fails_only_when_a_fix_is_available(run_cli, tmp_path):
    (tmp_path / "manual.py").write_text("import triton\n")
    assert run_cli("fix", "--check", "manual.py").returncode == 0
    (tmp_path / "auto.py").write_text(SYNC)
    assert run_cli("fix", "--check", "auto.py").returncode == 1


def test_github_workflow_example_uses_real_commands_and_flags(run_cli):
    workflow = yaml.safe_load((ROOT / "examples" / "ci" / "github-actions.yml").read_text())
    steps = workflow["jobs"]["trainium-readiness"]["steps"]
    commands = [" ".join(s["run"].split()) for s in steps if "run" in s and "neuron-migrate " in s["run"]]
    assert len(commands) == 3
    for command in commands:
        words = shlex.split(command)
        sub = words[1]
        help_text = run_cli(sub, "--help").stdout
        for flag in (w for w in words if w.startswith("--")):
            assert flag in help_text, f"{flag} is not an option of `neuron-migrate {sub}`"
