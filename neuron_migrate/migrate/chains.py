"""Per-device `if`/`elif` chains: `if is_npu_available(): ... elif torch.cuda.is_available(): ... elif
is_neuron_available(): ...`.

One branch of such a chain is CUDA's and must stay CUDA's: made accelerator-generic, its test would also be
true on the devices whose branches come after it. When the chain already has a branch for `neuron`, none of
its branches needs a change for Trainium.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import pairwise

import libcst as cst

#: the vendors' accelerators besides CUDA and neuron, as device types and in availability functions
_VENDOR_DEVICES = "xpu|npu|mlu|hpu|mps|musa|xla|sdaa"
#: the device types of the vendors' accelerators besides CUDA and neuron
OTHER_ACCELERATOR_TYPES = frozenset({*_VENDOR_DEVICES.split("|"), "mtia", "tpu"})
#: other accelerators, as an `if`/`elif` chain names them: `device.type == "xpu"`, `is_torch_npu_available()`,
#: accelerate's and peft's `is_npu_available()`, `torch.xpu.is_available()`, `DistributedType.MULTI_NPU`
#: (a device name not run into other letters, so `input` is not `npu`)
_OTHER_DEVICES = re.compile(
    rf"(?<![a-z])({_VENDOR_DEVICES}|tpu|hip|rocm|neuronx?|privateuse1|custom_(?:device|backend)\w*)(?![a-z])",
    re.IGNORECASE,
)
#: `neuron`, and the PrivateUse1 backend `neuron` registers as (`_is_privateuse1_backend_available()`,
#: torch's `custom_device_mod` for `torch._C._get_privateuse1_backend_name()`)
_NEURON = re.compile(r"(?<![a-z])(neuronx?|privateuse1|custom_(?:device|backend)\w*)(?![a-z])", re.IGNORECASE)

#: code that chooses by another accelerator: its type as a string (`"mps"`, `'xpu:0'`, `"tpu"`), its
#: collective backend's name (`"hccl"`, HPU's; `"xccl"`, XPU's), or an availability function
#: (`is_torch_npu_available`, `is_xpu_available`)
_OTHER_DEVICE_NAMED = re.compile(
    rf"""["']({_VENDOR_DEVICES}|mtia|tpu|hccl|xccl)(?::\d*)?["']|\bis_(?:torch_)?({_VENDOR_DEVICES}|tpu)_available\b"""
)
#: CUDA's or neuron's device type, listed with others' (`["cuda", "xpu", "neuron"]`)
_TOGETHER = re.compile(r"""["'](?:cuda|neuron)(?::\d*)?["']""")
#: the device types of a CUDA test that lets neuron in (what NM105 writes, `d.type in ("cuda", "neuron")`):
#: one branch for both, not a branch of neuron's own
_SHARED_WITH_CUDA = re.compile(r"""\(\s*(["'])cuda(:?)\1\s*,\s*\1neuron\2\1\s*\)""")

#: what a branch of a per-device chain is told: the other devices' branches come first or after it
CHAIN_TODO = (
    "one branch of a per-device chain (`{cue}`): keep it, and add a branch for `neuron` "
    "(a generic test would also take the other devices' branches)"
)
CHAIN_NOTE = "one branch of a per-device chain that has a `neuron` branch: no change needed"


@dataclass(frozen=True)
class DeviceChain:
    """The other accelerators an `if`/`elif` chain branches on: the first one named, and whether the chain
    already has a branch for `neuron` (then none of its branches needs a change for Trainium)."""

    cue: str
    has_neuron: bool

    def advice(self) -> str:
        return CHAIN_NOTE if self.has_neuron else CHAIN_TODO.format(cue=self.cue)


def chain_tests(stack, index: int) -> list[cst.BaseExpression]:
    """The tests of the `if`/`elif` chain that `stack[index]` (an `If`) belongs to, first to last."""
    tests = []
    branch: cst.CSTNode | None = stack[_chain_top(stack, index)]
    while isinstance(branch, cst.If):
        tests.append(branch.test)
        branch = branch.orelse
    return tests


def chain_of_tests(ctx, tests: list[cst.BaseExpression]) -> DeviceChain | None:
    """The other devices `tests` name, if any."""
    cues = [
        match.group(0)
        for test in tests
        for match in _OTHER_DEVICES.finditer(_SHARED_WITH_CUDA.sub("", ctx.code(test)))
    ]
    if not cues:
        return None
    others = [cue for cue in cues if not _NEURON.fullmatch(cue)]
    return DeviceChain(others[0] if others else cues[0], len(others) < len(cues))


