"""The one availability analysis: is an accelerator certain, possible or absent at a node, and does the code
there only run when `torch.accelerator` itself is missing (an old-torch fallback)?

Read from the node's ancestors and the statements before it in each enclosing block, within the innermost
function (a function can be called from anywhere, so nothing outside it holds inside, except for a script's
function whose every call in the module is where an accelerator is certain: `entry.py`):

- `if T:` bodies hold T, their `else`/`elif` branches hold `not T`; `x if T else y`, `T and x`, `T or x`
  alike;
- after `if not T: return | raise | continue | break | sys.exit(...)` (no `else`) the rest of the block holds
  T;
- after `assert T` the rest of the block holds T.

A test T implies an accelerator when it is `torch.cuda.is_available()` / `torch.accelerator.is_available()`,
a positive `device_count()`, `x.is_cuda`, a device type test (`d.type == "cuda"`, `d.type != "cpu"`,
`d.type in ("cuda", "neuron")`, `"cuda" in str(d)`, `d.startswith("cuda")`), a conjunction holding one of
those, or a name every assignment of which is such a test (`use_cuda = torch.cuda.is_available()`,
`args.cuda = not args.no_cuda and ...`).
`torch.accelerator.current_accelerator()` (or a `*current_accelerator()` helper, or a name holding it)
being `None` or false means there is none (`acc.type if acc is not None else "cuda"`: the `"cuda"` there is
only reached without an accelerator).
"""

from __future__ import annotations

import re
from itertools import pairwise
from typing import Literal

import libcst as cst

from neuron_migrate.migrate.bindings import key_of
from neuron_migrate.migrate.chains import OTHER_ACCELERATOR_TYPES
from neuron_migrate.migrate.device_literals import is_cuda_and_neuron, literal_value
from neuron_migrate.migrate.walk import find, walk

Presence = Literal["certain", "possible", "absent"]
#: (what holds when the test is true, what holds when it is false): "certain" / "absent" / None (no telling)
Implication = tuple["str | None", "str | None"]

_AVAILABLE = frozenset({"torch.cuda.is_available", "torch.accelerator.is_available"})
_COUNT = frozenset({"torch.cuda.device_count", "torch.accelerator.device_count"})
#: calls that never return: the process's exits, and a test's skips and failures (they raise)
_EXITS = frozenset(
    {"sys.exit", "exit", "quit", "os._exit", "pytest.skip", "pytest.fail", "pytest.exit", "pytest.xfail"}
    | {"self.skipTest", "self.fail"}
)
_FUNCTIONS = (cst.FunctionDef, cst.Lambda, cst.ClassDef)
_NONE: Implication = (None, None)


def _string(node: cst.CSTNode) -> str | None:
    if isinstance(node, cst.SimpleString):
        value = literal_value(node)
        return value if isinstance(value, str) else None
    return None


def _flip(implication: Implication) -> Implication:
    return implication[1], implication[0]


def implies(ctx, test: cst.CSTNode, depth: int = 0) -> Implication:
    """What an accelerator's presence is when `test` is true and when it is false."""
    if depth > 4:
        return _NONE
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _flip(implies(ctx, test.expression, depth + 1))
    if isinstance(test, cst.BooleanOperation):
        left, right = implies(ctx, test.left, depth + 1), implies(ctx, test.right, depth + 1)
        if isinstance(test.operator, cst.And):
            when_true = (
                "certain"
                if "certain" in (left[0], right[0])
                else "absent"
                if "absent" in (left[0], right[0])
                else None
            )
            when_false = left[1] if left[1] == right[1] else None
            return when_true, when_false
        when_true = left[0] if left[0] == right[0] else None
        when_false = (
            "certain"
            if "certain" in (left[1], right[1])
            else "absent"
            if "absent" in (left[1], right[1])
            else None
        )
        return when_true, when_false
    if isinstance(test, cst.Call):
        name = ctx.call_name(test)
        if name in _AVAILABLE and not test.args:
            return "certain", "absent"
        if name in _COUNT and not test.args:
            return "certain", "absent"
        if (name or "").endswith("current_accelerator"):
            # None only when torch has no accelerator at all; without `check_available=True` the default
            # Linux wheel answers `cuda` on a machine without a GPU
            checked = any(a.keyword is not None and a.keyword.value == "check_available" for a in test.args)
            return ("certain" if checked else None), "absent"
        return _method_test(ctx, test)
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        return _comparison(ctx, test)
    if isinstance(test, cst.Attribute) and test.attr.value == "is_cuda":
        return "certain", None
    if isinstance(test, (cst.Name, cst.Attribute, cst.Subscript)):
        return _named(ctx, test, depth)
    return _NONE


