"""NM410 / NM411: `torch.backends.cudnn.*` and `torch.backends.cuda.*` switches."""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from neuron_migrate.migrate.patterns import QualifiedNameRule
from neuron_migrate.migrate.rule import Invalid


class _BackendFlagRule(QualifiedNameRule):
    """Shared: the actual qualified name (the table holds `….*`). The switches work on every device (they are
    plain Python flags, read only by CUDA libraries), so the findings say what Trainium does, without an edit:
    removing or replacing them could only change what happens on CUDA."""

    severity = "info"
    fix_safety = "none"
    cuda_only = False
    inert_off_cuda = True

    def on_use(self, node: cst.Name | cst.Attribute, call: cst.Call | None, name: str) -> None:
        self.report(call or node, self.message_for(self.ctx.qualified_name(node) or name))


_CUDNN_SWITCHES = {
    "benchmark": "`torch.backends.cudnn.benchmark` tunes cuDNN kernels on CUDA and does nothing on Trainium "
    "(the Neuron compiler chooses kernels): no change needed",
    "deterministic": "`torch.backends.cudnn.deterministic` covers cuDNN only: on Trainium use "
    "`torch.use_deterministic_algorithms(True)` if you need determinism there (no change needed "
    "for CUDA)",
}
_CUDNN_OTHER = "`{short}` is a cuDNN setting: harmless on Trainium, where it does nothing; no change needed"
_CUDNN_QUERY = "`{short}` asks about cuDNN, which Trainium does not have: do not gate device code on it"


class CudnnFlags(_BackendFlagRule):
    """`torch.backends.cudnn.*`: `benchmark`, `deterministic`, `enabled`, `allow_tf32`, `flags()`, ….

    What it does
    Reports every use of `torch.backends.cudnn`: assignments and reads of its switches, and calls such as
    `is_available()`, `version()` and `flags(...)`.

    Why it matters on Trainium
    cuDNN is NVIDIA's library: on a `neuron` device these switches do nothing (and setting them is harmless).
    `benchmark` autotuning is the Neuron compiler's job; determinism for every device is
    `torch.use_deterministic_algorithms`, which on Trainium also turns off Adaptive Eager fusion. Gating code
    on `cudnn.is_available()` or `cudnn.version()` takes the non-CUDA path there.

    Example
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.deterministic = True

    Use instead
    torch.backends.cudnn.benchmark = True  # kept: tunes CUDA, ignored on Trainium
    torch.use_deterministic_algorithms(True)  # only where determinism on Trainium matters

    Fix safety
    No automatic fix, on purpose: the switches work everywhere, and removing or replacing them could only
    change CUDA runs (lost autotuning, TF32 numerics, a global `use_deterministic_algorithms` that makes
    non-deterministic ops raise). The finding is information.
    """

    code = "NM410"
    name = "cudnn-flags"
    message = _CUDNN_OTHER
    triggers = (b"cudnn",)
    names_only = True
    NAMES: ClassVar[dict[str, str | None]] = {"torch.backends.cudnn.*": None}
    VALID = (
        "import torch\ntorch.use_deterministic_algorithms(True)\n",
        "import torch\ntorch.backends.mkldnn.enabled = False\n",
    )
    INVALID = (
        Invalid(
            "import torch\ndef setup():\n    torch.backends.cudnn.benchmark = True\n"
            "    torch.backends.cudnn.deterministic = False\n",
            count=2,
        ),
        Invalid(
            "from torch.backends import cudnn\nif fast:\n    cudnn.benchmark = True\n",
        ),
        Invalid(
            "import torch\nprint(torch.backends.cudnn.version(), torch.backends.cudnn.enabled)\n",
            count=2,
        ),
    )

    def message_for(self, name: str) -> str:
        short = name.rsplit(".", 1)[-1]
        if short in ("is_available", "version", "is_acceptable"):
            return _CUDNN_QUERY.format(short=name)
        return _CUDNN_SWITCHES.get(short, _CUDNN_OTHER.format(short=name))


_CUDA_MESSAGES = {
    "torch.backends.cuda.matmul.allow_tf32": "`torch.backends.cuda.matmul.allow_tf32` sets cuBLAS TF32 on "
    "CUDA and does nothing on Trainium: no change needed "
    "(`torch.set_float32_matmul_precision` is the device-generic switch)",
    "torch.backends.cuda.sdp_kernel": "`torch.backends.cuda.sdp_kernel` picks CUDA's attention kernels and "
    "is deprecated: it has no effect on Trainium; `torch.nn.attention.sdpa_kernel` "
    "is its successor",
}
_SDP_TOGGLE = (
    "`{short}` switches CUDA's SDPA kernels globally and has no effect on Trainium: no change needed "
    "(pick kernels around a call with `torch.nn.attention.sdpa_kernel([...])`)"
)
_CUDA_OTHER = (
    "`{short}` is a CUDA backend setting: harmless on Trainium, where it does nothing; no change needed"
)


class CudaBackendFlags(_BackendFlagRule):
    """`torch.backends.cuda.*`: TF32 matmuls, SDPA kernel switches, `sdp_kernel()`, cuBLAS/cuFFT settings.

    What it does
    Reports every use of `torch.backends.cuda`: `matmul.allow_tf32`, `enable_flash_sdp` and the other SDPA
    kernel toggles, `sdp_kernel(...)`, `preferred_linalg_library`, `cufft_plan_cache`, ….

    Why it matters on Trainium
    They configure CUDA libraries (cuBLAS, cuFFT, CUDA SDPA kernels) and do nothing for a `neuron` device, so
    a speed-up or a numerics choice made with them does not carry over. Matmul precision for every device is
    `torch.set_float32_matmul_precision`; kernel choice for `scaled_dot_product_attention` is
    `torch.nn.attention.sdpa_kernel`.

    Example
    torch.backends.cuda.matmul.allow_tf32 = True

    Use instead
    torch.backends.cuda.matmul.allow_tf32 = True  # kept: CUDA only, ignored on Trainium

    Fix safety
    No automatic fix, on purpose: the settings work on every device, and replacing them could only change
    CUDA runs (`set_float32_matmul_precision` also sets the CPU's oneDNN precision, and mixing it with the
    legacy flags makes torch 2.13 raise when the precision is read). The finding is information.
    """

    code = "NM411"
    name = "cuda-backend-flags"
    message = _CUDA_OTHER
    triggers = ((b"cuda", b"backends"),)
    names_only = True
    NAMES: ClassVar[dict[str, str | None]] = {"torch.backends.cuda.*": None}
    VALID = (
        "import torch\ntorch.set_float32_matmul_precision('high')\n",
        "import torch\nwith torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):\n    pass\n",
        "import torch\ntorch.backends.cudnn_x = 1\n",
    )
    INVALID = (
        Invalid(
            "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True  # fast\n",
        ),
        Invalid(
            "import torch\nwith torch.backends.cuda.sdp_kernel(enable_math=False):\n    pass\n",
        ),
        Invalid(
            "import torch\ntorch.backends.cuda.enable_flash_sdp(False)\n",
        ),
    )

    def message_for(self, name: str) -> str:
        if name.startswith("torch.backends.cuda.enable_") and name.endswith("_sdp"):
            return _SDP_TOGGLE.format(short=name)
        return _CUDA_MESSAGES.get(name, _CUDA_OTHER.format(short=name))
