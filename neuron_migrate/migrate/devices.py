"""Where a string is a device, and what a CUDA device string becomes (shared by NM101–NM105).

A string is a device only in a *device slot*: the first argument of `.to()`, any `device=` keyword,
`map_location=`, `device_type=`, `torch.set_default_device()`, the default of a `--device` command-line option
or of a `.get("device", ...)`, a `{"device": ...}` value, a value returned by a `*device*` function, and a value
assigned to a name that is called `device` / `dev` / `device_type` / `*_device` or that flows into one of those
slots somewhere in the same module (`DeviceFlow`, computed once per file). Comments, docstrings, log and help
texts, annotations, dict keys, `accelerator=` (Lightning's vocabulary) are never device slots.

A rewritten string stays a string (`"cuda"` -> the accelerator's type, `f"cuda:{i}"` -> `f"{type}:{i}"`), so
whatever the program does with it afterwards (`in`, `startswith`, formatting, JSON) keeps working; only where a
torch API takes the value directly does a bare `"cuda"` become the device expression itself.
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass, field

import libcst as cst

from neuron_migrate.migrate.names import Scopes, dotted
from neuron_migrate.migrate.patterns import (
    DEVICE_EXPR,
    DEVICE_TYPE_EXPR,
    is_cuda_device_string,
    positional,
    string_value,
)

_DEVICE_NAME = re.compile(r"^(dev|device|device_type|device_str|\w+_device|\w+_device_type)$", re.IGNORECASE)
_NOT_DEVICE_NAME = re.compile(r"^(is|has|use|num|n|max|min|no)_", re.IGNORECASE)
_DEVICE_OPTION = re.compile(r"^--?(dev|device|device[-_]type|[\w-]+[-_]device)$", re.IGNORECASE)
_AMP_CALLEE = re.compile(r"(^|\.)(autocast|GradScaler)$")  # NM2xx rules own these
_POSITIONAL_DEVICE = {"torch.set_default_device"}
_GETTERS = {"get", "getenv", "setdefault", "pop", "getattr"}
#: code that only CUDA has: a check guarding it is a capability gate and must stay CUDA-only
_CAPABILITY = re.compile(
    r"capability|get_device_properties|get_device_name|is_bf16_supported|version\.cuda|nccl|flash|fused|triton"
    r"|apex|xformers|bitsandbytes|CUDAGraph|make_graphed_callables|cuda\.graph|cudnn\.version|nvml|cupy|sm_?\d",
    re.IGNORECASE)


def is_device_name(key: str | None) -> bool:
    """Whether a dotted name holds a device by convention (`device`, `args.dev`, `self.train_device`)."""
    if not key:
        return False
    last = key.rsplit(".", 1)[-1]
    return bool(_DEVICE_NAME.match(last)) and not _NOT_DEVICE_NAME.match(last)


def is_cuda_string(node: cst.CSTNode) -> bool:
    """A CUDA device string: `'cuda'`, `'cuda:0'`, `f"cuda:{i}"`, `.format`/`%` forms, `"cuda:" + str(i)`."""
    if is_cuda_device_string(node):
        return True
    return (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add)
            and string_value(node.left) == "cuda:")


def has_index(node: cst.CSTNode) -> bool:
    """Whether a CUDA device string names a device index (`cuda:1`, `f"cuda:{rank}"`)."""
    value = string_value(node)
    return value is None or ":" in value


def _quote(node: cst.CSTNode) -> str:
    text = node.value if isinstance(node, cst.SimpleString) else '"'
    return text.lstrip("rRuU")[0]


def agnostic_string(ctx, node: cst.CSTNode) -> str:
    """The string the CUDA device string `node` becomes: the accelerator's type, keeping any index."""
    value = string_value(node)
    if value is not None:
        if ":" not in value:
            return DEVICE_TYPE_EXPR
        q = _quote(node) if isinstance(node, cst.SimpleString) else '"'
        return f"{DEVICE_TYPE_EXPR} + {q}:{value.split(':', 1)[1]}{q}"
    if isinstance(node, cst.FormattedString):
        inner = DEVICE_TYPE_EXPR.replace('"', "'") if '"' in node.start else DEVICE_TYPE_EXPR
        code = ctx.module.code_for_node(node.with_changes(lpar=[], rpar=[]))
        return code.replace("cuda", "{" + inner + "}", 1)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):  # "cuda:" + str(i)
        return f'{DEVICE_TYPE_EXPR} + ":" + {ctx.module.code_for_node(node.right).strip()}'
    # "cuda:%d" % i and "cuda:{}".format(i): the same formatting, minus the "cuda:" of the literal
    literal = node.left if isinstance(node, cst.BinaryOperation) else node.func.value
    if not isinstance(literal, cst.SimpleString):  # ("cuda:" "{}").format(i): rare, keep it simple
        code = ctx.module.code_for_node(node.with_changes(lpar=[], rpar=[])).strip()
        return f'{DEVICE_TYPE_EXPR} + ":" + ({code}).split(":", 1)[1]'
    rest = literal.with_changes(value=literal.value.replace("cuda:", "", 1), lpar=[], rpar=[])
    if isinstance(node, cst.BinaryOperation):
        rest_node = node.with_changes(left=rest, lpar=[], rpar=[])
    else:
        rest_node = node.with_changes(func=node.func.with_changes(value=rest), lpar=[], rpar=[])
    return f'{DEVICE_TYPE_EXPR} + ":" + {ctx.module.code_for_node(rest_node).strip()}'