def _method_test(ctx, call: cst.Call) -> Implication:
    """`d.startswith("cuda")` (a device string that names CUDA; `d.startswith(("cuda:", "neuron:"))`)."""
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value == "startswith" and len(call.args) == 1:
        prefix = call.args[0].value
        if _string(prefix) in ("cuda", "cuda:") or is_cuda_and_neuron(prefix, ":"):
            return "certain", None
    return _NONE


def _comparison(ctx, test: cst.Comparison) -> Implication:
    item = test.comparisons[0]
    op, left, right = item.operator, test.left, item.comparator
    if isinstance(op, (cst.In, cst.NotIn)):  # "cuda" in str(device), d.type in ("cuda", "neuron")
        found = (
            ("certain", None)
            if (_string(left) == "cuda" and not isinstance(right, (cst.List, cst.Tuple)))
            or is_cuda_and_neuron(right)
            else _NONE
        )
        return found if isinstance(op, cst.In) else _flip(found)
    if isinstance(left, cst.Call) and ctx.call_name(left) in _COUNT:
        number = right.value if isinstance(right, cst.Integer) else None
        if number is not None:
            value = int(number)
            if isinstance(op, cst.GreaterThan) and value >= 0:
                return ("certain", "absent") if value == 0 else ("certain", None)
            if isinstance(op, cst.GreaterThanEqual) and value >= 1:
                return ("certain", "absent") if value == 1 else ("certain", None)
            if isinstance(op, (cst.Equal, cst.LessThan)) and value == (0 if isinstance(op, cst.Equal) else 1):
                return "absent", "certain"
            if (isinstance(op, cst.LessThan) and value > 1) or (isinstance(op, cst.LessThanEqual) and value):
                return None, "certain"  # `device_count() < 2`: false means two or more
            if isinstance(op, cst.NotEqual) and value == 0:
                return "certain", "absent"
        return _NONE
    if not isinstance(op, (cst.Equal, cst.NotEqual, cst.Is, cst.IsNot)):
        return _NONE
    if isinstance(op, (cst.Is, cst.IsNot)) and _is_none(right) != _is_none(left):  # `acc is not None`
        other = implies(ctx, left if _is_none(right) else right)
        return other if isinstance(op, cst.IsNot) else _flip(other)
    value = _spelled_device(ctx, right)
    if value is None:
        value = _spelled_device(ctx, left)
    if value is None:
        return _NONE
    positive = isinstance(op, (cst.Equal, cst.Is))
    if value == "cuda" or value.startswith("cuda:"):
        return ("certain", None) if positive else (None, "certain")
    if value == "cpu":
        return (None, "certain") if positive else ("certain", None)
    return _NONE


def _spelled_device(ctx, node: cst.CSTNode) -> str | None:
    """A string, or the string a `torch.device("cpu")` is built from (`model.device != torch.device("cpu")`:
    stable-ts)."""
    if isinstance(node, cst.Call) and len(node.args) == 1 and ctx.call_name(node) == "torch.device":
        return _string(node.args[0].value)
    return _string(node)


