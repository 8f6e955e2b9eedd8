"""NM412: pinned host memory (`pin_memory=True`, `tensor.pin_memory()`)."""

from __future__ import annotations

import libcst as cst

from neuron_migrate.migrate.guards import accelerator_certain
from neuron_migrate.migrate.patterns import guarded_fix
from neuron_migrate.migrate.rule import Invalid, Rule


class PinMemory(Rule):
    """Pinned host memory: `DataLoader(pin_memory=True)` and `tensor.pin_memory()`.

    What it does
    Reports the keyword `pin_memory=True` in any call (`DataLoader`, tensor factories), and flags
    `.pin_memory()` calls where no accelerator is certain.

    Why it matters on Trainium
    With an accelerator both pin for it (`cuda` or `neuron`: TorchNeuron supports pinned host memory), so
    `DataLoader(pin_memory=True)` needs no change; without one it only warns and does not pin. The method
    form raises without an accelerator ("Cannot access accelerator device when none is available").

    Example
    loader = DataLoader(ds, batch_size=32, pin_memory=True)
    x = x.pin_memory().to(device, non_blocking=True)

    Use instead
    loader = DataLoader(ds, batch_size=32, pin_memory=True)  # kept: pins for neuron too
    x = (x.pin_memory() if torch.accelerator.is_available() else x).to(device, non_blocking=True)

    Fix safety
    Safe for the method form: with an accelerator it pins as before; without one it returns the tensor
    unpinned instead of raising. The keyword form gets no edit: it already works on every device.
    `.pin_memory(device)` (deprecated argument) gets no fix.
    """

    code = "NM412"
    name = "pin-memory"
    message = ("`pin_memory=True` pins for the current accelerator, `neuron` included, and only warns without "
               "one: no change needed")
    severity = "info"
    fix_safety = "safe"
    cuda_only = False
    triggers = (b"pin_memory",)
    VALID = (
        "import torch\nloader = DataLoader(ds, pin_memory=torch.accelerator.is_available())\n",
        "loader = DataLoader(ds, pin_memory=False)\n",
        "import torch\nif torch.accelerator.is_available():\n    x = x.pin_memory()\n",
        "def make(pin_memory=True):\n    pass\n",
        "import torch\nb = torch.utils.data._utils.pin_memory.pin_memory(batch, 'cuda')\n",
    )
    INVALID = (
        Invalid(
            "from torch.utils.data import DataLoader\nloader = DataLoader(ds, batch_size=8, pin_memory=True)\n",
        ),
        Invalid(
            "import torch\nx_dev = x.pin_memory().to(device, non_blocking=True)\n",
            "import torch\nx_dev = (x.pin_memory() if torch.accelerator.is_available() else x).to(device,"
            " non_blocking=True)\n",
        ),
        Invalid(
            "import torch\ndef pin(self):\n    self.inp.pin_memory()\n",
            "import torch\ndef pin(self):\n    if torch.accelerator.is_available():\n"
            "        self.inp.pin_memory()\n",
        ),
        Invalid(
            "x = x.pin_memory('cuda')\n",
        ),
    )

    def visit_Call(self, node: cst.Call) -> None:
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == "pin_memory" and _is_true(arg.value):
                self.report(arg)
        func = node.func
        if not isinstance(func, cst.Attribute) or func.attr.value != "pin_memory" or accelerator_certain(self.ctx):
            return
        # `torch.utils.data._utils.pin_memory.pin_memory(batch, device)` is a function, not the tensor method
        if not (self.ctx.qualified_name(func) or "").startswith("torch."):
            fix = None
            if not node.args:
                fix = guarded_fix(self, node, self.ctx.code(node), "Pin only when an accelerator is available",
                                  cpu_value=self.ctx.code(func.value))
            self.report(node, "`.pin_memory()` raises without an accelerator: pin only when "
                              "`torch.accelerator.is_available()`", fix)


def _is_true(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "True"
