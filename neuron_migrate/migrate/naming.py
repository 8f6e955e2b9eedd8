"""Naming the device once: turn the `DEVICE` / `DEVICE_TYPE` placeholders of a file's fixes into code.

Per scope (a function body, or module-level code; class bodies, lambdas and comprehensions belong to the scope
around them), in order of preference:

0. for the type only, under `if d.type == "cuda":` (or `in ("cuda", "neuron")`): `d.type`, which is the
   current accelerator's type there;
1. a name already bound to the idiom in that scope (`device = torch.accelerator.current_accelerator(...) or
   torch.device("cpu")`, also one a fix in this run is rewriting into the idiom) whose binding runs before the
   use: the placeholder becomes that name (`device`, `device.type`, or a `device_type` name for the type);
2. else, when the scope needs the idiom more than once, or a fix cannot hold it inline (an f-string), or the
   inline idiom would push its line over the line length: one new binding, `device = ...` (`device_type =
   (...).type` when only the type is wanted), inserted right above the first statement that needs it, in
   the innermost block holding every use (above the outermost `for`/`while` around that block: the device
   does not change between iterations), under a name the scope does not use yet;
3. else the idiom inline.

A test module (`test_*.py`, `*_test.py`) where two or more functions are left at step 2 or 3 gets one
module-level `DEVICE = ...` after its imports instead, which all their uses name.

Only fixes that this run applies count towards "more than once", so an unsafe fix left for a person does not
make a binding for a single safe use.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

import libcst as cst

from neuron_migrate.migrate.bindings import Binding
from neuron_migrate.migrate.device_literals import is_cuda_and_neuron, string_value
from neuron_migrate.migrate.fixes import (
    CERTAIN_DEVICE_EXPR,
    DEVICE,
    DEVICE_ATOM,
    DEVICE_EXPR,
    DEVICE_TYPE,
    DEVICE_TYPE_EXPR,
    PLACEHOLDERS,
    FixSpec,
    Insertion,
    Replacement,
    inline,
    inline_certain,
)
from neuron_migrate.migrate.guards import accelerator, conjuncts
from neuron_migrate.migrate.names import dotted
from neuron_migrate.migrate.test_gates import is_test_module
from neuron_migrate.migrate.walk import statements, walk

_BLOCKS = (cst.IndentedBlock, cst.Module)
#: what holds one statement of a block: where a lookup evaluated lazily inside one stops being so
_STATEMENT_KINDS = (cst.SimpleStatementLine, cst.BaseCompoundStatement)
_SPACES = re.compile(r"\s+")
_IDIOMS = {
    _SPACES.sub("", DEVICE_EXPR),
    _SPACES.sub("", DEVICE_EXPR.replace('"', "'")),
    inline_certain(DEVICE),
}
_TYPE_IDIOMS = {_SPACES.sub("", DEVICE_TYPE_EXPR), _SPACES.sub("", DEVICE_TYPE_EXPR.replace('"', "'"))}
NAMES = {"device": ("device", "accelerator", "accel_device"), "type": ("device_type", "accelerator_type")}
#: the names of a test module's one binding (`_test_module_binding`): a module-level constant
MODULE_NAMES = {"device": ("DEVICE", "ACCELERATOR"), "type": ("DEVICE_TYPE", "ACCELERATOR_TYPE")}


@dataclass
class Use:
    """One fix that names the device, with the stack of the code it rewrites."""

    pending: object
    stack: tuple[cst.CSTNode, ...]
    applied: bool
    types_only: bool
    long: bool
    names_itself: bool  # the fix is the whole value of `name = ...`: that assignment already names the device


def _idiom_shaped(value: cst.BaseExpression) -> bool:
    """Whether `value` has the shape of a device idiom: `current_accelerator(...)`, optionally `or ...`,
    optionally `(...).type`."""
    if isinstance(value, cst.Attribute) and value.attr.value == "type":
        value = value.value
    if isinstance(value, cst.BooleanOperation):
        value = value.left
    return isinstance(value, cst.Call) and (dotted(value.func) or "").endswith("current_accelerator")


def scope_of(stack: tuple[cst.CSTNode, ...]) -> cst.CSTNode:
    """The function whose body holds the node (or the module): where a binding for it can go."""
    for index in range(len(stack) - 2, -1, -1):
        node = stack[index]
        if isinstance(node, cst.FunctionDef) and stack[index + 1] is node.body:
            return node
    return stack[0]


def _in_scope(stack: tuple[cst.CSTNode, ...], scope: cst.CSTNode) -> tuple[cst.CSTNode, ...]:
    """The part of `stack` from the scope's body block down."""
    start = stack.index(scope)
    return stack[start + 1 :] if isinstance(scope, cst.FunctionDef) else stack