def _is_none(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Name) and node.value == "None"


def _named(ctx, node: cst.CSTNode, depth: int) -> Implication:
    """A flag every binding of which is an availability test (`use_cuda = torch.cuda.is_available()`), or
    that is only set to `True` where an accelerator is certain (`need_sync = False`, then `if arg.is_cuda:
    need_sync = True`)."""
    bindings = ctx.bindings.of(key_of(node))
    values = [b.value for b in bindings]
    if not values or any(v is None for v in values):
        return _NONE
    if all(_boolean(v) is not None for v in values) and any(_boolean(v) for v in values):
        return _raised_flag(ctx, key_of(node), bindings)
    found = {implies(ctx, v, depth + 1) for v in values}
    return found.pop() if len(found) == 1 else _NONE


def _raised_flag(ctx, key: str, bindings: list) -> Implication:
    """`("certain", None)` when every `key = True` runs where an accelerator is certain (once per file and
    flag; a flag raised under a test of itself is no evidence)."""
    known = ctx.once(_raised_flag, dict)  # per file: flag -> what it implies
    if key not in known:
        known[key] = _NONE  # while it is being worked out
        raised = [b for b in bindings if _boolean(b.value)]
        known[key] = ("certain", None) if all(_certain_at(ctx, b) for b in raised) else _NONE
    return known[key]


def _boolean(node: cst.CSTNode | None) -> bool | None:
    return {"True": True, "False": False}.get(node.value) if isinstance(node, cst.Name) else None


def _certain_at(ctx, binding) -> bool:
    """Whether an accelerator is certain where `binding`'s statement runs (within its function)."""
    path: list[cst.CSTNode] = []
    found: list[tuple[cst.CSTNode, ...]] = []

    class Finder(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if found:
                return False
            path.append(node)
            if node is binding.statement:
                found.append(tuple(path))
            return not found and not isinstance(node, cst.BaseExpression)

        def on_leave(self, original_node: cst.CSTNode) -> None:
            if path and path[-1] is original_node:
                path.pop()

    if binding.statement is None:
        return False
    walk(binding.scope, Finder())
    return bool(found) and accelerator(ctx, found[0]) == "certain"


def exits(block: cst.BaseSuite) -> bool:
    """Whether a block always leaves (its last statement returns, raises, continues, breaks or exits)."""
    body = block.body if isinstance(block, cst.IndentedBlock) else [block]
    last = body[-1] if body else None
    if isinstance(last, cst.SimpleStatementLine):
        last = last.body[-1] if last.body else None
    if isinstance(last, (cst.Return, cst.Raise, cst.Continue, cst.Break)):
        return True
    if isinstance(last, cst.Expr) and isinstance(last.value, cst.Call):
        return last.value.func is not None and _dotted_exit(last.value.func)
    return False


def _dotted_exit(func: cst.BaseExpression) -> bool:
    from neuron_migrate.migrate.names import dotted

    return dotted(func) in _EXITS if isinstance(func, (cst.Name, cst.Attribute)) else False


def _from_earlier_statements(ctx, block: cst.CSTNode, child: cst.CSTNode) -> str | None:
    """What the statements before `child` in `block` establish: early exits and asserts."""
    body = getattr(block, "body", None)
    if not isinstance(body, (list, tuple)):
        return None
    state = None
    for stmt in body:
        if stmt is child:
            break
        if isinstance(stmt, cst.If) and stmt.orelse is None and exits(stmt.body):
            after = implies(ctx, stmt.test)[1]
            state = after or state
        elif isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Assert):
                    state = implies(ctx, small.test)[0] or state
            if _raises_without_accelerator(ctx, stmt):
                state = "certain"
    return state


