"""Code that does the same on any accelerator: what a CUDA device-type test may safely send neuron to.

Fixed (`d.type in ("cuda", "neuron")`), a test like `if x.device.type == "cuda":` sends `neuron` into code
that was written for CUDA only. That is safe when the code is device plumbing (moving and pinning
tensors, `torch.accelerator` / `torch.amp` calls, logging, builtins) or code the fixes of the same run make
device-agnostic; anything else (a torch op with a CUDA-only argument such as `torch.mm(out_dtype=...)`, the
project's own kernels) may not run there, so the rewrite needs a person (`settle` makes it unsafe).
"""

from __future__ import annotations

import builtins
import re

import libcst as cst

from neuron_migrate.migrate.guards import conjuncts, implies
from neuron_migrate.migrate.names import dotted
from neuron_migrate.migrate.walk import find, walk

_NEUTRAL_NAMES = re.compile(
    r"torch\.(accelerator|amp|profiler)\..*|torch\.(device|get_device_module|Stream|Event|is_tensor|"
    r"is_autocast_enabled|get_autocast_dtype|no_grad|inference_mode)"
)
#: no builtin runs device code
_BUILTINS = frozenset(dir(builtins))
#: tensor and module methods that only move, pin, convert or read values, the stream calls the fixes write
#: (and the methods of lists and dicts)
_NEUTRAL_METHODS = frozenset(
    re.findall(
        r"\w+",
        "to cpu pin_memory is_pinned item tolist numpy detach contiguous half float bfloat16 size dim numel "
        "is_floating_point is_complex is_contiguous data_ptr current_stream wait_stream record_stream "
        "get pop append extend update keys values items join format startswith endswith",
    )
)
#: the neutral methods that move, pin or order work on a device
_DEVICE_METHODS = frozenset({"to", "cpu", "pin_memory", "current_stream", "wait_stream", "record_stream"})
_STREAM_METHODS = frozenset({"synchronize", "wait", "record", "query"})
_STREAM = re.compile(r"stream|event", re.IGNORECASE)
_LOG_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "log"})
_EXCEPTION_NAME = re.compile(r"(Error|Exception|Warning|Exit)$")


def widening_risk(ctx, check, libraries: list, covered: set[int]) -> str | None:
    """Why letting neuron in through the CUDA device-type test `check` could send it into code it may not run,
    or None: the file uses CUDA-only libraries or kernels (`libraries`: their findings), or the code the
    test selects for CUDA makes a call that is neither device plumbing nor fixed in this run."""
    side, rest = cuda_side(ctx, check), and_rest(check)
    if (subject := _tested_name(check.node)) and _assigns(side, subject):
        return (
            f"the code it selects for CUDA sets `{subject}` itself: neuron would have it replaced there too"
        )
    call = first_unknown_call(ctx, (*rest, *side), covered)
    if call is not None:
        return f"neuron would run `{call}`: check it works there"
    affected = side or _what_cuda_skips(ctx, check)
    if affected and not _does_device_work(ctx, (*rest, *affected), covered):
        first = ctx.excerpt(affected[0])
        what = "selects for" if side else "skips on"
        return (
            f"what it {what} CUDA (`{first}`) does no device work: a choice made for CUDA, which neuron "
            "would now make too"
        )
    if libraries:
        used = ctx.code(libraries[0].node).strip().splitlines()[0]
        return f"the file uses CUDA-only code, `{used}`: check that neuron should take this path"
    return None


def _tested_name(test: cst.CSTNode) -> str | None:
    """The dotted name a device test asks about (`device_map` of `device_map == "cuda"`, `dev` of
    `dev.type == "cuda"` or `dev.startswith("cuda")`), if it is one."""
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        operands = (test.left, test.comparisons[0].comparator)
        subject = next((o for o in operands if isinstance(o, (cst.Name, cst.Attribute))), None)
    elif isinstance(test, cst.Call) and isinstance(test.func, cst.Attribute):
        subject = test.func.value
    else:
        return None
    if isinstance(subject, cst.Attribute) and subject.attr.value == "type":
        subject = subject.value
    return dotted(subject) if isinstance(subject, (cst.Name, cst.Attribute)) else None