def agnostic_device(ctx, node: cst.CSTNode) -> str:
    """What `node` becomes where torch takes a device: the device expression, or `torch.device(type, N)`."""
    value = string_value(node)
    if value == "cuda":
        return DEVICE_EXPR
    if value is not None:
        return f"torch.device({DEVICE_TYPE_EXPR}, {value.split(':', 1)[1]})"
    return agnostic_string(ctx, node)  # a computed index may be a str: keep the string form


# --- precedence ------------------------------------------------------------------------------------------

_LOOSE_PARENTS = (cst.Arg, cst.Assign, cst.AnnAssign, cst.Param, cst.DictElement, cst.Return, cst.Element,
                  cst.WithItem, cst.Expr, cst.Lambda, cst.IfExp, cst.If, cst.While, cst.Assert, cst.Index)


def fit(text: str, parent: cst.CSTNode | None, comparison: bool = False) -> str:
    """`text` wrapped in parentheses unless it can stand as it is under `parent`.

    `text` is an `or` expression (the device expression) or, when `comparison`, a comparison, which may also
    stand as an operand of `and`/`or`/`not`."""
    if isinstance(parent, _LOOSE_PARENTS):
        return text
    if comparison and (isinstance(parent, cst.BooleanOperation) or (
            isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, cst.Not))):
        return text
    return f"({text})"


# --- the per-module flow of device names -------------------------------------------------------------------

@dataclass(frozen=True)
class Slot:
    """A place that takes a device.

    kind: `device` (a torch API takes it directly: a device object or a string will do), `string` (a name,
    parameter or setting: keep it a string), `type` (a device type string), `none` (no agnostic value exists).
    `map_location`: the value reaches `torch.load(map_location=...)`, which rejects `cpu:N`."""

    kind: str
    where: str
    map_location: bool = False


@dataclass
class DeviceFlow:
    """Names (dotted keys) used in device slots anywhere in the module, and names assigned a device value."""

    uses: set[str] = field(default_factory=set)
    map_locations: set[str] = field(default_factory=set)
    holders: set[str] = field(default_factory=set)
    params: dict[str, list[str]] = field(default_factory=dict)


_FLOWS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def device_flow(ctx) -> DeviceFlow:
    """The module's `DeviceFlow`, computed on first use and shared by every rule of this file.

    It costs a second walk over the tree, so rules ask for it only when a name alone does not decide (most
    files never need it: `device = "cuda"`, `.to("cuda")`, `device.type == "cuda"` are decided by name)."""
    flow = _FLOWS.get(ctx)
    if flow is None:
        flow = _FLOWS[ctx] = _collect(ctx)
    return flow