def _child_in(block: cst.CSTNode, stack: tuple[cst.CSTNode, ...]) -> cst.CSTNode | None:
    index = stack.index(block)
    return stack[index + 1] if index + 1 < len(stack) else None


def dominates(binding: Binding, stack: tuple[cst.CSTNode, ...]) -> bool:
    """Whether `binding` runs before the node at the end of `stack`, on every path (same block or an enclosing
    one, an earlier statement)."""
    block, statement = binding.block, binding.statement
    if block is None or statement is None or block not in stack:
        return False
    child = _child_in(block, stack)
    body = list(block.body)
    return (
        child is not None
        and statement in body
        and child in body
        and body.index(statement) < body.index(child)
    )


class DeviceNames:
    """Resolves every placeholder of one file's fixes (see the module docstring)."""

    def __init__(
        self,
        ctx,
        line_length: int,
        applies: Callable[[object], bool],
        overflow: Callable[[object, Replacement, str], bool],
    ) -> None:
        self.ctx = ctx
        self.line_length = line_length
        self.applies = applies
        self.overflow = overflow  # (pending, replacement, new text) -> whether the line would get too long
        self.rewritten: dict[int, str] = {}  # id(node) -> placeholder text a fix in this run puts there

    def resolve(self, pendings: list) -> None:
        uses = [self._use(p) for p in pendings if p.fix is not None and p.fix.uses_device]
        for pending in pendings:
            if pending.fix is not None and self.applies(pending):
                for r in pending.fix.replacements:
                    if r.text in (DEVICE, DEVICE_ATOM, DEVICE_TYPE):
                        self.rewritten[id(r.node)] = DEVICE_TYPE if r.text == DEVICE_TYPE else DEVICE
        groups: dict[int, list[Use]] = {}
        scopes: dict[int, cst.CSTNode] = {}
        for use in uses:
            scope = scope_of(use.stack)
            groups.setdefault(id(scope), []).append(use)
            scopes[id(scope)] = scope
        unnamed = {key: self._named_in_scope(scopes[key], group) for key, group in groups.items()}
        shared = self._test_module_binding(scopes, unnamed)
        for key, rest in unnamed.items():
            if key not in shared:
                self._bind_or_inline(scopes[key], rest)

    def _use(self, pending) -> Use:
        fix: FixSpec = pending.fix
        types_only = not any(DEVICE in r.text or DEVICE_ATOM in r.text for r in fix.replacements)
        # too long for the line as the inline idiom would be written there (shorter where an accelerator is
        # certain: `torch.zeros(1, device=torch.accelerator.current_accelerator())` needs no name)
        written = inline_certain if accelerator(self.ctx, pending.stack) == "certain" else _inline
        # a name bound above the statement would run the lookup where the code did not (outetts'
        # `device if device is not None else "cuda" if ... else "cpu"`, review 49): inline there, and wrapped
        long = not _evaluated_lazily(pending.stack) and any(
            self.overflow(pending, r, written(r.text)) for r in fix.replacements if _holds(r.text)
        )
        return Use(pending, pending.stack, self.applies(pending), types_only, long, _names_itself(pending))

    # --- per scope ---------------------------------------------------------------------------------------

    def _named_in_scope(self, scope: cst.CSTNode, uses: list[Use]) -> list[Use]:
        """Steps 0 and 1 (and the uses whose assignment names the device itself, inline); the uses left."""
        existing = self._idiom_names(scope)
        rest = []
        for use in uses:
            if use.types_only and (tested := _tested_type(self.ctx, use.stack, scope)) is not None:
                self._name(use, tested, "type")
                continue
            name = next(
                (
                    n
                    for n, kind, b in existing
                    if dominates(b, use.stack)
                    and not self._binds_itself(b, use)
                    and (kind == "device" or use.types_only)
                ),
                None,
            )
            if name is not None:
                kind = next(k for n, k, _ in existing if n == name)
                self._name(use, name, kind)
            else:
                rest.append(use)
        for use in [u for u in rest if u.names_itself]:
            self._inline(use)
        return [u for u in rest if not u.names_itself]

    def _bind_or_inline(self, scope: cst.CSTNode, rest: list[Use]) -> None:
        """Steps 2 and 3 for the uses of one scope that no existing name serves."""
        applied = [u for u in rest if u.applied]
        if not rest:
            return
        if len(applied) >= 2 or any(u.pending.fix.needs_name or u.long for u in rest):
            statement = self._insertion_point(scope, applied or rest)
            if statement is not None:
                self._bind(scope, rest, statement)
                return
        for use in rest:
            self._inline(use)

    def _binds_itself(self, binding: Binding, use: Use) -> bool:
        return binding.value is not None and any(
            r.node is binding.value for r in use.pending.fix.replacements
        )

    def _idiom_names(self, scope: cst.CSTNode) -> list[tuple[str, str, Binding]]:
        """(name, "device" | "type", binding) for plain names every binding of which in `scope` is the idiom
        (or is being rewritten into it), plus module-level ones a function can see."""
        found = []
        scopes = [scope] if isinstance(scope, cst.Module) else [scope, self.ctx.module]
        local = self.ctx.bindings.keys_bound_in(scope) if scope is not self.ctx.module else set()
        for owner in scopes:
            for key in self.ctx.bindings.keys_bound_in(owner):
                if "." in key or "[" in key or (owner is not scope and key in local):
                    continue
                bindings = self.ctx.bindings.in_scope(key, owner)
                kinds = {self._idiom_kind(b.value) for b in bindings}
                if len(kinds) == 1 and (kind := kinds.pop()) is not None:
                    found.extend((key, kind, b) for b in bindings)
        return found

    def _idiom_kind(self, value: cst.BaseExpression | None) -> str | None:
        if value is None:
            return None
        planned = self.rewritten.get(id(value))
        if planned is not None:
            return "device" if planned == DEVICE else "type"
        if not _idiom_shaped(value):  # spare the code generation of every other value (a 20k-line table)
            return None
        text = _SPACES.sub("", self.ctx.code(value))
        return "device" if text in _IDIOMS else "type" if text in _TYPE_IDIOMS else None

    def _test_module_binding(self, scopes: dict[int, cst.CSTNode], unnamed: dict[int, list[Use]]) -> set[int]:
        """In a test module where two or more functions each need the idiom and no name serves them, one
        module-level name after the imports (`DEVICE = ...`), which every such use refers to, rather than the
        idiom in each test; the keys of the scopes it serves (none elsewhere). Only in test modules: a
        library's import would then ask the CUDA driver whether a device is there, which forbids forked
        workers CUDA (a test module's import is where `skipif(not torch.cuda.is_available())` asks already).
        """
        if not is_test_module(self.ctx.path):
            return set()
        functions = {
            key
            for key, rest in unnamed.items()
            if isinstance(scopes[key], cst.FunctionDef) and any(u.applied for u in rest)
        }
        statement = _after_imports(self.ctx.module)
        if len(functions) < 2 or statement is None:
            return set()
        uses = [u for key in functions for u in unnamed[key]]
        self._bind(self.ctx.module, uses, statement, module_level=True)
        return functions

    def _bind(
        self, scope: cst.CSTNode, uses: list[Use], statement: cst.CSTNode, module_level: bool = False
    ) -> None:
        """One name for `uses`, bound above `statement`: a local name, or a test module's constant
        (`module_level`: `MODULE_NAMES`, and never the certain idiom, which holds only where it runs)."""
        kind = "type" if all(u.types_only for u in uses) else "device"
        name = self._fresh(scope, (MODULE_NAMES if module_level else NAMES)[kind])
        value = DEVICE_TYPE_EXPR if kind == "type" else DEVICE_EXPR
        if (
            kind == "device"
            and not module_level
            and not any(_needs_type(u) for u in uses)
            and self._certain(statement, uses)
        ):
            value = CERTAIN_DEVICE_EXPR  # after `if not torch.accelerator.is_available(): return`: no CPU
        insertion = Insertion(statement, f"{name} = {value}")
        for use in uses:
            self._name(use, name, kind, insertion)

    def _certain(self, statement: cst.CSTNode, uses: list[Use]) -> bool:
        """Whether the device never needs its CPU fallback: an accelerator is certain where `statement`, on
        the stack of one of `uses`, runs, or wherever each use runs (a binding above a loop whose uses are all
        under `if run_on_gpu:`, the flag of an availability check)."""
        stack = next((u.stack for u in uses if statement in u.stack), None)
        if stack is not None and accelerator(self.ctx, stack[: stack.index(statement) + 1]) == "certain":
            return True
        return all(accelerator(self.ctx, u.stack) == "certain" for u in uses)

    def _insertion_point(self, scope: cst.CSTNode, uses: list[Use]) -> cst.CSTNode | None:
        """The earliest statement needing the device, in the innermost line-holding block around every use
        (None when there is no such block: a one-line `def f(): ...` body)."""
        stacks = [_in_scope(u.stack, scope) for u in uses]
        common = 0
        while all(len(s) > common for s in stacks) and all(s[common] is stacks[0][common] for s in stacks):
            common += 1
        # a class body is not where a module- or function-level name goes: bind above the class statement
        blocks = [
            i
            for i in range(common)
            if isinstance(stacks[0][i], _BLOCKS)
            and i + 1 < len(stacks[0])
            and not _owner_is_class(stacks[0], i)
        ]
        if not blocks:
            return None
        loop = _outermost_loop(stacks[0], blocks[-1])
        if loop is not None:  # the device does not change between iterations: name it once, above the loop
            return loop
        index = blocks[-1]
        block = stacks[0][index]
        body = list(block.body)
        children = [s[index + 1] for s in stacks if len(s) > index + 1 and s[index + 1] in body]
        return min(children, key=body.index)

    def _fresh(self, scope: cst.CSTNode, choices: tuple[str, ...]) -> str:
        """The first of `choices` that no name in the scope (nested scopes included) uses."""
        used = _names_used(scope)
        for choice in choices:
            if choice not in used:
                return choice
        number = 2
        while f"{choices[0]}_{number}" in used:
            number += 1
        return f"{choices[0]}_{number}"

    # --- writing the text ----------------------------------------------------------------------------------

    def _name(self, use: Use, name: str, kind: str, insertion: Insertion | None = None) -> None:
        type_text = f"{name}.type" if kind == "device" else name

        def text(value: str) -> str:
            return value.replace(DEVICE_ATOM, name).replace(DEVICE, name).replace(DEVICE_TYPE, type_text)

        self._rewrite(use, text, insertion)

    def _inline(self, use: Use) -> None:
        if use.pending.fix.needs_name:
            self._rewrite(use, _inline_in_fstring, None)
        elif accelerator(self.ctx, use.stack) == "certain":
            self._rewrite(use, inline_certain, None)
        else:
            self._rewrite(use, _inline, None)

    def _rewrite(self, use: Use, text: Callable[[str], str], insertion: Insertion | None) -> None:
        fix: FixSpec = use.pending.fix
        replacements = tuple(Replacement(r.node, text(r.text)) for r in fix.replacements)
        insertions = fix.insertions + ((insertion,) if insertion is not None else ())
        use.pending.fix = replace(
            fix,
            title=text(fix.title).replace(DEVICE_EXPR, "the current accelerator"),
            replacements=replacements,
            insertions=insertions,
        )


