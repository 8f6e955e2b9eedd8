"""The project's own GPU kernel modules: code that uses what one defines stays CUDA's (`kernel_modules.py`,
`cuda_files.project_kernel`; torchao's float8nocompile tests, review 40)."""

from __future__ import annotations

import pytest

from neuron_migrate.migrate.kernel_modules import kernel_library, module_name

from .helpers import write_tree

TRITON_KERNELS = (
    "import torch\nimport triton\nimport triton.language as tl\n\n\n@triton.jit\ndef _add(x_ptr, n):\n"
    "    pass\n\n\ndef add(x):\n    _add[(1,)](x, x.numel())\n    return x\n"
)


@pytest.mark.parametrize(
    ("source", "library"),
    [
        (TRITON_KERNELS, "triton"),
        ("from numba import cuda\n\n@cuda.jit\ndef k(a):\n    pass\n", "numba.cuda"),
        (
            "import torch\nfrom triton import (\n    autotune,  # tuned\n    jit,\n)\n\n"
            "@jit\ndef k():\n    pass\n",
            "triton",
        ),
        ("import cutlass.cute as cute\n\n\n@cute.kernel\ndef k():\n    pass\n", "cutlass"),
        # imported but not used to define a kernel, or not at the top, or decorated through something else
        ("import triton\n\n\ndef k():\n    pass\n", None),
        (
            "import torch\n\n\ndef f():\n    import triton\n\n    @triton.jit\n    def k():\n        pass\n",
            None,
        ),
        ("import functools\nimport triton\n\n\n@functools.cache\ndef k():\n    pass\n", None),
        ("from .triton import jit\n\n\n@jit\ndef k():\n    pass\n", None),
    ],
)
def test_a_kernel_module_is_told_from_its_text(source, library):
    assert kernel_library(source.encode()) == library


def test_a_module_name_is_its_path_from_the_root():
    assert module_name("pkg/ops/kernels.py") == "pkg.ops.kernels"
    assert module_name("pkg/ops/__init__.py") == "pkg.ops"


USER = (
    "import torch\n\n{import_line}\n\n\ndef run(x):\n    torch.cuda.synchronize()\n    return {call}(x)\n\n\n"
    "def unrelated(x):\n    torch.cuda.synchronize()\n    return x\n"
)


@pytest.mark.parametrize(
    ("path", "import_line", "call"),
    [
        ("pkg/ops.py", "from .kernels import add", "add"),
        ("pkg/sub/ops.py", "from ..kernels import add", "add"),
        ("pkg/ops.py", "from . import kernels", "kernels.add"),
        ("tests/test_ops.py", "from pkg.kernels import add", "add"),
        ("tests/test_ops.py", "import pkg.kernels as k", "k.add"),
    ],
)
def test_code_that_uses_the_projects_own_kernels_keeps_its_cuda_calls(
    tmp_path, run_cli, path, import_line, call
):
    """A function that calls the project's Triton kernels (or a helper of its module that does) serves them:
    its CUDA calls are right until the kernels are ported. The module's other functions keep their fixes."""
    write_tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/sub/__init__.py": "",
            "pkg/kernels.py": TRITON_KERNELS,
            path: USER.format(import_line=import_line, call=call),
        },
    )
    scanned = run_cli("scan", ".", "--no-cache", "--format", "json").stdout
    assert "its function uses `" in scanned and "which defines `triton` kernels" in scanned, scanned
    fixed = run_cli("fix", ".", "--no-cache").stdout
    assert fixed.count("torch.accelerator.synchronize()") == 1, fixed  # `unrelated` only


def test_a_helper_that_calls_the_kernels_makes_its_callers_cuda_s(tmp_path, run_cli):
    write_tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/kernels.py": TRITON_KERNELS,
            "pkg/ops.py": "import torch\n\nfrom pkg.kernels import add\n\n\n"
            "def _helper(x):\n    return add(x)\n\n\n"
            "def run(x):\n    torch.cuda.synchronize()\n    return _helper(x)\n",
        },
    )
    assert "+++ b/pkg/ops.py" not in run_cli("fix", ".", "--no-cache").stdout


def test_the_projects_kernel_modules_are_part_of_the_cache_key(tmp_path, run_cli):
    """Once the kernel module no longer defines kernels (ported), a warm run analyses its users again."""
    write_tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/kernels.py": TRITON_KERNELS,
            "pkg/ops.py": USER.format(import_line="from .kernels import add", call="add"),
        },
    )
    assert "which defines `triton` kernels" in run_cli("scan", ".", "--format", "json").stdout
    write_tree(tmp_path, {"pkg/kernels.py": "import torch\n\n\ndef add(x):\n    return x + x\n"})
    warm = run_cli("scan", ".", "--format", "json").stdout
    assert "which defines `triton` kernels" not in warm, warm
