"""Code that does the same on any accelerator: what a CUDA device-type test may safely send other devices to.

Made generic (`d.type != "cpu"`), a test like `if x.device.type == "cuda":` sends `neuron` (and XPU, MPS, …)
into code that was written for CUDA only. That is safe when the code is device plumbing (moving and pinning
tensors, `torch.accelerator` / `torch.amp` calls, logging, builtins) or code the fixes of the same run make
device-agnostic; anything else (a torch op with a CUDA-only argument such as `torch.mm(out_dtype=...)`, the
project's own kernels) may not run there, so the rewrite needs a person (`settle` makes it unsafe).
"""

from __future__ import annotations

import builtins
import re

import libcst as cst

from neuron_migrate.migrate.guards import implies
from neuron_migrate.migrate.names import dotted

_NEUTRAL_NAMES = re.compile(
    r"torch\.(accelerator|amp|profiler)\..*|torch\.(device|get_device_module|Stream|Event|is_tensor|"
    r"is_autocast_enabled|get_autocast_dtype|no_grad|inference_mode)"
)
#: no builtin runs device code
_BUILTINS = frozenset(dir(builtins))
#: tensor and module methods that only move, pin, convert or read values (and those of lists and dicts)
_NEUTRAL_METHODS = frozenset(
    re.findall(
        r"\w+",
        "to cpu pin_memory is_pinned item tolist numpy detach contiguous half float bfloat16 size dim numel "
        "get pop append extend update keys values items join format startswith endswith",
    )
)
_LOG_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "log"})
_EXCEPTION_NAME = re.compile(r"(Error|Exception|Warning|Exit)$")


def widening_risk(ctx, check, libraries: list, covered: set[int]) -> str | None:
    """Why making the CUDA device-type test `check` generic could send other devices into code they may not
    run, or None: the file uses CUDA-only libraries or kernels (`libraries`: their findings), or the code the
    test selects for CUDA makes a call that is neither device plumbing nor fixed in this run."""
    call = first_unknown_call(ctx, cuda_side(ctx, check), covered)
    if call is not None:
        return f"other devices would run `{call}`: check it works there"
    if libraries:
        used = ctx.code(libraries[0].node).strip().splitlines()[0]
        return f"the file uses CUDA-only code, `{used}`: check that other devices should take this path"
    return None


def cuda_side(ctx, check) -> tuple[cst.CSTNode, ...]:
    """The code the test of `check` runs only on CUDA: the body of `if <CUDA>:`, the `else` of `if <not
    CUDA>:`, the code after `if <not CUDA>: raise`; nothing for a test whose value is kept
    (`use_amp = ...`)."""
    test = check.region[0] if check.region else None
    owner = next(
        (n for n in check.stack if isinstance(n, (cst.If, cst.While, cst.IfExp)) and n.test is test), None
    )
    if owner is None:
        return ()
    if owner.body not in check.region:  # a precondition: what follows it
        return check.region[1:]
    when_true, when_false = implies(ctx, owner.test)
    if when_true != "certain" and when_false == "certain":
        orelse = owner.orelse
        return () if orelse is None else (orelse.body if isinstance(orelse, cst.Else) else orelse,)
    return (owner.body,)


def first_unknown_call(ctx, nodes: tuple[cst.CSTNode, ...], covered: set[int]) -> str | None:
    """The first call in `nodes` that is neither device plumbing nor replaced by an applied fix (its node id
    in `covered`), as source text, or None."""
    found: list[str] = []

    class Finder(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if found or id(node) in covered:
                return False
            if isinstance(node, cst.Call) and not (_callee_fixed(node, covered) or _neutral(ctx, node)):
                text = " ".join(ctx.code(node).split())
                found.append(text if len(text) <= 50 else text[:47] + "...")
                return False
            return True

    for node in nodes:
        node.visit(Finder())
        if found:
            return found[0]
    return None


def _callee_fixed(call: cst.Call, covered: set[int]) -> bool:
    """Whether an applied fix replaces the function a call calls (`x.cuda()` whose `cuda` becomes `to`)."""
    func = call.func
    return id(func) in covered or (isinstance(func, cst.Attribute) and id(func.attr) in covered)


def _neutral(ctx, call: cst.Call) -> bool:
    name = ctx.call_name(call) or ""
    if _NEUTRAL_NAMES.fullmatch(name) or name in _BUILTINS or _EXCEPTION_NAME.search(name):
        return True
    func = call.func
    if not isinstance(func, cst.Attribute):
        return False
    method, owner = func.attr.value, dotted(func.value) or ""
    if method in _LOG_METHODS and ("log" in owner.lower() or owner == "warnings"):
        return True
    return method in _NEUTRAL_METHODS
