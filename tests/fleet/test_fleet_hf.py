"""The CI check of the issue: `fleet hf --models llama,gpt2,qwen2,mistral,t5 --inference` against what the
individual traces say.

Work is shared to stay fast on a loaded 2-core machine: one fleet run (one fork server), and the five
reference traces through `opdb.trace.run_traces` (the function `trace --hf X --format json` calls, one child
for all five), started at the same time; plus the real `trace --hf t5 --inference --format json` CLI for the
seq2seq model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODELS = ("llama", "gpt2", "qwen2", "mistral", "t5")
_RANK = {"native": 0, "unknown": 1, "cpu_fallback": 2, "unsupported": 3}

REFERENCE = textwrap.dedent("""
    import json, sys
    from neuron_migrate.model import to_dict
    from neuron_migrate.opdb.tracer.targets import TargetSpec
    from neuron_migrate.opdb.tracer.runner import TraceOptions, run_traces
    specs = [TargetSpec.parse(None, (), hf=m) for m in sys.argv[1].split(",")]
    print(json.dumps([to_dict(r) for r in run_traces(specs, TraceOptions(inference=True, timeout=300))]))
""")


def _start(args: list[str], cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    return subprocess.Popen(
        [sys.executable, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _wait(proc: subprocess.Popen) -> str:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    work = tmp_path_factory.mktemp("fleet")
    fleet = _start(
        [
            "-m",
            "neuron_migrate",
            "fleet",
            "hf",
            "--models",
            ",".join(MODELS),
            "--inference",
            "--jobs",
            "2",
            "--cache-dir",
            str(work / "cache"),
            "--output-dir",
            str(work / "pages" / "new"),
        ],
        work,
    )
    reference = _start(["-c", REFERENCE, ",".join(MODELS)], work)
    cli_t5 = _start(["-m", "neuron_migrate", "trace", "--hf", "t5", "--inference", "--format", "json"], work)
    fleet_err = fleet.communicate(timeout=600)[1]
    assert fleet.returncode == 0, fleet_err[-3000:]
    traces = {
        r["target"].removeprefix("hf:"): r for r in json.loads(_wait(reference).strip().splitlines()[-1])
    }
    return {
        "fleet": json.loads((work / "pages" / "new" / "fleet.json").read_text()),
        "summary": fleet_err,
        "traces": traces,
        "cli_t5": json.loads(_wait(cli_t5)),
        "work": work,
    }


def _row(trace: dict) -> dict[str, tuple[str, int]]:
    """op -> (worst status, calls), computed here independently of fleet.matrix."""
    row: dict[str, list] = defaultdict(lambda: ["native", 0])
    for use in trace["ops"]:
        cell = row[use["op"]]
        if _RANK[use["status"]] > _RANK[cell[0]]:
            cell[0] = use["status"]
        cell[1] += use["count"]
    return {op: tuple(cell) for op, cell in row.items()}


def test_each_architecture_matches_its_own_trace(runs):
    fleet = {a["model_type"]: a for a in runs["fleet"]["architectures"]}
    assert list(fleet) == list(MODELS)
    assert fleet["t5"]["task"] == "seq2seq" and fleet["llama"]["task"] == "causal-lm"
    for model in MODELS:
        trace = runs["traces"][model]
        assert trace["error"] is None, trace["error"]
        got = {op: (cell["status"], cell["calls"]) for op, cell in fleet[model]["ops"].items()}
        assert got == _row(trace), model
        statuses = {status for status, _ in got.values()}
        expected = (
            "fails_on_neuron"
            if "unsupported" in statuses
            else "fallbacks"
            if statuses & {"cpu_fallback", "unknown"}
            else "native"
        )
        assert fleet[model]["verdict"] == expected, model
        assert fleet[model]["coverage"] == trace["coverage"], model


def test_the_trace_cli_agrees_for_the_seq2seq_model(runs):
    assert _row(runs["cli_t5"]) == _row(runs["traces"]["t5"])


def test_ranking_counts_what_the_traces_say(runs):
    blocked, slowed = defaultdict(set), defaultdict(set)
    for model, trace in runs["traces"].items():
        for op, (status, _) in _row(trace).items():
            if status == "unsupported":
                blocked[op].add(model)
            elif status != "native":
                slowed[op].add(model)
    ranking = {r["op"]: r for r in runs["fleet"]["rankings"]["inference"]}
    assert set(ranking) == set(blocked) | set(slowed)
    for op, rank in ranking.items():
        assert (rank["blocks"], rank["slows"]) == (len(blocked[op]), len(slowed[op])), op
        assert set(rank["architectures"]) == blocked[op] | slowed[op], op
    counts = [len(blocked[r["op"]]) for r in runs["fleet"]["rankings"]["inference"]]
    assert counts == sorted(counts, reverse=True)


def test_summary_pages_and_share(runs):
    fleet, pages = runs["fleet"], runs["work"] / "pages" / "new"  # --output-dir was created
    summary = fleet["summaries"]["inference"]
    counts = summary["counts"]
    assert sum(counts.values()) == len(MODELS) and fleet["modes"] == ["inference"]
    assert summary["native_share"] == counts["native"] / len(MODELS)
    assert summary["runs"] == counts["native"] + counts["fallbacks"]
    html, md = (pages / "fleet.html").read_text(), (pages / "fleet.md").read_text()
    for model in MODELS:
        assert f"<code>{model}</code>" in html and f"`{model}`" in md
    assert "run on neuron" in runs["summary"] and "natively" in runs["summary"]
    assert fleet["backend"] == runs["traces"]["llama"]["device"]


def test_a_rerun_comes_from_the_cache_without_tracing(runs, run_cli):
    work = runs["work"]
    proc = run_cli(
        "fleet",
        "hf",
        "--models",
        ",".join(MODELS),
        "--inference",
        "--cache-dir",
        work / "cache",
        "--format",
        "json",
        cwd=work,
    )
    assert proc.returncode == 0, proc.stderr
    again = json.loads(proc.stdout)
    assert (again["traced"], again["from_cache"]) == (0, len(MODELS))

    def strip(data):
        return [{k: v for k, v in a.items() if k not in ("cached", "seconds")} for a in data["architectures"]]

    assert strip(again) == strip(runs["fleet"])
    proc = run_cli(
        "fleet", "hf", "--models", "llama", "--train", "--cache-dir", work / "cache", "--list", cwd=work
    )
    assert proc.returncode == 0 and proc.stdout.split() == ["llama", "causal-lm", "LlamaForCausalLM"]


def test_bad_input_is_one_line(run_cli, tmp_path):
    proc = run_cli("fleet", "hf", "--jobs", "0")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--jobs 0" in proc.stderr
    proc = run_cli("fleet", "hf", "--format", "pdf")
    assert proc.returncode == 2 and "--format pdf" in proc.stderr
    for args, words in (
        (("--shard", "3/2"), "--shard 3/2: write I/N"),
        (("--mode", "fast"), "--mode fast"),
        (("--backend", "slurm"), "--backend slurm"),
    ):
        proc = run_cli("fleet", "hf", *args)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and words in proc.stderr, proc.stderr
    (tmp_path / "file").write_text("x")
    proc = run_cli("fleet", "hf", "--output-dir", tmp_path / "file")
    assert proc.returncode == 2 and "not a folder" in proc.stderr
    proc = run_cli("fleet", "merge", tmp_path / "missing.json")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "missing.json" in proc.stderr, (
        proc.stderr
    )
