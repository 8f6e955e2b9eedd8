"""Modules that cannot be imported are not fixed: ColossalAI's `legacy/inference/` imports packages that moved
away (`stale_imports.py`)."""

from __future__ import annotations

from pathlib import Path

from neuron_migrate.migrate.stale_imports import StaleImports

from .helpers import write_tree

CUDA_CODE = "import torch\n\n\ndef f(x):\n    return x.cuda()\n"


def _failing(root: Path) -> dict[str, tuple[str, str, bool]]:
    imports = StaleImports()
    for path in sorted(root.rglob("*.py")):
        imports.read(path, path.read_bytes())
    return {path.relative_to(root).as_posix(): why for path, why in imports.verdicts().items()}


def test_a_module_that_imports_a_missing_package_fails_and_so_do_its_importers(tmp_path):
    write_tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/inference/__init__.py": "",
            "pkg/schedule.py": "from pkg.inference.engine.manager import Manager\n",  # engine/ is gone
            "pkg/legacy/__init__.py": "from .engine import Engine\n",
            "pkg/legacy/engine.py": "import torch\nfrom ..schedule import run\n",
            "pkg/legacy/util.py": "x = 1\n",  # imports nothing itself, but its package's __init__ fails
            "pkg/fine.py": "from pkg.inference import tools\nfrom pkg import legacy_name\n",
        },
    )
    missing = "pkg.inference.engine.manager"
    assert _failing(tmp_path) == {
        "pkg/schedule.py": (missing, missing, False),
        "pkg/legacy/engine.py": ("..schedule", missing, False),
        "pkg/legacy/__init__.py": (".engine", missing, False),
        "pkg/legacy/util.py": ("pkg.legacy", missing, True),
    }


def test_what_the_build_may_write_does_not_count(tmp_path):
    """A missing last component may be setuptools-scm's `_version.py`, a private one an extension not built
    yet (`_C`); the top-level package's `__init__.py` is not followed (were it to fail, all modules would)."""
    write_tree(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg._version import version\nfrom pkg.gen.proto import x\n",
            "pkg/a.py": "from pkg._C import ops\nimport pkg._C.nn\nfrom pkg._ext.ops import g\n",
            "pkg/b.py": "from pkg.ext.fast import f\n",
            "pkg/ext/__init__.py": "",
            "pkg/ext/fast.cpython-311-x86_64-linux-gnu.so": "",
            "other/__init__.py": "",
            "other/c.py": "from pkg.gone.module import y\nimport numpy.gone.module\n",  # not its package
        },
    )
    assert _failing(tmp_path) == {"pkg/__init__.py": ("pkg.gen.proto", "pkg.gen.proto", False)}


def test_a_module_that_cannot_be_imported_keeps_its_findings_but_gets_no_fix(tmp_path, run_cli):
    write_tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/old.py": "from pkg.moved.away import helper\n" + CUDA_CODE,
            "pkg/example.py": '"""Example:\n\nfrom pkg.moved.away import helper\n"""\n' + CUDA_CODE,
        },
    )
    done = run_cli("fix", ".", "--no-cache")
    assert "+++ b/pkg/example.py" in done.stdout and "+++ b/pkg/old.py" not in done.stdout, done.stdout
    scanned = run_cli("scan", "pkg/old.py", "--no-cache").stderr
    assert "NM103" in scanned and "which is not in the project: it fails at import" in scanned, scanned
    # the verdict is part of the cache key: once the package is back, the module is fixed
    run_cli("scan", ".")
    write_tree(tmp_path, {"pkg/moved/__init__.py": "", "pkg/moved/away.py": "def helper():\n    pass\n"})
    assert "+++ b/pkg/old.py" in run_cli("fix", ".").stdout
