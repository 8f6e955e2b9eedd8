"""The scanner on awkward trees: bad files become NM9xx findings and the run goes on; filters and cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from neuron_migrate.migrate.scanner import ScanOptions, run_tasks, scan, submission_order
from neuron_migrate.migrate.sources import Selection

SYNC = "import torch\ntorch.cuda.synchronize()\n"


def run(root: Path, **kw):
    kw.setdefault("jobs", 1)
    return scan(ScanOptions(paths=(root,), root=root, **kw))


def codes(result):
    return sorted((f.path, f.code) for f in result.findings)


def test_bad_files_become_findings_and_the_run_goes_on(tmp_path):
    (tmp_path / "good.py").write_text(SYNC)
    (tmp_path / "latin1.py").write_bytes(b"x = '\xe9'\nimport torch\ntorch.cuda.synchronize()\n")
    (tmp_path / "nul.py").write_bytes(b"import torch\x00\ntorch.cuda.synchronize()\n")
    (tmp_path / "py2.py").write_text('import torch\nprint "cuda"\ntorch.cuda.synchronize()\n')
    (tmp_path / "broken.py").symlink_to(tmp_path / "missing.py")
    (tmp_path / "loop.py").symlink_to(tmp_path / "loop.py")
    result = run(tmp_path)
    assert codes(result) == [
        ("broken.py", "NM902"),
        ("good.py", "NM401"),
        ("latin1.py", "NM902"),
        ("loop.py", "NM902"),
        ("nul.py", "NM902"),
        ("py2.py", "NM901"),
    ]
    assert len(result.errors) == 5
    py2 = next(f for f in result.findings if f.path == "py2.py")
    assert "Python 2" in py2.message and py2.line == 2


def test_coding_cookie_and_bom_are_honoured(tmp_path):
    (tmp_path / "cookie.py").write_bytes(b"# -*- coding: latin-1 -*-\nx = '\xe9'\n" + SYNC.encode())
    (tmp_path / "bom.py").write_bytes(b"\xef\xbb\xbf" + SYNC.encode())
    assert codes(run(tmp_path)) == [("bom.py", "NM401"), ("cookie.py", "NM401")]


def test_huge_file_is_reported_not_read(tmp_path, monkeypatch):
    from neuron_migrate.migrate import sources

    monkeypatch.setattr(sources, "MAX_BYTES", 100)
    (tmp_path / "big.py").write_text(SYNC + "#" * 200 + "\n")
    assert codes(run(tmp_path)) == [("big.py", "NM902")]


def test_prefilter_skips_files_that_cannot_match(tmp_path):
    (tmp_path / "plain.py").write_text("x = 1\n")
    (tmp_path / "sync.py").write_text(SYNC)
    result = run(tmp_path, select=("NM401",))
    assert result.files_skipped_by_prefilter == 1
    assert codes(result) == [("sync.py", "NM401")]


def test_cache_reuses_unchanged_files_and_notices_edits(tmp_path):
    tree, cache = tmp_path / "tree", tmp_path / "cache"
    tree.mkdir()
    (tree / "a.py").write_text(SYNC)
    (tree / "b.py").write_text("x = 1\n")
    first = run(tree, cache_dir=cache)
    second = run(tree, cache_dir=cache)
    assert second.files_from_cache == 2 and codes(second) == codes(first)
    (tree / "b.py").write_text(SYNC)
    third = run(tree, cache_dir=cache)
    assert third.files_from_cache == 1 and codes(third) == [("a.py", "NM401"), ("b.py", "NM401")]


def test_cache_key_includes_the_selection(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.py").write_text(SYNC)
    run(tmp_path / "t", cache_dir=tmp_path / "c")
    assert codes(run(tmp_path / "t", cache_dir=tmp_path / "c", select=("NM9",))) == []


def test_a_scan_served_from_the_cache_imports_neither_libcst_nor_a_rule(tmp_path):
    """Half of a warm run's time was importing libcst and the rules it did not use."""
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.py").write_text(SYNC)
    program = (
        "import sys\nfrom pathlib import Path\n"
        "from neuron_migrate.migrate.scanner import ScanOptions, scan\n"
        f"root, cache = Path({str(tmp_path / 't')!r}), Path({str(tmp_path / 'c')!r})\n"
        "result = scan(ScanOptions(paths=(root,), root=root, jobs=1, cache_dir=cache))\n"
        "print(result.files_from_cache, [f.code for f in result.findings],"
        " sorted(m for m in sys.modules if m == 'libcst' or m.startswith('neuron_migrate.migrate.rules')))\n"
    )

    def fresh_process() -> str:
        done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
        return done.stdout.strip()

    cold = fresh_process()
    assert cold.startswith("0 ['NM401'] ['libcst'")
    assert fresh_process() == "1 ['NM401'] []"


def test_an_unknown_code_is_an_error_whether_or_not_a_cache_exists(tmp_path):
    from neuron_migrate.errors import UsageError

    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.py").write_text(SYNC)
    run(tmp_path / "t", cache_dir=tmp_path / "c")
    for cache_dir in (tmp_path / "c", None):
        with pytest.raises(UsageError, match="no rule code starts with 'NM0'"):
            run(tmp_path / "t", cache_dir=cache_dir, select=("NM0",))


