"""NM105: device tests and choices that ask "is this CUDA?" where they mean "is this an accelerator?"
(`device.type == 'cuda'`, `'cuda' if cond else 'cpu'`)."""

from __future__ import annotations

from dataclasses import replace

import libcst as cst

from neuron_migrate.migrate.conditions import cuda_string
from neuron_migrate.migrate.device_flow import (
    availability,
    device_conditional,
    device_type_text,
    is_device_expr,
)
from neuron_migrate.migrate.device_literals import (
    NEURON_DEVICE_TYPES,
    agnostic_string,
    built_cuda_type,
    cuda_and_neuron,
    fit,
    has_index,
    is_cuda_string,
    string_value,
)
from neuron_migrate.migrate.fixes import DEVICE, DEVICE_TYPE
from neuron_migrate.migrate.lexicon import Lexicon
from neuron_migrate.migrate.names import dotted
from neuron_migrate.migrate.quotes import quote_of
from neuron_migrate.migrate.rule import FixSpec, Invalid, Replacement, Rule
from neuron_migrate.migrate.rules.accelerator_checks import neuron_test, report_check


class CudaDeviceCheck(Rule):
    """Tests that a device is CUDA, and CUDA-or-CPU choices.

    What it does
    Flags `device.type == 'cuda'`, `device == 'cuda'`, `'cuda' in device`, `device.startswith('cuda')` on
    values that hold a device (by name, `x.device`, `str(...)` of one, or a name given a device in the
    module; `.type == 'cuda'` on anything), and `'cuda' if cond else 'cpu'` conditionals.

    Why it matters on Trainium
    On Trainium the device type is `neuron`, so every such test is False and the code silently takes its
    CPU path (no AMP, no pinned memory, no non-blocking copies, the wrong device).

    Example
    device = "cuda" if torch.cuda.is_available() else "cpu"
    use_amp = device == "cuda"

    Use instead
    device = (torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")).type
    use_amp = device in ("cuda", "neuron")

    Fix safety
    Safe: `'cuda' if torch.cuda.is_available() else 'cpu'` becomes the accelerator's type, which is `cuda` on
    a CUDA machine and `cpu` without an accelerator, as before; with another condition only the `'cuda'`
    string is replaced, so the condition still decides. A test keeps what it compares and lets `neuron` in
    beside CUDA: `d.type == "cuda"` becomes `d.type in ("cuda", "neuron")`, `device != "cuda"` becomes
    `device not in ("cuda", "neuron")`, `d.startswith("cuda:")` becomes `d.startswith(("cuda:",
    "neuron:"))`, `"cuda" in device` becomes `torch.device(device).type in ("cuda", "neuron")`. Every other
    device (CPU, MPS, XLA, meta, ...) gets the answer it got before, in the project's quotes. That is safe
    when the code the test selects for CUDA is device plumbing (moving or pinning tensors,
    `torch.accelerator` / `torch.amp` calls, logging) or code the same run makes device-agnostic, or when the
    test's value is kept (`use_amp = ...`); around a plain choice with no device work (a memory format, a
    list of LAPACK drivers, a sample the test makes CUDA skip: a fact about CUDA that neuron would now
    follow too), around other code (a torch op with a CUDA-only argument, the project's own kernels), around
    code that sets the tested name itself (`if device_map == "cuda": device_map = f"cuda:{rank}"`), in a
    file that uses a CUDA-only library or Triton, in a module that chooses by other accelerators (a `"mps"`
    or `"tpu"` string, `is_torch_xpu_available()`: its CUDA code is CUDA's part of per-device code), and for
    `.type == 'cuda'` on something not known to be a device it is unsafe, and the message names what to
    check. A test that is only a part of a flag's value (`(d.type == "cuda" and gqa) or masked`) is judged by
    what the flag selects. No fix for a test that guards CUDA-only code (fused/flash kernels, capability,
    NCCL: it must stay CUDA-only), for a comparison with an indexed string, in an `if`/`elif` chain with
    branches for other accelerators (add a `neuron` branch), or for membership in a list of device types (one
    that names `neuron` already takes Trainium in, and is not flagged).
    """

    code = "NM105"
    device_test = True
    name = "cuda-device-check"
    message = 'CUDA-only device test, false on Trainium: let neuron in (`device.type in ("cuda", "neuron")`)'
    severity = "warning"
    fix_safety = "safe"
    triggers = (b"cuda",)
    VALID = (
        'import torch\nif backend == "nccl":\n    pass\nif name == "cuda":\n    print(name)\n',
        'if "cuda" in sys.argv:\n    pass\nif key.startswith("cuda"):\n    pass\n',
        'import torch\nok = x.device.type != "cpu"\nmode = "fast" if fast else "cpu"\n',
        'import torch\nif x.device.type in ("cuda", "xpu", "neuron"):\n    pass\n',
        'import torch\nif device.startswith(("cuda:", "neuron:")):\n    pass\n',
    )
    INVALID = (
        Invalid(
            'import torch\ndevice = "cuda" if torch.cuda.is_available() else "cpu"\n'
            'use_amp = device == "cuda"\npin = "cuda" in device\n',
            "import torch\ndevice = (torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")).type\n'
            'use_amp = device in ("cuda", "neuron")\n'
            'pin = torch.device(device).type in ("cuda", "neuron")\n',
            count=3,
        ),
        Invalid(
            'import torch\ndev = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n'
            'if dev.type == "cuda" and not args.device.startswith("cuda:"):\n    x = x.to(dev)\n',
            "import torch\ndev = torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")\nif dev.type in ("cuda", "neuron") and'
            ' not args.device.startswith(("cuda:", "neuron:")):\n    x = x.to(dev)\n',
            count=3,
        ),
        Invalid(  # stable-baselines3: the type of a device built for CUDA is the string "cuda"
            "import torch as th\ndef get_device(device):\n    device = th.device(device)\n"
            '    if device.type == th.device("cuda").type and not th.cuda.is_available():\n'
            '        return th.device("cpu")\n    return device\n',
            "import torch as th\ndef get_device(device):\n    device = th.device(device)\n"
            '    if device.type in ("cuda", "neuron") and not th.cuda.is_available():\n'
            '        return th.device("cpu")\n    return device\n',
        ),
        Invalid(
            'import torch\ndef f(x, node, gpu):\n    a = "cuda" in str(x.device)\n'
            '    b = node.type != "cuda"\n'
            '    return ("cuda:0" if gpu else "cpu"), a, b\n',
            'import torch\ndef f(x, node, gpu):\n    a = x.device.type in ("cuda", "neuron")\n'
            '    b = node.type not in ("cuda", "neuron")\n'
            "    device_type = (torch.accelerator.current_accelerator(check_available=True)"
            ' or torch.device("cpu")).type\n    return (f"{device_type}:0" if gpu else "cpu"), a, b\n',
            count=3,
        ),
        Invalid(
            'import torch\nif x.device.type == "cuda" and torch.cuda.get_device_capability()[0] >= 8:\n'
            '    attn = flash(x)\nif device.type in ("cuda", "xpu"):\n    pass\n',
            count=2,
        ),
        Invalid(
            "import torch\ndef select(device):\n    if device.startswith('cuda:'):\n"
            "        torch.accelerator.set_device_index(device)\n",
            "import torch\ndef select(device):\n"
            "    if device.startswith(('cuda:', 'neuron:')):\n"
            "        torch.accelerator.set_device_index(device)\n",
        ),
    )

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """A CUDA device string to compare with."""
        return cuda_string(lex)

    def visit_IfExp(self, node: cst.IfExp) -> None:
        if not device_conditional(self.ctx, node):
            return
        parent = self.ctx.parent
        if (
            isinstance(parent, cst.Arg)
            and parent.keyword is not None
            and parent.keyword.value == "accelerator"
        ):
            return  # Lightning's vocabulary, not a torch device (NM111)
        ctx = self.ctx
        cuda, other = (node.body, node.orelse) if is_cuda_string(node.body) else (node.orelse, node.body)
        available = availability(ctx, node.test)
        collapse = (
            string_value(other) == "cpu"
            and not has_index(cuda)
            and available is not None
            and available == (cuda is node.body)
        )
        message = "CUDA-or-CPU choice: use the current accelerator's type (`cpu` when there is none)"
        if not collapse:
            text, needs_name = agnostic_string(ctx, cuda)
            fix = FixSpec(
                "Replace the CUDA string with the current accelerator's type",
                (Replacement(cuda, text),),
                imports=("torch",),
                needs_name=needs_name,
            )
        elif (
            isinstance(ctx.parent, cst.Arg)
            and isinstance(ctx.ancestor(2), cst.Call)
            and (ctx.call_name(ctx.ancestor(2)) == "torch.device" and len(ctx.ancestor(2).args) == 1)
        ):
            fix = FixSpec(
                "Replace with the current accelerator",
                (Replacement(ctx.ancestor(2), fit(DEVICE, ctx.ancestor(3))),),
                imports=("torch",),
            )
        else:
            fix = FixSpec(
                "Replace with the current accelerator's type",
                (Replacement(node, DEVICE_TYPE),),
                imports=("torch",),
            )
        self.report(node, message, fix, region=(node.test,))  # `... and "CUDAExecutionProvider" in p` stays

    def visit_Comparison(self, node: cst.Comparison) -> None:
        if len(node.comparisons) == 1 and any(
            is_cuda_string(n) or string_value(n) == "cuda" or built_cuda_type(self.ctx, n) is not None
            for n in (node.left, node.comparisons[0].comparator, *_elements(node.comparisons[0].comparator))
        ):
            self.ctx.defer(lambda: self._comparison(node))  # whether a name is a device: after the walk

    def _comparison(self, node: cst.Comparison) -> None:
        op = node.comparisons[0].operator
        # `torch.device("cuda").type` is the string "cuda" (its literal gives the quotes): the same test
        left = built_cuda_type(self.ctx, node.left) or node.left
        right = built_cuda_type(self.ctx, node.comparisons[0].comparator) or node.comparisons[0].comparator
        if isinstance(op, (cst.In, cst.NotIn)):
            self._membership(node, left, right, isinstance(op, cst.In))
        elif isinstance(op, (cst.Equal, cst.NotEqual)):
            value, other = (right, left) if is_cuda_string(right) else (left, right)
            if is_cuda_string(value):
                self._equality(node, other, value, isinstance(op, cst.Equal))

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "startswith" and len(node.args) == 1):
            return
        prefix = string_value(node.args[0].value)
        if prefix in ("cuda", "cuda:"):
            self.ctx.defer(lambda: self._startswith(node, func, prefix == "cuda:"))

    def _startswith(self, node: cst.Call, func: cst.Attribute, indexed: bool) -> None:
        if not self._device(func.value):
            return
        prefix = node.args[0].value
        fix = FixSpec(
            self._TITLE,
            (Replacement(prefix, cuda_and_neuron(quote_of(prefix), ":" if indexed else "")),),
        )
        report_check(self, node, self.message, fix)

    def _equality(
        self, node: cst.Comparison, other: cst.BaseExpression, value: cst.BaseExpression, equal: bool
    ) -> None:
        if has_index(value):
            if not (isinstance(other, cst.Attribute) and other.attr.value == "type") and self._device(other):
                self.report(
                    node,
                    "Comparison with an indexed CUDA device: compare `torch.device(...).type` "
                    "and `.index` separately",
                )
            return
        if isinstance(other, cst.Attribute) and other.attr.value == "type":
            owner = other.value
            if self._device(owner):
                self._check(node, self.ctx.code(other).strip(), equal, quote_of(value))
            else:  # `node.type == "cuda"`: what else the code does with `node` is not known
                note = f"; check that `{self.ctx.code(owner).strip()}` is a device"
                self._check(node, self.ctx.code(other).strip(), equal, quote_of(value), note)
        elif self._device(other):
            self._check(node, self.ctx.code(other).strip(), equal, quote_of(value))

    def _membership(
        self, node: cst.Comparison, left: cst.BaseExpression, right: cst.BaseExpression, inside: bool
    ) -> None:
        if string_value(left) == "cuda" and self._device(right):
            self._check(node, self._type_text(right, quote_of(left)), inside, quote_of(left))
        elif string_value(left) == "cuda" and (inner := self._stringified_device(right)) is not None:
            self._check(node, f"{self.ctx.code(inner).strip()}.type", inside, quote_of(left))
        elif (
            isinstance(right, (cst.Tuple, cst.List, cst.Set))
            and "cuda" in (listed := {string_value(e.value) for e in right.elements})
            and not listed & NEURON_DEVICE_TYPES  # `("cuda", "neuron")` already takes Trainium in
            and (self._device(left) or (isinstance(left, cst.Attribute) and left.attr.value == "type"))
        ):
            self.report(
                node,
                'CUDA in a list of device types: add `"neuron"` where Trainium supports this code',
            )

    _TITLE = "Let neuron take CUDA's side of the test"

    def _check(self, node: cst.CSTNode, subject: str, positive: bool, quote: str, unknown: str = "") -> None:
        """Report the test with its fix; `unknown`: the tested value may not be a device (the fix is unsafe,
        and the note says what to check)."""
        fix = neuron_test(self, node, subject, positive, self._TITLE, quote)
        if unknown:
            fix = replace(fix, safety="unsafe")
        report_check(self, node, (self.message if positive else _NOT_CUDA_MESSAGE) + unknown, fix)

    def _device(self, expr: cst.BaseExpression) -> bool:  # after the walk only (it asks the device flow)
        return is_device_expr(self.ctx, expr)

    def _stringified_device(self, expr: cst.BaseExpression) -> cst.BaseExpression | None:
        """`d` for `str(d)` where `d` is a device (`str(next(model.parameters()).device)`), else None."""
        if not (isinstance(expr, cst.Call) and self.ctx.call_name(expr) == "str" and len(expr.args) == 1):
            return None
        inner = expr.args[0].value
        is_device_attr = isinstance(inner, cst.Attribute) and inner.attr.value == "device"
        return inner if is_device_attr or self._device(inner) else None

    def _type_text(self, expr: cst.BaseExpression, quote: str = '"') -> str:
        key = dotted(expr) if isinstance(expr, (cst.Name, cst.Attribute)) else None
        if key and key.lower().endswith("type"):  # already a device type string
            return self.ctx.code(expr).strip()
        return device_type_text(self.ctx, expr, quote)


#: the message of a test that excludes CUDA (`d.type != "cuda"`): true on Trainium, which takes the other side
_NOT_CUDA_MESSAGE = (
    "CUDA-only device test, true on Trainium (neuron takes the side meant for CPUs and other devices): let "
    'neuron in (`device.type not in ("cuda", "neuron")`)'
)


def _elements(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    return [e.value for e in node.elements] if isinstance(node, (cst.Tuple, cst.List, cst.Set)) else []
