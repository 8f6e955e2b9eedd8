"""benchmarks/fix_quality.py end to end: a crashing fix is bisected to its files, ruff deltas are counted,
the original tree is never written, and the real CLI's numbers reach the table and the JSON record."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

from benchmarks import fix_quality
from benchmarks.fixq.bench import Target, bench_tree
from benchmarks.fixq.changes import FilePair
from benchmarks.fixq.lint import lint_deltas

# Stands in for `neuron-migrate fix`: rewrites 'cuda' to 'DEV'; a file saying CRASH kills the whole run,
# one saying FAIL is reported the way the CLI reports a fix that raised.
FAKE_FIX = """
import sys
from pathlib import Path
targets = [a for a in sys.argv[1:] if not a.startswith("--") and a != "."]
files = [f for t in map(Path, targets) for f in ([t] if t.is_file() else sorted(t.rglob("*.py")))]
changed = sites = 0
for f in files:
    text = f.read_text()
    if "CRASH" in text:
        sys.exit(3)
    if "FAIL" in text:
        print(f"{f}: not fixed: fix failed: RuntimeError: boom", file=sys.stderr)
        continue
    if "cuda" in text:
        f.write_text(text.replace("cuda", "DEV"))
        changed, sites = changed + 1, sites + text.count("cuda")
print(f"{changed} files changed, {sites} findings fixed, 0 left for a person.", file=sys.stderr)
sys.exit(1)
"""


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return root


def test_a_crashing_file_is_isolated_and_the_rest_is_still_measured(tmp_path):
    pkg = _tree(
        tmp_path / "src" / "pkg",
        {f"m{i}.py": f"x{i} = torch.device('cuda')\n" for i in range(7)}
        | {"sub/bad.py": "# CRASH\nx = 'cuda'\n", "sub/fails.py": "# FAIL\n"},
    )
    originals = {p: p.read_bytes() for p in pkg.rglob("*.py")}
    fake = tmp_path / "fake_fix.py"
    fake.write_text(FAKE_FIX)
    result = bench_tree(
        Target("pkg", pkg, pkg), unsafe=False, examples=3, command=[sys.executable, str(fake)]
    )
    assert {p: p.read_bytes() for p in pkg.rglob("*.py")} == originals
    assert sorted(rel for rel, _ in result.run.crashes) == ["pkg/sub/bad.py", "pkg/sub/fails.py"]
    assert result.tallies["crashes"].count == 2
    assert result.tallies["files_changed"].count == 7
    assert result.tallies["rewritten_sites"].count == 7
    assert result.run.invocations > 2


def test_ruff_deltas_count_new_findings_and_format_regressions(tmp_path):
    # `import torch` glued to the stdlib group (I001) and left unused (F401); F821 (torch undefined) goes away
    before = "import os\n\nprint(os.sep)\nx = torch.cuda.is_available()\n"
    after = "import os\nimport torch\n\nprint(os.sep)\nx = is_available(  )\n"
    unformatted = "x = [1,2]\n"
    pairs = [
        FilePair("pkg/a.py", before, after, 88),
        FilePair("pkg/b.py", unformatted, unformatted + "y = 'cuda'\n", 88),
    ]
    for side, index in (("before", 1), ("after", 2)):
        for pair in pairs:
            path = tmp_path / side / pair.rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text((pair.before, pair.after)[index - 1])
    findings, formats = lint_deltas(tmp_path / "before", tmp_path / "after", pairs, examples=3)
    assert findings.count == 3  # I001, F401, and F821 for the bare is_available
    assert sorted(e.text[:4] for e in findings.examples) == ["F401", "F821", "I001"]
    assert formats.count == 1 and formats.examples[0].line == 5  # b.py failed before too


def test_a_finding_that_only_moved_is_not_new(tmp_path):
    before = "import torch\nimport torch\n\nx = torch.cuda.is_available()\n"
    after = '"""Doc."""\n\nimport torch\nimport torch\n\nx = torch.accelerator.is_available()\n'
    for side, text in (("before", before), ("after", after)):
        (tmp_path / side / "pkg").mkdir(parents=True)
        (tmp_path / side / "pkg" / "a.py").write_text(text)
    pair = FilePair("pkg/a.py", before, after, 88)
    findings, _ = lint_deltas(tmp_path / "before", tmp_path / "after", [pair], examples=3)
    assert findings.count == 0  # F811 "redefinition of unused `torch` from line 1", then "from line 3"


def test_the_real_cli_end_to_end(tmp_path, capsys):
    project = _tree(
        tmp_path / "proj",
        {
            "pyproject.toml": "[tool.ruff]\nline-length = 60\n",
            "train.py": """\
            import torch


            def step(model, x):
                x = x.cuda()
                model = model.cuda()
                torch.cuda.synchronize()
                return model(x)
            """,
            "clean.py": "def add(a, b):\n    return a + b\n",
        },
    )
    out = tmp_path / "record.json"
    assert fix_quality.main(["--packages", str(project), "--json", str(out), "--examples", "2"]) == 0
    data = json.loads(out.read_text())
    metrics = data["packages"]["proj"]["metrics"]
    assert metrics["rewritten_sites"]["count"] >= 3
    assert metrics["files_changed"]["count"] == 1
    assert metrics["broken_by_fix"]["count"] == 0
    assert data["total"]["files"] == 2
    printed = capsys.readouterr().out
    assert "rewritten sites" in printed and "proj" in printed
    assert "torch.cuda.synchronize()" in (project / "train.py").read_text()
    compared = tmp_path / "again.json"
    fix_quality.main(["--packages", str(project), "--json", str(compared), "--compare", str(out)])
    assert "→" in capsys.readouterr().out


def test_the_copy_keeps_the_projects_configuration(tmp_path):
    """`fix` runs on a copy: without the project's `pyproject.toml` there it wrapped at 88 while the
    measurement read the project's limit, and reported its own lines as too long and as ruff-format
    regressions."""
    from benchmarks.fixq.runner import copy_sources

    project = _tree(
        tmp_path / "proj",
        {"pyproject.toml": "[tool.ruff]\nline-length = 60\n", "pkg/setup.cfg": "", "pkg/a.py": "x = 1\n"},
    )
    rels = copy_sources(project, tmp_path / "copy")
    assert rels == ["proj/pkg/a.py"]
    assert (tmp_path / "copy" / "proj" / "pyproject.toml").read_text() == "[tool.ruff]\nline-length = 60\n"
    assert (tmp_path / "copy" / "proj" / "pkg" / "setup.cfg").is_file()