def admitted_devices(stack: tuple[cst.CSTNode, ...] | list[cst.CSTNode]) -> cst.Comparison | None:
    """An earlier check in the function around the end of `stack` that lets through only device types that
    leave out neuron (anomalib's benchmark: `if accelerator not in {"cpu", "cuda"}: raise ValueError(...)`;
    `assert device in ("cpu", "cuda", "mps")`): its test, or None. The code after it serves those
    devices alone, so a rewrite there for any accelerator is half a migration: the check turns neuron away."""
    found = None
    for parent, child in pairwise(stack):
        if isinstance(parent, _FUNCTIONS):
            found = None  # a check outside the innermost function does not hold inside it
            continue
        body = getattr(parent, "body", None)
        if not isinstance(body, (list, tuple)):
            continue
        for statement in body:
            if statement is child:
                break
            found = _device_check(statement) or found
    return found


def _device_check(statement: cst.CSTNode) -> cst.Comparison | None:
    """The membership test of `if x not in (...): raise` (or any exit) or `assert x in (...)`, when every
    element is a device type and CUDA is one of them, not neuron."""
    kind = type(statement)  # exact type tests: see `names.dotted` (asked of every statement before a check)
    if kind is cst.If and statement.orelse is None and exits(statement.body):
        test, operator = statement.test, cst.NotIn
    elif kind is cst.SimpleStatementLine and type(statement.body[0]) is cst.Assert:
        test, operator = statement.body[0].test, cst.In
    else:
        return None
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return None
    target = test.comparisons[0]
    if not isinstance(target.operator, operator) or not isinstance(target.comparator, _COLLECTIONS):
        return None
    values = {_string(element.value) for element in target.comparator.elements}
    return test if "cuda" in values and values <= _DEVICE_TYPES else None


_COLLECTIONS = (cst.Set, cst.Tuple, cst.List)
#: the device types a check that turns neuron away may list
_DEVICE_TYPES = OTHER_ACCELERATOR_TYPES | {"cpu", "cuda", "meta"}


#: calls that raise without an accelerator, as written and as rewritten (`torch.cuda.current_device()` becomes
#: `torch.accelerator.current_device_index()`, unguarded): code after one in its block only runs with one
_RAISE_WITHOUT = frozenset(
    {
        "torch.cuda.current_device",
        "torch.cuda.current_stream",
        "torch.accelerator.current_device_index",
        "torch.accelerator.current_stream",
    }
)
#: where evaluation is conditional: a call under one may not run
_CONDITIONAL = (
    cst.Lambda,
    cst.IfExp,
    cst.BooleanOperation,
    cst.ListComp,
    cst.SetComp,
    cst.DictComp,
    cst.GeneratorExp,
)


def _raises_without_accelerator(ctx, statement: cst.SimpleStatementLine) -> bool:
    """Whether the statement always calls one of `_RAISE_WITHOUT` (megatron's `torch.empty(n,
    device=torch.cuda.current_device())`), so the statements after it run only with an accelerator. Asked
    of every statement before each finding in a block: each statement is searched once per file, and none
    where the file's text names no such function (a large data literal is not searched at all)."""
    if not ctx.once(
        _RAISE_WITHOUT, lambda: any(name.rsplit(".", 1)[1] in ctx.source for name in _RAISE_WITHOUT)
    ):
        return False
    return ctx.once(
        (_raises_without_accelerator, statement),
        lambda: any(
            ctx.call_name(call) in _RAISE_WITHOUT for call in find(statement, cst.Call, skip=_CONDITIONAL)
        ),
    )


def _branch(ctx, parent: cst.CSTNode, child: cst.CSTNode) -> str | None:
    """What `parent` (an `if`, a conditional, a boolean operation) says about the branch `child` is in."""
    if isinstance(parent, (cst.If, cst.While, cst.IfExp)):
        if child is parent.body:
            return implies(ctx, parent.test)[0]
        if child is parent.orelse:
            return implies(ctx, parent.test)[1]
    elif isinstance(parent, cst.BooleanOperation) and child is parent.right:
        side = implies(ctx, parent.left)
        return side[0] if isinstance(parent.operator, cst.And) else side[1]
    elif isinstance(parent, cst.Else):
        return None  # the `If` above it decides (its orelse is this Else)
    return None