def _after_imports(module: cst.Module) -> cst.CSTNode | None:
    """The module's first statement after its docstring and the imports at its top (also those in a `try` or
    `if` there: `try: import x except ImportError: x = None`): where a module-level name goes. None when
    the module is nothing else, or imports torch further down (the name would be bound before it)."""
    body = list(module.body)
    for index, statement in enumerate(body):
        docstring = (
            index == 0
            and isinstance(statement, cst.SimpleStatementLine)
            and all(isinstance(s, cst.Expr) and isinstance(s.value, cst.SimpleString) for s in statement.body)
        )
        if docstring or _imports_only(statement):
            continue
        later = body[index:]
        return None if any(_imports_torch(s) for s in later) else statement
    return None


def _imports_only(statement: cst.CSTNode) -> bool:
    """Whether a top-level statement only imports: an import line, or a `try` / `if` whose body does."""
    if isinstance(statement, cst.SimpleStatementLine):
        return all(isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body)
    if isinstance(statement, (cst.Try, cst.If)) and isinstance(statement.body, cst.IndentedBlock):
        return all(_imports_only(inner) for inner in statement.body.body)
    return False


def _imports_torch(statement: cst.CSTNode) -> bool:
    """Whether a top-level statement imports torch (`import torch`, `from torch import ...`), also in its
    `try` / `if` blocks (or, erring on the safe side, in a function it defines)."""
    for node in (statement, *statements(statement)):
        for small in node.body if isinstance(node, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.Import) and any(
                (dotted(a.name) or "").split(".")[0] == "torch" for a in small.names
            ):
                return True
            if isinstance(small, cst.ImportFrom) and (dotted(small.module) or "").split(".")[0] == "torch":
                return True
    return False