def test_suppressions_on_the_line_and_for_the_file(tmp_path):
    (tmp_path / "line.py").write_text(
        "import torch\ntorch.cuda.synchronize()  # neuron-migrate: ignore[NM401]\n"
        "torch.cuda.synchronize()  # neuron-migrate: ignore[NM1]\n"
        "torch.cuda.synchronize()  # neuron-migrate: ignore\n"
    )
    (tmp_path / "file.py").write_text("# neuron-migrate: ignore-file\n" + SYNC)
    result = run(tmp_path)
    assert [(f.path, f.line) for f in result.findings] == [("line.py", 3)]


def test_include_exclude_and_default_skips(tmp_path):
    for rel in ("src/a.py", "tests/b.py", ".venv/c.py", "node_modules/d.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(SYNC)
    assert codes(run(tmp_path, selection=Selection(exclude=("tests",)))) == [("src/a.py", "NM401")]
    assert codes(run(tmp_path, selection=Selection(include=("tests/*",)))) == [("tests/b.py", "NM401")]


def test_gitignore_is_respected(tmp_path):
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / ".gitignore").write_text("generated/\nskip_me.py\n")
    for rel in ("generated/x.py", "skip_me.py", "keep.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(SYNC)
    assert codes(run(tmp_path)) == [("keep.py", "NM401")]
    assert len(run(tmp_path, selection=Selection(respect_gitignore=False)).findings) == 3


def test_notebook_locations_are_cell_relative(tmp_path):
    notebook = {
        "cells": [
            {"cell_type": "markdown", "source": ["torch.cuda.synchronize()"]},
            {"cell_type": "code", "source": ["import torch\n", "x = 1"], "outputs": []},
            {"cell_type": "code", "source": ["%timeit x\n", "torch.cuda.synchronize()"], "outputs": []},
            {"cell_type": "code", "source": "%%bash\nnvidia-smi\n", "outputs": []},
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (tmp_path / "nb.ipynb").write_text(json.dumps(notebook))
    result = run(tmp_path)
    assert [(f.code, f.cell, f.line) for f in result.findings] == [("NM401", 2, 2)]
    assert result.findings[0].location == "nb.ipynb[cell 2]:2:1"


def test_broken_notebook_is_a_parse_finding(tmp_path):
    (tmp_path / "nb.ipynb").write_text("{not json")
    assert codes(run(tmp_path)) == [("nb.ipynb", "NM901")]


def test_process_pool_gives_the_same_findings(tmp_path):
    for i in range(40):
        (tmp_path / f"m{i}.py").write_text(SYNC if i % 2 else "x = 1\n# cuda\n")
    assert codes(run(tmp_path, jobs=2)) == codes(run(tmp_path, jobs=1))


def test_missing_path_is_a_usage_error(tmp_path):
    from neuron_migrate.errors import UsageError

    with pytest.raises(UsageError, match="no such file"):
        scan(ScanOptions(paths=(tmp_path / "nope",), root=tmp_path))


def test_unknown_rule_prefix_is_a_usage_error(tmp_path):
    from neuron_migrate.errors import UsageError

    with pytest.raises(UsageError, match="NMX"):
        run(tmp_path, select=("NMX",))


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read any file")
def test_unreadable_file(tmp_path):
    path = tmp_path / "secret.py"
    path.write_text(SYNC)
    path.chmod(0)
    assert codes(run(tmp_path)) == [("secret.py", "NM902")]


def test_pool_takes_the_largest_tasks_first_and_returns_results_in_task_order():
    tasks = [(index, index) for index in range(40)]
    seen: list[tuple[int, int]] = []
    results = run_tasks(max, tasks, 2, lambda done, total: seen.append((done, total)), sizes=list(range(40)))
    assert results == list(range(40))
    assert seen[-1] == (40, 40)
    assert submission_order(4, [5, 9, 1, 9]) == [1, 3, 0, 2]
    assert submission_order(3, None) == [0, 1, 2]


def test_a_file_is_analysed_without_the_cycle_collector_and_its_cycles_are_freed_after(monkeypatch):
    """The collector traversed each file's libcst tree again and again while it lived (a tenth of a scan):
    it is off during a file, and the cycles the analysis made are collected as soon as the file is done."""
    import gc
    import weakref

    from neuron_migrate.migrate import file_scan
    from neuron_migrate.migrate.sources import SourceText

    seen = {}

    class Cycle:
        pass

    def analysis(rel, text, codes, style):
        seen["collector on"] = gc.isenabled()
        cycle = Cycle()
        cycle.me = cycle
        seen["cycle"] = weakref.ref(cycle)
        return []

    monkeypatch.setattr(file_scan, "_scan_file", analysis)
    assert file_scan.scan_file("a.py", SourceText("x = 1\n"), ("NM101",)) == []
    assert seen["collector on"] is False and gc.isenabled()
    assert seen["cycle"]() is None
