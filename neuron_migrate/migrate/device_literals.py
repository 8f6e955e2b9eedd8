"""CUDA device strings (`'cuda'`, `'cuda:1'`, `f"cuda:{rank}"`, …) and what each becomes in agnostic code.

A rewritten string stays a string (`"cuda"` -> the accelerator's type, `f"cuda:{i}"` -> `f"{type}:{i}"`), so
whatever the program does with it afterwards (`in`, `startswith`, formatting, JSON) keeps working; only where
a torch API takes the value directly does a bare `"cuda"` become the device itself. The texts hold the device
placeholders of `fixes.py`; `naming.py` turns them into a name or the inline idiom.
"""

from __future__ import annotations

import re

import libcst as cst

from neuron_migrate.migrate.fixes import DEVICE, DEVICE_ATOM, DEVICE_TYPE
from neuron_migrate.migrate.walk import find

#: the device types `neuron` has in torch: its own, and the PrivateUse1 key it registers through
NEURON_DEVICE_TYPES = frozenset({"neuron", "privateuseone"})
#: the device types a fixed CUDA test lets in: CUDA, as before, and Trainium
CUDA_AND_NEURON = ("cuda", "neuron")
_CUDA_DEVICE = re.compile(r"^cuda(:\d+)?$")
_CUDA_PREFIX = re.compile(r"^cuda(:|$)")


def literal_value(node: cst.SimpleString) -> str | bytes:
    """`node.evaluated_value` without Python's compiler where the literal's text is its value: no escape, no
    carriage return, no bytes prefix (`evaluated_value` compiles every literal it reads, a twentieth of a
    scan)."""
    text, prefix = node.value, node.prefix
    if "\\" in text or "\r" in text or prefix.lower() not in ("", "r", "u"):
        return node.evaluated_value
    return text[len(prefix) + len(node.quote) : -len(node.quote)]


def string_value(node: cst.CSTNode | None) -> str | None:
    """The value of a plain string literal (not bytes, not f-string), else None."""
    if isinstance(node, cst.SimpleString):
        if "b" in node.prefix.lower():
            return None
        value = literal_value(node)
        return value if isinstance(value, str) else None
    if isinstance(node, cst.ConcatenatedString):
        left, right = string_value(node.left), string_value(node.right)
        return left + right if left is not None and right is not None else None
    return None


def is_cuda_device_string(node: cst.CSTNode) -> bool:
    """`'cuda'`, `'cuda:0'`, `f"cuda:{rank}"`, `"cuda:{}".format(rank)`, `"cuda:%d" % rank`."""
    value = string_value(node)
    if value is not None:
        return bool(_CUDA_DEVICE.match(value))
    if isinstance(node, cst.FormattedString):
        head = node.parts[0] if node.parts else None
        return (
            isinstance(head, cst.FormattedStringText)
            and _CUDA_PREFIX.match(head.value) is not None
            and (head.value in ("cuda", "cuda:"))
        )
    if (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "format"
    ):
        value = string_value(node.func.value)
        return value is not None and bool(re.match(r"^cuda:\{\w*\}$", value))
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
        value = string_value(node.left)
        return value is not None and bool(re.match(r"^cuda:%[di]$", value))
    return False


def is_cuda_string(node: cst.CSTNode) -> bool:
    """A CUDA device string, including `"cuda:" + str(i)`."""
    if is_cuda_device_string(node):
        return True
    return (
        isinstance(node, cst.BinaryOperation)
        and isinstance(node.operator, cst.Add)
        and string_value(node.left) == "cuda:"
    )


def built_cuda_type(ctx, node: cst.CSTNode) -> cst.BaseExpression | None:
    """The `"cuda"` literal of `torch.device("cuda").type`: the string `"cuda"`, spelled as a device (a
    comparison with it is a CUDA test, stable-baselines3's `device.type == th.device("cuda").type`); else
    None."""
    call = node.value if isinstance(node, cst.Attribute) and node.attr.value == "type" else None
    if not isinstance(call, cst.Call):
        return None
    if ctx.call_name(call) != "torch.device" or len(call.args) != 1 or call.args[0].star:
        return None
    arg = call.args[0]
    if arg.keyword is not None and arg.keyword.value != "type":
        return None
    return arg.value if string_value(arg.value) == "cuda" else None


