"""NM412: pinned host memory (`pin_memory=True`, `tensor.pin_memory()`)."""

from __future__ import annotations

import re

import libcst as cst

from neuron_migrate.migrate.conditions import BETWEEN
from neuron_migrate.migrate.lexicon import Lexicon
from neuron_migrate.migrate.rule import Invalid, Rule

#: `pin_memory=True` (the keyword reported) or a `.pin_memory(` call; comments and strings may match too,
#: which only keeps a file that cannot report (never the reverse)
_PINNED = re.compile(
    rf"\bpin_memory{BETWEEN}={BETWEEN}(?:\({BETWEEN})*True\b|\.{BETWEEN}pin_memory{BETWEEN}\("
)


class PinMemory(Rule):
    """Pinned host memory: `DataLoader(pin_memory=True)` and `tensor.pin_memory()`.

    What it does
    Reports the keyword `pin_memory=True` in any call (`DataLoader`, tensor factories) and `.pin_memory()`
    calls.

    Why it matters on Trainium
    Nothing to change: with an accelerator both pin for it (`cuda` or `neuron`: TorchNeuron supports pinned
    host memory, and non-blocking copies from it). Without any accelerator `DataLoader(pin_memory=True)` only
    warns, and `x.pin_memory()` raises ("Cannot access accelerator device when none is available") — on a
    CPU-only machine exactly as the CUDA code did.

    Example
    loader = DataLoader(ds, batch_size=32, pin_memory=True)
    x = x.pin_memory().to(device, non_blocking=True)

    Use instead
    loader = DataLoader(ds, batch_size=32, pin_memory=True)  # kept: pins for neuron too
    x = x.pin_memory().to(device, non_blocking=True)  # kept

    Fix safety
    No automatic fix, on purpose: the code already works on CUDA and on Trainium; the finding is information.
    """

    code = "NM412"
    name = "pin-memory"
    message = (
        "pinned memory works for the current accelerator, `neuron` included (without one "
        "`pin_memory=True` only warns): no change needed"
    )
    severity = "info"
    cuda_only = False
    triggers = (b"pin_memory",)
    VALID = (
        "loader = DataLoader(ds, pin_memory=False)\n",
        "def make(pin_memory=True):\n    pass\n",
        "import torch\nb = torch.utils.data._utils.pin_memory.pin_memory(batch, 'cuda')\n",
    )
    INVALID = (
        Invalid(
            "from torch.utils.data import DataLoader\nloader = DataLoader(ds, batch_size=8, "
            "pin_memory=True)\n"
        ),
        Invalid("import torch\nx_dev = x.pin_memory().to(device, non_blocking=True)\n"),
    )

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """`pin_memory=True` or a `.pin_memory(` call."""
        return "pin_memory" in lex.names and _PINNED.search(lex.text) is not None

    def visit_Call(self, node: cst.Call) -> None:
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == "pin_memory" and _is_true(arg.value):
                self.report(arg)
        func = node.func
        # `torch.utils.data._utils.pin_memory.pin_memory(batch, device)` is a function, not the tensor method
        if (
            isinstance(func, cst.Attribute)
            and func.attr.value == "pin_memory"
            and not (self.ctx.qualified_name(func) or "").startswith("torch.")
        ):
            self.report(node)


def _is_true(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "True"
