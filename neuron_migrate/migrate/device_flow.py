"""Where a value is a device: device slots, and the names that flow into them (shared by NM101–NM105).

A string is a device only in a *device slot*: the first argument of `.to()`, any `device=` keyword,
`map_location=`, `device_type=`, `torch.set_default_device()`, the default of a `--device` command-line option
or of a `.get("device", ...)`, a `{"device": ...}` value, a value returned by a `*device*` function, and a
value assigned to a name that is called `device` / `dev` / `device_type` / `*_device` or that flows into one
of those slots somewhere in the same module (through assignments, and through the arguments of functions the
module defines, by position or keyword). Comments, docstrings, log and help texts, annotations, dict keys,
`accelerator=` (Lightning's vocabulary) are never device slots, nor is the device argument of a registry
(`register_interface_for_device("cuda", CudaInterface)`, `get_scheduling_for_device("cuda")`): there the
string names the device an implementation is for, a key, not the device to run on.

The flow is computed once per file, on first use after the walk, from the calls the walk recorded and the
bindings index; a rule that asks about it defers its decision to after the walk (`FileContext.defer`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import libcst as cst

from neuron_migrate.migrate.bindings import key_of
from neuron_migrate.migrate.device_literals import is_cuda_string, string_value
from neuron_migrate.migrate.names import dotted
from neuron_migrate.migrate.patterns import keyword, positional
from neuron_migrate.migrate.walk import walk

_DEVICE_NAME = re.compile(r"^(dev|device|device_type|device_str|\w+_device|\w+_device_type)$", re.IGNORECASE)
_NOT_DEVICE_NAME = re.compile(r"^(is|has|use|num|n|max|min|no)_", re.IGNORECASE)
_DEVICE_OPTION = re.compile(r"^--?(dev|device|device[-_]type|[\w-]+[-_]device)$", re.IGNORECASE)
_AMP_CALLEE = re.compile(r"(^|\.)(autocast|GradScaler)$")  # NM2xx rules own these
_POSITIONAL_DEVICE = {"torch.set_default_device"}
#: functions whose first argument is a device type (`init_device_mesh("cuda", (2,))`: openrlhf, review 44)
_POSITIONAL_TYPE = {
    "torch.distributed.device_mesh.init_device_mesh",
    "torch.distributed.device_mesh.DeviceMesh",
    "torch.distributed.tensor.DeviceMesh",
    "torch.distributed._tensor.DeviceMesh",
}
_GETTERS = {"get", "getenv", "setdefault", "pop", "getattr"}
#: functions that file or look up an implementation by device type: their device argument is a key
_REGISTRY = re.compile(r"^register|_for_device(_type)?$")


_INDEX_NAME = re.compile(
    r"^(i|idx|index|\w*rank|\w*gpu|\w*_id|\w*_idx|\w*_index|device_id|id)$", re.IGNORECASE
)


def is_index_name(key: str | None) -> bool:
    """Whether a dotted name holds a device index by convention (`local_rank`, `gpu`, `args.gpu_id`, `i`)."""
    return bool(key) and bool(_INDEX_NAME.match(key.rsplit(".", 1)[-1]))


def is_device_name(key: str | None) -> bool:
    """Whether a dotted name holds a device by convention (`device`, `args.dev`, `self.train_device`)."""
    if not key:
        return False
    last = key.rsplit(".", 1)[-1].split('["')[-1].rstrip('"]')
    return bool(_DEVICE_NAME.match(last)) and not _NOT_DEVICE_NAME.match(last)


@dataclass(frozen=True)
class Slot:
    """A place that takes a device.

    kind: `device` (a torch API takes it directly: a device object or a string will do), `string` (a name,
    parameter or setting: keep it a string), `type` (a device type string), `none` (no agnostic value exists).
    `map_location`: the value reaches `torch.load(map_location=...)`, which rejects `cpu:N`. `review`: why a
    generic value needs a person's review there (the fix is unsafe), as a clause for the message."""

    kind: str
    where: str
    map_location: bool = False
    review: str = ""


_COMPARED = (
    " (the name is compared, not used as a device here: without an accelerator it would become `cpu` and "
    "match CPU entries)"
)


