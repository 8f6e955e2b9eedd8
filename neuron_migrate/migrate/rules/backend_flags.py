"""NM410 / NM411: `torch.backends.cudnn.*` and `torch.backends.cuda.*` switches."""

from __future__ import annotations

import libcst as cst

from neuron_migrate.migrate.patterns import QualifiedNameRule
from neuron_migrate.migrate.rule import FixSpec, Invalid, Replacement


class _BackendFlagRule(QualifiedNameRule):
    """Shared: the actual qualified name (the table holds `….*`) and the assignment a flag is the target of."""

    def on_use(self, node: cst.Name | cst.Attribute, call: cst.Call | None, name: str) -> None:
        super().on_use(node, call, self.ctx.qualified_name(node) or name)

    def assignment(self, node: cst.CSTNode) -> cst.Assign | None:
        """The `flag = value` statement when `node` is its only target (not `a = flag = v`, not a read)."""
        target, assign = self.ctx.parent, self.ctx.ancestor(2)
        if isinstance(target, cst.AssignTarget) and isinstance(assign, cst.Assign) and len(assign.targets) == 1:
            return assign
        return None

    def removal(self, assign: cst.Assign, title: str) -> FixSpec:
        """Delete the assignment; `pass` where it is the block's only statement or shares its line."""
        line, block = self.ctx.ancestor(3), self.ctx.ancestor(4)
        alone = isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1
        only = isinstance(block, cst.IndentedBlock) and len(block.body) == 1
        if alone and not only:
            return FixSpec(title, (Replacement(line, ""),))
        return FixSpec(title, (Replacement(assign, "pass"),))


_CUDNN_SWITCHES = {
    "benchmark": "`torch.backends.cudnn.benchmark` tunes cuDNN kernels only: remove it (the Neuron compiler "
                 "chooses kernels)",
    "deterministic": "`torch.backends.cudnn.deterministic` covers cuDNN only: use "
                     "`torch.use_deterministic_algorithms(...)` for every device",
}
_CUDNN_OTHER = "`{short}` is a cuDNN setting with no effect on Trainium: remove it or keep it for CUDA only"
_CUDNN_QUERY = "`{short}` asks about cuDNN, which Trainium does not have: do not gate device code on it"


class CudnnFlags(_BackendFlagRule):
    """`torch.backends.cudnn.*`: `benchmark`, `deterministic`, `enabled`, `allow_tf32`, `flags()`, ….

    What it does
    Flags every use of `torch.backends.cudnn`: assignments and reads of its switches, and calls such as
    `is_available()`, `version()` and `flags(...)`.

    Why it matters on Trainium
    cuDNN is NVIDIA's library: on a `neuron` device these switches do nothing. `benchmark` autotuning is
    the Neuron compiler's job; determinism for every device is `torch.use_deterministic_algorithms`.

    Example
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.deterministic = True

    Use instead
    torch.use_deterministic_algorithms(True, warn_only=True)

    Fix safety
    Unsafe. Assignments to `benchmark`, `enabled`, `allow_tf32` and the other cuDNN settings are deleted:
    harmless on Trainium and without an accelerator, but on CUDA it changes kernel choice, speed or TF32
    numerics. `deterministic = v` becomes `torch.use_deterministic_algorithms(v, warn_only=True)`, which is
    broader than cuDNN's flag: every op with a deterministic variant uses it (slower; on Trainium it turns
    off Adaptive Eager fusion) and ops without one warn (`warn_only=True`; without it they would raise, and
    cuBLAS would need `CUBLAS_WORKSPACE_CONFIG`). Reads and calls get no fix.
    """

    code = "NM410"
    name = "cudnn-flags"
    message = _CUDNN_OTHER
    severity = "warning"
    fix_safety = "unsafe"
    triggers = (b"cudnn",)
    NAMES = {"torch.backends.cudnn.*": None}
    VALID = (
        "import torch\ntorch.use_deterministic_algorithms(True)\n",
        "import torch\ntorch.backends.mkldnn.enabled = False\n",
    )
    INVALID = (
        Invalid(
            "import torch\ndef setup():\n    torch.backends.cudnn.benchmark = True\n"
            "    torch.backends.cudnn.deterministic = False\n",
            "import torch\ndef setup():\n    torch.use_deterministic_algorithms(False, warn_only=True)\n",
            count=2,
        ),
        Invalid(
            "from torch.backends import cudnn\nif fast:\n    cudnn.benchmark = True\n",
            "if fast:\n    pass\n",
        ),
        Invalid(
            "import torch.backends.cudnn as cudnn\ncudnn.deterministic = args.det\n",
            "import torch\ntorch.use_deterministic_algorithms(args.det, warn_only=True)\n",
        ),
        Invalid("import torch\nprint(torch.backends.cudnn.version(), torch.backends.cudnn.enabled)\n", count=2),
    )

    def message_for(self, name: str) -> str:
        short = name.rsplit(".", 1)[-1]
        if short in ("is_available", "version", "is_acceptable"):
            return _CUDNN_QUERY.format(short=name)
        return _CUDNN_SWITCHES.get(short, _CUDNN_OTHER.format(short=name))

    def fix_for(self, node: cst.CSTNode, call: cst.Call | None, name: str) -> FixSpec | None:
        assign = self.assignment(node) if call is None else None
        if assign is None:
            return None
        if name == "torch.backends.cudnn.deterministic":
            text = f"torch.use_deterministic_algorithms({self.ctx.code(assign.value)}, warn_only=True)"
            return FixSpec("Replace with `torch.use_deterministic_algorithms(..., warn_only=True)`",
                           (Replacement(assign, text),), imports=("torch",))
        return self.removal(assign, f"Remove the `{name}` assignment")