def has_index(node: cst.CSTNode) -> bool:
    """Whether a CUDA device string names a device index (`cuda:1`, `f"cuda:{rank}"`)."""
    value = string_value(node)
    return value is None or ":" in value


def agnostic_string(ctx, node: cst.CSTNode) -> tuple[str, bool]:
    """The string the CUDA device string `node` becomes (the accelerator's type, keeping any index), and
    whether that text is an f-string (its placeholder must then become a name, not the inline idiom)."""
    value = string_value(node)
    if value is not None:
        if ":" not in value:
            return DEVICE_TYPE, False
        quote = _quote(node) if isinstance(node, cst.SimpleString) else '"'
        index = value.split(":", 1)[1]
        if isinstance(node, cst.SimpleString) and node.prefix in ("", "u") and not set("{}\\") & set(index):
            return f"f{quote}{{{DEVICE_TYPE}}}:{index}{quote}", True  # "cuda:0" -> f"{device_type}:0"
        return f"{DEVICE_TYPE} + {quote}:{index}{quote}", False
    if isinstance(node, cst.FormattedString):
        code = ctx.module.code_for_node(node.with_changes(lpar=[], rpar=[]))
        return code.replace("cuda", "{" + DEVICE_TYPE + "}", 1), True
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):  # "cuda:" + str(i)
        return f'{DEVICE_TYPE} + ":" + {ctx.module.code_for_node(node.right).strip()}', False
    # "cuda:%d" % i and "cuda:{}".format(i): the same formatting, minus the "cuda:" of the literal
    literal = node.left if isinstance(node, cst.BinaryOperation) else node.func.value
    if not isinstance(literal, cst.SimpleString):  # ("cuda:" "{}").format(i): rare, keep it simple
        code = ctx.module.code_for_node(node.with_changes(lpar=[], rpar=[])).strip()
        return f'{DEVICE_TYPE} + ":" + ({code}).split(":", 1)[1]', False
    if (
        index := _formatted_index(node, literal)
    ) is not None:  # "cuda:{}".format(gpu) -> f"{device_type}:{gpu}"
        quote = _quote(literal)
        return f"f{quote}{{{DEVICE_TYPE}}}:{{{ctx.module.code_for_node(index).strip()}}}{quote}", True
    rest = literal.with_changes(value=literal.value.replace("cuda:", "", 1), lpar=[], rpar=[])
    if isinstance(node, cst.BinaryOperation):
        rest_node = node.with_changes(left=rest, lpar=[], rpar=[])
    else:
        rest_node = node.with_changes(func=node.func.with_changes(value=rest), lpar=[], rpar=[])
    return f'{DEVICE_TYPE} + ":" + {ctx.module.code_for_node(rest_node).strip()}', False


def _formatted_index(node: cst.CSTNode, literal: cst.SimpleString) -> cst.BaseExpression | None:
    """The name `"cuda:{}".format(name)` formats (a plain or dotted name, one positional argument, a
    placeholder without a format spec, which an f-string formats the same way); else None."""
    if not isinstance(node, cst.Call) or literal.prefix not in ("", "u") or len(node.args) != 1:
        return None
    arg = node.args[0]
    if arg.star or arg.keyword is not None or not isinstance(arg.value, (cst.Name, cst.Attribute)):
        return None
    return arg.value if string_value(literal) in ("cuda:{}", "cuda:{0}") else None


def agnostic_device(ctx, node: cst.CSTNode) -> tuple[str, bool]:
    """What `node` becomes where torch takes a device: the device, or `torch.device(type, N)`."""
    value = string_value(node)
    if value == "cuda":
        return DEVICE, False
    if value is not None:
        return f"torch.device({DEVICE_TYPE}, {value.split(':', 1)[1]})", False
    return agnostic_string(ctx, node)  # a computed index may be a str: keep the string form


