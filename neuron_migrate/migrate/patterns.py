"""Building blocks rules share: qualified-name matching, call arguments, statements and guarded calls.

`QualifiedNameRule` is the base of every rule that flags uses of a CUDA API by qualified name; a mapping
table (data, not if-chains) says what each name becomes and the rule builds the fix from it.
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import cache
from typing import ClassVar

import libcst as cst

from neuron_migrate.migrate.conditions import references, spelled
from neuron_migrate.migrate.fixes import AVAILABILITY_GUARD, AVAILABLE, FixSpec, Replacement
from neuron_migrate.migrate.guards import accelerator_certain
from neuron_migrate.migrate.lexicon import Lexicon
from neuron_migrate.migrate.rule import Rule


def keyword(call: cst.Call, name: str) -> cst.Arg | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def positional(call: cst.Call, index: int) -> cst.Arg | None:
    args = [a for a in call.args if a.keyword is None and not a.star]
    return args[index] if index < len(args) else None


def without_argument(rule: Rule, call: cst.Call, arg: cst.Arg) -> str:
    """The source of `call` with `arg` removed (commas and the trailing-comma style kept right)."""
    args = list(call.args)
    index = args.index(arg)
    args.pop(index)
    if args and index == len(args):  # removed the last argument: the new last one takes its comma (or none)
        args[-1] = args[-1].with_changes(comma=arg.comma)
    return rule.ctx.module.code_for_node(call.with_changes(args=args))


class QualifiedNameRule(Rule):
    """Flags every use (call, decorator, bare reference) of the qualified names in `NAMES`.

    `NAMES` maps a qualified name to its replacement callee (a dotted name such as
    `torch.accelerator.synchronize`), or to None when there is nothing to rewrite to. Names ending in `.*`
    match the whole namespace below them. Subclasses override `fix_for` to build richer rewrites.
    """

    NAMES: ClassVar[dict[str, str | None]] = {}
    #: every finding is a reference to one of NAMES (any other visitor only gathers facts for those
    #: findings), so a file that spells none of them cannot hold one; False: the rule states its own
    #: `can_report`, or is analysed wherever its triggers occur
    names_only: ClassVar[bool] = False

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """For a `names_only` rule, whether the code spells one of NAMES; otherwise always."""
        return spells_names(cls, lex) if cls.names_only else True

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
        """A reference to `name` (a key of NAMES) at `node`, found by the analyzer's shared name index; not a
        plain name an assignment rebinds (espnet's `GradScaler = None` for an old torch), unlike an
        attribute it sets (`torch.backends.cudnn.benchmark = True`)."""
        parent = self.ctx.parent
        targets = (cst.AssignTarget, cst.AnnAssign, cst.AugAssign)
        if isinstance(node, cst.Name) and isinstance(parent, targets) and parent.target is node:
            return
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


def spells_names(rule: type[Rule], lex: Lexicon) -> bool:
    """Whether the code may reference one of `rule.NAMES` (a `QualifiedNameRule`, or any rule with NAMES):
    every identifier of the qualified name occurs in it (in the attribute chain, or in the import that bound
    its head), and a chain or an import spells it (`conditions.references`)."""
    return any(parts <= lex.names and references(lex, name) for parts, name in _spellings(rule))


@cache
def _spellings(rule: type[Rule]) -> tuple[tuple[frozenset[str], str], ...]:
    """Each of a rule's NAMES with what it spells, worked out once per rule rather than once per file."""
    return tuple(zip(spelled(rule.NAMES), rule.NAMES, strict=True))


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
        return rule.ctx.code(call)[len(rule.ctx.code(call.func)) :]
    values = [rule.ctx.code(a.value) for a in call.args if a.keyword is None]
    if any(a.star for a in call.args) or len(values) > len(positional):
        return None
    keywords = {a.keyword.value: rule.ctx.code(a.value) for a in call.args if a.keyword is not None}
    for name in positional[len(values) :]:
        if name in keywords:
            values.append(keywords.pop(name))
        elif keywords:
            return None  # a later keyword cannot be moved past a missing positional
    return None if keywords else f"({', '.join(values)})"


def parent_of(ctx, node: cst.CSTNode) -> cst.CSTNode | None:
    """The parent of `node`, which is on the visited node's stack."""
    for index in range(len(ctx.stack) - 1, 0, -1):
        if ctx.stack[index] is node:
            return ctx.stack[index - 1]
    return None


def in_fstring_quotes(ctx, text: str) -> str:
    """`text` with its double quotes made single inside a double-quoted f-string (and the other way round):
    before Python 3.12 an f-string's expressions cannot use its own quote character."""
    for node in reversed(ctx.stack):
        if isinstance(node, cst.FormattedString):
            quote = node.start.lstrip("rRfFbBuU")[:1]
            return text.replace('"', "'") if quote == '"' else text.replace("'", '"')
    return text


def guarded_fix(
    rule: Rule, call: cst.Call, new_call: str, title: str, cpu_value: str | None, silent: bool = False
) -> FixSpec | None:
    """Replace `call` by `new_call`, run only when an accelerator is available.

    The `torch.accelerator` versions of synchronize, empty_cache and the memory statistics raise on a machine
    without an accelerator, where the CUDA versions were no-ops or returned 0. A call that is a whole
    statement becomes an `if` block; a call inside an expression becomes `new if available else cpu_value`
    (no fix when `cpu_value` is None). Where the guard analysis says an accelerator is certain (inside an
    availability check, after an early exit without one, after an assert) no guard is added. For a call that
    was `silent` without CUDA (`empty_cache()`, the memory getters), a test of a parameter that defaults to
    CUDA does not make an accelerator certain: the CUDA call ran there, quietly (`guards.accelerator`'s
    `strict`).
    """
    from neuron_migrate.migrate.device_literals import fit

    ctx = rule.ctx
    if accelerator_certain(ctx, strict=silent):
        return FixSpec(title, (Replacement(call, new_call),), imports=("torch",))
    if is_expression_statement(ctx, call) is not None:
        block = f"{AVAILABILITY_GUARD}\n{indentation(ctx)}{ctx.module.default_indent}{new_call}"
        return FixSpec(
            f"{title}, guarded by `torch.accelerator.is_available()`",
            (Replacement(call, block),),
            imports=("torch",),
        )
    if cpu_value is None:
        return None
    cpu_value = in_fstring_quotes(ctx, cpu_value)
    guarded = fit(f"{new_call} if {AVAILABLE} else {cpu_value}", parent_of(ctx, call))
    return FixSpec(
        f"{title}, {cpu_value} without an accelerator", (Replacement(call, guarded),), imports=("torch",)
    )


def cautious_about_device(rule: Rule, call: cst.Call, fix: FixSpec | None) -> FixSpec | None:
    """`fix`, made unsafe when `call` takes its device by a value that may be the CPU's (`synchronize(device)`
    with `device = tensor.device`; not an index, a device string or a `torch.cuda` / `torch.accelerator`
    call): `torch.accelerator` raises for a CPU device, where under a CUDA check on a host with another
    accelerator the CUDA call was skipped (torch's PowerSGD hook on a gloo process group)."""
    arg = keyword(call, "device") or positional(call, 0)
    if fix is None or arg is None or _never_the_cpu(rule.ctx, arg.value):
        return fix
    device = rule.ctx.excerpt(arg.value, 30)
    return replace(
        fix,
        safety="unsafe",
        caution=f"`{device}` may be the CPU's device, for which `torch.accelerator` raises on a host with "
        f'another accelerator: call it only for an accelerator device (`if {device}.type != "cpu":`)',
    )


def _never_the_cpu(ctx, value: cst.BaseExpression) -> bool:
    """Whether a device argument cannot be the CPU's: an index, a device string (a CUDA one, which the
    device rules rewrite), `None`, or what a `torch.cuda` / `torch.accelerator` call returns."""
    if isinstance(value, (cst.Integer, cst.SimpleString, cst.FormattedString)):
        return True
    if isinstance(value, cst.Attribute) and value.attr.value == "index":
        return True  # `device0.index`: an int (cellpose, review 50)
    if isinstance(value, cst.Name):
        return value.value == "None" or _counts_devices(ctx, value.value)
    called = ctx.call_name(value) if isinstance(value, cst.Call) else None
    return called is not None and called.startswith(("torch.cuda.", "torch.accelerator."))


def _counts_devices(ctx, name: str) -> bool:
    """Whether `name` is the variable of a `for` loop around the visited node that runs over `range(...)`
    (`for i in range(torch.cuda.device_count()):`, ms-swift, review 50): an index."""
    for node in reversed(ctx.stack):
        if (
            isinstance(node, cst.For)
            and isinstance(node.target, cst.Name)
            and node.target.value == name
            and isinstance(node.iter, cst.Call)
            and ctx.call_name(node.iter) == "range"
        ):
            return True
    return False


def guarded_call_fix(
    rule: Rule, call: cst.Call, name: str, target: str, cpu_value: str | None
) -> FixSpec | None:
    """`guarded_fix` for a call whose callee `name` is swapped for `target`, arguments kept."""
    return guarded_fix(
        rule, call, f"{target}{call_args(rule, call)}", f"Replace `{name}` with `{target}`", cpu_value
    )


#: CUDA-only code no rule flags by itself (kernels and libraries called through their own names, capability
#: queries, quantization methods whose kernels are CUDA-only, TensorPipe's RPC device maps, which take CPU and
#: CUDA devices only, DeepSpeed-Inference's kernel injection, the process-wide float32 precision settings,
#: which in torch 2.13 also switch oneDNN's CPU matmuls and convolutions to TF32 or bfloat16: widened to any
#: accelerator, they change CPU results on an MPS, XPU or Trainium host): a check guarding it is a capability
#: gate and stays CUDA-only
CUDA_ONLY_CODE = re.compile(
    r"flash_attn|flash|fused|xformers|apex|bitsandbytes|triton|cupy|nvml|cutlass|deepspeed\.ops|"
    r"replace_with_kernel_inject|"
    r"eetq|spqr|vptq|higgs|flute|marlin|exllama|qutlass|fbgemm_gpu|deep_?gemm|magma|"
    r"transformer_engine|CUDAGraph|make_graphed_callables|get_device_capability|get_device_properties|"
    r"get_device_name|is_bf16_supported|version\.cuda|cudnn\.version|cuda\.nccl|\bsm_?\d+|rocm|\bhip\b|"
    r"set_device_map|device_maps|cuequivariance|set_float32_matmul_precision|fp32_precision",
    re.IGNORECASE,
)


def check_region(ctx) -> tuple[cst.CSTNode, ...]:
    """The code a device check at the visited node guards: (test, body) of the `if` / `while` / conditional
    whose test holds it (its `else` when the test is negated), (iterable, body) of the `for` loop over what
    it counts; elsewhere the statement it is part of (`ok = is_available() and capability() > 8`)."""
    for child, parent in zip(reversed(ctx.stack), reversed(ctx.stack[:-1]), strict=False):
        if isinstance(parent, (cst.If, cst.While, cst.IfExp)):
            if child is parent.test:
                return _guarded_after(ctx, parent) or (parent.test, _guarded_branch(ctx, parent))
            break
        if isinstance(parent, cst.Assert) and child is parent.test:  # a precondition, like `if not: raise`
            return (parent.test, *_rest_of_block(ctx, parent))
        if (
            isinstance(parent, cst.For) and child is parent.iter
        ):  # `for i in range(device_count()):` per device
            return (parent.iter, parent.body)
        if isinstance(parent, (cst.SimpleStatementLine, cst.BaseCompoundStatement, cst.Lambda)):
            break
    statement, _ = enclosing_statement(ctx)
    return (statement,) if statement is not None else ()


def _guarded_branch(ctx, owner: cst.If | cst.While | cst.IfExp) -> cst.CSTNode:
    """The branch a device test guards: the body, or the `else` of a negated test (`["cpu"] if not
    torch.cuda.is_available() else ["cpu", "cuda"]`)."""
    from neuron_migrate.migrate.guards import implies

    orelse = getattr(owner, "orelse", None)
    if orelse is None:
        return owner.body
    when_true, when_false = implies(ctx, owner.test)
    if when_false != "certain" or when_true == "certain":
        return owner.body
    return orelse.body if isinstance(orelse, cst.Else) else orelse


def _rest_of_block(ctx, node: cst.CSTNode) -> tuple[cst.CSTNode, ...]:
    """The statements after the one that holds `node` (on the visited stack), in their block."""
    index = next((i for i in range(len(ctx.stack) - 1, 0, -1) if ctx.stack[i] is node), None)
    for at in range(index or 0, 0, -1):
        statement, block = ctx.stack[at], ctx.stack[at - 1]
        if isinstance(block, (cst.IndentedBlock, cst.Module)) and statement in block.body:
            return tuple(block.body[block.body.index(statement) + 1 :])
    return ()


def _guarded_after(ctx, check: cst.CSTNode) -> tuple[cst.CSTNode, ...] | None:
    """For `if <no accelerator>: raise/return ...` (a precondition: `not torch.cuda.is_available()`,
    `d.type != "cuda"`, `device_count() == 0`), the code it protects: the statements after it in its block.
    Its own body is only the early exit."""
    from neuron_migrate.migrate.guards import exits, implies

    if not (isinstance(check, cst.If) and check.orelse is None and exits(check.body)):
        return None
    when_true, when_false = implies(ctx, check.test)
    negated = isinstance(check.test, cst.UnaryOperation) and isinstance(check.test.operator, cst.Not)
    if not (negated or (when_false == "certain" and when_true != "certain")):
        return None
    index = next((i for i in range(len(ctx.stack) - 1, 0, -1) if ctx.stack[i] is check), None)
    block = ctx.stack[index - 1] if index else None
    body = list(block.body) if isinstance(block, (cst.IndentedBlock, cst.Module)) else []
    if check not in body:  # an `elif`: the `if` above it holds it, not a block
        return None
    return (check.test, *body[body.index(check) + 1 :])