def _assigns(nodes: tuple[cst.CSTNode, ...], key: str) -> bool:
    """Whether `nodes` assign the dotted name `key` (`device_map = f"cuda:{rank}"`)."""
    found: list[bool] = []

    class Finder(cst.CSTVisitor):
        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            if dotted(node.target) == key:
                found.append(True)

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            if dotted(node.target) == key:
                found.append(True)

    for node in nodes:
        walk(node, Finder())
    return bool(found)


def cuda_side(ctx, check) -> tuple[cst.CSTNode, ...]:
    """The code the test of `check` runs only on CUDA: the body of `if <CUDA>:`, the `else` of `if <not
    CUDA>:`, the code after `if <not CUDA>: raise`; for a test kept in a name (`on_gpu = d.type == "cuda"`),
    the code that name's tests select in the same function (`flag_side`)."""
    owner = _test_owner(check, (cst.If, cst.While, cst.IfExp))
    if owner is None:
        return flag_side(ctx, check)
    if owner.body not in check.region:  # a precondition (what follows it), or a negated test's `else`
        return check.region[1:]
    when_true, when_false = implies(ctx, owner.test)
    if when_true != "certain" and when_false == "certain":
        orelse = owner.orelse
        return () if orelse is None else (orelse.body if isinstance(orelse, cst.Else) else orelse,)
    if _excluding_part(ctx, owner, check):
        return ()  # `if x and d.type != "cuda":` runs its body off CUDA only, and its `else` on either
    return (owner.body,)


def _what_cuda_skips(ctx, check) -> tuple[cst.CSTNode, ...]:
    """For `if <not CUDA>: body` without an `else` (`if not (bool and device.type == "cuda"): yield ...`), the
    body: fixed, the test makes neuron skip it too."""
    owner = _test_owner(check, (cst.If,))
    if owner is None or owner.orelse is not None or owner.body not in check.region:
        return ()
    when_true, when_false = implies(ctx, owner.test)
    excludes = when_true != "certain" and when_false == "certain"
    return (owner.body,) if excludes or _excluding_part(ctx, owner, check) else ()


def _excluding_part(ctx, owner, check) -> bool:
    """Whether the check's test is one part of the `and` that `owner` tests and holds off CUDA only
    (`if recorder.marked and device.type != "cuda":`, tensordict, review 48): the body never runs on CUDA."""
    parts = conjuncts(owner.test)
    if len(parts) < 2 or not any(part is check.node for part in parts):
        return False
    when_true, when_false = implies(ctx, check.node)
    return when_true != "certain" and when_false == "certain"


def _test_owner(check, kinds: tuple[type, ...]):
    """The statement or expression of `kinds` whose test heads the check's region, if any."""
    test = check.region[0] if check.region else None
    return next((n for n in check.stack if isinstance(n, kinds) and n.test is test), None)