def accelerator(
    ctx, stack: list[cst.CSTNode] | tuple[cst.CSTNode, ...] | None = None, strict: bool = False
) -> Presence:
    """Whether an accelerator is certain, possible or absent where the last node of `stack` runs. `strict`
    (for calls that were no-ops without CUDA and raise without an accelerator: `empty_cache()`): a test of a
    parameter whose default names CUDA proves nothing (stable-ts's `noisereduce_audio(device="cuda")` runs on
    the CPU where there is no GPU, and `if "cuda" in str(device):` still holds)."""
    stack = ctx.stack if stack is None else stack
    start = 0
    for index in range(len(stack) - 1, -1, -1):
        if isinstance(stack[index], _FUNCTIONS) and index < len(stack) - 1:
            start = index + 1
            break
    state: str | None = None
    function = stack[start - 1] if start > 0 and isinstance(stack[start - 1], cst.FunctionDef) else None
    defaults = _cuda_defaults(function) if strict and function is not None else None
    for index in range(start, len(stack) - 1):
        parent, child = stack[index], stack[index + 1]
        if isinstance(parent, cst.Else):
            continue
        if isinstance(parent, (cst.If, cst.While)) and isinstance(child, cst.Else):
            found = implies(ctx, parent.test)[1]
        elif isinstance(parent, (cst.IndentedBlock, cst.Module)):
            found = _from_earlier_statements(ctx, parent, child)
        else:
            found = _branch(ctx, parent, child)
        test = getattr(parent, "left" if isinstance(parent, cst.BooleanOperation) else "test", None)
        if (
            found == "certain"
            and defaults is not None
            and test is not None
            and defaults.search(ctx.code(test))
        ):
            found = None
        state = found or state
    if state is None and start > 0 and isinstance(stack[start - 1], cst.FunctionDef):
        from neuron_migrate.migrate.entry import certain_on_entry

        if certain_on_entry(ctx, stack[start - 1], accelerator):
            return "certain"
    return state or "possible"  # type: ignore[return-value]


def _cuda_defaults(function: cst.FunctionDef) -> re.Pattern | None:
    """The function's parameters whose default names CUDA (`device="cuda"`), as a pattern of their names:
    a test of one says what the caller asked for, not that the machine has it."""
    names = [
        param.name.value
        for param in (*function.params.params, *function.params.kwonly_params)
        if param.default is not None and (_string(param.default) or "").split(":")[0] == "cuda"
    ]
    return re.compile(rf"\b(?:{'|'.join(names)})\b") if names else None


def accelerator_certain(ctx, stack=None, strict: bool = False) -> bool:
    """Whether code at the node cannot run without an accelerator (so it needs no availability guard)."""
    return accelerator(ctx, stack, strict) == "certain"


# --- torch without torch.accelerator (old-torch fallback branches) ----------------------------------------