@dataclass
class DeviceFlow:
    """Names (dotted keys) used in device slots anywhere in the module, and names assigned a device value."""

    uses: set[str] = field(default_factory=set)
    map_locations: set[str] = field(default_factory=set)
    #: names that reach `fork_rng(device_type=...)`, where the CPU fallback raises (`torch.cpu` has no RNG)
    forks: set[str] = field(default_factory=set)
    holders: set[str] = field(default_factory=set)
    params: dict[str, list[str]] = field(default_factory=dict)
    compared: set[str] | None = None  # names the module compares (`==`, `!=`, `in`), on first use


def device_flow(ctx) -> DeviceFlow:
    """The module's `DeviceFlow`, computed on first use from what the walk recorded (no second walk)."""
    return ctx.once(device_flow, lambda: _collect(ctx))


def keys_of(expr: cst.CSTNode | None) -> list[str]:
    """The dotted names an expression passes on (`a`, `self.dev`; both branches of `x if c else y`)."""
    if isinstance(expr, (cst.Name, cst.Attribute, cst.Subscript)):
        key = key_of(expr)
        return [key] if key else []
    if isinstance(expr, cst.IfExp):
        return keys_of(expr.body) + keys_of(expr.orelse)
    if isinstance(expr, cst.BooleanOperation):
        return keys_of(expr.left) + keys_of(expr.right)
    return []


def holds_device(ctx, expr: cst.CSTNode | None) -> bool:
    """Whether an assigned value is a device: a CUDA string, `torch.device(...)`, the accelerator."""
    if expr is None:
        return False
    if is_cuda_string(expr):
        return True
    if isinstance(expr, (cst.IfExp, cst.BooleanOperation)):
        parts = (expr.body, expr.orelse) if isinstance(expr, cst.IfExp) else (expr.left, expr.right)
        return any(holds_device(ctx, p) for p in parts)
    if isinstance(expr, cst.Call):
        name = ctx.call_name(expr) or ""
        return name == "torch.device" or "current_accelerator" in name
    return False


def _functions(ctx) -> dict[str, list[str]]:
    """Parameter names of the functions (and methods) the module defines, by name (ambiguous names
    dropped)."""
    params: dict[str, list[str]] = {}
    seen: set[str] = set()
    for binding in (b for bindings in ctx.bindings.by_key.values() for b in bindings if b.kind == "param"):
        function = binding.scope
        if not isinstance(function, cst.FunctionDef) or id(function) in seen:
            continue
        seen.add(id(function))
        names = [p.name.value for p in (*function.params.posonly_params, *function.params.params)]
        if names and names[0] in ("self", "cls"):  # a method: calls do not pass the instance
            names = names[1:]
        key = function.name.value
        params[key] = names if key not in params else []
    return {k: v for k, v in params.items() if v}


def _callee(call: cst.Call) -> str | None:
    """The name a call's function is defined under in this module (`run(...)`, `self.run(...)`)."""
    func = call.func
    if isinstance(func, cst.Name):
        return func.value
    if (
        isinstance(func, cst.Attribute)
        and isinstance(func.value, cst.Name)
        and func.value.value in ("self", "cls")
    ):
        return func.attr.value
    return None


def _collect(ctx) -> DeviceFlow:
    flow = DeviceFlow(params=_functions(ctx))
    edges: dict[str, set[str]] = {}
    for call, name in ctx.calls:
        for index, arg in enumerate(call.args):
            slot = call_slot(name or "", call, arg) or param_slot(call, arg, flow)
            if name == "torch.device" and index == 0:
                slot = Slot("device", "`torch.device()`")
            if slot is None:
                continue
            for key in keys_of(arg.value):
                flow.uses.add(key)
                if slot.map_location:
                    flow.map_locations.add(key)
                if slot.kind == "none":
                    flow.forks.add(key)
        for param, arg in _bound_params(call, flow):
            edges.setdefault(param, set()).update(keys_of(arg.value))
    for key, bindings in ctx.bindings.by_key.items():
        for binding in bindings:
            if binding.kind in ("assign", "item") and binding.value is not None:
                edges.setdefault(key, set()).update(keys_of(binding.value))
                if holds_device(ctx, binding.value):
                    flow.holders.add(key)
    # a name copied into a device name (`device = d`) or passed to a device parameter is a device too
    pending = list(flow.uses | {k for k in edges if is_device_name(k)})
    while pending:
        key = pending.pop()
        for source in edges.get(key, ()):
            if source not in flow.uses or (key in flow.forks and source not in flow.forks):
                flow.uses.add(source)
                if key in flow.map_locations:
                    flow.map_locations.add(source)
                if key in flow.forks:
                    flow.forks.add(source)
                pending.append(source)
    for key in list(flow.holders):
        flow.holders.update(k for k, sources in edges.items() if key in sources)
    return flow