def names_neuron(ctx, test: cst.BaseExpression) -> bool:
    """Whether a test is about the `neuron` device (`is_neuron_available()`, `d.type == "neuron"`)."""
    return _NEURON.search(ctx.code(test)) is not None


def device_chain(ctx) -> DeviceChain | None:
    """The other accelerators an `if`/`elif` chain branches on, when the visited node is in one of the chain's
    tests (`if torch.cuda.is_available(): ... elif is_npu_available(): ...`); sibling `if` statements of the
    same block that test other devices count too (`if d == "cuda": ...` then `if d == "hpu": ...`), and so do
    the other operands of an `or` outside an `if` test (`return cuda.is_available() or hpu.is_available()`).
    A PrivateUse1 branch is a `neuron` branch: that is how `neuron` registers."""
    test_of, either = None, None
    for child, parent in zip(reversed(ctx.stack), reversed(ctx.stack[:-1]), strict=False):
        if isinstance(parent, cst.If) and child is parent.test:
            test_of = parent
            break
        if isinstance(parent, cst.BooleanOperation) and isinstance(parent.operator, cst.Or):
            either = parent  # `cuda.is_available() or hpu.is_available() or ...`: one test per device
        if isinstance(parent, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            return chain_of_tests(ctx, [either]) if either is not None else None
    if test_of is None:
        return None
    index = ctx.stack.index(test_of)
    tests = chain_tests(ctx.stack, index)
    index = _chain_top(ctx.stack, index)
    top = ctx.stack[index]
    block = ctx.stack[index - 1] if index > 0 else None
    if isinstance(block, (cst.IndentedBlock, cst.Module)):
        tests += [stmt.test for stmt in block.body if isinstance(stmt, cst.If) and stmt is not top]
    return chain_of_tests(ctx, tests)


def _chain_top(stack, index: int) -> int:
    """The index in `stack` of the first `if` of the chain `stack[index]` is an `elif` of."""
    while index > 0 and isinstance(stack[index - 1], cst.If) and stack[index - 1].orelse is stack[index]:
        index -= 1
    return index


def other_device_named(ctx) -> str | None:
    """The first other accelerator the module chooses by (`"mps"`, `is_torch_npu_available`), or None: a
    module that does treats the devices apart, so its CUDA code made generic changes what they do too
    (`include_half=device.startswith("cuda")` beside an `"mps"` case). A device type listed with CUDA's or
    neuron's (`device.type in ["cuda", "xpu", "neuron"]`, `if device not in ("cpu", "xpu", "neuron"):
    raise`) treats them together, and does not count. The module's text is read once per file, on first
    need."""
    return ctx.once(other_device_named, lambda: _first_other_device(ctx.source))


def _first_other_device(text: str) -> str | None:
    named = (m for m in _OTHER_DEVICE_NAMED.finditer(text) if not _listed(text, m))
    return next((next(g for g in m.groups() if g) for m in named), None)


def _listed(text: str, match: re.Match) -> bool:
    """Whether the device string `match` stands in a list, tuple or set that also names CUDA or neuron (the
    text between the brackets around it)."""
    if not match.group(0).startswith(("'", '"')):
        return False
    start = max(text.rfind(bracket, 0, match.start()) for bracket in "[({")
    if start < 0 or max(text.rfind(bracket, start, match.start()) for bracket in "])}") > start:
        return False  # not inside brackets: the last one opened before it is closed again
    ends = [i for i in (text.find(bracket, match.end()) for bracket in "])}") if i >= 0]
    inside = text[start + 1 : min(ends, default=len(text))]
    return "," in inside and _TOGETHER.search(inside) is not None


def after_device_branches(ctx, stack) -> bool:
    """Whether the node at the end of `stack` is in a later branch (an `elif` or the `else`) of a chain that
    tests other accelerators first: they took their own branches, so this one only serves the rest
    (`if is_xpu_available(): torch.xpu.manual_seed_all(s) else: torch.cuda.manual_seed_all(s)`)."""
    return any(
        isinstance(parent, cst.If)
        and child is parent.orelse
        and chain_of_tests(ctx, chain_tests(stack, index)) is not None
        for index, (parent, child) in enumerate(pairwise(stack))
    )