def and_rest(check) -> tuple[cst.CSTNode, ...]:
    """What the CUDA test of `check` heads in `test and rest` (`device.type == "cuda" and
    _get_magma_version() >= (2, 5, 4)`): `rest` only runs on CUDA."""
    stack, rest = check.stack, []
    for index in range(len(stack) - 1, 0, -1):
        parent, child = stack[index - 1], stack[index]
        if isinstance(parent, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            break
        if (
            isinstance(parent, cst.BooleanOperation)
            and isinstance(parent.operator, cst.And)
            and child is parent.left
        ):
            rest.append(parent.right)
    return tuple(rest)


def flag_side(ctx, check) -> tuple[cst.CSTNode, ...]:
    """For `name = <CUDA test>` (the whole value), what the tests of `name` select in the function (or module)
    that assigns it: `if name:` bodies, the `else` of `if not name:`, `x` of `x if name else y`, the right
    side of `name and x` (the other way round for a test that holds without CUDA). A CUDA test that is only
    a part of the value (`(d.type == "cuda" and gqa) or unbacked`) may make the name hold, so what the name
    selects counts too; so does a flag the CUDA test raises (`if arg.is_cuda: need_sync = True`, where every
    `True` the flag gets is under that test)."""
    flag = _assigned_flag(ctx, check) or _raised_flag(ctx, check)
    if flag is None:
        return ()
    name, on_cuda = flag
    scope = next((n for n in reversed(check.stack) if isinstance(n, cst.FunctionDef)), ctx.module)
    selected: list[cst.CSTNode] = []

    def holds(test: cst.BaseExpression) -> bool | None:
        """True where `test` is `name`, False where it is `not name`, else None."""
        if isinstance(test, cst.Name) and test.value == name:
            return True
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            inner = holds(test.expression)
            return None if inner is None else not inner
        return None

    def pick(test, body, orelse) -> None:
        value = holds(test)
        if value is None and any(holds(part) == on_cuda for part in conjuncts(test)):
            selected.append(body)  # `if name and x:` runs its body only where `name` holds
        elif value is not None:
            branch = body if value == on_cuda else orelse
            if branch is not None:
                selected.append(branch.body if isinstance(branch, cst.Else) else branch)

    for node in ctx.once((_SELECTING, scope), lambda: find(scope, _SELECTING)):
        kind = type(node)
        if kind is cst.BooleanOperation:
            if holds(node.left) == on_cuda and isinstance(node.operator, cst.And):
                selected.append(node.right)
        else:
            pick(node.test, node.body, node.orelse if kind is not cst.While else None)
    return tuple(selected)


#: where a flag may select code; the nodes are found once per scope (`flag_side`: a module with seventy CUDA
#: flags walked it seventy times)
_SELECTING = (cst.If, cst.While, cst.IfExp, cst.BooleanOperation)


def _assigned_flag(ctx, check) -> tuple[str, bool] | None:
    """(`name`, what it holds where CUDA is) for `name = <value holding the CUDA test>`, or for that part of
    `a, name = x, <value>` (MONAI's `non_blocking, _ss = torch.cuda.is_available(), -1`)."""
    statement = check.region[0] if check.region else None
    assigned = _name_assigned(statement) or _unpacked(statement, check.stack)
    if assigned is None:
        return None
    name, value = assigned
    when_true, when_false = implies(ctx, value)
    if "certain" in (when_true, when_false):
        return name, when_true == "certain"
    if value in check.stack and not _negated_below(value, check.stack):
        return name, True  # `(x.device.type == "cuda" and ...) or ...`: the name may hold because of CUDA
    return None


def _raised_flag(ctx, check) -> tuple[str, bool] | None:
    """(`name`, True) for `if <CUDA test>: name = True` when each `True` the function gives it is there."""
    owner = _test_owner(check, (cst.If,))
    if owner is None or owner.body not in check.region or not isinstance(owner.body, cst.IndentedBlock):
        return None
    if implies(ctx, owner.test)[0] != "certain":  # `if ok or x.is_cuda:` also raises it without CUDA
        return None
    scope = next((n for n in reversed(check.stack) if isinstance(n, cst.FunctionDef)), ctx.module)
    for statement in owner.body.body:
        assigned = _name_assigned(statement)
        if assigned is None or not _is_true(assigned[1]):
            continue
        name = assigned[0]
        bindings = ctx.bindings.in_scope(name, scope)
        raised = [b for b in bindings if b.kind == "param" or not _is_false(b.value)]
        if all(b.statement is statement for b in raised):
            return name, True
    return None


def _name_assigned(statement: cst.CSTNode | None) -> tuple[str, cst.BaseExpression] | None:
    """(name, value) for a statement `name = value` (one plain name), else None."""
    small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and statement.body else None
    if (
        isinstance(small, cst.Assign)
        and len(small.targets) == 1
        and isinstance(small.targets[0].target, cst.Name)
    ):
        return small.targets[0].target.value, small.value
    return None


def _unpacked(statement: cst.CSTNode | None, stack) -> tuple[str, cst.BaseExpression] | None:
    """(name, value) for the part of `a, b = x, y` (as many plain names as values) whose value holds the
    node at the end of `stack`, else None."""
    small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and statement.body else None
    if not isinstance(small, cst.Assign) or len(small.targets) != 1:
        return None
    targets, values = small.targets[0].target, small.value
    if not isinstance(targets, cst.Tuple) or not isinstance(values, cst.Tuple):
        return None
    if len(targets.elements) != len(values.elements):
        return None
    for target, value in zip(targets.elements, values.elements, strict=True):
        if isinstance(target, cst.StarredElement) or isinstance(value, cst.StarredElement):
            return None
        if value.value in stack:
            return (target.value.value, value.value) if isinstance(target.value, cst.Name) else None
    return None


def _is_true(value: cst.BaseExpression | None) -> bool:
    return isinstance(value, cst.Name) and value.value == "True"


def _is_false(value: cst.BaseExpression | None) -> bool:
    return isinstance(value, cst.Name) and value.value == "False"


def _negated_below(value: cst.CSTNode, stack: tuple[cst.CSTNode, ...]) -> bool:
    """Whether a `not` stands between `value` and the node at the end of `stack` (which it holds)."""
    below = stack[stack.index(value) :]
    return any(isinstance(n, cst.UnaryOperation) and isinstance(n.operator, cst.Not) for n in below)


def first_unknown_call(ctx, nodes: tuple[cst.CSTNode, ...], covered: set[int]) -> str | None:
    """The first call in `nodes` that is neither device plumbing nor replaced by an applied fix (its node id
    in `covered`), as source text, or None."""
    found: list[str] = []

    class Finder(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if found or id(node) in covered:
                return False
            if isinstance(node, cst.Call) and not (_callee_fixed(node, covered) or _neutral(ctx, node)):
                found.append(ctx.excerpt(node))
                return False
            return True

    for node in nodes:
        walk(node, Finder())
        if found:
            return found[0]
    return None


def _does_device_work(ctx, nodes: tuple[cst.CSTNode, ...], covered: set[int]) -> bool:
    """Whether `nodes` hold device plumbing (a `torch.accelerator` / `torch.amp` call, a move, pin or stream
    call) or code an applied fix rewrites; values, builtins, logging and list methods alone are a choice
    (`memory_format = torch.contiguous_format`, `drivers = ("gels",)`), not plumbing."""
    found: list[bool] = []

    class Finder(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if found:
                return False
            if id(node) in covered or (isinstance(node, cst.Call) and _plumbing(ctx, node, covered)):
                found.append(True)
                return False
            return True

    for node in nodes:
        walk(node, Finder())
    return bool(found)


def _plumbing(ctx, call: cst.Call, covered: set[int]) -> bool:
    if _callee_fixed(call, covered) or _NEUTRAL_NAMES.fullmatch(ctx.call_name(call) or ""):
        return True
    func = call.func
    if not isinstance(func, cst.Attribute):
        return False
    return func.attr.value in _DEVICE_METHODS or _stream_call(ctx, func)


def _stream_call(ctx, func: cst.Attribute) -> bool:
    """`torch.accelerator.current_stream(d).synchronize()`, `event.wait()`: a stream or event's own
    synchronize / wait / record / query."""
    return func.attr.value in _STREAM_METHODS and bool(_STREAM.search(ctx.code(func.value)))


def _callee_fixed(call: cst.Call, covered: set[int]) -> bool:
    """Whether an applied fix replaces the function a call calls (`x.cuda()` whose `cuda` becomes `to`), or
    the object it calls it on (`torch.cuda.current_stream(d).synchronize()`)."""
    func = call.func
    return id(func) in covered or (
        isinstance(func, cst.Attribute) and (id(func.attr) in covered or id(func.value) in covered)
    )


def is_message(call: cst.Call) -> bool:
    """`print(...)`, `logger.warning(...)`, `warnings.warn(...)`: a call that only tells the user a thing."""
    func = call.func
    if isinstance(func, cst.Name):
        return func.value == "print"
    if not isinstance(func, cst.Attribute):
        return False
    owner = dotted(func.value) or ""
    return func.attr.value in _LOG_METHODS and ("log" in owner.lower() or owner == "warnings")


def _neutral(ctx, call: cst.Call) -> bool:
    name = ctx.call_name(call) or ""
    if _NEUTRAL_NAMES.fullmatch(name) or name in _BUILTINS or _EXCEPTION_NAME.search(name):
        return True
    func = call.func
    if not isinstance(func, cst.Attribute):
        return False
    if is_message(call) or _stream_call(ctx, func):
        return True
    return func.attr.value in _NEUTRAL_METHODS
