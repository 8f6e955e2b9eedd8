"""NM107–NM108: questions only CUDA can answer (device name, properties, compute capability, CUDA version)."""

from __future__ import annotations

from typing import ClassVar

from neuron_migrate.migrate.patterns import QualifiedNameRule
from neuron_migrate.migrate.rule import Invalid

_MODULE = "`torch.get_device_module(device).{short}()` where the device module has it (cuda, xpu)"
#: what to use instead, per function: there is no `torch.accelerator` equivalent for any of them
_INSTEAD = {
    "get_device_name": f"{_MODULE}, else log `device.type`",
    "get_device_properties": f"{_MODULE}; for total memory `torch.accelerator.get_memory_info()[1]`",
    "get_device_capability": "a test of the feature itself (a dtype, an op), not of an SM version; "
    "`torch.accelerator.get_device_capability()` lists supported dtypes, not (major, minor)",
    "is_bf16_supported": f"{_MODULE}; Trainium supports bfloat16 natively",
}


class CudaDeviceProperties(QualifiedNameRule):
    """Device name, properties, compute capability and bfloat16 support queried through `torch.cuda`.

    What it does
    Flags `torch.cuda.get_device_name`, `get_device_properties`, `get_device_capability` and
    `is_bf16_supported`, however `torch.cuda` was imported.

    Why it matters on Trainium
    With no CUDA device these raise (`Torch not compiled with CUDA enabled` or no device), and the answers
    mean nothing for a NeuronCore: a compute capability gate such as `>= (8, 0)` is simply false, and
    `is_bf16_supported()` says False although Trainium computes in bfloat16 natively.

    Example
    if torch.cuda.get_device_capability() >= (8, 0):
        dtype = torch.bfloat16

    Use instead
    device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")
    if device.type == "neuron" or (device.type == "cuda" and torch.cuda.get_device_capability() >= (8, 0)):
        dtype = torch.bfloat16

    Fix safety
    No automatic fix: `torch.accelerator` has no device name or properties, and its
    `get_device_capability()` returns `{"supported_dtypes": ...}`, not CUDA's (major, minor). Use
    `torch.get_device_module(device)` where that module offers the function (cuda, xpu), or keep the call
    on a CUDA-only path.
    """

    code = "NM107"
    name = "cuda-device-properties"
    message = "`{name}` is CUDA-only: use {instead}"
    severity = "warning"
    triggers = (b"get_device_", b"is_bf16_supported")
    names_only = True
    NAMES: ClassVar[dict[str, str | None]] = {f"torch.cuda.{short}": None for short in _INSTEAD}
    VALID = (
        "import torch\nname = torch.get_device_module(device).get_device_name()\n",
        "import torch\ncap = torch.accelerator.get_device_capability()\n",
        "import torch\nprint('see torch.cuda.get_device_name()')\n",
    )
    INVALID = (
        Invalid(
            "import torch\nprint('gpu', torch.cuda.get_device_name())\n",
        ),
        Invalid(
            "from torch.cuda import get_device_capability as cap\nok = cap(0) >= (8, 0)\n",
        ),
        Invalid(
            "import torch.cuda as tc\nmem = tc.get_device_properties(0).total_memory\n"
            "bf16 = tc.is_bf16_supported()\n",
            count=2,
        ),
    )

    def message_for(self, name: str) -> str:
        short = name.rsplit(".", 1)[-1]
        return self.message.format(name=name, instead=_INSTEAD[short].format(short=short))


class TorchVersionCuda(QualifiedNameRule):
    """`torch.version.cuda`, the CUDA version torch was built with.

    What it does
    Flags reads of `torch.version.cuda` (also `from torch.version import cuda`).

    Why it matters on Trainium
    On a Trainium instance torch is a CPU build plus TorchNeuron, so `torch.version.cuda` is None: version
    comparisons raise TypeError, and code that uses it to decide "GPU build or not" takes the CPU path.

    Example
    if torch.version.cuda and torch.cuda.is_available():
        device = "cuda"

    Use instead
    device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")

    Fix safety
    No automatic fix: the check is a capability gate. To choose a device, ask `torch.accelerator`; keep a
    real CUDA-version check (a kernel that needs CUDA >= 12) on the CUDA-only path, after testing
    `device.type == "cuda"`.
    """

    code = "NM108"
    name = "torch-version-cuda"
    message = (
        "`torch.version.cuda` is None on Trainium: choose the device with `torch.accelerator`, and keep "
        "CUDA-version checks behind `device.type == 'cuda'`"
    )
    severity = "warning"
    triggers = (b"version.cuda", b"torch.version")
    names_only = True
    NAMES: ClassVar[dict[str, str | None]] = {"torch.version.cuda": None, "torch.version.cuda.*": None}
    VALID = (
        "import torch\nprint(torch.version.__version__, torch.version.hip)\n",
        "import torch\nv = torch.__version__\n",
    )
    INVALID = (
        Invalid(
            "import torch\nprint('cuda runtime', torch.version.cuda)\n",
        ),
        Invalid(
            "import torch\nmajor = int(torch.version.cuda.split('.')[0])\n",
        ),
        Invalid(
            "from torch.version import cuda as cuda_version\nok = cuda_version is not None\n",
        ),
    )
