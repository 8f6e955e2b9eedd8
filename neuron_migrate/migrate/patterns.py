"""Building blocks rules share: CUDA device strings, qualified-name matching, statements and indentation.

`QualifiedNameRule` is the base of every rule that flags uses of a CUDA API by qualified name; a mapping
table (data, not if-chains) says what each name becomes and the rule builds the fix from it.
"""

from __future__ import annotations

import re
from typing import ClassVar

import libcst as cst

from neuron_migrate.migrate.edits import AVAILABILITY_GUARD
from neuron_migrate.migrate.rule import FixSpec, Replacement, Rule

#: the one device expression the rewrites use: an accelerator when there is one, else the CPU
DEVICE_EXPR = 'torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")'
#: the device *type* as a string ("cuda", "neuron", "cpu"), for APIs that take `device_type`
DEVICE_TYPE_EXPR = f"({DEVICE_EXPR}).type"

_CUDA_DEVICE = re.compile(r"^cuda(:\d+)?$")
_CUDA_PREFIX = re.compile(r"^cuda(:|$)")


def string_value(node: cst.CSTNode) -> str | None:
    """The value of a plain string literal (not bytes, not f-string), else None."""
    if isinstance(node, cst.SimpleString):
        prefix = node.prefix.lower()
        if "b" in prefix:
            return None
        value = node.evaluated_value
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
        return isinstance(head, cst.FormattedStringText) and _CUDA_PREFIX.match(head.value) is not None and (
            head.value in ("cuda", "cuda:"))
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "format":
        value = string_value(node.func.value)
        return value is not None and bool(re.match(r"^cuda:\{\w*\}$", value))
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
        value = string_value(node.left)
        return value is not None and bool(re.match(r"^cuda:%[di]$", value))
    return False


def device_index_expr(node: cst.CSTNode, module: cst.Module) -> str | None:
    """For `'cuda:1'` -> `'1'`; for `f"cuda:{rank}"` -> `'rank'`; None when the string names no index."""
    value = string_value(node)
    if value is not None:
        return value.split(":", 1)[1] if ":" in value else None
    if isinstance(node, cst.FormattedString) and len(node.parts) == 2:
        part = node.parts[1]
        if isinstance(part, cst.FormattedStringExpression) and part.format_spec is None and part.conversion is None:
            return module.code_for_node(part.expression)
    if isinstance(node, cst.Call) and len(node.args) == 1:
        return module.code_for_node(node.args[0].value)
    if isinstance(node, cst.BinaryOperation):
        return module.code_for_node(node.right)
    return None


def is_outermost_chain(node: cst.CSTNode, parent: cst.CSTNode | None) -> bool:
    """False for `torch.cuda` inside `torch.cuda.synchronize` (only the full chain is checked)."""
    return not (isinstance(parent, cst.Attribute) and parent.value is node)


def keyword(call: cst.Call, name: str) -> cst.Arg | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def positional(call: cst.Call, index: int) -> cst.Arg | None:
    args = [a for a in call.args if a.keyword is None and not a.star]
    return args[index] if index < len(args) else None


class QualifiedNameRule(Rule):
    """Flags every use (call, decorator, bare reference) of the qualified names in `NAMES`.

    `NAMES` maps a qualified name to its replacement callee (a dotted name such as
    `torch.accelerator.synchronize`), or to None when there is nothing to rewrite to. Names ending in `.*`
    match the whole namespace below them. Subclasses override `fix_for` to build richer rewrites.
    """

    NAMES: ClassVar[dict[str, str | None]] = {}

    def _match(self, qualified: str | None) -> str | None:
        if qualified is None:
            return None
        if qualified in self.NAMES:
            return qualified
        for name in self.NAMES:
            if name.endswith(".*") and qualified.startswith(name[:-1]):
                return name
        return None

    def _check(self, node: cst.Name | cst.Attribute) -> None:
        """Check one reference (the analyzer calls `use` directly for references it has resolved)."""
        matched = self._match(self.ctx.qualified_name(node))
        if matched is not None:
            self.use(node, matched)

    def use(self, node: cst.Name | cst.Attribute, name: str) -> None:
        """A reference to `name` (a key of NAMES) at `node`, found by the analyzer's shared name index."""
        parent = self.ctx.parent
        call = parent if isinstance(parent, cst.Call) and parent.func is node else None
        self.on_use(node, call, name)

    def on_use(self, node: cst.Name | cst.Attribute, call: cst.Call | None, name: str) -> None:
        """Report a use of `name`; `call` is the call when the use is `name(...)`."""
        self.report(call or node, self.message_for(name), self.fix_for(node, call, name))

    def message_for(self, name: str) -> str:
        return self.message.format(name=name, short=name.rsplit(".", 1)[-1])

    def fix_for(self, node: cst.CSTNode, call: cst.Call | None, name: str) -> FixSpec | None:
        """Default: swap the callee for the mapped name (arguments kept)."""
        target = self.NAMES.get(name)
        if target is None:
            return None
        return FixSpec(f"Replace `{name}` with `{target}`", (Replacement(node, target),), imports=("torch",))