def keys_of(expr: cst.CSTNode) -> list[str]:
    """The dotted names an expression passes on (`a`, `self.dev`; both branches of `x if c else y`)."""
    if isinstance(expr, (cst.Name, cst.Attribute)):
        key = dotted(expr)
        return [key] if key else []
    if isinstance(expr, cst.IfExp):
        return keys_of(expr.body) + keys_of(expr.orelse)
    if isinstance(expr, cst.BooleanOperation):
        return keys_of(expr.left) + keys_of(expr.right)
    return []


def holds_device(ctx, expr: cst.CSTNode) -> bool:
    """Whether an assigned value is a device: a CUDA string, `torch.device(...)`, the accelerator."""
    if is_cuda_string(expr):
        return True
    if isinstance(expr, (cst.IfExp, cst.BooleanOperation)):
        parts = (expr.body, expr.orelse) if isinstance(expr, cst.IfExp) else (expr.left, expr.right)
        return any(holds_device(ctx, p) for p in parts)
    if isinstance(expr, cst.Call):
        name = ctx.call_name(expr) or ""
        return name == "torch.device" or "current_accelerator" in name
    return False


def _collect(ctx) -> DeviceFlow:
    flow = DeviceFlow()
    edges: dict[str, set[str]] = {}
    scopes = Scopes(ctx.module)  # its own: the rules' traversal may be inside a function when this runs

    class Collector(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                scopes.push()
            elif isinstance(node, (cst.Import, cst.ImportFrom)) and len(scopes._stack) > 1:
                scopes.bind_import(node)
            return super().on_visit(node)

        def on_leave(self, original_node: cst.CSTNode) -> None:
            super().on_leave(original_node)
            if isinstance(original_node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                scopes.pop()

        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            flow.params[node.name.value] = [p.name.value for p in (*node.params.posonly_params, *node.params.params)]

        def visit_Call(self, node: cst.Call) -> None:
            name = scopes.qualified_name(node.func) or ""
            for index, arg in enumerate(node.args):
                slot = call_slot(name, node, arg) or param_slot(node, arg, flow)
                if name == "torch.device" and index == 0:
                    slot = Slot("device", "`torch.device()`")
                if slot is None:
                    continue
                for key in keys_of(arg.value):
                    flow.uses.add(key)
                    if slot.map_location:
                        flow.map_locations.add(key)
            if isinstance(node.func, cst.Name) and node.func.value in flow.params:
                names = flow.params[node.func.value]
                for index, arg in enumerate(a for a in node.args if a.keyword is None and not a.star):
                    if index < len(names):
                        edges.setdefault(names[index], set()).update(keys_of(arg.value))

        def visit_Assign(self, node: cst.Assign) -> None:
            for target in node.targets:
                self._assign(target.target, node.value)

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            if node.value is not None:
                self._assign(node.target, node.value)

        def _assign(self, target: cst.CSTNode, value: cst.CSTNode) -> None:
            key = dotted(target) if isinstance(target, (cst.Name, cst.Attribute)) else None
            if key is None:
                return
            edges.setdefault(key, set()).update(keys_of(value))
            if holds_device(ctx, value):
                flow.holders.add(key)

    ctx.module.visit(Collector())
    # a name copied into a device name (`device = d`) or passed to a device parameter is a device too
    pending = list(flow.uses | {k for k in edges if is_device_name(k)})
    while pending:
        key = pending.pop()
        for source in edges.get(key, ()):
            if source not in flow.uses:
                flow.uses.add(source)
                if key in flow.map_locations:
                    flow.map_locations.add(source)
                pending.append(source)
    for key in list(flow.holders):
        flow.holders.update(k for k, sources in edges.items() if key in sources)
    return flow


# --- device slots ------------------------------------------------------------------------------------------

def _is_device_option(call: cst.Call) -> bool:
    method = call.func.attr.value if isinstance(call.func, cst.Attribute) else getattr(call.func, "value", "")
    if method not in ("add_argument", "option", "add_option", "Option"):
        return False
    return any(_DEVICE_OPTION.match(string_value(a.value) or "") for a in call.args if a.keyword is None)


def call_slot(name: str, call: cst.Call, arg: cst.Arg) -> Slot | None:
    """The device slot `arg` of `call` (whose callee resolves to `name`) is, if any.

    `torch.device(...)` is NM102's and the amp calls NM2xx's, so they are no slot here."""
    method = call.func.attr.value if isinstance(call.func, cst.Attribute) else ""
    if name == "torch.device" or _AMP_CALLEE.search(name):
        return None
    keyword = arg.keyword.value if arg.keyword is not None else None
    if keyword == "device_type":
        return Slot("none" if name.endswith("fork_rng") else "type", "`device_type=`")
    if keyword == "map_location" or (name == "torch.load" and arg is positional(call, 1)):
        return Slot("device", "`map_location=`", map_location=True)
    if keyword == "device":
        torch_api = name.startswith("torch.") or method in ("to", "to_empty")
        return Slot("device" if torch_api else "string", "`device=`")
    if keyword is None and arg is positional(call, 0) and (method == "to" or name in _POSITIONAL_DEVICE):
        return Slot("device", f"`{name or '.' + method}()`")
    if keyword == "default" and _is_device_option(call):
        return Slot("string", "the default of a `--device` option")
    getter = method or (name.rsplit(".", 1)[-1] if name else "")
    if keyword is None and getter in _GETTERS:
        key_index = 1 if getter == "getattr" else 0
        key = positional(call, key_index)
        if arg is positional(call, key_index + 1) and key is not None and is_device_name(string_value(key.value)):
            return Slot("string", "the default of a device setting")
    return None


def param_slot(call: cst.Call, arg: cst.Arg, flow: DeviceFlow) -> Slot | None:
    """A positional argument of a function defined in this module, given to a device parameter."""
    if arg.keyword is None and isinstance(call.func, cst.Name) and call.func.value in flow.params:
        plain = [a for a in call.args if a.keyword is None and not a.star]
        names = flow.params[call.func.value]
        index = next((i for i, a in enumerate(plain) if a is arg), len(names))
        if index < len(names) and (is_device_name(names[index]) or names[index] in flow.uses):
            return Slot("string", f"parameter `{names[index]}`")
    return None


def _climb(stack: list[cst.CSTNode]) -> int:
    """Index in `stack` of the value whose slot decides: through `a or b` and the branches of `x if c else y`."""
    index = len(stack) - 1
    while index > 0:
        parent = stack[index - 1]
        if isinstance(parent, cst.BooleanOperation) or (isinstance(parent, cst.IfExp) and stack[index] is not parent.test):
            index -= 1
            continue
        break
    return index


def value_slot(ctx, indexed: bool) -> Slot | None:
    """The device slot the expression being visited (`ctx.stack[-1]`) fills, if any.

    `indexed`: the value names a device index, so whether it reaches `map_location` matters."""
    stack = ctx.stack
    index = _climb(stack)
    node, parent = stack[index], stack[index - 1] if index > 0 else None
    grand = stack[index - 2] if index > 1 else None
    if isinstance(parent, cst.Arg) and parent.value is node and isinstance(grand, cst.Call):
        slot = call_slot(ctx.call_name(grand) or "", grand, parent)
        if slot is None and isinstance(grand.func, cst.Name) and parent.keyword is None:
            slot = param_slot(grand, parent, device_flow(ctx))
        return slot
    if isinstance(parent, (cst.Assign, cst.AnnAssign)) and parent.value is node:
        targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
        return _named_slot([_target_key(t) for t in targets], ctx, indexed)
    if isinstance(parent, cst.Element) and isinstance(grand, cst.Tuple) and index > 2:
        assign = stack[index - 3]
        if isinstance(assign, cst.Assign) and assign.value is grand and len(assign.targets) == 1:
            target = assign.targets[0].target
            position = next(i for i, e in enumerate(grand.elements) if e is parent)
            if isinstance(target, cst.Tuple) and len(target.elements) == len(grand.elements):
                element = target.elements[position].value
                keys = [dotted(element)] if isinstance(element, (cst.Name, cst.Attribute)) else []
                return _named_slot(keys, ctx, indexed)
    if isinstance(parent, cst.Param) and parent.default is node:
        return _named_slot([parent.name.value], ctx, indexed, "the default of parameter")
    if isinstance(parent, cst.DictElement) and parent.value is node and is_device_name(string_value(parent.key)):
        return Slot("string", "a `device` setting")
    if isinstance(parent, cst.Return):
        function = next((n for n in reversed(stack[:index]) if isinstance(n, (cst.FunctionDef, cst.Lambda))), None)
        if isinstance(function, cst.FunctionDef) and "device" in function.name.value.lower():
            return Slot("string", f"the value of `{function.name.value}()`")
    return None


def _target_key(target: cst.BaseExpression) -> str | None:
    """`device` for `device = ...`, `self.device`, and `cfg["device"] = ...`."""
    if isinstance(target, (cst.Name, cst.Attribute)):
        return dotted(target)
    if isinstance(target, cst.Subscript) and len(target.slice) == 1 and isinstance(target.slice[0].slice, cst.Index):
        return string_value(target.slice[0].slice.value)
    return None


def _named_slot(keys: list[str | None], ctx, indexed: bool, what: str = "") -> Slot | None:
    for key in keys:
        if key and (is_device_name(key) or key in device_flow(ctx).uses):
            where = f"{what} `{key}`" if what else f"`{key} = ...`"
            return Slot("string", where, map_location=indexed and key in device_flow(ctx).map_locations)
    return None


# --- device tests --------------------------------------------------------------------------------------------

def is_device_expr(ctx, expr: cst.CSTNode) -> bool:
    """Whether `expr` clearly holds a device (or device string): by name, by `x.device`, or by what it is given."""
    if isinstance(expr, cst.Call):
        name = ctx.call_name(expr)
        if name == "torch.device":
            return True
        if name == "str" and len(expr.args) == 1:
            return is_device_expr(ctx, expr.args[0].value)
        return False
    key = dotted(expr) if isinstance(expr, (cst.Name, cst.Attribute)) else None
    if not key:
        return False
    return is_device_name(key) or key in device_flow(ctx).holders or key in device_flow(ctx).uses


def device_type_text(ctx, expr: cst.CSTNode) -> str:
    """Code for the device type of a device string (or `str()` of a device): `torch.device(d).type`, and
    `x.device.type` for `str(x.device)`."""
    if isinstance(expr, cst.Call) and ctx.call_name(expr) == "str" and len(expr.args) == 1:
        expr = expr.args[0].value
        if isinstance(expr, cst.Attribute) and expr.attr.value == "device":  # str(x.device): a torch.device
            return f"{ctx.module.code_for_node(expr).strip()}.type"
    return f"torch.device({ctx.module.code_for_node(expr).strip()}).type"


def device_conditional(ctx, node: cst.IfExp) -> bool:
    """Whether `x if c else y` is a CUDA-or-CPU choice (NM105's): a CUDA string against a string or an
    availability test."""
    branches = (node.body, node.orelse)
    if not any(is_cuda_string(b) for b in branches):
        return False
    other = node.orelse if is_cuda_string(node.body) else node.body
    return string_value(other) is not None or availability(ctx, node.test) is not None


def availability(ctx, test: cst.CSTNode) -> bool | None:
    """True for `torch.cuda.is_available()` (or the accelerator's), False for its negation, else None."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = availability(ctx, test.expression)
        return None if inner is None else not inner
    if isinstance(test, cst.Call) and not test.args:
        name = ctx.call_name(test)
        if name in ("torch.cuda.is_available", "torch.accelerator.is_available"):
            return True
    return None


def capability_cue(ctx, levels: int = 1) -> str | None:
    """The CUDA-only feature a check at `ctx.stack[-levels]` guards (fused/flash kernels, capability, NCCL …).

    Such a check is a capability gate: it must stay CUDA-only, so it gets a finding without a fix."""
    stack = ctx.stack[: len(ctx.stack) - levels + 1]
    for child, parent in zip(reversed(stack), reversed(stack[:-1])):
        texts: list[cst.CSTNode] = []
        if isinstance(parent, (cst.If, cst.While, cst.IfExp)) and child is parent.test:
            texts = [parent.test, parent.body]
        elif isinstance(parent, (cst.SimpleStatementLine, cst.Arg)):
            texts = [parent]
        elif isinstance(parent, (cst.BaseCompoundStatement, cst.FunctionDef)):
            return None
        for node in texts:
            match = _CAPABILITY.search(ctx.module.code_for_node(node))
            if match:
                return match.group(0)
        if texts:
            return None
    return None
