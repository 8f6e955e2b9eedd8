"""Start-up stays light: each command imports the heavy libraries it uses when it runs, so `--version` loads
none of them and `scan` none it does not need (module lists, not timings: timing lives in benchmarks/)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

HEAVY = ("libcst", "jinja2", "rich", "torch", "transformers")
PROBE = """
import json, sys
args, heavy = json.loads(sys.argv[1]), set(json.loads(sys.argv[2]))
from neuron_migrate.cli import main
sys.argv = ["neuron-migrate", *args]
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & heavy)), file=sys.stderr)
"""


def _heavy_loaded(args: list[str], cwd) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args), json.dumps(HEAVY)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT)},
    )
    return json.loads(proc.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("args", "allowed"),
    [
        (["--version"], []),
        (["--help"], ["rich"]),  # typer draws its help with rich
        (
            ["scan", ".", "--no-cache"],
            ["libcst", "rich"],
        ),  # the scanner parses with libcst, the summary is rich
    ],
)
def test_commands_load_only_what_they_use(tmp_path, args, allowed):
    assert _heavy_loaded(args, tmp_path) == allowed


@pytest.mark.parametrize("output_format", ["text", "json", "github"])
def test_a_scan_served_from_the_cache_loads_no_libcst(tmp_path, output_format):
    """A warm run reads every result from the cache: no file is parsed, so libcst is never imported (SARIF
    still imports the rules for their metadata)."""
    (tmp_path / "train.py").write_text("import torch\nx = torch.ones(2).cuda()\n")
    (tmp_path / "kernel.cu").write_text("__global__ void k() {}\n")  # a kernel source's finding is kept too
    args = ["scan", ".", "--format", output_format, "--output", "out.txt", "--exit-zero"]
    assert "libcst" in _heavy_loaded(args, tmp_path)  # cold: the file is parsed
    assert "libcst" not in _heavy_loaded(args, tmp_path)
