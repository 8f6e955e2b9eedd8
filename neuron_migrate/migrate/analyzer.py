"""Run every selected rule over one source text in a single libcst traversal and return its findings.

The traversal dispatches each node to the rules that have a `visit_<NodeType>` method for it, so forty rules
cost one walk; the same walk fills the file's bindings index (`bindings.py`) that rules and the guard analysis
query. After it: deferred rule checks, each rule's `finish`, then `settle` (fixes withdrawn where CUDA-only
code must stay, or in old-torch fallbacks) and the device naming, then positions, computed only when a rule
reported something, and only for the innermost statements that hold its nodes (`positions.py`).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Callable

import libcst as cst

from neuron_migrate.migrate.context import FileContext
from neuron_migrate.migrate.fixes import FixStyle
from neuron_migrate.migrate.patterns import QualifiedNameRule
from neuron_migrate.migrate.positions import StatementPositions
from neuron_migrate.migrate.records import finding_of
from neuron_migrate.migrate.rule import Rule
from neuron_migrate.migrate.settle import settle
from neuron_migrate.migrate.walk import SEMANTIC, STATEMENTS, walk
from neuron_migrate.model import Finding

_SUPPRESS = re.compile(r"#\s*neuron-migrate:\s*ignore(?!-file)(?:\[([A-Za-z0-9_,\s]+)\])?")
_SUPPRESS_FILE = re.compile(r"#\s*neuron-migrate:\s*ignore-file(?:\[([A-Za-z0-9_,\s]+)\])?")


def _is_reference(node: cst.CSTNode, parent: cst.CSTNode | None, stack: list[cst.CSTNode]) -> bool:
    """Whether a Name/Attribute is the whole of a reference (not a part of a longer chain, not a binding).

    Exact type tests: these classes have no subclasses, and `type() is` skips the ABC `isinstance` machinery
    on a test made for every name in the file."""
    kind = type(parent)
    if kind is cst.Attribute:
        return False  # the chain's value or attribute: the reference is the Attribute above
    if kind in _NAMING and parent.name is node:
        return False
    if kind is cst.Arg and parent.keyword is node:
        return False
    return not any(type(a) in _IMPORTS for a in stack[-4:-1])


class _Dispatcher(cst.CSTVisitor):
    def __init__(self, ctx: FileContext, rules: list[Rule]) -> None:
        super().__init__()
        self.ctx = ctx
        # for positions (`positions.py`): each node's innermost statement, each statement's enclosing one
        self.statement_of: dict[int, cst.CSTNode] = {}
        self.enclosing: dict[int, cst.CSTNode | None] = {}
        self.statements: list[cst.CSTNode | None] = [None]
        self.scope_nodes: list[cst.CSTNode] = [ctx.module]
        self.visits: dict[str, list[Callable]] = defaultdict(list)
        self.leaves: dict[str, list[Callable]] = defaultdict(list)
        # rules that flag qualified names share one resolution per reference instead of one per rule
        self.exact: dict[str, list[QualifiedNameRule]] = defaultdict(list)
        self.prefixes: list[tuple[str, str, QualifiedNameRule]] = []
        for rule in rules:
            if isinstance(rule, QualifiedNameRule):
                for name in rule.NAMES:
                    if name.endswith(".*"):
                        self.prefixes.append((name[:-1], name, rule))
                    else:
                        self.exact[name].append(rule)
        self.heads = {name.split(".")[0] for name in self.exact} | {
            p.split(".")[0] for p, _, _ in self.prefixes
        }
        for rule in rules:
            for attr in dir(type(rule)):
                if attr.startswith("visit_"):
                    self.visits[attr[6:]].append(getattr(rule, attr))
                elif attr.startswith("leave_"):
                    self.leaves[attr[6:]].append(getattr(rule, attr))

    def on_visit(self, node: cst.CSTNode) -> bool:
        ctx = self.ctx
        kind = type(node)
        if kind in STATEMENTS and type(ctx.stack[-1]) in _BLOCKS:
            self.enclosing[id(node)] = self.statements[-1]
            self.statements.append(node)
        self.statement_of[id(node)] = self.statements[-1]
        ctx.stack.append(node)
        if kind in _IMPORTS:
            if ctx.scopes.depth > 1:
                ctx.scopes.bind_import(node)
        elif kind in _SCOPES:
            ctx.scopes.push()
            self.scope_nodes.append(node)
            if kind is not cst.ClassDef:
                ctx.bindings.record_params(node)
        elif kind in _REFERENCES:
            if self.heads:
                self._dispatch_reference(node)
        elif kind in _BINDERS:
            self._bind(node, kind)
        handlers = self.visits.get(kind.__name__)
        if handlers:
            for handler in handlers:
                handler(node)
        return True

    def _dispatch_reference(self, node: cst.Name | cst.Attribute) -> None:
        ctx = self.ctx
        if not _is_reference(node, ctx.parent, ctx.stack):
            return
        qualified = ctx.qualified_name(node)
        if qualified is None or qualified.split(".")[0] not in self.heads:
            return
        for rule in self.exact.get(qualified, ()):
            rule.use(node, qualified)
        for prefix, name, rule in self.prefixes:
            if qualified.startswith(prefix):
                rule.use(node, name)

    def _bind(self, node: cst.CSTNode, kind: type) -> None:
        """Record what `node` binds in the bindings index (with the statement and block that hold it)."""
        bindings, scope = self.ctx.bindings, self.scope_nodes[-1]
        if kind is cst.Call:
            if node.args:
                self.ctx.calls.append((node, self.ctx.call_name(node)))
                func = node.func
                if isinstance(func, cst.Attribute) and func.attr.value in ("add_argument", "add_option"):
                    statement, block = _statement_and_block(self.ctx.stack)
                    bindings.record_option(node, statement, block, scope)
            return
        statement, block = _statement_and_block(self.ctx.stack)
        if kind is cst.Assign:
            bindings.record_assign(
                [t.target for t in node.targets], node.value, "assign", statement, block, scope
            )
        elif kind is cst.AnnAssign:
            if node.value is not None:
                bindings.record_assign([node.target], node.value, "assign", statement, block, scope)
        elif kind is cst.AugAssign:
            bindings.record_assign([node.target], None, "augassign", statement, block, scope)
        elif kind is cst.NamedExpr:
            bindings.record_assign([node.target], node.value, "assign", statement, block, scope)
        elif kind is cst.For:
            bindings.record_assign([node.target], None, "loop", statement, block, scope)
        elif kind is cst.WithItem and node.asname is not None:
            bindings.record_assign([node.asname.name], node.item, "with", statement, block, scope)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        handlers = self.leaves.get(type(original_node).__name__)
        if handlers:
            for handler in handlers:
                handler(original_node)
        if type(original_node) in _SCOPES:
            self.ctx.scopes.pop()
            self.scope_nodes.pop()
        if original_node is self.statements[-1]:
            self.statements.pop()
        self.ctx.stack.pop()


def _statement_and_block(stack: list[cst.CSTNode]) -> tuple[cst.CSTNode | None, cst.CSTNode | None]:
    """The statement holding the visited node and the block (module, indented block, one-line suite) it is
    in."""
    for index in range(len(stack) - 2, -1, -1):
        block = stack[index]
        if isinstance(block, (cst.Module, cst.IndentedBlock, cst.SimpleStatementSuite)):
            return stack[index + 1], block
    return None, None


#: an annotation runs no device code (a type named there is no use of it), so no rule sees one
_NODE_TYPES = SEMANTIC - {cst.Annotation}
_IMPORTS = frozenset({cst.Import, cst.ImportFrom})
#: the nodes whose `name` is a Name they bind or declare, not a reference
_NAMING = frozenset({cst.ImportAlias, cst.AsName, cst.FunctionDef, cst.ClassDef, cst.Param})
_SCOPES = frozenset({cst.FunctionDef, cst.ClassDef, cst.Lambda})
_REFERENCES = frozenset({cst.Name, cst.Attribute})
_BLOCKS = frozenset({cst.Module, cst.IndentedBlock})
_BINDERS = frozenset(
    {cst.Assign, cst.AnnAssign, cst.AugAssign, cst.NamedExpr, cst.For, cst.WithItem, cst.Call}
)


def suppressions(lines: list[str]) -> tuple[dict[int, set[str] | None], set[str] | bool | None]:
    """Per-line `# neuron-migrate: ignore[...]` codes (None = all) and the file-level ignore (False =
    none)."""
    per_line: dict[int, set[str] | None] = {}
    whole_file: set[str] | bool | None = False
    for number, line in enumerate(lines, start=1):
        if "neuron-migrate" not in line:
            continue
        if match := _SUPPRESS_FILE.search(line):
            codes = {c.strip().upper() for c in match.group(1).split(",")} if match.group(1) else None
            whole_file = codes
        elif match := _SUPPRESS.search(line):
            per_line[number] = (
                {c.strip().upper() for c in match.group(1).split(",")} if match.group(1) else None
            )
    return per_line, whole_file


def _suppressed(code: str, codes: set[str] | bool | None) -> bool:
    if codes is False:
        return False
    return codes is None or any(code.startswith(c) for c in codes)  # type: ignore[union-attr]


_DEFAULT_STYLE = FixStyle()


def analyze_module(
    module: cst.Module,
    path: str,
    rules: list[type[Rule]],
    bound_modules: frozenset[str] = frozenset(),
    source: str | None = None,
    style: FixStyle = _DEFAULT_STYLE,
    tree: ast.Module | None = None,
) -> list[Finding]:
    """Findings of `rules` in a parsed module (positions relative to the module's text, `source` when the
    caller has it: regenerating it from the tree costs a pass over the whole file; `tree`, its `ast`
    parse, when the caller has that)."""
    ctx = FileContext(module, path, bound_modules, source)
    instances = [rule(ctx) for rule in rules]
    dispatcher = _Dispatcher(ctx, instances)
    walk(module, dispatcher, _NODE_TYPES)
    ctx.run_deferred()
    for instance in instances:
        instance.finish()
    if not ctx.pending:
        return []
    source = ctx.source
    positions = StatementPositions(module, source, dispatcher.statement_of, dispatcher.enclosing, tree)
    for pending in ctx.pending:  # first the findings' own nodes: their statements hold the whitespace and
        positions[pending.node]  # punctuation some fixes edit, which the walk does not index
    lines = source.splitlines()
    settle(ctx, positions, lines, style)
    per_line, whole_file = suppressions(lines)
    findings = []
    seen: set[tuple] = set()
    for pending in ctx.pending:
        finding = finding_of(pending, positions, lines, ctx, style)
        key = (finding.code, finding.line, finding.col, finding.end_line, finding.end_col)
        if key in seen or _suppressed(finding.code, whole_file):
            continue
        if _suppressed(finding.code, per_line.get(finding.line, False)):
            continue
        seen.add(key)
        findings.append(finding)
    findings.sort(key=lambda f: (f.line, f.col, f.code))
    return findings
