"""The torch APIs a program calls, with the argument style of each call, and whether torch 2.13 accepts them.

`torch_calls(source)` finds every call whose callee is a dotted name that resolves (through the file's
imports: `import torch.distributed as dist`, `from torch import cuda`) to `torch.…`, and records how it is
called: the number of positional arguments and the keyword names. `torch.get_device_module(...).name(...)`
counts as `torch.cuda.name`: that is the module it returns on a CUDA machine (what it returns elsewhere is
checked by running the rewrite there). `check_call` resolves the name in the installed torch and binds the
call to `inspect.signature` where torch has one.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TorchCall:
    """One call style: `torch.accelerator.synchronize(_, device=)`."""

    name: str
    positional: int
    keywords: tuple[str, ...]
    unpacked: bool  # *args / **kwargs at the call: the style cannot be bound statically

    def __str__(self) -> str:
        parts = ["_"] * self.positional + [f"{k}=" for k in self.keywords] + (["*…"] if self.unpacked else [])
        return f"{self.name}({', '.join(parts)})"


def _aliases(tree: ast.Module) -> dict[str, str]:
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "torch":
                    names[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else "torch"
        elif (
            isinstance(node, ast.ImportFrom)
            and (node.module or "").split(".")[0] == "torch"
            and not node.level
        ):
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _dotted(node: ast.expr, aliases: dict[str, str]) -> str | None:
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    if isinstance(node, ast.Attribute):
        base = node.value
        if isinstance(base, ast.Call) and _dotted(base.func, aliases) == "torch.get_device_module":
            return f"torch.cuda.{node.attr}"
        prefix = _dotted(base, aliases)
        return f"{prefix}.{node.attr}" if prefix else None
    return None


def torch_calls(source: str) -> set[TorchCall]:
    """The torch call styles in `source` (see the module docstring)."""
    tree = ast.parse(source)
    aliases = _aliases(tree)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (name := _dotted(node.func, aliases)):
            unpacked = any(isinstance(a, ast.Starred) for a in node.args) or any(
                k.arg is None for k in node.keywords
            )
            found.add(
                TorchCall(
                    name,
                    sum(not isinstance(a, ast.Starred) for a in node.args),
                    tuple(k.arg for k in node.keywords if k.arg),
                    unpacked,
                )
            )
    return found


def resolve(name: str) -> Any:
    """The object `torch.a.b.c` names in the installed torch (AttributeError / ImportError when it has
    none)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(name)


def check_call(call: TorchCall) -> str | None:
    """None when torch 2.13 has the API and accepts the call's argument style, else what is wrong."""
    try:
        target = resolve(call.name)
    except (AttributeError, ImportError) as err:
        return f"{call.name} does not exist in torch 2.13 ({err})"
    if call.unpacked:
        return None
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return None  # a C function or type without a signature: existence is what can be checked
    try:
        signature.bind(*([None] * call.positional), **dict.fromkeys(call.keywords))
    except TypeError as err:
        return f"{call} does not bind to {call.name}{signature}: {err}"
    return None
