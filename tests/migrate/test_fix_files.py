"""`fix` on files: diff by default, --write, --patch for git apply, byte-level preservation, refusals."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from neuron_migrate.migrate.cautions import MEMORY_ON_MPS_FROM
from neuron_migrate.migrate.file_scan import scan_file
from neuron_migrate.migrate.fix_files import fix_file, write_fixed
from neuron_migrate.migrate.fixes import FixStyle
from neuron_migrate.migrate.rule import load_rules
from neuron_migrate.migrate.sources import SourceFile, SourceText

SYNC = "import torch\ntorch.cuda.synchronize()\n"
FIXED = "import torch\nif torch.accelerator.is_available():\n    torch.accelerator.synchronize()\n"
ALL = tuple(load_rules())


def fix_bytes(tmp_path: Path, data: bytes, name: str = "a.py") -> bytes | None:
    path = tmp_path / name
    path.write_bytes(data)
    return fix_file(SourceFile(path, name), ALL, FixStyle()).new


def test_diff_by_default_writes_nothing_and_exits_1(run_cli, tmp_path):
    (tmp_path / "a.py").write_text(SYNC)
    proc = run_cli("fix", ".")
    assert proc.returncode == 1
    assert (
        "-torch.cuda.synchronize()" in proc.stdout and "+    torch.accelerator.synchronize()" in proc.stdout
    )
    assert (tmp_path / "a.py").read_text() == SYNC


def test_write_applies_and_second_run_is_clean(run_cli, tmp_path):
    (tmp_path / "a.py").write_text(SYNC)
    assert run_cli("fix", ".", "--write").returncode == 0
    assert (tmp_path / "a.py").read_text() == FIXED
    again = run_cli("fix", ".")
    assert again.returncode == 0 and again.stdout == ""


def test_manual_findings_keep_exit_1_and_are_listed(run_cli, tmp_path):
    (tmp_path / "a.py").write_text("import triton\n")
    proc = run_cli("fix", ".", "--write")
    if "NM701" in proc.stderr:  # the library rule is present
        assert proc.returncode == 1 and "Left for a person" in proc.stderr
        assert run_cli("fix", ".", "--write", "--exit-zero").returncode == 0


def test_patch_is_taken_by_git_apply(run_cli, tmp_path):
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(SYNC)
    proc = run_cli("fix", ".", "--patch", "changes.patch")
    assert (tmp_path / "pkg" / "a.py").read_text() == SYNC
    assert "the patch is in changes.patch" in proc.stderr and "rerun with" not in proc.stderr
    patch = (tmp_path / "changes.patch").read_text()
    assert patch.startswith("--- a/pkg/a.py\n+++ b/pkg/a.py\n"), proc.stderr
    subprocess.run(["git", "apply", "changes.patch"], cwd=tmp_path, check=True)
    assert (tmp_path / "pkg" / "a.py").read_text() == FIXED


def test_a_patch_path_in_a_missing_folder_is_one_error_naming_the_option(run_cli, tmp_path):
    (tmp_path / "a.py").write_text(SYNC)
    proc = run_cli("fix", ".", "--patch", "no/such/dir/changes.patch")
    assert proc.returncode == 2 and (tmp_path / "a.py").read_text() == SYNC
    assert proc.stderr.strip().startswith("neuron-migrate: error: --patch no/such/dir/changes.patch: folder")
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_crlf_bom_and_missing_final_newline_are_kept(tmp_path):
    data = b"\xef\xbb\xbfimport torch\r\ntorch.cuda.synchronize()"
    new = fix_bytes(tmp_path, data)
    assert new == (
        b"\xef\xbb\xbfimport torch\r\nif torch.accelerator.is_available():\r\n"
        b"    torch.accelerator.synchronize()"
    )


def test_declared_encoding_is_kept(tmp_path):
    data = "# -*- coding: latin-1 -*-\nname = 'caf\xe9'\n".encode("latin-1") + SYNC.encode()
    new = fix_bytes(tmp_path, data)
    assert new is not None and b"caf\xe9" in new and b"torch.accelerator.synchronize()" in new


def test_tabs_indentation_is_kept(tmp_path):
    data = b"import torch\ndef f():\n\tx = 1\n\ttorch.cuda.synchronize()\n"
    assert fix_bytes(tmp_path, data) == (
        b"import torch\ndef f():\n\tx = 1\n\tif torch.accelerator.is_available():\n"
        b"\t\ttorch.accelerator.synchronize()\n"
    )


def test_file_changed_since_read_is_refused(tmp_path):
    path = tmp_path / "a.py"
    path.write_text(SYNC)
    fix = fix_file(SourceFile(path, "a.py"), ALL, FixStyle())
    path.write_text(SYNC + "# edited meanwhile\n")
    assert "changed on disk" in write_fixed(fix)
    assert path.read_text() == SYNC + "# edited meanwhile\n"


def test_permissions_are_kept(tmp_path):
    path = tmp_path / "a.py"
    path.write_text(SYNC)
    path.chmod(0o750)
    assert write_fixed(fix_file(SourceFile(path, "a.py"), ALL, FixStyle())) is None
    assert path.stat().st_mode & 0o777 == 0o750 and path.read_text() == FIXED


def test_unparsable_file_is_left_alone(run_cli, tmp_path):
    (tmp_path / "bad.py").write_text("import torch\ntorch.cuda.synchronize(\n")
    (tmp_path / "good.py").write_text(SYNC)
    proc = run_cli("fix", ".", "--write")
    assert (tmp_path / "bad.py").read_text() == "import torch\ntorch.cuda.synchronize(\n"
    assert (tmp_path / "good.py").read_text() == FIXED
    assert proc.returncode == 1 and "NM901" in proc.stderr


def test_notebook_cells_are_fixed_and_outputs_kept(run_cli, tmp_path):
    notebook = {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": 1,
                "metadata": {},
                "outputs": [{"name": "stdout", "output_type": "stream", "text": ["ok\n"]}],
                "source": ["import torch\n", "print('ok')"],
            },
            {
                "cell_type": "code",
                "execution_count": 2,
                "metadata": {},
                "outputs": [],
                "source": ["torch.cuda.synchronize()\n", "y = 2"],
            },
            {
                "cell_type": "code",
                "execution_count": 3,
                "metadata": {},
                "outputs": [],
                "source": ["%timeit torch.cuda.synchronize()"],
            },
        ],
        "metadata": {"kernelspec": {"name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    text = json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"
    (tmp_path / "nb.ipynb").write_text(text)
    assert run_cli("fix", ".", "--write").returncode in (0, 1)
    after = json.loads((tmp_path / "nb.ipynb").read_text())
    assert after["cells"][1]["source"] == [
        "if torch.accelerator.is_available():\n",
        "    torch.accelerator.synchronize()\n",
        "y = 2",
    ]
    assert after["cells"][0] == notebook["cells"][0] and after["cells"][2] == notebook["cells"][2]
    assert after["metadata"] == notebook["metadata"]
    raw = (tmp_path / "nb.ipynb").read_text()
    assert raw.endswith("}\n") and raw.startswith('{\n "cells"')


def test_unsafe_fixes_need_the_flag(tmp_path):
    from neuron_migrate.migrate.fixer import fix_text
    from neuron_migrate.model import Edit, Finding, Fix

    finding = Finding(
        "NM999",
        "warning",
        "device",
        "a.py",
        1,
        0,
        1,
        1,
        "m",
        fix=Fix("t", "unsafe", (Edit(1, 0, 1, 1, "y"),)),
    )
    assert fix_text("x\n", [finding]).text == "x\n"
    assert fix_text("x\n", [finding], unsafe=True).text == "y\n"


def test_deleted_statements_leave_no_blank_or_indented_lines():
    from neuron_migrate.migrate.edits import apply_edits
    from neuron_migrate.model import Edit

    text = "def f():\n    a = 1\n    b = 2  # why\n    c = 3\n"
    assert apply_edits(text, [Edit(2, 4, 2, 9, "")]) == "def f():\n    b = 2  # why\n    c = 3\n"
    assert apply_edits(text, [Edit(3, 4, 3, 9, "")]) == "def f():\n    a = 1\n    # why\n    c = 3\n"
    assert apply_edits(text, [Edit(2, 4, 3, 0, "")]) == "def f():\n    b = 2  # why\n    c = 3\n"
    assert apply_edits("x = 1\ny = 2", [Edit(2, 0, 2, 5, "")]) == "x = 1\n"
    assert apply_edits("f(a, b)\n", [Edit(1, 2, 1, 5, "")]) == "f(b)\n"  # not a whole line: only the span


def test_statements_guarded_one_after_another_share_one_guard():
    from neuron_migrate.migrate.fixer import fix_text
    from tests.migrate.helpers import findings

    source = (
        "import torch\ndef f(a):\n    torch.cuda.empty_cache()\n    torch.cuda.synchronize()\n"
        "    if a:\n        torch.cuda.synchronize()\n    torch.cuda.synchronize()  # why\n"
        "    torch.cuda.synchronize()\n"
    )
    after = fix_text(source, findings(source, ("NM401", "NM402"), target_torch=MEMORY_ON_MPS_FROM)).text
    assert after == (
        "import torch\ndef f(a):\n    if torch.accelerator.is_available():\n"
        "        torch.accelerator.empty_cache()\n"
        "        torch.accelerator.synchronize()\n    if a:\n        if torch.accelerator.is_available():\n"
        "            torch.accelerator.synchronize()\n"
        "    if torch.accelerator.is_available():\n        torch.accelerator.synchronize()  # why\n"
        "    if torch.accelerator.is_available():\n        torch.accelerator.synchronize()\n"
    )


def test_notebook_cells_with_ipython_magics_are_fixed_around_them(run_cli, tmp_path):
    """Magic and shell lines are not Python: they are masked while the cell is fixed and come back unchanged;
    a `%%` cell magic is skipped, and the run says so."""
    cells = [
        [
            "!pip install -q torch\n",
            "import torch\n",
            "%matplotlib inline\n",
            "x = torch.ones(2).cuda()\n",
            "files = !ls\n",
            "if x.sum() > 0:\n",
            "    %time torch.cuda.synchronize()\n",
            "    y = 1",
        ],
        ["%%bash\n", "nvidia-smi"],
    ]
    write_notebook(tmp_path / "nb.ipynb", cells)
    proc = run_cli("fix", ".", "--write")
    after = json.loads((tmp_path / "nb.ipynb").read_text())
    first = after["cells"][0]["source"]
    assert (
        first[:3] == cells[0][:3]
        and "files = !ls\n" in first
        and "    %time torch.cuda.synchronize()\n" in first
    )
    assert "x = torch.ones(2).to(device)\n" in first, first
    assert after["cells"][1]["source"] == cells[1]
    assert "cell 2: a `%%` cell magic, not Python" in proc.stderr


def test_target_torch_decides_which_apis_a_fix_may_write(run_cli, tmp_path):
    """`torch.accelerator.get_memory_info` came after torch 2.9: written only for a newer `target-torch`."""
    source = "import torch\nfree, total = torch.cuda.mem_get_info()\n"
    (tmp_path / "a.py").write_text(source)
    proc = run_cli("fix", "a.py", "--write", "--no-cache")
    assert (tmp_path / "a.py").read_text() == source and "needs torch >= 2.13" in proc.stderr
    (tmp_path / "pyproject.toml").write_text('[tool.neuron-migrate]\ntarget-torch = "2.13"\n')
    run_cli("fix", "a.py", "--write", "--no-cache")
    assert (
        tmp_path / "a.py"
    ).read_text() == "import torch\nfree, total = torch.accelerator.get_memory_info()\n"
    (tmp_path / "pyproject.toml").write_text('[tool.neuron-migrate]\ntarget-torch = "2.1"\n')
    bad = run_cli("fix", "a.py", "--no-cache")
    assert bad.returncode == 2 and "target-torch '2.1'" in bad.stderr and "Traceback" not in bad.stderr


def test_findings_another_fix_takes_along_count_as_fixed_and_nothing_is_lost(tmp_path):
    # NM106's own fix overlaps NM105's, which replaces the whole choice; the CUDA seed after
    # `torch.manual_seed` and the check around it are notes. Every finding is either applied or left, none
    # vanishes from the count.
    source = (
        "import torch\n"
        'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n'
        "torch.manual_seed(0)\n"
        "if torch.cuda.is_available():\n"
        "    torch.cuda.manual_seed_all(0)\n"
        "import triton\n"
    )
    path = tmp_path / "a.py"
    path.write_text(source)
    result = fix_file(SourceFile(path, "a.py"), ALL, FixStyle())
    found = scan_file("a.py", SourceText(source), ALL, FixStyle())
    assert result.new is not None
    assert len(result.applied) + len(result.left) == len(found), (
        [f.code for f in found],
        [f.code for f in result.applied],
        [f.code for f, _ in result.left],
    )
    assert sorted(f.code for f, _ in result.left) == ["NM106", "NM404", "NM701"]


def test_notebook_cells_reuse_the_device_an_earlier_cell_binds(run_cli, tmp_path):
    """Cells run in order in one namespace: a later cell's fix names the `device` an earlier one binds (as
    `scan` proposes on the notebook as one module), and positions stay cell-relative."""
    cells = [
        ["%matplotlib inline\n", "import torch\n", 'device = torch.device("cuda")\n'],
        ["x = torch.ones(2)\n", "x = x.cuda()\n", "torch.cuda.synchronize()"],
        ["print(x.is_cuda)"],
    ]
    write_notebook(tmp_path / "nb.ipynb", cells)
    proc = run_cli("fix", ".", "--write")
    after = [cell["source"] for cell in json.loads((tmp_path / "nb.ipynb").read_text())["cells"]]
    assert after[0][0] == "%matplotlib inline\n" and "x = x.to(device)\n" in after[1], after
    assert "nb.ipynb[cell 3]:1:7 NM104" in proc.stderr, proc.stderr
    assert "3 findings fixed" in proc.stderr, proc.stderr


def write_notebook(path: Path, cells: list[list[str]]) -> None:
    """A notebook of code cells with these sources, written as Jupyter does (indent 1)."""
    notebook = {
        "cells": [
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": cell}
            for cell in cells
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(notebook, indent=1) + "\n")


def test_an_edit_inside_code_an_accepted_edit_keeps_verbatim_is_applied_within_it():
    """`nested`: the outer edit's text is the source of one stretch of what it replaces; an edit inside that
    stretch goes into it. An edit the outer one does not keep (it rewrites that code) still overlaps."""
    from neuron_migrate.migrate.edits import nested
    from neuron_migrate.model import Edit

    text = "with torch.cuda.stream(torch.cuda.Stream()):\n    pass\n"
    outer = Edit(1, 5, 1, 43, "torch.cuda.Stream()")
    inner = Edit(1, 23, 1, 40, "torch.Stream")
    assert nested(text, [outer], [inner]) == [Edit(1, 5, 1, 43, "torch.Stream()")]
    rewritten = Edit(1, 5, 1, 43, "s")  # not a stretch of the source: the inner edit would be lost
    assert nested(text, [rewritten], [inner]) is None


GENERATED = (
    '"""Distributed training helpers."""\n\n'
    "# AUTOGENERATED! DO NOT EDIT! File to edit: ../nbs/20a_distributed.ipynb.\n\n"
    "import torch\n\n\ndef setup_distrib(gpu):\n    torch.cuda.synchronize()\n"
)


def test_a_generated_file_is_left_to_its_generator_and_says_so(run_cli, tmp_path):
    """fastai's modules are exported from notebooks (nbdev): an edit there is lost at the next export, so
    `fix` lists the file's findings for a person, says where it comes from, and exits 1; `scan` reports it
    as usual, and --include-generated fixes it anyway."""
    (tmp_path / "distributed.py").write_text(GENERATED)
    proc = run_cli("fix", ".", "--write")
    assert proc.returncode == 1 and (tmp_path / "distributed.py").read_text() == GENERATED
    assert (
        "distributed.py: skipped a generated file (# AUTOGENERATED! DO NOT EDIT! File to edit:" in proc.stderr
    )
    assert "NM401" in proc.stderr and "in a generated file: change what generates it" in proc.stderr
    scanned = run_cli("scan", ".")
    assert "NM401" in scanned.stdout + scanned.stderr
    assert run_cli("fix", ".", "--write", "--include-generated").returncode == 0
    assert "torch.accelerator.synchronize()" in (tmp_path / "distributed.py").read_text()


def test_only_a_header_marks_a_file_generated():
    """torch's schema check mentions `@generated` in its code, and an ONNX pass has a `DO NOT EDIT` comment
    above one table: neither file is generated."""
    from neuron_migrate.migrate.generated import generated_marker

    assert (
        generated_marker('"""Tables.\n\n@generated by tools/gen.py\n"""\nx = 1\n')
        == "@generated by tools/gen.py"
    )
    assert generated_marker("# Generated by the protocol buffer compiler.  DO NOT EDIT!\nimport x\n")
    assert generated_marker('import x\n\nMARK = "// @generated"\n# DO NOT EDIT MANUALLY\n') is None


def test_a_memory_function_is_a_safe_fix_only_for_a_project_on_torch_2_13_or_newer():
    """`torch.accelerator.empty_cache()` & co raise on MPS before torch 2.13 (pytorch#186430: its
    allocator was no `c10::DeviceAllocator`), behind `is_available()` too, where `torch.cuda.empty_cache()`
    did nothing on a Mac (mace, nequip, anomalib; review 37, class b)."""
    from neuron_migrate.migrate.cautions import MEMORY_ON_MPS_FROM
    from tests.migrate.helpers import findings

    source = (
        "import torch\ndef tidy():\n    torch.cuda.empty_cache()\n    return torch.cuda.memory_allocated()\n"
    )
    older = findings(source, ("NM402", "NM403"), target_torch=(2, 12))
    assert [f.fix.safety for f in older] == ["unsafe", "unsafe"]
    assert all("raises on MPS" in f.message and "torch 2.12" in f.message for f in older), older[0].message
    newer = findings(source, ("NM402", "NM403"), target_torch=MEMORY_ON_MPS_FROM)
    assert [f.fix.safety for f in newer] == ["safe", "safe"]


def test_a_computed_autocast_device_is_a_safe_fix_only_for_a_project_on_torch_2_5_or_newer():
    """Before torch 2.5 there is no MPS autocast, and `torch.autocast("mps", enabled=False)` raises
    (transformers#29431, torch 2.2 and 2.3), where `autocast("cuda")` only warned on a Mac: vector-quantize-
    pytorch declares torch 2.4 (review 38, class b)."""
    from neuron_migrate.migrate.cautions import AUTOCAST_ON_MPS_FROM
    from tests.migrate.helpers import findings

    source = (
        "import torch\n\n\ndef quantize(x: torch.Tensor) -> torch.Tensor:\n"
        "    with torch.autocast('cuda', enabled=False):\n        return x.float()\n"
    )
    (older,) = findings(source, ("NM204",), target_torch=(2, 4))
    assert older.fix.safety == "unsafe" and "before torch 2.5 an autocast raises for an MPS device" in (
        older.message
    )
    (newer,) = findings(source, ("NM204",), target_torch=AUTOCAST_ON_MPS_FROM)
    assert newer.fix.safety == "safe"
