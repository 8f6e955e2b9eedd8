"""NM104: `tensor.is_cuda`, which asks "is this CUDA?" where code means "is this an accelerator?"."""

from __future__ import annotations

import libcst as cst

from neuron_migrate.migrate.lexicon import Lexicon
from neuron_migrate.migrate.rule import Invalid, Rule
from neuron_migrate.migrate.rules.accelerator_checks import neuron_test, report_check


class IsCuda(Rule):
    """`tensor.is_cuda`.

    What it does
    Flags reads of the `.is_cuda` attribute.

    Why it matters on Trainium
    `is_cuda` is False for a tensor on `neuron`, so code that picks its fast path or moves data back with
    `if x.is_cuda:` silently takes the CPU path on Trainium.

    Example
    if not x.is_cuda:
        x = x.to(device)

    Use instead
    if x.device.type not in ("cuda", "neuron"):
        x = x.to(device)

    Fix safety
    Unsafe: `x.device.type in ("cuda", "neuron")` answers as `is_cuda` did for every device but `neuron`,
    which now takes CUDA's side; but `x` must be a tensor (or have a `.device`): a class of the project's own
    with an `is_cuda` property has none. Check that, and that the code under the test suits Trainium. A test
    that guards CUDA-only code (fused or flash kernels, compute capability, NCCL) gets no fix: it must stay
    CUDA-only.
    """

    code = "NM104"
    device_test = True
    name = "is-cuda"
    message = '`.is_cuda` is False on Trainium: let neuron in (`x.device.type in ("cuda", "neuron")`)'
    severity = "warning"
    fix_safety = "unsafe"
    triggers = (b"is_cuda",)
    VALID = (
        'import torch\non_accel = x.device.type in ("cuda", "neuron")\n',
        "class T:\n    def __init__(self):\n        self.is_cuda = False\n",
        '"""Check x.is_cuda first."""\n# if x.is_cuda:\n',
    )
    INVALID = (
        Invalid(
            "import torch\ndef f(x, y):\n    if not x.is_cuda:\n        x = x.to(y.device)\n"
            "    return x.is_cuda and y.is_cuda\n",
            'import torch\ndef f(x, y):\n    if x.device.type not in ("cuda", "neuron"):\n'
            "        x = x.to(y.device)\n"
            '    return x.device.type in ("cuda", "neuron") and y.device.type in ("cuda", "neuron")\n',
            count=3,
        ),
        Invalid(
            "same = a.is_cuda == b.is_cuda\n",
            'same = (a.device.type in ("cuda", "neuron")) == (b.device.type in ("cuda", "neuron"))\n',
            count=2,
        ),
        Invalid(
            "def f(x):\n    if _fused is not None and x.is_cuda:\n        return _fused.apply(x)\n"
            "    return x\n",
        ),
        Invalid(
            "from flash_attn import flash_attn_func\nuse_flash = q.is_cuda\n",
        ),
    )

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """An `.is_cuda` attribute."""
        return "is_cuda" in lex.names

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value != "is_cuda":
            return
        parent = self.ctx.parent
        if isinstance(parent, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.Del)):
            return  # a class of the user's own that sets an `is_cuda` attribute
        if (self.ctx.qualified_name(node) or "").startswith("torch."):
            return
        owner = self.ctx.code(node.value).strip()
        fix = neuron_test(self, node, f"{owner}.device.type", True, "Test the device type for CUDA or neuron")
        report_check(self, node, self.message, fix)
