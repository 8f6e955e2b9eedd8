"""NM106: `torch.cuda` device queries and selection that `torch.accelerator` covers one for one."""

from __future__ import annotations

import libcst as cst

from neuron_migrate.migrate.patterns import QualifiedNameRule, guarded_call_fix
from neuron_migrate.migrate.rule import FixSpec, Invalid


class CudaDeviceApi(QualifiedNameRule):
    """Device queries and selection through `torch.cuda`.

    What it does
    Flags `torch.cuda.is_available`, `device_count`, `current_device`, `set_device` and `device(...)`,
    however `torch.cuda` was imported.

    Why it matters on Trainium
    On a Trainium instance `torch.cuda.is_available()` is False, so code gated on it silently takes its CPU
    path; `set_device` and `current_device` fail. `torch.accelerator` answers for whichever accelerator the
    process has: CUDA, `neuron`, or none.

    Example
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)

    Use instead
    if torch.accelerator.is_available():
        torch.accelerator.set_device_index(local_rank)

    Fix safety
    Safe: each `torch.accelerator` function behaves like its CUDA counterpart on a CUDA machine, and on a
    CPU-only machine `is_available()` is False and `device_count()` is 0 as before. A `set_device` statement
    is guarded by `torch.accelerator.is_available()`: selecting a device means nothing without one, and
    `set_device_index` raises there, so the rewritten script still runs on a CPU-only machine.
    """

    code = "NM106"
    name = "cuda-device-api"
    message = "`{name}` is CUDA-only: use `torch.accelerator` so the code sees any accelerator"
    severity = "error"
    fix_safety = "safe"
    triggers = (b"cuda",)
    NAMES = {
        "torch.cuda.is_available": "torch.accelerator.is_available",
        "torch.cuda.device_count": "torch.accelerator.device_count",
        "torch.cuda.current_device": "torch.accelerator.current_device_index",
        "torch.cuda.set_device": "torch.accelerator.set_device_index",
        "torch.cuda.device": "torch.accelerator.device_index",
    }
    VALID = (
        "import torch\nok = torch.accelerator.is_available()\n",
        "import torch\nn = torch.accelerator.device_count()\n",
        "import torch\ntorch.cuda_is_available = 1\n",  # not torch.cuda at all
    )
    INVALID = (
        Invalid(
            "import torch\nif torch.cuda.is_available():\n    torch.cuda.set_device(rank)\n",
            "import torch\nif torch.accelerator.is_available():\n    torch.accelerator.set_device_index(rank)\n",
            count=2,
        ),
        Invalid(
            "import torch.cuda as tc\nn = tc.device_count()\n",
            "import torch\nn = torch.accelerator.device_count()\n",
        ),
        Invalid(
            "from torch.cuda import is_available\nuse_gpu = is_available()\n",
            "import torch\nuse_gpu = torch.accelerator.is_available()\n",
        ),
        Invalid(
            "import torch\ndef setup(rank):\n    torch.cuda.set_device(rank)\n",
            "import torch\ndef setup(rank):\n    if torch.accelerator.is_available():\n"
            "        torch.accelerator.set_device_index(rank)\n",
        ),
        Invalid(
            "import torch\nwith torch.cuda.device(1):\n    pass\n",
            "import torch\nwith torch.accelerator.device_index(1):\n    pass\n",
        ),
        Invalid(
            "def f():\n    from torch import cuda\n    return cuda.current_device()\n",
            "import torch\ndef f():\n    return torch.accelerator.current_device_index()\n",
        ),
    )

    def fix_for(self, node: cst.CSTNode, call: cst.Call | None, name: str) -> FixSpec | None:
        if call is not None and name == "torch.cuda.set_device":
            fix = guarded_call_fix(self, call, name, self.NAMES[name], cpu_value=None)
            if fix is not None:
                return fix
        return super().fix_for(node, call, name)
