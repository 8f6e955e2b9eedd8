"""NM106: `torch.cuda` device queries and selection that `torch.accelerator` covers one for one."""

from __future__ import annotations

import re
from typing import ClassVar

import libcst as cst

from neuron_migrate.migrate.bindings import key_of
from neuron_migrate.migrate.device_flow import device_flow, is_index_name
from neuron_migrate.migrate.guards import accelerator_certain, conjuncts
from neuron_migrate.migrate.patterns import QualifiedNameRule, check_region, guarded_call_fix
from neuron_migrate.migrate.rule import FixSpec, Invalid, Replacement
from neuron_migrate.migrate.rules.accelerator_checks import reported_in_device_chain
from neuron_migrate.migrate.walk import innermost_function, walk

_CHECKS = {"torch.cuda.is_available", "torch.cuda.device_count"}


#: a value's own device in a test (`metric.device.type`, `x.is_cuda`), or a device name compared with the
#: CPU's (`device != "cpu"`, `dev == 'cpu'`)
_OWN_DEVICE = re.compile(r"\.device\b|\.is_cuda\b|\bdev(?:ice)?\w*\s*[!=]=\s*['\"]cpu['\"]")
_FOREIGN_DEVICE = (
    "with `{test}` it asks about the device a value names (a checkpoint's, a caller's): whether CUDA, "
    "which that value names on a CUDA machine, is there; `torch.accelerator.is_available()` would say yes on "
    "a host with another accelerator, where CUDA is missing: compare that device's type with the current "
    "accelerator's"
)


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
    is guarded by `torch.accelerator.is_available()` (unless an accelerator is certain there): selecting a
    device means nothing without one, and `set_device_index` raises there. An availability check whose code
    keeps CUDA-only calls (device properties, capability, bf16 support, CUDA-only libraries) is not
    rewritten: on Trainium that code would run and fail, so the check stays CUDA's and is reported for a
    person.
    """

    code = "NM106"
    name = "cuda-device-api"
    message = "`{name}` is CUDA-only: use `torch.accelerator` so the code sees any accelerator"
    severity = "error"
    fix_safety = "safe"
    triggers = (b"cuda",)
    names_only = True
    NAMES: ClassVar[dict[str, str | None]] = {
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
            "import torch\nif torch.accelerator.is_available():\n"
            "    torch.accelerator.set_device_index(rank)\n",
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
            "import torch\n"
            "with torch.accelerator.device_index(1 if torch.accelerator.is_available() else None):\n"
            "    pass\n",
        ),
        Invalid(  # a `torch.cuda.device` as a value: `device_index` is a context manager only
            "import torch\ntorch.cuda.set_device(torch.cuda.device(rank))\n",
            count=2,
        ),
        Invalid(
            "def f():\n    from torch import cuda\n    return cuda.current_device()\n",
            "import torch\ndef f():\n    return torch.accelerator.current_device_index()\n",
        ),
        Invalid(  # a check around CUDA-only code stays CUDA's: on Trainium that code would run and fail
            "import torch\nif torch.cuda.is_available() and torch.cuda.is_bf16_supported():\n"
            "    dtype = torch.bfloat16\n"
            "if torch.cuda.is_available():\n    total = torch.cuda.get_device_properties(0).total_memory\n",
            count=2,
        ),
        Invalid(  # a loop over the CUDA devices whose body keeps CUDA-only code
            "import torch\nfor i in range(torch.cuda.device_count()):\n"
            "    print(torch.cuda.get_device_name(i))\n",
        ),
        Invalid(  # the flag a check is assigned to guards CUDA-only code
            "import torch\nuse_cuda = torch.cuda.is_available()\nif use_cuda:\n"
            "    name = torch.cuda.get_device_name()\n",
        ),
    )

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        #: each test with the function it is in (None at module level)
        self.tests: list[tuple[cst.If | cst.While | cst.IfExp, cst.FunctionDef | None]] = []

    def visit_If(self, node: cst.If) -> None:
        self.tests.append((node, self._function()))

    def visit_While(self, node: cst.While) -> None:
        self.tests.append((node, self._function()))

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self.tests.append((node, self._function()))

    def _function(self) -> cst.FunctionDef | None:
        return innermost_function(self.ctx.stack)

    def on_use(self, node: cst.Name | cst.Attribute, call: cst.Call | None, name: str) -> None:
        if name == "torch.cuda.device" and call is not None and not self._with_item(call):
            self.report(
                call,
                self.message_for(name) + " (a `torch.cuda.device` used as a value: pass its index itself, "
                "`torch.accelerator.set_device_index(i)`)",
                None,
            )
            return
        if name not in _CHECKS or call is None:
            super().on_use(node, call, name)
            return
        if reported_in_device_chain(self, call, self.message_for(name)):
            return
        if name == "torch.cuda.is_available" and (test := self._foreign_device_test(call)) is not None:
            self.report(call, f"{self.message_for(name)} ({_FOREIGN_DEVICE.format(test=test)})", None)
            return
        if name == "torch.cuda.is_available" and (holder := self._saved_device_choice(call)) is not None:
            self.ctx.defer(lambda: self._check_or_saved_device_choice(node, call, name, holder))
            return
        self._report_check(node, call, name)

    def _foreign_device_test(self, call: cst.Call) -> str | None:
        """For `not torch.cuda.is_available() and metric.device.type != "cpu"` (chemprop's test for a metric
        a checkpoint brought from a CUDA machine) or `device != "cpu" and torch.cuda.is_available()`
        (axolotl's LoRA merge keeps the caller's device, `"cuda"` by default, only where CUDA is): the other
        part, which tests a value's own device, as text. Together they ask about that device, not whether an
        accelerator is there."""
        stack = self.ctx.stack
        at = next((i for i in range(len(stack) - 1, -1, -1) if stack[i] is call), None)
        if at is None or at == 0:
            return None
        negation = stack[at - 1]
        if isinstance(negation, cst.UnaryOperation) and isinstance(negation.operator, cst.Not):
            at -= 1
        else:
            negation = call
        top = None
        for parent in reversed(stack[:at]):
            if not (isinstance(parent, cst.BooleanOperation) and isinstance(parent.operator, cst.And)):
                break
            top = parent
        if top is None:
            return None
        others = (part for part in conjuncts(top) if part is not negation)
        return next((self.ctx.code(part) for part in others if _OWN_DEVICE.search(self.ctx.code(part))), None)

    def _report_check(self, node: cst.Name | cst.Attribute, call: cst.Call, name: str) -> None:
        region = () if self._flag_assigned() else check_region(self.ctx)
        if region:
            self.report(call, self.message_for(name), self.fix_for(node, call, name), region=region)
            return
        flag = self._flag_assigned()
        if flag is None:
            super().on_use(node, call, name)
            return
        fix = self.fix_for(node, call, name)
        statement, function = check_region(self.ctx), self._function()
        self.ctx.defer(
            lambda: self.report(
                call, self.message_for(name), fix, region=statement + self._guarded_by(flag, function)
            )
        )

    def _saved_device_choice(self, call: cst.Call) -> cst.Arg | cst.Assign | None:
        """For `x if torch.cuda.is_available() else y` with `None` on one side, passed as an argument or
        assigned: that argument or assignment (whether it is a `map_location` is asked after the walk)."""
        stack = self.ctx.stack
        at = next((index for index, node in enumerate(stack) if node is call), None)
        above = list(reversed(stack[:at])) if at is not None else []
        if above and isinstance(above[0], cst.UnaryOperation) and isinstance(above[0].operator, cst.Not):
            above = above[1:]
        choice = above[0] if above else None
        if not (isinstance(choice, cst.IfExp) and len(above) > 1):
            return None
        if not any(
            isinstance(side, cst.Name) and side.value == "None" for side in (choice.body, choice.orelse)
        ):
            return None
        holder = above[1]
        return holder if isinstance(holder, (cst.Arg, cst.Assign)) else None

    def _check_or_saved_device_choice(
        self, node: cst.Name | cst.Attribute, call: cst.Call, name: str, holder: cst.Arg | cst.Assign
    ) -> None:
        """MONAI's pretrained nets: `map_location = None if torch.cuda.is_available() else
        torch.device("cpu")`. `None` restores each tensor on the device it was saved from, which only CUDA
        can do for a checkpoint saved on a GPU; elsewhere the CPU is right, on Trainium too. Made generic, the
        check would pass on neuron and the load would fail: a note. Any other choice with `None` is an
        ordinary check."""
        if isinstance(holder, cst.Arg):
            to_map_location = holder.keyword is not None and holder.keyword.value == "map_location"
        else:
            keys = {key_of(target.target) for target in holder.targets}
            to_map_location = bool(keys & device_flow(self.ctx).map_locations)
        if not to_map_location:
            self._report_check(node, call, name)
            return
        self.report(
            call,
            self.message_for(name),
            no_change="it chooses `map_location=None` (tensors restored on the device they were saved from, "
            "which only CUDA can do for a GPU checkpoint) or the CPU, which is right on Trainium: no change "
            "needed",
        )

    def _device_index_fix(self, node: cst.CSTNode, call: cst.Call) -> FixSpec | None:
        """`torch.cuda.device(i)` takes an index or a device; `torch.accelerator.device_index` an index
        only, and is a context manager only: `torch.cuda.set_device(torch.cuda.device(i))` (nanotron) reads
        the index of a `torch.cuda.device`, which `set_device_index` cannot: `on_use` reports that use
        without a fix."""
        arg = call.args[0] if len(call.args) == 1 and not call.args[0].star else None
        if arg is None:
            return None
        value = arg.value
        title = "Replace `torch.cuda.device` with `torch.accelerator.device_index`"
        target = "torch.accelerator.device_index"
        if isinstance(value, cst.Name) and value.value == "None":
            return FixSpec(title, (Replacement(call, f"{target}(None)"),), imports=("torch",))
        if isinstance(value, cst.Attribute) and value.attr.value == "device":
            # `q.device`: its index, None for a CPU tensor, which makes `device_index` a no-op
            index, title = f"{self.ctx.code(value)}.index", title + " of the device's index"
        elif isinstance(value, cst.Integer) or is_index_name(self.ctx.code(value)):
            index = self.ctx.code(value)
            if not accelerator_certain(
                self.ctx
            ):  # `device_index(None)` is the no-op a CPU-only machine needs
                index = f"{index} if torch.accelerator.is_available() else None"
        else:
            return None
        return FixSpec(title, (Replacement(call, f"{target}({index})"),), imports=("torch",))

    def _with_item(self, call: cst.Call) -> bool:
        """Whether `call` is the context manager of a `with` item."""
        stack = self.ctx.stack
        at = next((index for index, node in enumerate(stack) if node is call), 0)
        return at > 0 and isinstance(stack[at - 1], cst.WithItem) and stack[at - 1].item is call

    def _flag_assigned(self) -> str | None:
        """`use_cuda` for `use_cuda = torch.cuda.is_available()` (or `args.cuda = ... and is_available()`)."""
        for child, parent in zip(reversed(self.ctx.stack), reversed(self.ctx.stack[:-1]), strict=False):
            if isinstance(parent, cst.Assign) and child is parent.value and len(parent.targets) == 1:
                return key_of(parent.targets[0].target)
            if not isinstance(
                parent,
                (
                    cst.BooleanOperation,
                    cst.UnaryOperation,
                    cst.Comparison,
                    cst.ComparisonTarget,
                    cst.Call,
                    cst.Arg,
                ),
            ):
                return None
        return None

    def _guarded_by(self, flag: str, function: cst.FunctionDef | None) -> tuple[cst.CSTNode, ...]:
        """The tests and bodies of the checks that test the flag: the code this availability answer guards. A
        plain name's tests are those of the function that assigns it (another function's `pin_memory`
        parameter is another name); an attribute's (`self.has_cuda`) are anywhere in the module."""
        region: list[cst.CSTNode] = []
        local = "." not in flag
        for test, where in self.tests:
            if (where is function or not local) and flag in {key_of(n) for n in _names(test.test)}:
                region.extend((test.test, test.body))
        return tuple(region)

    def fix_for(self, node: cst.CSTNode, call: cst.Call | None, name: str) -> FixSpec | None:
        if call is not None and name == "torch.cuda.device":
            return self._device_index_fix(node, call)
        if call is not None and name == "torch.cuda.set_device":
            fix = guarded_call_fix(self, call, name, self.NAMES[name], cpu_value=None)
            if fix is not None:
                return fix
        return super().fix_for(node, call, name)


def _names(expr: cst.CSTNode) -> list[cst.CSTNode]:
    """The names and attribute chains in a test (`use_cuda`, `args.cuda`)."""
    found: list[cst.CSTNode] = []

    class Collect(cst.CSTVisitor):
        def visit_Attribute(self, node: cst.Attribute) -> bool:
            found.append(node)
            return False

        def visit_Name(self, node: cst.Name) -> None:
            found.append(node)

    walk(expr, Collect())
    return found
