"""NM102: `torch.device('cuda')`, `torch.device('cuda', i)`, `torch.device(f"cuda:{i}")`."""

from __future__ import annotations

import libcst as cst

from neuron_migrate.migrate.devices import agnostic_string, device_flow, fit, has_index, is_cuda_string
from neuron_migrate.migrate.names import dotted
from neuron_migrate.migrate.patterns import DEVICE_EXPR, DEVICE_TYPE_EXPR, keyword, positional, string_value
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
    rank_device = torch.device((torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")).type, local_rank)

    Fix safety
    Safe: on a CUDA machine the rewrite is the same device (`current_accelerator()` is `cuda` without an
    index, like `torch.device('cuda')`; an index is kept as the second argument), on Trainium it is `neuron`,
    and without an accelerator it is `cpu` (`cpu:N` is a valid placement for tensors and modules). An index
    written inside an f-string or `.format` stays in the string, since it may be a `str`. Unsafe where an
    indexed device reaches `torch.load(map_location=...)`, which rejects `cpu:N` on a CPU-only machine.
    """

    code = "NM102"
    name = "torch-device-cuda"
    message = ("`torch.device('cuda')` is CUDA-only: use "
               "`torch.accelerator.current_accelerator(check_available=True) or torch.device('cpu')`")
    severity = "error"
    fix_safety = "safe"
    triggers = (b"cuda",)
    VALID = (
        'import torch\nd = torch.device("cpu")\n',
        'import torch\nd = torch.device(args.device)\n',
        'import torch\nd = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")\n',
        'import torch\nd = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n',  # NM105's
        '"""torch.device("cuda") in a docstring."""\n# torch.device("cuda") in a comment\n',
    )
    INVALID = (
        Invalid(
            'import torch\ndevice = torch.device("cuda")\nx = torch.ones(2).to(device)\n',
            f'import torch\ndevice = {DEVICE_EXPR}\nx = torch.ones(2).to(device)\n',
        ),
        Invalid(
            'from torch import device\nd = device("cuda", local_rank)\nc = device("cuda:1")\n',
            f'import torch\nd = torch.device({DEVICE_TYPE_EXPR}, local_rank)\nc = torch.device({DEVICE_TYPE_EXPR}, 1)\n',
            count=2,
        ),
        Invalid(
            'import torch\nif torch.cuda.is_available():\n    kind = torch.device("cuda").type\n'
            '    d = torch.device(f"cuda:{rank}")\n    e = torch.device(type="cuda", index=0)\n',
            f'import torch\nif torch.cuda.is_available():\n    kind = ({DEVICE_EXPR}).type\n'
            f"    d = torch.device(f\"{{{DEVICE_TYPE_EXPR.replace(chr(34), chr(39))}}}:{{rank}}\")\n"
            f"    e = torch.device({DEVICE_TYPE_EXPR}, 0)\n",
            count=3,
        ),
        Invalid(
            'import torch\ndev = torch.device("cuda", rank)\nstate = torch.load("ckpt.pt", map_location=dev)\n'
            'with torch.device("cuda"):\n    m = torch.nn.Linear(2, 2)\n',
            f'import torch\ndev = torch.device({DEVICE_TYPE_EXPR}, rank)\n'
            f'state = torch.load("ckpt.pt", map_location=dev)\nwith {DEVICE_EXPR}:\n    m = torch.nn.Linear(2, 2)\n',
            count=2,
        ),
    )

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.call_name(node) != "torch.device":
            return
        kind = positional(node, 0) or keyword(node, "type")
        if kind is None or not is_cuda_string(kind.value):
            return
        index = positional(node, 1) or keyword(node, "index")
        self.report(node, fix=self._fix(node, kind.value, index))

    def _fix(self, call: cst.Call, kind: cst.BaseExpression, index: cst.Arg | None) -> FixSpec:
        value = string_value(kind)
        if index is not None:
            text = f"torch.device({DEVICE_TYPE_EXPR}, {self.ctx.code(index.value).strip()})"
        elif value == "cuda":
            text = fit(DEVICE_EXPR, self.ctx.parent)
        elif value is not None:
            text = f"torch.device({DEVICE_TYPE_EXPR}, {value.split(':', 1)[1]})"
        else:
            text = f"torch.device({agnostic_string(self.ctx, kind)})"
        indexed = index is not None or has_index(kind)
        unsafe = indexed and self._reaches_map_location()
        title = "Replace with the current accelerator" + (", same index" if indexed else "")
        return FixSpec(title, (Replacement(call, text),), imports=("torch",), safety="unsafe" if unsafe else None)

    def _reaches_map_location(self) -> bool:
        parent, grand = self.ctx.parent, self.ctx.ancestor(2)
        if isinstance(parent, cst.Arg) and parent.keyword is not None and parent.keyword.value == "map_location":
            return True
        if isinstance(parent, cst.Assign) and isinstance(grand, cst.SimpleStatementLine):
            keys = [dotted(t.target) for t in parent.targets if isinstance(t.target, (cst.Name, cst.Attribute))]
            return any(key in device_flow(self.ctx).map_locations for key in keys)
        return False