def _bound_params(call: cst.Call, flow: DeviceFlow) -> list[tuple[str, cst.Arg]]:
    """(parameter name, argument) pairs of a call to a function of this module, by position and keyword."""
    callee = _callee(call)
    names = flow.params.get(callee or "")
    if not names:
        return []
    pairs, position = [], 0
    for arg in call.args:
        if arg.star:
            return pairs
        if arg.keyword is None:
            if position < len(names):
                pairs.append((names[position], arg))
            position += 1
        elif arg.keyword.value in names:
            pairs.append((arg.keyword.value, arg))
    return pairs


# --- device slots ------------------------------------------------------------------------------------------


def _is_device_option(call: cst.Call) -> bool:
    method = call.func.attr.value if isinstance(call.func, cst.Attribute) else getattr(call.func, "value", "")
    if method not in ("add_argument", "option", "add_option", "Option"):
        return False
    return any(_DEVICE_OPTION.match(string_value(a.value) or "") for a in call.args if a.keyword is None)


def _choices_without_neuron(option: cst.Call) -> str:
    """For an option whose `choices=` lists CUDA's device type but not neuron's (ColossalAI's `choices=["cpu",
    "cuda"]`), why its default may not become the accelerator's type; else ""."""
    choices = keyword(option, "choices")
    if choices is not None and _lists_cuda_not_neuron(choices.value):
        return " (its `choices=` do not list `neuron`: add it there, or argparse refuses it on Trainium)"
    return ""


def _lists_cuda_not_neuron(node: cst.BaseExpression) -> bool:
    """Whether `node` is a list or tuple of strings, or a `Literal[...]` of them, that has "cuda", not
    "neuron"."""
    if isinstance(node, (cst.List, cst.Tuple)):
        values = {string_value(element.value) for element in node.elements}
    elif isinstance(node, cst.Subscript) and (dotted(node.value) or "").split(".")[-1] == "Literal":
        indexes = [element.slice for element in node.slice]
        values = {string_value(index.value) for index in indexes if isinstance(index, cst.Index)}
    else:
        return False
    return "cuda" in values and "neuron" not in values


def call_slot(name: str, call: cst.Call, arg: cst.Arg) -> Slot | None:
    """The device slot `arg` of `call` (whose callee resolves to `name`) is, if any.

    `torch.device(...)` is NM102's and the amp calls NM2xx's, so they are no slot here."""
    method = call.func.attr.value if isinstance(call.func, cst.Attribute) else ""
    if name == "torch.device" or _AMP_CALLEE.search(name) or _REGISTRY.search(name.rsplit(".", 1)[-1]):
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
    if keyword is None and arg is positional(call, 0) and name in _POSITIONAL_TYPE:
        return Slot("type", f"`{name.rsplit('.', 1)[-1]}()`")
    if keyword == "default" and _is_device_option(call):
        return Slot("string", "the default of a `--device` option", review=_choices_without_neuron(call))
    getter = method or (name.rsplit(".", 1)[-1] if name else "")
    if keyword is None and getter in _GETTERS:
        key_index = 1 if getter == "getattr" else 0
        key = positional(call, key_index)
        if (
            arg is positional(call, key_index + 1)
            and key is not None
            and is_device_name(string_value(key.value))
        ):
            return Slot("string", "the default of a device setting")
    return None


def param_slot(call: cst.Call, arg: cst.Arg, flow: DeviceFlow) -> Slot | None:
    """An argument of a function defined in this module, given to a device parameter (not a registry's)."""
    if _REGISTRY.search(_callee(call) or ""):
        return None
    for param, bound in _bound_params(call, flow):
        if bound is arg and (is_device_name(param) or param in flow.uses):
            return Slot("string", f"parameter `{param}`")
    return None


def _climb(stack: list[cst.CSTNode]) -> int:
    """Index in `stack` of the value whose slot decides: through `a or b` and the branches of
    `x if c else y`."""
    index = len(stack) - 1
    while index > 0:
        parent = stack[index - 1]
        if isinstance(parent, cst.BooleanOperation) or (
            isinstance(parent, cst.IfExp) and stack[index] is not parent.test
        ):
            index -= 1
            continue
        break
    return index


