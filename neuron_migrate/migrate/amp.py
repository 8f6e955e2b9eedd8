"""Argument handling shared by the mixed-precision rewrites (NM201–NM205).

The CUDA-only amp objects were *off* on a machine without CUDA: `torch.cuda.amp.autocast` and
`torch.autocast('cuda')` left matmuls in float32 and `torch.cuda.amp.GradScaler` kept the scale at 1. Their
`torch.amp` replacements on the current device would be *on* for the CPU (bfloat16 autocast, an enabled
scaler), so every rewrite passes `enabled=... torch.accelerator.is_available()` to keep the old behaviour,
unless the code already sits under an availability guard.
"""

from __future__ import annotations

import libcst as cst

from neuron_migrate.migrate.fixes import AVAILABLE
from neuron_migrate.migrate.guards import accelerator_certain

#: CUDA autocast's default dtype; kept explicit because the default differs per device (cpu: bfloat16)
CUDA_AUTOCAST_DTYPE = "torch.float16"

_ATOMIC = (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.SimpleString, cst.Integer)


def bind_arguments(call: cst.Call, params: tuple[str, ...]) -> dict[str, cst.BaseExpression] | None:
    """`call`'s arguments by parameter name (positionals in `params` order), or None for `*args`/`**kwargs`
    or more positionals than `params` (then the call cannot be rewritten argument by argument)."""
    bound: dict[str, cst.BaseExpression] = {}
    positionals = 0
    for arg in call.args:
        if arg.star:
            return None
        if arg.keyword is None:
            if positionals >= len(params):
                return None
            bound[params[positionals]] = arg.value
            positionals += 1
        else:
            bound[arg.keyword.value] = arg.value
    return bound


def rebuilt_safety(node: cst.CSTNode) -> str | None:
    """A fix that rebuilds `node` from its parts drops the comments inside it: then it needs review."""

    class FindComment(cst.CSTVisitor):
        found = False

        def visit_Comment(self, comment: cst.Comment) -> None:
            self.found = True

    finder = FindComment()
    node.visit(finder)
    return "unsafe" if finder.found else None


def is_literal(node: cst.BaseExpression | None, value: str) -> bool:
    """Whether `node` is the bare name `True`, `False` or `None` given as `value`."""
    return isinstance(node, cst.Name) and node.value == value


def enabled_value(ctx, node: cst.BaseExpression | None) -> str | None:
    """The `enabled=` text that keeps a CUDA-only amp object off without an accelerator (None: omit it)."""
    if accelerator_certain(ctx):
        return None if node is None else ctx.code(node)
    if node is None or is_literal(node, "True"):
        return AVAILABLE
    if is_literal(node, "False"):
        return "False"
    text = ctx.code(node)
    if not isinstance(node, _ATOMIC):
        text = f"({text})"
    return f"{text} and {AVAILABLE}"


def keyword_arguments(
    ctx, bound: dict[str, cst.BaseExpression], order: tuple[str, ...], overrides: dict[str, str | None]
) -> list[str]:
    """`name=value` texts: the names of `order` first, then any other bound keyword, in call order.

    `overrides` replaces (or, with None, drops) a value; an override for an unbound name adds it.
    """
    texts: dict[str, str | None] = {name: ctx.code(value) for name, value in bound.items()}
    texts.update(overrides)
    names = [n for n in order if n in texts] + [n for n in texts if n not in order]
    return [f"{name}={texts[name]}" for name in names if texts[name] is not None]
