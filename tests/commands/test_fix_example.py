"""`fix --write` on a copy of the bundled example: train.py then trains on this CPU-only machine, and a second
`fix` has nothing left to rewrite (only the findings left for a person).

The copy sets `target-torch = "2.13"`, the torch TorchNeuron runs on, as `fix` advises: for an older torch the
memory functions' fixes are unsafe (they raise on MPS before 2.13), and `torch.cuda.reset_peak_memory_stats`
fails on a CPU-only torch."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cuda_project"


def test_fixed_example_trains_on_cpu_and_second_fix_is_clean(run_cli, tmp_path):
    project = tmp_path / "cuda_project"
    shutil.copytree(EXAMPLE, project)
    (project / "pyproject.toml").write_text('[tool.neuron-migrate]\ntarget-torch = "2.13"\n')
    original = subprocess.run(
        [sys.executable, "train.py", "--steps", "2", "--num-workers", "0"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert original.returncode != 0 and "step 1 loss" not in original.stdout  # it insists on CUDA

    first = run_cli("fix", str(project), "--write")
    assert first.returncode == 1, first.stderr  # findings are left for a person
    assert re.search(
        r"\d+ files changed, \d+ findings fixed, \d+ left for a person", first.stdout + first.stderr
    )

    trained = subprocess.run(
        [sys.executable, "train.py", "--steps", "2", "--num-workers", "0"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert trained.returncode == 0, trained.stderr[-2000:]
    losses = re.findall(r"step (\d+) loss ([\d.]+)", trained.stdout)
    assert [step for step, _ in losses] == ["1", "2"], trained.stdout

    second = run_cli("fix", str(project))
    assert "0 files would change, 0 findings would fix" in second.stdout + second.stderr, second.stdout
