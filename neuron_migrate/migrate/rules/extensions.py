"""NM702 / NM704: custom GPU kernels: CUDA C++ extensions built through PyTorch, and Triton kernels."""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from neuron_migrate.migrate.conditions import uses
from neuron_migrate.migrate.cuda_files import CPP_EXTENSION, builds_cuda
from neuron_migrate.migrate.lexicon import Lexicon
from neuron_migrate.migrate.patterns import QualifiedNameRule
from neuron_migrate.migrate.rule import Invalid, Rule

_NKI = (
    "port its kernels to PyTorch ops or an NKI kernel (`@nki.jit`, registered with `torch_neuronx`'s "
    "`nki_op`)"
)
_TRITON_DECORATORS = {
    "triton.jit",
    "triton.autotune",
    "triton.heuristics",
    "triton.runtime.jit",
    "triton.runtime.autotune",
    "triton.runtime.heuristics",
    "triton.runtime.jit.jit",
    "triton.runtime.autotuner.autotune",
    "triton.runtime.autotuner.heuristics",
}
_USES_TRITON_DECORATOR = uses(_TRITON_DECORATORS)


class CudaExtension(QualifiedNameRule):
    """A CUDA C++ extension built with `torch.utils.cpp_extension`.

    What it does
    Flags `CUDAExtension(...)` (in `setup.py`), and `cpp_extension.load(...)` / `load_inline(...)` calls that
    compile CUDA: `.cu` sources, `cuda_sources=`, `with_cuda=True` or `extra_cuda_cflags=`.

    Why it matters on Trainium
    The build needs the CUDA toolkit and its kernels run only on NVIDIA GPUs. On Trainium the extension does
    not build, or it imports but has no `neuron` kernels.

    Example
    CUDAExtension("fused_op", ["csrc/fused_op.cpp", "csrc/fused_op_kernel.cu"])

    Use instead
    The same computation as PyTorch ops, or an NKI kernel registered as a custom op; build the CUDA
    extension only when CUDA is present.

    Fix safety
    No automatic fix: porting a kernel is manual work.
    """

    code = "NM702"
    name = "cuda-extension"
    message = f"CUDA extension: {_NKI}; build it only on CUDA machines"
    severity = "error"
    effort = "custom-kernel"
    builds_kernels = True
    cuda_library = True
    triggers = (b"cpp_extension", b"CUDAExtension")
    names_only = True
    NAMES: ClassVar[dict[str, str | None]] = {
        f"{CPP_EXTENSION}.{n}": None for n in ("CUDAExtension", "load", "load_inline")
    }
    VALID = (
        "from torch.utils.cpp_extension import CppExtension\next = CppExtension('op', ['op.cpp'])\n",
        "from torch.utils import cpp_extension\nop = cpp_extension.load('op', sources=['op.cpp'])\n",
        "from torch.utils.cpp_extension import load_inline\n"
        "op = load_inline('op', cpp_src, cuda_sources=None)\n",
        "import json\ncfg = json.load(open('CUDAExtension.json'))\n",
    )
    INVALID = (
        Invalid(
            "from torch.utils.cpp_extension import CUDAExtension, BuildExtension\n"
            "ext = CUDAExtension('op', ['op.cpp', 'op_kernel.cu'])\n",
        ),
        Invalid(
            "from torch.utils import cpp_extension\n"
            "op = cpp_extension.load('op', ['op.cpp', os.path.join(root, 'kernel.cu')])\n",
        ),
        Invalid(
            "import torch.utils.cpp_extension as ext\nop = ext.load('op', srcs, with_cuda=True)\n",
        ),
        Invalid(
            "from torch.utils.cpp_extension import load_inline\nop = load_inline('op', cpp_src, cuda_src)\n",
        ),
        Invalid(
            "import torch\ndef build():\n"
            "    return torch.utils.cpp_extension.load_inline(name='op', cpp_sources=cpp, "
            "cuda_sources=[cu])\n",
        ),
        Invalid(
            "from torch.utils.cpp_extension import CUDAExtension, CppExtension\n"
            "Ext = CUDAExtension if use_cuda else CppExtension\n",
        ),
    )

    def on_use(self, node: cst.Name | cst.Attribute, call: cst.Call | None, name: str) -> None:
        short = name.rsplit(".", 1)[-1]
        if short == "CUDAExtension" or (call is not None and builds_cuda(call, short)):
            self.report(call or node)


class TritonKernel(Rule):
    """A Triton kernel.

    What it does
    Flags functions decorated with `@triton.jit`, `@triton.autotune(...)` or `@triton.heuristics(...)`,
    however `triton` was imported. One finding per kernel, on its `def`.

    Why it matters on Trainium
    Triton compiles for NVIDIA (and AMD) GPUs; there is no Triton backend for NeuronCores, so the kernel and
    the launches of it cannot run.

    Example
    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        ...

    Use instead
    The same computation as PyTorch ops (often `torch.compile` fuses it well), or an NKI kernel
    (`@nki.jit`) registered with `torch_neuronx`'s `nki_op`.

    Fix safety
    No automatic fix: porting a kernel is manual work.
    """

    code = "NM704"
    name = "triton-kernel"
    message = (
        "Triton kernel: rewrite it as PyTorch ops or an NKI kernel (`@nki.jit` with "
        "`torch_neuronx`'s `nki_op`)"
    )
    severity = "error"
    effort = "custom-kernel"
    cuda_library = True
    triggers = (b"triton",)
    VALID = (
        "import torch\n@torch.jit.script\ndef f(x):\n    return x\n",
        "import numba\n@numba.jit\ndef g(x):\n    return x\n",
        "from triton.testing import do_bench\n@do_bench\ndef h():\n    pass\n",
    )
    INVALID = (
        Invalid(
            "import triton\nimport triton.language as tl\n@triton.jit\ndef k(x_ptr, BLOCK: tl.constexpr):\n"
            "    pass\n",
        ),
        Invalid(
            "import triton as tt\n@tt.autotune(configs=[], key=['n'])\n@tt.jit\ndef k(x_ptr, n):\n    pass\n",
        ),
        Invalid(
            "from triton import jit, heuristics\n@heuristics({'EVEN': lambda a: a['n'] % 2 == 0})\n@jit\n"
            "def k(x_ptr, n):\n    pass\n",
        ),
        Invalid(
            "class Ops:\n    from triton import jit\n    @staticmethod\n    @jit\n    def k(x_ptr):\n"
            "        pass\n",
        ),
    )

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """A use of a Triton kernel decorator."""
        return _USES_TRITON_DECORATOR(lex)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        for decorator in node.decorators:
            target = decorator.decorator
            name = self.ctx.qualified_name(target.func if isinstance(target, cst.Call) else target)
            if name in _TRITON_DECORATORS:
                self.report(node)
                return