_VERSION_FLAG = re.compile(
    r"torch\w*?(greater|less|newer|older|at_least|before)|"
    r"(greater|less|newer|older|at_least|before)\w*torch",
    re.IGNORECASE,
)
#: a flag named after the torch version it requires: ultralytics' `TORCH_2_4 = check_version(TORCH_VERSION,
#: "2.4.0")`, `IS_TORCH_2_1`
_AT_LEAST_FLAG = re.compile(r"(?:is_)?torch_?\d+_\d+(?:_\d+)?", re.IGNORECASE)
#: a version as code writes it: "2.3", "2.4.0", (2, 3), (2, 3, 0), _2_7
_VERSION = re.compile(r"(\d+)(?:\.|_|,\s*)(\d+)")
#: the operator of a helper that takes it as an argument: `is_torch_version(">=", "2.3")`, `operator.lt`
_OPERATORS = {">=": ">=", ">": ">", "<": "<", "<=": "<=", "ge": ">=", "gt": ">", "lt": "<", "le": "<="}
_COMPARISONS = {cst.GreaterThanEqual: ">=", cst.GreaterThan: ">", cst.LessThan: "<", cst.LessThanEqual: "<="}
#: the oldest torch with `torch.accelerator` and the API the fixes use: older than that, a fallback is needed
_ACCELERATOR_COMPLETE = (2, 9)
#: torch APIs code probes with `hasattr` to tell torch versions apart, and the release that added them: the
#: branch for a torch without one (DeepSpeed's "PyTorch < 2.4 only has per-device getters") is older still
_PROBED_APIS = {
    "torch.accelerator": (2, 6),
    "torch.get_autocast_dtype": (2, 4),
    "torch.amp.GradScaler": (2, 3),
    "torch.amp.custom_fwd": (2, 4),
    "torch.amp.custom_bwd": (2, 4),
    "torch.library.custom_op": (2, 4),
    "torch.library.register_fake": (2, 4),
}


def _version_test(ctx, test: cst.CSTNode) -> bool | None:
    """True when `test` being false means a torch without `torch.accelerator` (torch >= X or > X, for an X
    that 2.9 passes), False when its being true means that (torch < X or <= X), else None:
    `_is_torch_greater_or_equal_than_2_7`, `is_torch_greater_or_equal("2.6")`, `torch.__version__ >= "2.6"`,
    `version.parse(torch.__version__) < version.parse("2.8")`, accelerate's `is_torch_version(">=", "2.3")`,
    `torch_version >= (2, 3)`, ultralytics' `TORCH_2_4` (a flag named after the version it requires)."""
    found = _version_comparison(ctx, test)
    if found is None:
        return None
    operator, version = found
    if operator in (">=", "<"):
        return None if version > _ACCELERATOR_COMPLETE else operator == ">="
    return None if version >= _ACCELERATOR_COMPLETE else operator == ">"


def _version_comparison(ctx, test: cst.CSTNode) -> tuple[str, tuple[int, int]] | None:
    """(operator, version) of a torch version test (see `_version_test`), the operator as `torch <op>
    version` reads."""
    text = ctx.code(test)
    if "torch" not in text.lower():
        return None
    operator = None
    about_versions = "version" in text.lower()  # not `torch.rand(1) > 0.5`
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and about_versions:
        operator = _COMPARISONS.get(type(test.comparisons[0].operator))
    elif about_versions and isinstance(test, cst.Call) and any(_operator_of(a.value) for a in test.args):
        operator = next(op for arg in test.args if (op := _operator_of(arg.value)))
    elif isinstance(test, (cst.Name, cst.Attribute, cst.Call)) and (match := _VERSION_FLAG.search(text)):
        newer = (match.group(1) or match.group(2)).lower() in ("greater", "newer", "at_least")
        operator = ">=" if newer else "<"
    elif isinstance(test, (cst.Name, cst.Attribute)) and _AT_LEAST_FLAG.fullmatch(text.rsplit(".", 1)[-1]):
        operator = ">="
    found = _VERSION.search(text)
    if operator is None or found is None:
        return None
    return operator, (int(found.group(1)), int(found.group(2)))


def branch_torch_floor(ctx, stack) -> tuple[tuple[int, int], str] | None:
    """The oldest torch the code at the end of `stack` runs on by the tests around it, and the test, when
    one says: the body of `if` torch >= X (or a `hasattr` probe of an API torch X added: funasr's shim
    `hasattr(torch.amp, "GradScaler")`, torch 2.3) only runs from X on, so a fix there may only use what X
    has."""
    best: tuple[tuple[int, int], str] | None = None
    for parent, child in pairwise(stack):
        if isinstance(parent, (cst.If, cst.IfExp)) and child is parent.body:
            for conjunct in conjuncts(parent.test):
                floor = _floor_of(ctx, conjunct)
                if floor is not None and (best is None or floor > best[0]):
                    best = (floor, ctx.excerpt(conjunct, 60))
    return best


