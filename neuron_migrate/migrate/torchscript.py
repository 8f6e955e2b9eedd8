"""Code TorchScript may compile, where `torch.accelerator` and a computed autocast device cannot go.

`torch.jit.script` compiles a module's methods (all but `__init__`) and the functions it is given. None of
`torch.accelerator`'s functions compiles (torch 2.13: `NamedExpr aren't supported`, or a pybind builtin it
cannot call), and an autocast whose device is not a string literal compiles but fails when it runs
("Autocast device argument must be a constant"), where `torch.autocast("cuda", enabled=False)`, `x.cuda()`
and `torch.device("cuda")` work. A fix that writes either into such code breaks scripting on every device,
CUDA included (MONAI's `CastToFloat`, which `add_casts_around_norms` scripts for ONNX and TensorRT export;
kornia's scripted matchers). Where the file shows it is TorchScript code (it uses `torch.jit` or names
TorchScript), or the project guards code for TorchScript anywhere (`torch.jit.is_scripting()`), such a fix
becomes unsafe and says why.
"""

from __future__ import annotations

import re

import libcst as cst

from neuron_migrate.migrate.fixes import PLACEHOLDERS
from neuron_migrate.migrate.names import dotted

#: what TorchScript code says: the `torch.jit` APIs that script or steer scripting, or the name itself
_TORCHSCRIPT = re.compile(
    r"\bjit\.(?:script|export|unused|ignore|is_scripting|interface)\b|torchscript", re.IGNORECASE
)
_SCRIPT_DECORATOR = re.compile(r"(^|\.)jit\.(script|export|interface)$")
#: a `@torch.jit.script` decorator line: it scripts the function or class it decorates, and nothing else
_SCRIPT_DECORATOR_LINE = re.compile(r"^[ \t]*@[\w. \t]*\bjit\.script\b", re.M)

SCRIPTED = (
    "TorchScript runs neither `torch.accelerator` nor an autocast whose device is not a string literal, and "
    "this project's modules are TorchScript code: if `{scope}` is ever scripted, keep its CUDA code for "
    "scripting (`if torch.jit.is_scripting():`) and give eager mode the rewrite"
)
#: rules whose fixes give an autocast a computed device
AUTOCAST_RULES = frozenset({"NM201", "NM204"})


def scripted_scope(ctx, pending, project_scripts: bool = False) -> str | None:
    """The function or method a fix would break for TorchScript (its name), or None: the fix writes
    `torch.accelerator` (or the device idiom, which calls it) or a computed autocast device into a method of
    a `*Module` class other than `__init__`, or into a function decorated for TorchScript, in a file that
    shows it is TorchScript code, or of a project that guards code for TorchScript (`project_scripts`:
    kornia's matchers carry no sign of it, but 30 of kornia's modules test `torch.jit.is_scripting()`). In
    such a project an autocast turned off for its input's device (`x.device.type`) counts in any function:
    kornia scripts plain functions too. A file whose only sign is `@torch.jit.script` on functions or classes
    scripts those alone, not its modules' methods (imagen-pytorch scripts two noise schedules)."""
    if _unscriptable(ctx, pending.node):
        return None  # the code never scripted: nothing to break
    fix = pending.fix
    texts = [part.text for part in (*fix.replacements, *fix.insertions)]
    accelerator = any("torch.accelerator" in text or any(p in text for p in PLACEHOLDERS) for text in texts)
    autocast = pending.rule.code in AUTOCAST_RULES
    if not (accelerator or autocast):
        return None
    signs, decorators = ctx.once(_script_signs, lambda: _script_signs(ctx.source))
    if not (project_scripts or signs):
        return None
    scope = _scope(pending.stack, project_scripts or signs > decorators)
    if scope is not None or accelerator or not (project_scripts and autocast):
        return scope
    return next((node.name.value for node in pending.stack if isinstance(node, cst.FunctionDef)), None)


def _script_signs(source: str) -> tuple[int, int]:
    """How often a file says it is TorchScript code, and how many of those are `@torch.jit.script`
    decorator lines (a file whose only signs are those scripts the decorated code alone)."""
    return len(_TORCHSCRIPT.findall(source)), len(_SCRIPT_DECORATOR_LINE.findall(source))


#: the `torch.cuda` functions TorchScript compiles (builtin `cuda::` ops of a CUDA build) and its stream
#: and event classes; the others (`empty_cache`, `is_available`, the memory statistics, `manual_seed`) it
#: cannot
_SCRIPTABLE_CUDA = frozenset(
    {"synchronize", "device_count", "current_device", "current_stream", "default_stream", "set_device"}
    | {"Stream", "Event"}
)


def _unscriptable(ctx, node: cst.CSTNode) -> bool:
    """Whether the CUDA code a finding is about is a `torch.cuda` function TorchScript cannot compile: a
    module method that calls it was never scriptable (MONAI's `torch.cuda.empty_cache()` in VISTA3D)."""
    target = node.func if isinstance(node, cst.Call) else node
    name = ctx.qualified_name(target) or ""
    return (
        name.startswith("torch.cuda.")
        and name.count(".") == 2
        and name.rsplit(".", 1)[1] not in _SCRIPTABLE_CUDA
    )


def _scope(stack: tuple[cst.CSTNode, ...], modules: bool) -> str | None:
    """The outermost function of `stack` that TorchScript may compile, by name: one decorated for it, a
    method of a class decorated for it, or (`modules`: the file may script its modules) a `*Module`'s
    method."""
    for index, node in enumerate(stack):
        if isinstance(node, cst.ClassDef) and _decorated_for_torchscript(node):
            method = next((n for n in stack[index:] if isinstance(n, cst.FunctionDef)), None)
            return f"{node.name.value}.{method.name.value}" if method else node.name.value
        if not isinstance(node, cst.FunctionDef):
            continue
        if _decorated_for_torchscript(node):
            return node.name.value
        owner = stack[index - 2] if index >= 2 else None
        if (
            modules
            and isinstance(owner, cst.ClassDef)
            and node.name.value != "__init__"
            and any((dotted(base.value) or "").endswith("Module") for base in owner.bases)
        ):
            return f"{owner.name.value}.{node.name.value}"
        return None
    return None


def _decorated_for_torchscript(node: cst.FunctionDef | cst.ClassDef) -> bool:
    return any(_SCRIPT_DECORATOR.search(dotted(_callee(d.decorator)) or "") for d in node.decorators)


def _callee(decorator: cst.BaseExpression) -> cst.BaseExpression:
    return decorator.func if isinstance(decorator, cst.Call) else decorator
