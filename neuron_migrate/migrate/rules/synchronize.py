"""NM401: `torch.cuda.synchronize`."""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from neuron_migrate.migrate.patterns import QualifiedNameRule, call_args, cautious_about_device, guarded_fix
from neuron_migrate.migrate.rule import FixSpec, Invalid


class CudaSynchronize(QualifiedNameRule):
    """`torch.cuda.synchronize()`, typically around timing code.

    What it does
    Flags calls of `torch.cuda.synchronize`.

    Why it matters on Trainium
    On a `neuron` device execution is asynchronous too, but `torch.cuda.synchronize()` waits for CUDA work
    only: timings measured around it are wrong, and it fails on a machine without CUDA.

    Example
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start

    Use instead
    if torch.accelerator.is_available():
        torch.accelerator.synchronize()
    elapsed = time.perf_counter() - start

    Fix safety
    Safe: on CUDA the call is the same (a `device=` keyword becomes positional: `torch.accelerator.synchronize`
    takes it positionally only); without an accelerator the guard skips it, since
    `torch.accelerator.synchronize()` raises there. Where an accelerator is certain (inside an availability
    check, after an early exit without one) no guard is added. A device given by a value that may be the
    CPU's (`synchronize(device)` with a tensor's device; not an index, a device string or a
    `torch.cuda`/`torch.accelerator` call) makes the fix unsafe: `torch.accelerator.synchronize` raises for a
    CPU device on a host with another accelerator, where a CUDA check around the call had skipped it.
    """  # noqa: E501 - rendered verbatim into docs/rules.md

    code = "NM401"
    name = "cuda-synchronize"
    message = "`torch.cuda.synchronize()` waits for CUDA only: use `torch.accelerator.synchronize()`"
    severity = "error"
    fix_safety = "safe"
    triggers = ((b"cuda", b"synchronize"),)
    names_only = True
    NAMES: ClassVar[dict[str, str | None]] = {"torch.cuda.synchronize": "torch.accelerator.synchronize"}
    VALID = (
        "import torch\nif torch.accelerator.is_available():\n    torch.accelerator.synchronize()\n",
        "import torch\ntorch.cpu.synchronize()\n",
    )
    INVALID = (
        Invalid(
            "import time, torch\ntorch.cuda.synchronize()\nt = time.time()\n",
            "import time, torch\nif torch.accelerator.is_available():\n    torch.accelerator.synchronize()\n"
            "t = time.time()\n",
        ),
        Invalid(
            "import torch\ndef step(m):\n    m()\n    torch.cuda.synchronize()  # wait\n",
            "import torch\ndef step(m):\n    m()\n    if torch.accelerator.is_available():\n"
            "        torch.accelerator.synchronize()  # wait\n",
        ),
        Invalid(
            "import torch\nif torch.accelerator.is_available():\n    torch.cuda.synchronize(0)\n",
            "import torch\nif torch.accelerator.is_available():\n    torch.accelerator.synchronize(0)\n",
        ),
        Invalid(
            "from torch.cuda import synchronize as sync\nimport torch\nif torch.cuda.is_available():\n"
            "    sync()\n",
            "import torch\nif torch.cuda.is_available():\n    torch.accelerator.synchronize()\n",
        ),
        Invalid(
            "import torch\ndef wait(device):\n    if not torch.cuda.is_available():\n        return\n"
            "    torch.cuda.synchronize(device=device)\n",
            "import torch\ndef wait(device):\n    if not torch.cuda.is_available():\n        return\n"
            "    torch.accelerator.synchronize(device)\n",
        ),
        Invalid(
            "import torch\nif not torch.accelerator.is_available():\n    print('cpu')\nelse:\n"
            "    torch.cuda.synchronize()\ndef timed(x):\n    assert torch.cuda.is_available()\n"
            "    y = x * 2\n"
            "    torch.cuda.synchronize()\nuse_accel = torch.cuda.is_available()\nif use_accel:\n"
            "    torch.cuda.synchronize()\n",
            "import torch\nif not torch.accelerator.is_available():\n    print('cpu')\nelse:\n"
            "    torch.accelerator.synchronize()\ndef timed(x):\n    assert torch.cuda.is_available()\n"
            "    y = x * 2\n    torch.accelerator.synchronize()\nuse_accel = torch.cuda.is_available()\n"
            "if use_accel:\n    torch.accelerator.synchronize()\n",
            count=3,
        ),
        Invalid(
            "import torch\nif x.device.type != 'cpu':\n    torch.cuda.synchronize()\nfor step in range(3):\n"
            "    if not torch.cuda.is_available():\n        continue\n    torch.cuda.synchronize()\n",
            "import torch\nif x.device.type != 'cpu':\n    torch.accelerator.synchronize()\n"
            "for step in range(3):\n    if not torch.cuda.is_available():\n        continue\n"
            "    torch.accelerator.synchronize()\n",
            count=2,
        ),
    )

    def fix_for(self, node: cst.CSTNode, call: cst.Call | None, name: str) -> FixSpec | None:
        if call is None:
            return super().fix_for(node, call, name)
        args = call_args(self, call, positional=("device",))  # positional-only in torch.accelerator
        if args is None:
            return None
        target = self.NAMES[name]
        fix = guarded_fix(
            self, call, f"{target}{args}", f"Replace `{name}` with `{target}`", cpu_value="None"
        )
        return cautious_about_device(self, call, fix)
