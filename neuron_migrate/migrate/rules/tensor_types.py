"""NM109: the legacy CUDA tensor types `torch.cuda.FloatTensor` & co."""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from neuron_migrate.migrate.conditions import any_string
from neuron_migrate.migrate.device_literals import string_value
from neuron_migrate.migrate.fixes import DEVICE
from neuron_migrate.migrate.lexicon import Lexicon
from neuron_migrate.migrate.patterns import (
    QualifiedNameRule,
    indentation,
    is_expression_statement,
    spells_names,
)
from neuron_migrate.migrate.rule import FixSpec, Invalid, Replacement

DTYPES = {
    "Float": "torch.float32",
    "Double": "torch.float64",
    "Half": "torch.float16",
    "BFloat16": "torch.bfloat16",
    "Long": "torch.int64",
    "Int": "torch.int32",
    "Short": "torch.int16",
    "Char": "torch.int8",
    "Byte": "torch.uint8",
    "Bool": "torch.bool",
}
_FLOATING = {"Float", "Double", "Half", "BFloat16"}
_SET_DEFAULT = "torch.set_default_tensor_type"


def _kind(name: str | None) -> str | None:
    """`Float` for `torch.cuda.FloatTensor` (or the string `'torch.cuda.FloatTensor'`)."""
    if name and name.startswith("torch.cuda.") and name.endswith("Tensor"):
        kind = name[len("torch.cuda.") : -len("Tensor")]
        return kind if kind in DTYPES else None
    return None


