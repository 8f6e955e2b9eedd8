"""The fleet's GitHub Actions matrix example is consistent and uses real commands and flags."""

from __future__ import annotations

import shlex

import yaml

from tests.conftest import ROOT


def test_matrix_shards_cover_the_run_and_merge_waits_for_them(run_cli):
    workflow = yaml.safe_load((ROOT / "examples" / "ci" / "fleet-matrix.yml").read_text())
    shards = workflow["env"]["SHARDS"]
    assert workflow["jobs"]["shard"]["strategy"]["matrix"]["shard"] == list(range(1, shards + 1))
    assert workflow["jobs"]["merge"]["needs"] == "shard"
    commands = [
        " ".join(s["run"].split())
        for job in workflow["jobs"].values()
        for s in job["steps"]
        if "run" in s and "neuron-migrate fleet" in s["run"]
    ]
    assert [shlex.split(c)[2] for c in commands] == ["hf", "merge"]
    assert "--shard ${{ matrix.shard }}/${{ env.SHARDS }}" in commands[0]
    for command in commands:
        words = shlex.split(command)
        help_text = run_cli("fleet", words[2], "--help").stdout
        for flag in (w for w in words if w.startswith("--")):
            assert flag in help_text, f"{flag} is not an option of `neuron-migrate fleet {words[2]}`"