_SDP_ARGS = ("enable_flash", "enable_math", "enable_mem_efficient", "enable_cudnn")
_SDP_BACKENDS = {"enable_flash": "FLASH_ATTENTION", "enable_mem_efficient": "EFFICIENT_ATTENTION",
                 "enable_math": "MATH", "enable_cudnn": "CUDNN_ATTENTION"}  # the order sdp_kernel lists them in
_CUDA_MESSAGES = {
    "torch.backends.cuda.matmul.allow_tf32": "`torch.backends.cuda.matmul.allow_tf32` covers CUDA only: use "
                                             "`torch.set_float32_matmul_precision(\"high\")`",
    "torch.backends.cuda.sdp_kernel": "`torch.backends.cuda.sdp_kernel` is deprecated and CUDA-named: use "
                                      "`torch.nn.attention.sdpa_kernel([...])`",
}
_SDP_TOGGLE = ("`{short}` switches SDPA kernels globally by CUDA's names: drop it on Trainium, or pick kernels "
               "around the call with `torch.nn.attention.sdpa_kernel([...])`")
_CUDA_OTHER = "`{short}` is a CUDA backend setting with no effect on Trainium: remove it or keep it for CUDA only"


class CudaBackendFlags(_BackendFlagRule):
    """`torch.backends.cuda.*`: TF32 matmuls, SDPA kernel switches, `sdp_kernel()`, cuBLAS/cuFFT settings.

    What it does
    Flags every use of `torch.backends.cuda`: `matmul.allow_tf32`, `enable_flash_sdp` and the other SDPA
    kernel toggles, `sdp_kernel(...)`, `preferred_linalg_library`, `cufft_plan_cache`, ….

    Why it matters on Trainium
    They configure CUDA libraries (cuBLAS, cuFFT, CUDA SDPA kernels) and do nothing for a `neuron` device.
    Matmul precision for every device is `torch.set_float32_matmul_precision`; kernel choice for
    `scaled_dot_product_attention` is `torch.nn.attention.sdpa_kernel`.

    Example
    torch.backends.cuda.matmul.allow_tf32 = True
    with torch.backends.cuda.sdp_kernel(enable_math=False):
        out = F.scaled_dot_product_attention(q, k, v)

    Use instead
    torch.set_float32_matmul_precision("high")
    with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.FLASH_ATTENTION, ...]):
        out = F.scaled_dot_product_attention(q, k, v)

    Fix safety
    Safe. `matmul.allow_tf32 = True` becomes `set_float32_matmul_precision("high")` (`False`: `"highest"`),
    which sets the same cuBLAS flag on CUDA and the matching oneDNN matmul precision. It is not offered in a
    file that uses the per-backend `fp32_precision` API: mixing that with the legacy flags makes torch 2.13
    raise ("mix of the legacy and new APIs") when the precision is read. `sdp_kernel(...)` with literal
    arguments becomes `torch.nn.attention.sdpa_kernel([...])` with the backends it enabled, in its order:
    that is what `sdp_kernel` itself calls. The SDPA toggles, reads and other settings get no fix.
    """

    code = "NM411"
    name = "cuda-backend-flags"
    message = _CUDA_OTHER
    severity = "warning"
    fix_safety = "safe"
    triggers = ((b"cuda", b"backends"),)
    NAMES = {"torch.backends.cuda.*": None}
    VALID = (
        "import torch\ntorch.set_float32_matmul_precision('high')\n",
        "import torch\nwith torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):\n    pass\n",
        "import torch\ntorch.backends.cudnn_x = 1\n",
    )
    INVALID = (
        Invalid(
            "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True  # fast\n",
            "import torch\ntorch.set_float32_matmul_precision(\"high\")  # fast\n",
        ),
        Invalid(
            "from torch.backends import cuda\nif exact:\n    cuda.matmul.allow_tf32 = False\n",
            "import torch\nif exact:\n    torch.set_float32_matmul_precision(\"highest\")\n",
        ),
        Invalid(
            "import torch\ntorch.backends.cuda.matmul.allow_tf32 = args.tf32\n",
            "import torch\ntorch.set_float32_matmul_precision(\"high\" if args.tf32 else \"highest\")\n",
        ),
        Invalid(
            "import torch\nwith torch.backends.cuda.sdp_kernel(enable_math=False, enable_mem_efficient=False):\n"
            "    pass\n",
            "import torch\nwith torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.FLASH_ATTENTION, "
            "torch.nn.attention.SDPBackend.CUDNN_ATTENTION]):\n    pass\n",
        ),
        Invalid(
            "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n"
            "torch.backends.cuda.matmul.fp32_precision = 'tf32'\n",
            count=2,
        ),
        Invalid("import torch\ntorch.backends.cuda.enable_flash_sdp(False)\n"),
    )

    def message_for(self, name: str) -> str:
        if name.startswith("torch.backends.cuda.enable_") and name.endswith("_sdp"):
            return _SDP_TOGGLE.format(short=name)
        return _CUDA_MESSAGES.get(name, _CUDA_OTHER.format(short=name))

    def fix_for(self, node: cst.CSTNode, call: cst.Call | None, name: str) -> FixSpec | None:
        if name == "torch.backends.cuda.sdp_kernel" and call is not None:
            return self._sdpa_kernel_fix(call)
        assign = self.assignment(node) if call is None else None
        if name != "torch.backends.cuda.matmul.allow_tf32" or assign is None:
            return None
        if "fp32_precision" in self.ctx.module.code:
            return None
        value = assign.value
        if isinstance(value, cst.Name) and value.value in ("True", "False"):
            precision = '"high"' if value.value == "True" else '"highest"'
        else:
            precision = f'"high" if {self.ctx.code(value)} else "highest"'
        return FixSpec("Replace with `torch.set_float32_matmul_precision(...)`",
                       (Replacement(assign, f"torch.set_float32_matmul_precision({precision})"),), imports=("torch",))

    def _sdpa_kernel_fix(self, call: cst.Call) -> FixSpec | None:
        enabled = dict.fromkeys(_SDP_ARGS, True)
        for index, arg in enumerate(call.args):
            key = arg.keyword.value if arg.keyword is not None else (_SDP_ARGS[index] if index < 4 else None)
            literal = arg.value.value if isinstance(arg.value, cst.Name) else None
            if arg.star or key not in enabled or literal not in ("True", "False"):
                return None
            enabled[key] = literal == "True"
        backends = ", ".join(f"torch.nn.attention.SDPBackend.{_SDP_BACKENDS[k]}" for k in _SDP_BACKENDS if enabled[k])
        return FixSpec("Replace `sdp_kernel(...)` with `torch.nn.attention.sdpa_kernel([...])`",
                       (Replacement(call, f"torch.nn.attention.sdpa_kernel([{backends}])"),), imports=("torch",))
