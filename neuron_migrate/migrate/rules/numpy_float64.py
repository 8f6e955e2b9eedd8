"""NumPy arrays that are float64 by default (`np.zeros(3)`, `np.array([0.5])`) made into tensors on a device:
`Float64`'s (NM801) array check, in the pre-pass and in the walk."""

from __future__ import annotations

import re

import libcst as cst

from neuron_migrate.migrate.conditions import BETWEEN, call_arguments, module_aliases
from neuron_migrate.migrate.lexicon import Lexicon
from neuron_migrate.migrate.patterns import keyword

#: NumPy functions that make float64 arrays unless given a `dtype=`
_NUMPY_FLOAT64 = {
    f"numpy.{name}"
    for name in (
        "zeros",
        "ones",
        "empty",
        "full",
        "linspace",
        "logspace",
        "eye",
        "identity",
        "loadtxt",
        "genfromtxt",
    )
} | {
    f"numpy.random.{name}"
    for name in ("rand", "randn", "random", "uniform", "normal", "standard_normal", "random_sample")
}
#: the makers as a call spells them after the module (`np.zeros`, `np.random.rand`)
_MAKERS = frozenset(name.rsplit(".", 1)[1] for name in _NUMPY_FLOAT64)
_MAKER_CALL = rf"(?P<maker>{'|'.join(sorted(_MAKERS))}|array|asarray){BETWEEN}\("
_DTYPE_KEYWORD = re.compile(r"\bdtype\s*=")
_FLOAT_LITERAL = re.compile(r"\d\.|\.\d|\de")


def numpy_float64_to_device(lex: Lexicon) -> bool:
    """`Float64`'s array check in the pre-pass: a call of a NumPy function that makes float64 arrays
    (`np.zeros(...)`, ...) without `dtype=`, or `np.array` / `np.asarray` of a literal with a float in it, and
    `torch.from_numpy`, or `torch.tensor` / `torch.as_tensor` with `device=`.

    `zeros`, `ones`, `full` are torch's names too, so the call must be spelled on a NumPy alias that an import
    binds (`np.zeros`, `numpy.random.rand`); a file that imports names from NumPy directly (`from numpy import
    zeros`) keeps the looser test."""
    if "numpy" not in lex.imported or (_MAKERS | {"array", "asarray"}).isdisjoint(lex.names):
        return False
    to_device = "device" in lex.names and bool({"tensor", "as_tensor"} & lex.names)
    if not ("from_numpy" in lex.names or to_device):
        return False
    if re.search(r"\bfrom\s+numpy\b", lex.text):
        return True
    aliases = module_aliases(lex.text, "numpy")
    if not aliases:
        return False
    spelled = rf"\b(?:{'|'.join(map(re.escape, aliases))}){BETWEEN}\.(?:{BETWEEN}random{BETWEEN}\.)?"
    for call in re.finditer(rf"{spelled}{BETWEEN}{_MAKER_CALL}", lex.text):
        literal = call.group("maker") in ("array", "asarray")
        if literal and not re.match(rf"{BETWEEN}[\[(]", lex.text[call.end() :]):
            continue  # the rule reads only a literal list or tuple here
        arguments = call_arguments(lex.text, call.end())
        if arguments is None:  # cannot tell where the call ends: keep the rule
            return True
        if _DTYPE_KEYWORD.search(arguments):
            continue  # an explicit dtype: the rule does not flag this array
        if not literal or _FLOAT_LITERAL.search(arguments):
            return True
    return False


def array_to_device(ctx, call: cst.Call) -> cst.BaseExpression | None:
    """The NumPy array in `torch.from_numpy(a).to(device)` / `.cuda()`, `torch.tensor(a, device=...)`."""
    func = call.func
    if (
        isinstance(func, cst.Attribute)
        and func.attr.value in ("to", "cuda")
        and isinstance(func.value, cst.Call)
    ):
        inner = func.value
        if (
            ctx.call_name(inner) == "torch.from_numpy"
            and inner.args
            and (func.attr.value == "cuda" or call.args)
        ):
            first = call.args[0].value if call.args else None
            if first is None or not _is_dtype(ctx, first):
                return inner.args[0].value
    if (
        ctx.call_name(call) in ("torch.tensor", "torch.as_tensor")
        and call.args
        and keyword(call, "device")
        and keyword(call, "dtype") is None
    ):
        return call.args[0].value
    return None


def _is_dtype(ctx, node: cst.BaseExpression) -> bool:
    return (ctx.qualified_name(node) or "").startswith("torch.") and "float" in (
        ctx.qualified_name(node) or ""
    )


def is_numpy_float64(ctx, node: cst.BaseExpression | None, depth: int = 0) -> bool:
    """Whether `node` is (a name assigned) a NumPy array that is float64: made by a float64-by-default
    function without `dtype=`, or `np.array` of float literals."""
    if node is None or depth > 2:
        return False
    if isinstance(node, cst.Name):
        values = ctx.bindings.values(node.value)
        return bool(values) and all(is_numpy_float64(ctx, v, depth + 1) for v in values)
    if not isinstance(node, cst.Call):
        return False
    name = ctx.call_name(node) or ""
    if name in _NUMPY_FLOAT64:
        return keyword(node, "dtype") is None
    if name in ("numpy.array", "numpy.asarray") and node.args and keyword(node, "dtype") is None:
        values = node.args[0].value
        elements = values.elements if isinstance(values, (cst.List, cst.Tuple)) else ()
        return any(isinstance(e.value, cst.Float) for e in elements)
    return False