def _floor_of(ctx, test: cst.CSTNode) -> tuple[int, int] | None:
    if _is_hasattr(ctx, test):
        return _PROBED_APIS.get(_probed_api(ctx, test))
    found = _version_comparison(ctx, test)
    return found[1] if found is not None and found[0] == ">=" else None


def _is_hasattr(ctx, test: cst.CSTNode) -> bool:
    return isinstance(test, cst.Call) and ctx.call_name(test) == "hasattr" and len(test.args) == 2


def _probed_api(ctx, call: cst.Call) -> str:
    """What a `hasattr(owner, "name")` probe asks for, as `owner.name` (`torch.amp.GradScaler`)."""
    return f"{_owner_name(ctx, call.args[0].value)}.{_string(call.args[1].value)}"


def _owner_name(ctx, owner: cst.CSTNode) -> str | None:
    """The qualified name of a `hasattr` owner, also through a name bound once to `getattr(torch, "amp",
    None)`."""
    name = ctx.qualified_name(owner)
    if name is not None and (name == "torch" or name.startswith("torch.")):
        return name
    values = ctx.bindings.values(key_of(owner)) if isinstance(owner, cst.Name) else []
    if len(values) == 1 and isinstance(value := values[0], cst.Call) and ctx.call_name(value) == "getattr":
        args = value.args
        if len(args) >= 2 and (attr := _string(args[1].value)) is not None:
            return f"{ctx.qualified_name(args[0].value)}.{attr}"
    return name


def _operator_of(node: cst.BaseExpression) -> str | None:
    """`">="` for the string `">="` or `operator.ge`."""
    from neuron_migrate.migrate.names import dotted

    value = _string(node)
    if value is None and isinstance(node, cst.Attribute) and dotted(node.value) == "operator":
        value = node.attr.value
    return _OPERATORS.get(value or "")


def _api_test(ctx, test: cst.CSTNode, seen: frozenset[str] = frozenset()) -> bool | None:
    """True when `test` being false means a torch without `torch.accelerator` (with the API the fixes use),
    False for its negation, else None: `hasattr(torch, "accelerator")`, a `hasattr` probe of an API that an
    older torch added (`hasattr(torch, "get_autocast_dtype")`, torch 2.4) and torch version tests. `seen`:
    the names already followed to their values (`x = f(x)` must not be followed forever)."""
    version = _version_test(ctx, test)
    if version is not None:
        return version
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _api_test(ctx, test.expression, seen)
        return None if inner is None else not inner
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        left, right = _api_test(ctx, test.left), _api_test(ctx, test.right)
        return True if True in (left, right) else None
    if _is_hasattr(ctx, test) and _string(test.args[1].value) is not None:
        probed = _probed_api(ctx, test)
        added = _PROBED_APIS.get(probed)
        if probed.startswith("torch.accelerator.") or (added and added <= _ACCELERATOR_COMPLETE):
            return True
    if (
        isinstance(test, cst.Comparison) and len(test.comparisons) == 1
    ):  # getattr(torch, "accelerator", None) is None
        left, item = test.left, test.comparisons[0]
        if (
            isinstance(left, cst.Call)
            and ctx.call_name(left) == "getattr"
            and len(left.args) >= 2
            and _string(left.args[1].value) == "accelerator"
            and isinstance(item.comparator, cst.Name)
            and (item.comparator.value == "None")
        ):
            return isinstance(item.operator, cst.IsNot)
    if isinstance(test, (cst.Name, cst.Attribute)) and (key := key_of(test)) not in seen:
        values = ctx.bindings.values(key)
        if values and all(v is not None for v in values):
            found = {_api_test(ctx, v, seen | {key}) for v in values}
            return found.pop() if len(found) == 1 else None
    return None