def value_slot(ctx, indexed: bool) -> Slot | None:
    """The device slot the expression being visited (`ctx.stack[-1]`) fills, if any (after the walk only).

    `indexed`: the value names a device index, so whether it reaches `map_location` matters."""
    stack = ctx.stack
    index = _climb(stack)
    node, parent = stack[index], stack[index - 1] if index > 0 else None
    grand = stack[index - 2] if index > 1 else None
    if isinstance(parent, cst.Arg) and parent.value is node and isinstance(grand, cst.Call):
        return call_slot(ctx.call_name(grand) or "", grand, parent) or param_slot(
            grand, parent, device_flow(ctx)
        )
    if isinstance(parent, (cst.Assign, cst.AnnAssign)) and parent.value is node:
        targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
        slot = _named_slot([key_of(t) for t in targets], ctx, indexed)
        annotation = parent.annotation.annotation if isinstance(parent, cst.AnnAssign) else None
        if slot and annotation and _lists_cuda_not_neuron(annotation):  # `Literal["cpu", "cuda"] = "cuda"`
            slot = replace(slot, review=" (its type does not list `neuron`: add it there too)")
        return slot
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
    if (
        isinstance(parent, cst.DictElement)
        and parent.value is node
        and is_device_name(string_value(parent.key))
    ):
        return Slot("string", "a `device` setting")
    if isinstance(parent, cst.Return):
        function = next(
            (n for n in reversed(stack[:index]) if isinstance(n, (cst.FunctionDef, cst.Lambda))), None
        )
        if isinstance(function, cst.FunctionDef) and "device" in function.name.value.lower():
            return Slot("string", f"the value of `{function.name.value}()`")
    return None


def _named_slot(keys: list[str | None], ctx, indexed: bool, what: str = "") -> Slot | None:
    flow = device_flow(ctx)
    for key in keys:
        if key and (is_device_name(key) or key in flow.uses):
            where = f"{what} `{key}`" if what else f"`{key} = ...`"
            if key in flow.forks:
                return Slot("none", where)
            # only its name says the value is a device (it reaches no device slot) and the module compares
            # that name: a device type matched against others, where the CPU fallback matches CPU entries
            compared = key not in flow.uses and key in _compared_names(ctx, flow)
            return Slot(
                "string",
                where,
                map_location=indexed and key in flow.map_locations,
                review=_COMPARED if compared else "",
            )
    return None


def _compared_names(ctx, flow: DeviceFlow) -> set[str]:
    """The dotted names that are an operand of a comparison somewhere in the module (computed once)."""
    if flow.compared is None:
        found: set[str] = set()

        class Finder(cst.CSTVisitor):
            def visit_Comparison(self, node: cst.Comparison) -> None:
                for operand in (node.left, *(item.comparator for item in node.comparisons)):
                    found.update(keys_of(operand))

        walk(ctx.module, Finder())
        flow.compared = found
    return flow.compared


# --- device tests -------------------------------------------------------------------------------------------


def is_device_expr(ctx, expr: cst.CSTNode) -> bool:
    """Whether `expr` clearly holds a device (or device string): by name, by `x.device`, or by what it is
    given."""
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


def device_type_text(ctx, expr: cst.CSTNode, quote: str = '"') -> str:
    """Code for the device type of a device string (or `str()` of a device): `torch.device(d).type`,
    `x.device.type` for `str(x.device)` (a tensor's or a module's device), and `str(d).split(":")[0]` for
    `str(d)` of anything else, which takes what `torch.device` rejects (stable-ts's `if "cuda" in
    str(device):` with `device=None`), `self.device` included: an object's own attribute holds what it was
    given (mmagic's inferencers keep the caller's string `"cuda"`)."""
    if isinstance(expr, cst.Call) and ctx.call_name(expr) == "str" and len(expr.args) == 1:
        inner = expr.args[0].value
        if (
            isinstance(inner, cst.Attribute)
            and inner.attr.value == "device"
            and not (isinstance(inner.value, cst.Name) and inner.value.value in ("self", "cls"))
        ):  # str(x.device): a torch.device
            return f"{ctx.module.code_for_node(inner).strip()}.type"
        return f"{ctx.module.code_for_node(expr).strip()}.split({quote}:{quote})[0]"
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
