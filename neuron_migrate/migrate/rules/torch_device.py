"""NM102: `torch.device('cuda')`, `torch.device('cuda', i)`, `torch.device(f"cuda:{i}")`."""

from __future__ import annotations

import libcst as cst

from neuron_migrate.migrate.conditions import cuda_string
from neuron_migrate.migrate.device_flow import device_flow
from neuron_migrate.migrate.device_literals import (
    agnostic_string,
    built_cuda_type,
    fit,
    has_index,
    is_cuda_string,
    string_value,
)
from neuron_migrate.migrate.fixes import AVAILABLE, DEVICE, DEVICE_TYPE
from neuron_migrate.migrate.lexicon import Lexicon
from neuron_migrate.migrate.names import dotted
from neuron_migrate.migrate.patterns import keyword, positional
from neuron_migrate.migrate.rule import FixSpec, Invalid, Replacement, Rule


class TorchDeviceCuda(Rule):
    """`torch.device` built for CUDA.

    What it does
    Flags `torch.device('cuda')`, `torch.device('cuda', i)`, `torch.device('cuda:1')`,
    `torch.device(f"cuda:{rank}")` and `torch.device(type='cuda', index=i)`, however `torch.device` was
    imported.

    Why it matters on Trainium
    The device is `neuron` there. Building `torch.device('cuda')` succeeds anywhere, so the failure comes
    later, at the first allocation or `.to(device)`, far from the line to change.

    Example
    device = torch.device("cuda")
    rank_device = torch.device("cuda", local_rank)

    Use instead
    device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")
    rank_device = torch.device(device.type, local_rank)

    Fix safety
    Safe: on a CUDA machine the rewrite is the same device (`current_accelerator()` is `cuda` without an
    index, like `torch.device('cuda')`; an index is kept as the second argument), on Trainium it is `neuron`,
    and without an accelerator it is `cpu` (`cpu:N` is a valid placement for tensors and modules). An index
    written inside an f-string or `.format` stays in the string, since it may be a `str`. Where an indexed
    device reaches `torch.load(map_location=...)`, which rejects `cpu:N`, the index is kept only when there is
    an accelerator.
    """

    code = "NM102"
    name = "torch-device-cuda"
    message = (
        "`torch.device('cuda')` is CUDA-only: use "
        "`torch.accelerator.current_accelerator(check_available=True) or torch.device('cpu')`"
    )
    severity = "error"
    fix_safety = "safe"
    triggers = (b"cuda",)
    VALID = (
        'import torch\nd = torch.device("cpu")\n',
        "import torch\nd = torch.device(args.device)\n",
        "import torch\nd = torch.accelerator.current_accelerator(check_available=True) or "
        'torch.device("cpu")\n',
        'import torch\nd = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n',  # NM105's
        '"""torch.device("cuda") in a docstring."""\n# torch.device("cuda") in a comment\n',
        'import torch\nusing_cuda = device.type == torch.device("cuda").type\n',  # a CUDA test: NM105's
    )
    INVALID = (
        Invalid(
            'import torch\ndevice = torch.device("cuda")\nx = torch.ones(2).to(device)\n',
            "import torch\ndevice = torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")\nx = torch.ones(2).to(device)\n',
        ),
        Invalid(
            'from torch import device\nd = device("cuda", local_rank)\nc = device("cuda:1")\n',
            "import torch\ndevice_type = (torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")).type\nd = torch.device(device_type, local_rank)\n'
            "c = torch.device(device_type, 1)\n",
            count=2,
        ),
        Invalid(
            'import torch\nif torch.cuda.is_available():\n    kind = torch.device("cuda").type\n'
            '    d = torch.device(f"cuda:{rank}")\n    e = torch.device(type="cuda", index=0)\n',
            "import torch\nif torch.cuda.is_available():\n"
            "    device = torch.accelerator.current_accelerator(check_available=True) or "
            'torch.device("cpu")\n'
            '    kind = device.type\n    d = torch.device(f"{device.type}:{rank}")\n'
            "    e = torch.device(device.type, 0)\n",
            count=3,
        ),
        Invalid(
            'import torch\ndev = torch.device("cuda", rank)\n'
            'state = torch.load("ckpt.pt", map_location=dev)\n'
            'with torch.device("cuda"):\n    m = torch.nn.Linear(2, 2)\n',
            "import torch\ndevice = torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")\n'
            "dev = torch.device(device.type, rank) if torch.accelerator.is_available() else"
            ' torch.device("cpu")\nstate = torch.load("ckpt.pt", map_location=dev)\nwith device:\n'
            "    m = torch.nn.Linear(2, 2)\n",
            count=2,
        ),
        Invalid(  # the fallback for a torch without `torch.accelerator` keeps its CUDA code
            "import torch\nif hasattr(torch, 'accelerator'):\n"
            "    device = torch.accelerator.current_accelerator()\n"
            "else:\n    device = torch.device('cuda')\n",
        ),
    )

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """`torch.device` spelled (in the call or the import that bound it) and a CUDA device string."""
        return {"torch", "device"} <= lex.names and cuda_string(lex)

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.call_name(node) != "torch.device":
            return
        kind = positional(node, 0) or keyword(node, "type")
        if kind is None or not is_cuda_string(kind.value):
            return
        index = positional(node, 1) or keyword(node, "index")
        if self._compared_type():  # `d.type == torch.device("cuda").type`: a CUDA test, NM105's
            return
        self.ctx.defer(lambda: self.report(node, fix=self._fix(node, kind.value, index)))

    def _compared_type(self) -> bool:
        """Whether the call is the device in `X == torch.device("cuda").type` (or `!=`): the string "cuda" in
        a test of a device, which NM105 lets neuron into. Made the current accelerator's type, the test would
        ask something else without an accelerator (`"cpu"`)."""
        attribute, up = self.ctx.parent, self.ctx.ancestor(2)
        if built_cuda_type(self.ctx, attribute) is None:
            return False
        comparison = self.ctx.ancestor(3) if isinstance(up, cst.ComparisonTarget) else up
        return (
            isinstance(comparison, cst.Comparison)
            and len(comparison.comparisons) == 1
            and isinstance(comparison.comparisons[0].operator, (cst.Equal, cst.NotEqual))
        )

    def _fix(self, call: cst.Call, kind: cst.BaseExpression, index: cst.Arg | None) -> FixSpec:
        value = string_value(kind)
        needs_name = False
        if index is not None:
            text = f"torch.device({DEVICE_TYPE}, {self.ctx.code(index.value).strip()})"
        elif value == "cuda":
            text = fit(DEVICE, self.ctx.parent)
        elif value is not None:
            text = f"torch.device({DEVICE_TYPE}, {value.split(':', 1)[1]})"
        else:
            string, needs_name = agnostic_string(self.ctx, kind)
            text = f"torch.device({string})"
        indexed = index is not None or has_index(kind)
        title = "Replace with the current accelerator" + (", same index" if indexed else "")
        if indexed and self._reaches_map_location():  # `torch.load` rejects `cpu:N`
            text = fit(f'{text} if {AVAILABLE} else torch.device("cpu")', self.ctx.parent, node=call)
            title += " (`cpu` without one: `torch.load` rejects `cpu:N`)"
        return FixSpec(title, (Replacement(call, text),), imports=("torch",), needs_name=needs_name)

    def _reaches_map_location(self) -> bool:
        parent, grand = self.ctx.parent, self.ctx.ancestor(2)
        if (
            isinstance(parent, cst.Arg)
            and parent.keyword is not None
            and parent.keyword.value == "map_location"
        ):
            return True
        if isinstance(parent, cst.Assign) and isinstance(grand, cst.SimpleStatementLine):
            keys = [
                dotted(t.target) for t in parent.targets if isinstance(t.target, (cst.Name, cst.Attribute))
            ]
            return any(key in device_flow(self.ctx).map_locations for key in keys)
        return False