def enclosing_statement(ctx) -> tuple[cst.SimpleStatementLine | None, int]:
    """The simple statement line around the visited node and how many levels up it is."""
    for depth, node in enumerate(reversed(ctx.stack)):
        if isinstance(node, cst.SimpleStatementLine):
            return node, depth
        if isinstance(node, cst.BaseCompoundStatement):
            return None, depth
    return None, 0


def is_expression_statement(ctx, call: cst.Call) -> cst.SimpleStatementLine | None:
    """The statement line when `call` is the whole of a one-statement line (`torch.cuda.synchronize()`)."""
    stmt, _ = enclosing_statement(ctx)
    if stmt is None or len(stmt.body) != 1:
        return None
    expr = stmt.body[0]
    return stmt if isinstance(expr, cst.Expr) and expr.value is call else None


def indentation(ctx) -> str:
    """The indentation of the visited statement (sum of the enclosing blocks' indents)."""
    default = ctx.module.default_indent
    return "".join(
        default if node.indent is None else node.indent
        for node in ctx.stack
        if isinstance(node, cst.IndentedBlock)
    )


def call_args(rule: Rule, call: cst.Call, positional: tuple[str, ...] = ()) -> str | None:
    """`(a, b)` for `call`; keywords named in `positional` become positional arguments in that order.

    The `torch.accelerator` functions take their device or stream positionally only. None when the call has
    `*`/`**` arguments or keywords not in `positional` (when any are listed), or when a keyword would land
    after a missing positional.
    """
    if not positional:
        return rule.ctx.code(call)[len(rule.ctx.code(call.func)):]
    values = [rule.ctx.code(a.value) for a in call.args if a.keyword is None]
    if any(a.star for a in call.args) or len(values) > len(positional):
        return None
    keywords = {a.keyword.value: rule.ctx.code(a.value) for a in call.args if a.keyword is not None}
    for name in positional[len(values):]:
        if name in keywords:
            values.append(keywords.pop(name))
        elif keywords:
            return None  # a later keyword cannot be moved past a missing positional
    return None if keywords else f"({', '.join(values)})"


def guarded_fix(rule: Rule, call: cst.Call, new_call: str, title: str, cpu_value: str | None) -> FixSpec | None:
    """Replace `call` by `new_call`, run only when an accelerator is available.

    The `torch.accelerator` versions of synchronize, empty_cache and the memory statistics raise on a machine
    without an accelerator, where the CUDA versions were no-ops or returned 0. A call that is a whole
    statement becomes an `if` block; a call inside an expression becomes `(new if available else cpu_value)`
    (no fix when `cpu_value` is None). Code already under a CUDA-availability guard needs no second one.
    """
    ctx = rule.ctx
    if under_availability_guard(ctx):
        return FixSpec(title, (Replacement(call, new_call),), imports=("torch",))
    if is_expression_statement(ctx, call) is not None:
        block = f"{AVAILABILITY_GUARD}\n{indentation(ctx)}{ctx.module.default_indent}{new_call}"
        return FixSpec(f"{title}, guarded by `torch.accelerator.is_available()`", (Replacement(call, block),),
                       imports=("torch",))
    if cpu_value is None:
        return None
    guarded = f"({new_call} if torch.accelerator.is_available() else {cpu_value})"
    return FixSpec(f"{title}, {cpu_value} without an accelerator", (Replacement(call, guarded),), imports=("torch",))


def guarded_call_fix(rule: Rule, call: cst.Call, name: str, target: str, cpu_value: str | None) -> FixSpec | None:
    """`guarded_fix` for a call whose callee `name` is swapped for `target`, arguments kept."""
    return guarded_fix(rule, call, f"{target}{call_args(rule, call)}", f"Replace `{name}` with `{target}`", cpu_value)


def under_availability_guard(ctx) -> bool:
    """Whether the visited node only runs when CUDA or any accelerator is available."""
    for child, parent in zip(reversed(ctx.stack), reversed(ctx.stack[:-1])):
        if isinstance(parent, (cst.If, cst.IfExp)) and child is parent.body:
            test = ctx.code(parent.test)
            if ("cuda" in test or "accelerator" in test) and ("is_available" in test or "device_count" in test):
                return True
    return False