def _handles_missing_api(handler: cst.ExceptHandler) -> bool:
    """Whether the handler catches what a missing API raises: `AttributeError`, `ImportError`, or
    `TypeError` (a newer signature: `torch.amp.GradScaler(device=...)`)."""
    kind = handler.type
    names = [kind] if not isinstance(kind, cst.Tuple) else [e.value for e in kind.elements]
    return any(isinstance(n, cst.Name) and n.value in _MISSING_API_ERRORS for n in names)


_MISSING_API_ERRORS = frozenset({"AttributeError", "ImportError", "ModuleNotFoundError", "TypeError"})
#: the device-generic APIs the fixes write: a `try` that uses one falls back for a torch without it
_NEWER_API = re.compile(r"\btorch\.(?:accelerator\b|amp\.|Stream\b|Event\b)|get_default_backend_for_device")


def without_accelerator_api(ctx, stack=None) -> bool:
    """Whether the node runs only when `torch.accelerator` is missing: the `else` of `hasattr(torch,
    "accelerator")`, an `except AttributeError:` (or `ImportError`, `TypeError`) around code that uses it or
    another API the fixes write (open_clip's `try: torch.amp.GradScaler(device=device)` / `except
    (AttributeError, TypeError): torch.cuda.amp.GradScaler()`), or the rest of a block after `if
    hasattr(torch, "accelerator"): return ...`. Rewriting such code with `torch.accelerator` breaks it."""
    stack = ctx.stack if stack is None else stack
    for index in range(len(stack) - 1):
        parent, child = stack[index], stack[index + 1]
        kind = type(parent)  # exact type tests: see `names.dotted`
        if kind is cst.If and child is not parent.test:  # the test runs on every torch
            api = _api_test(ctx, parent.test)
            if api is not None and ((child is parent.body) != api):
                return True
        elif kind is cst.IfExp:
            api = _api_test(ctx, parent.test)
            if api is not None and ((child is parent.body) != api) and child in (parent.body, parent.orelse):
                return True
        elif kind is cst.Try and type(child) is cst.ExceptHandler and _handles_missing_api(child):
            if _NEWER_API.search(ctx.code(parent.body)):
                return True
        elif kind is cst.FunctionDef and _for_older_torch(ctx, parent):
            return True
        elif kind is cst.IndentedBlock or kind is cst.Module:
            for stmt in parent.body:
                if stmt is child:
                    break
                if (
                    type(stmt) is cst.If
                    and stmt.orelse is None
                    and exits(stmt.body)
                    and _api_test(ctx, stmt.test) is True
                ):
                    return True
    return False


def _for_older_torch(ctx, function: cst.FunctionDef) -> bool:
    """Whether a decorator picks `function` only for a torch older than `torch.accelerator`: torchrl's
    `@implement_for("torch", None, "2.3")` (the implementation for torch below 2.3)."""
    for decorator in function.decorators:
        call = decorator.decorator
        if not (isinstance(call, cst.Call) and len(call.args) >= 3):
            continue
        module, upper = _string(call.args[0].value), _string(call.args[2].value)
        found = _VERSION.search(upper or "")
        if (
            module == "torch"
            and found
            and (int(found.group(1)), int(found.group(2))) <= _ACCELERATOR_COMPLETE
        ):
            return True
    return False


def conjuncts(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The parts of an `and` chain (`a and b and c` -> [a, b, c]); any other test is its own one part."""
    return _operands(test, cst.And)


def disjuncts(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The alternatives of an `or` chain (`a or b or c` -> [a, b, c]); any other test is its own one."""
    return _operands(test, cst.Or)


def _operands(test: cst.BaseExpression, operator: type) -> list[cst.BaseExpression]:
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, operator):
        return [*_operands(test.left, operator), *_operands(test.right, operator)]
    return [test]
