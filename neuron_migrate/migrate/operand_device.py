"""The device a tensor made for CUDA must be on because of the other tensors of the op it feeds.

StyleTTS 2's decoder (review 49) builds a kernel for a convolution of its input:

    F0_curve = F.conv1d(F0_curve.unsqueeze(1), torch.ones(1, 1, F0_down).to('cuda'), ...)

The kernel must be where the input is, so `.to(F0_curve.device)` is what `.to('cuda')` meant: on CUDA it is
the same device wherever the original works (a torch op takes its tensors on one device; moving the kernel
to the current CUDA device only worked because the input was there), it follows the input to neuron, and it
needs no torch newer than any, unlike the current-accelerator idiom. Only for a torch op (its qualified name
starts with `torch.`) whose other positional argument is a parameter of the function, possibly through
methods that keep a tensor's device (`.unsqueeze(1)`).
"""

from __future__ import annotations

import libcst as cst

from neuron_migrate.migrate.walk import innermost_function

#: tensor methods whose result is on the tensor's device
_KEEPS_DEVICE = frozenset(
    [
        "unsqueeze",
        "squeeze",
        "view",
        "view_as",
        "reshape",
        "reshape_as",
        "transpose",
        "permute",
        "contiguous",
        "flatten",
        "float",
        "half",
        "double",
        "bfloat16",
        "long",
        "int",
        "bool",
        "clone",
        "detach",
        "t",
        "expand",
        "expand_as",
        "type_as",
        "abs",
        "neg",
        "sum",
        "mean",
        "narrow",
        "select",
    ]
)
_NOT_TENSORS = frozenset({"self", "cls"})


def operand_device(ctx, node: cst.BaseExpression) -> tuple[str, str] | None:
    """For a CUDA device string that places a tensor (`x.to("cuda")`, `torch.ones(..., device="cuda")`) passed
    to a torch op beside a parameter's tensor: (`param.device`, the op's name), else None. `ctx.stack` ends
    at `node`."""
    stack = ctx.stack
    if len(stack) < 5 or stack[-1] is not node:
        return None
    placing, holder, op = stack[-3], stack[-4], stack[-5]
    if not (isinstance(placing, cst.Call) and isinstance(holder, cst.Arg) and holder.value is placing):
        return None
    if not isinstance(op, cst.Call) or holder.keyword is not None:
        return None
    name = ctx.call_name(op) or ""
    if not name.startswith("torch.") or name.startswith(("torch.cuda.", "torch.device")):
        return None
    function = innermost_function(stack)
    if function is None:
        return None
    parameters = {p.name.value for p in (*function.params.posonly_params, *function.params.params)}
    functional = name.startswith("torch.nn.functional.")
    for position, arg in enumerate(op.args):
        if arg is holder or arg.keyword is not None or arg.star:
            continue
        root = _tensor_root(arg.value)
        if root is None or root not in parameters or root in _NOT_TENSORS:
            continue
        # a bare parameter may be a number some torch ops take (`torch.pow(base, t)`): only a functional op's
        # input, which must be a tensor; a tensor method called on it (`x.unsqueeze(1)`) says it is one
        if not isinstance(arg.value, cst.Name) or (functional and position == 0):
            return f"{root}.device", name
    return None


def _tensor_root(expr: cst.BaseExpression) -> str | None:
    """The name at the root of `expr` when every step from it keeps the device (`x`, `x.unsqueeze(1).float()`,
    `x.T`)."""
    while True:
        if isinstance(expr, cst.Name):
            return expr.value
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
            if expr.func.attr.value not in _KEEPS_DEVICE:
                return None
            expr = expr.func.value
        elif isinstance(expr, cst.Attribute) and expr.attr.value in ("T", "mT", "data"):
            expr = expr.value
        else:
            return None