class CudaTensorType(QualifiedNameRule):
    """Legacy CUDA tensor types.

    What it does
    Flags `torch.cuda.FloatTensor`, `HalfTensor`, `LongTensor` and the other legacy CUDA tensor types (as a
    constructor, in `x.type(...)`, in `isinstance`, or given to `torch.set_default_tensor_type`, also as the
    string `'torch.cuda.FloatTensor'`).

    Why it matters on Trainium
    These types exist only for CUDA: on Trainium and on a CPU-only machine `torch.cuda.FloatTensor(...)`
    raises "type torch.cuda.FloatTensor not available", and `set_default_tensor_type` is deprecated.

    Example
    torch.set_default_tensor_type(torch.cuda.FloatTensor)
    buf = torch.cuda.FloatTensor(4, 8)
    h = x.type(torch.cuda.HalfTensor)

    Use instead
    device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")
    torch.set_default_dtype(torch.float32)
    torch.set_default_device(device)
    buf = torch.empty(4, 8, dtype=torch.float32, device=device)
    h = x.to(device, torch.float16)

    Fix safety
    Unsafe. `torch.set_default_device` does what the CUDA default tensor type did for factory functions, but
    through a global function mode that slows down every factory call and also reaches library code.
    `x.type(T)` casts every tensor of a module, `.to(device, dtype)` only its floating-point ones. A
    constructor is rewritten only when its arguments show whether they are sizes (`torch.empty`) or data
    (`torch.tensor`); `isinstance` checks and other uses get no fix (test `x.dtype` and `x.device.type`).
    """

    code = "NM109"
    name = "cuda-tensor-type"
    message = "`{name}` is a legacy CUDA-only type: use `dtype=` and `device=` with the current accelerator"
    severity = "error"
    fix_safety = "unsafe"
    triggers = (
        b"FloatTensor",
        b"HalfTensor",
        b"DoubleTensor",
        b"LongTensor",
        b"IntTensor",
        b"BFloat16Tensor",
        b"ByteTensor",
        b"BoolTensor",
        b"CharTensor",
        b"ShortTensor",
    )
    NAMES: ClassVar[dict[str, str | None]] = {f"torch.cuda.{kind}Tensor": None for kind in DTYPES}
    VALID = (
        "import torch\nx = torch.FloatTensor(2)\ntorch.set_default_tensor_type(torch.DoubleTensor)\n",
        '"""Returns a torch.cuda.FloatTensor."""\nimport torch\nt = torch.empty(2, dtype=torch.float32)\n',
    )
    INVALID = (
        Invalid(
            "import torch\n\ndef setup():\n"
            "    torch.set_default_tensor_type(torch.cuda.FloatTensor)  # fast\n",
            "import torch\n\ndef setup():\n"
            "    device = torch.accelerator.current_accelerator(check_available=True) or "
            'torch.device("cpu")\n'
            "    torch.set_default_dtype(torch.float32)\n    torch.set_default_device(device)  # fast\n",
        ),
        Invalid(
            "from torch.cuda import HalfTensor, LongTensor\nimport torch\nbuf = HalfTensor(4, 8)\n"
            "ids = LongTensor([[1, 2]])\nh = x.type(torch.cuda.HalfTensor)\n"
            "k = x.type('torch.cuda.FloatTensor')\n",
            "import torch\ndevice = torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")\nbuf = torch.empty(4, 8, dtype=torch.float16, device=device)\n'
            "ids = torch.tensor([[1, 2]], dtype=torch.int64, device=device)\n"
            "h = x.to(device, torch.float16)\n"
            "k = x.to(device, torch.float32)\n",
            count=4,
        ),
        Invalid(
            "import torch\nok = isinstance(x, torch.cuda.FloatTensor)\ny = torch.cuda.FloatTensor(data)\n",
            count=2,
        ),
    )

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """A use of a legacy type, or its name as a string
        (`torch.set_default_tensor_type('torch.cuda.FloatTensor')`)."""
        return spells_names(cls, lex) or any_string(lex, lambda s: _kind(s) is not None)

    def visit_Call(self, node: cst.Call) -> None:
        # the string forms: set_default_tensor_type('torch.cuda.FloatTensor'), x.type('torch.cuda.HalfTensor')
        if len(node.args) == 1 and _kind(string_value(node.args[0].value)):
            self._use_as_argument(
                node, _kind(string_value(node.args[0].value)), string_value(node.args[0].value)
            )

    def on_use(self, node: cst.Name | cst.Attribute, call: cst.Call | None, name: str) -> None:
        kind = _kind(name)
        parent, grand = self.ctx.parent, self.ctx.ancestor(2)
        if call is not None:
            self.report(call, self.message_for(name), self._constructor_fix(call, kind, name))
        elif isinstance(parent, cst.Arg) and isinstance(grand, cst.Call) and len(grand.args) == 1:
            self._use_as_argument(grand, kind, name)
        else:
            self.report(
                node,
                f"`{name}` is a legacy CUDA-only type: test `x.dtype == {DTYPES[kind]}` and "
                "`x.device.type` instead",
            )

    def _use_as_argument(self, call: cst.Call, kind: str, name: str) -> None:
        callee = self.ctx.call_name(call)
        func = call.func
        fix = None
        if callee == _SET_DEFAULT:
            fix = self._default_type_fix(call, kind)
        elif isinstance(func, cst.Attribute) and func.attr.value == "type":
            fix = FixSpec(
                f"Replace `.type({name})` with `.to(device, {DTYPES[kind]})`",
                (Replacement(func.attr, "to"), Replacement(call.args[0], f"{DEVICE}, {DTYPES[kind]}")),
                imports=("torch",),
            )
        elif not isinstance(func, cst.Name) or func.value != "isinstance":
            return
        self.report(call, self.message_for(name), fix)

    def _default_type_fix(self, call: cst.Call, kind: str) -> FixSpec | None:
        if kind not in _FLOATING or is_expression_statement(self.ctx, call) is None:
            return None  # set_default_tensor_type raises for integer types anyway
        text = (
            f"torch.set_default_dtype({DTYPES[kind]})\n"
            f"{indentation(self.ctx)}torch.set_default_device({DEVICE})"
        )
        return FixSpec(
            "Replace with `torch.set_default_dtype` and `torch.set_default_device`",
            (Replacement(call, text),),
            imports=("torch",),
        )

    def _constructor_fix(self, call: cst.Call, kind: str, name: str) -> FixSpec | None:
        args = call.args
        if any(a.keyword is not None or a.star for a in args):
            return None
        if len(args) == 1 and isinstance(args[0].value, (cst.List, cst.ListComp)):
            factory = "torch.tensor"
        elif all(isinstance(a.value, cst.Integer) for a in args):
            factory = "torch.empty"
        else:
            return None  # sizes or data? a person must say
        inner = ", ".join(self.ctx.code(a.value).strip() for a in args) or "0"
        text = f"{factory}({inner}, dtype={DTYPES[kind]}, device={DEVICE})"
        return FixSpec(
            f"Replace `{name}(...)` with `{factory}(..., dtype=, device=)`",
            (Replacement(call, text),),
            imports=("torch",),
        )