def _tested_type(ctx, stack: tuple[cst.CSTNode, ...], scope: cst.CSTNode) -> str | None:
    """`d.type` when the code at the end of `stack` runs in the body of an `if` (within `scope`) that tested
    `d.type == "cuda"` (or `in ("cuda", "neuron")`): there `d`'s type is the current accelerator's, and the
    code can say so (Lightning's `torch.device(f"{device.type}:{index}")`)."""
    for parent, child in zip(reversed(stack[:-1]), reversed(stack[1:]), strict=False):
        if parent is scope:
            return None
        if isinstance(parent, cst.If) and child is parent.body:
            for part in conjuncts(parent.test):
                if not (isinstance(part, cst.Comparison) and len(part.comparisons) == 1):
                    continue
                op, target = part.comparisons[0].operator, part.comparisons[0].comparator
                names_cuda = (isinstance(op, cst.Equal) and string_value(target) == "cuda") or (
                    isinstance(op, cst.In) and is_cuda_and_neuron(target)
                )
                if names_cuda and isinstance(part.left, cst.Attribute) and part.left.attr.value == "type":
                    return ctx.code(part.left).strip()
    return None


def _names_used(scope: cst.CSTNode) -> set[str]:
    """Every variable name `scope` reads or binds (not keyword-argument names, not attributes)."""
    used: set[str] = set()

    class Names(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            used.add(node.value)

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            walk(node.value, self)
            return False

        def visit_Arg(self, node: cst.Arg) -> bool:
            walk(node.value, self)
            return False

    walk(scope, Names())
    return used


def _names_itself(pending) -> bool:
    """Whether the fix's only replacement is the whole value of an assignment to a plain name."""
    replacements = pending.fix.replacements
    if len(replacements) != 1 or replacements[0].text not in (DEVICE, DEVICE_ATOM, DEVICE_TYPE):
        return False
    node, stack = replacements[0].node, pending.stack
    for index in range(len(stack) - 1, 0, -1):
        if stack[index] is node:
            parent = stack[index - 1]
            if isinstance(parent, cst.Assign):
                return parent.value is node and all(isinstance(t.target, cst.Name) for t in parent.targets)
            if isinstance(parent, cst.AnnAssign):
                return parent.value is node and isinstance(parent.target, cst.Name)
            return False
    return False


def _evaluated_lazily(stack: tuple[cst.CSTNode, ...]) -> bool:
    """Whether the node at the end of `stack` is in a branch of a conditional expression, which runs only on
    some evaluations of its statement (`device if device is not None else <the idiom>`)."""
    start = max((i for i, node in enumerate(stack) if isinstance(node, _STATEMENT_KINDS)), default=0)
    return any(
        isinstance(parent, cst.IfExp) and child is not parent.test
        for parent, child in zip(stack[start:], stack[start + 1 :], strict=False)
    )


def _holds(text: str) -> bool:
    return any(p in text for p in PLACEHOLDERS)


def _inline(text: str) -> str:
    return inline(text)


def _needs_type(use: Use) -> bool:
    """Whether the fix writes the device's type (`device.type`: a type checker rejects it on the
    `torch.device | None` that `current_accelerator()` is typed as)."""
    return any(DEVICE_TYPE in r.text or DEVICE_ATOM in r.text for r in use.pending.fix.replacements)


def _inline_in_fstring(text: str) -> str:
    """The idiom inside an f-string: with the quote the string does not use (before Python 3.12 an f-string
    cannot hold its own quote character)."""
    quote = next((c for c in text if c in "'\""), '"')
    idiom = DEVICE_TYPE_EXPR.replace('"', "'") if quote == '"' else DEVICE_TYPE_EXPR
    return inline(text.replace(DEVICE_TYPE, idiom))


def _outermost_loop(stack: tuple[cst.CSTNode, ...], end: int) -> cst.CSTNode | None:
    """The outermost `for`/`while` statement among `stack[:end]` that stands in a block a binding can go in
    (not a class body), if any."""
    for index in range(1, end):
        node = stack[index]
        if (
            isinstance(node, (cst.For, cst.While))
            and isinstance(stack[index - 1], _BLOCKS)
            and not _owner_is_class(stack, index - 1)
        ):
            return node
    return None


def _owner_is_class(stack: tuple[cst.CSTNode, ...], index: int) -> bool:
    """Whether the block at `stack[index]` is a class body."""
    return index > 0 and isinstance(stack[index - 1], cst.ClassDef)