def _quote(node: cst.SimpleString) -> str:
    return node.value.lstrip("rRuU")[0]


# --- precedence ------------------------------------------------------------------------------------------

_LOOSE_PARENTS = (
    cst.Arg,
    cst.Assign,
    cst.AnnAssign,
    cst.Param,
    cst.DictElement,
    cst.Return,
    cst.Element,
    cst.WithItem,
    cst.Expr,
    cst.Lambda,
    cst.If,
    cst.While,
    cst.Assert,
    cst.Index,
    cst.AssignTarget,
    cst.GeneratorExp,
    cst.ListComp,
    cst.SetComp,
    cst.CompIf,
    cst.CompFor,
)


def fit(
    text: str, parent: cst.CSTNode | None, comparison: bool = False, node: cst.CSTNode | None = None
) -> str:
    """`text` wrapped in parentheses unless it can stand as it is under `parent`.

    `text` is an `or` expression (the device) or a conditional, or, when `comparison`, a comparison, which may
    also stand as an operand of `and`/`or`/`not`. Under a conditional only the test needs parentheses around
    an `or` (`a if b or c else d` reads wrongly): the branches of `x if c else y` bind looser than `or`. The
    device placeholder becomes its atom form where it needs parentheses (a name needs none)."""
    if isinstance(parent, _LOOSE_PARENTS):
        return text
    if text == DEVICE:
        return text if isinstance(parent, cst.IfExp) and node is not parent.test else DEVICE_ATOM
    if (
        isinstance(parent, cst.IfExp)
        and node is not None
        and node is not parent.test
        and not text.startswith(("lambda",))
    ):
        return text if " if " not in text else f"({text})"
    if comparison and (
        isinstance(parent, cst.BooleanOperation)
        or (isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, cst.Not))
    ):
        return text
    return f"({text})"


def cuda_and_neuron(quote: str = '"', suffix: str = "") -> str:
    """The tuple literal `("cuda", "neuron")` in `quote` (`suffix` `":"`: the prefixes of indexed device
    strings)."""
    return "(" + ", ".join(f"{quote}{kind}{suffix}{quote}" for kind in CUDA_AND_NEURON) + ")"


def is_cuda_and_neuron(node: cst.CSTNode, suffix: str = "") -> bool:
    """A tuple, list or set of CUDA's and neuron's device types (each ending in `suffix`, or not), and no
    other: `("cuda", "neuron")`, what a fixed CUDA test compares with."""
    if not isinstance(node, (cst.Tuple, cst.List, cst.Set)) or not node.elements:
        return False
    allowed = {*CUDA_AND_NEURON, *(kind + suffix for kind in CUDA_AND_NEURON)}
    return {string_value(e.value) for e in node.elements} <= allowed


def cpu_or_cuda_declared(ctx, stack) -> str | None:
    """A `Literal["cuda", "cpu"]` annotation in the outermost function around the end of `stack` (of a
    parameter or a local: fairchem's `load_predict_unit(device: Literal["cuda", "cpu"] | None = None)`), as
    text, or None: the function declares that its device is the CPU or CUDA, so a choice there that names
    another accelerator breaks its contract (and the asserts behind it) until that widens."""
    function = next((node for node in stack if isinstance(node, cst.FunctionDef)), None)
    if function is None:
        return None
    for subscript in find(function, cst.Subscript):
        if ctx.qualified_name(subscript.value) not in _LITERAL:
            continue
        values = {
            string_value(element.slice.value)
            for element in subscript.slice
            if isinstance(element.slice, cst.Index)
        }
        if "cuda" in values and values <= {"cuda", "cpu"}:
            return ctx.code(subscript)
    return None


_LITERAL = frozenset({"typing.Literal", "typing_extensions.Literal"})
