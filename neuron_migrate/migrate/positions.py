"""Source positions of the few nodes a file's findings need, without a position pass over the whole file.

libcst's `PositionProvider` regenerates the code of the entire module to place every node; on large files
that costs more than parsing and all the rules together, and a finding needs the positions of a handful of
nodes. So a node is placed by regenerating only the innermost statement that holds it (a line inside a
3,000-line class costs one line), with libcst's own position-recording code generator started where that
statement starts: its first line comes from Python's `ast` parser (C, fast), paired with libcst's
statement by its place in the blocks above it, and its indentation from the enclosing blocks. The
regenerated text is compared with the file's own text at that place; if `ast` cannot parse the file, or
anything does not line up, the whole module is resolved the old way, so a position is never a guess.

A long statement (torch's 10,000-line `op_db = [...]`, a decorated test class) is placed by parts the same
way: the shortest expression around the node that can be paired with its `ast` node (a list element, a call
argument, a decorator), regenerated from where `ast` says it starts.
"""

from __future__ import annotations

import ast
import itertools

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider
from libcst.metadata.position_provider import PositionProvidingCodegenState

from neuron_migrate.migrate.walk import STATEMENTS, walk

#: libcst nodes that hold a list of statements
BLOCKS = (cst.Module, cst.IndentedBlock)


class _Sink:
    """Where the code generator records positions (it expects a metadata provider's `_computed`)."""

    def __init__(self) -> None:
        self._computed: dict[cst.CSTNode, CodeRange] = {}


class StatementPositions:
    """`positions[node]` -> CodeRange for any node of `module`.

    `statement_of[id(node)]` is the innermost statement (a statement of a module or indented block) holding
    the node, the node itself for a statement; `enclosing[id(statement)]` the statement around that one
    (None at module level). The analyzer's walk fills both; `index_statements` builds them for tests.
    `tree`: the source's `ast` parse, when the caller has it (else it is parsed on first need)."""

    def __init__(
        self,
        module: cst.Module,
        source: str,
        statement_of: dict[int, cst.CSTNode],
        enclosing: dict[int, cst.CSTNode | None],
        tree: ast.Module | None = None,
    ) -> None:
        self.module = module
        self.source = source
        self.lines = source.splitlines(keepends=True)
        self.statement_of = statement_of
        self.enclosing = enclosing
        self.resolved: dict[cst.CSTNode, CodeRange] = {}
        self.done: set[int] = set()
        self.whole_file = False
        self._tree: ast.Module | bool | None = False if tree is None else tree  # False: not parsed yet
        self._paired: dict[int, tuple[ast.AST, tuple[str, ...]] | None] = {}
        self._parents: dict[int, dict[int, cst.CSTNode]] = {}

    def __getitem__(self, node: cst.CSTNode) -> CodeRange:
        found = self.resolved.get(node)
        if found is not None:
            return found
        statement = self.statement_of.get(id(node))
        if statement is not None and not self.whole_file and self._resolve_part(statement, node):
            return self.resolved[node]
        if self.whole_file or statement is None or id(statement) in self.done or not self._resolve(statement):
            self._resolve_whole_file()
        found = self.resolved.get(node)
        if found is None:  # a node the statement's code generation did not reach
            self._resolve_whole_file()
            found = self.resolved[node]
        return found

    def _resolve_whole_file(self) -> None:
        if not self.whole_file:
            self.resolved = dict(
                MetadataWrapper(self.module, unsafe_skip_copy=True).resolve(PositionProvider)
            )
            self.whole_file = True

    def _resolve(self, statement: cst.CSTNode) -> bool:
        """Place every node of `statement`; False when the shortcut does not apply."""
        self.done.add(id(statement))
        paired = self._pair(statement)
        if paired is None:
            return False
        node, indents = paired
        decorators = getattr(statement, "decorators", ())
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
        start = first - len(statement.leading_lines) - (len(decorators[0].leading_lines) if decorators else 0)
        return start >= 1 and self._generate(statement, indents, start, 0)

    def _generate(self, node: cst.CSTNode, indents: tuple[str, ...], line: int, column: int) -> bool:
        """Place every node of `node` by regenerating its code from (`line`, `column`); False, placing
        nothing, where the regenerated text is not the file's text there."""
        sink = _Sink()
        state = PositionProvidingCodegenState(
            default_indent=self.module.default_indent,
            default_newline=self.module.default_newline,
            provider=sink,
            indent_tokens=list(indents),
            line=line,
            column=column,
        )
        node._codegen(state)
        text = "".join(state.tokens)
        here = "".join(self.lines[line - 1 : line + text.count("\n")])[column:]
        if not here.startswith(text) and not (
            text.endswith(state.default_newline) and here == text[: -len(state.default_newline)]
        ):
            return False
        self.resolved.update(sink._computed)
        return True

    def _resolve_part(self, statement: cst.CSTNode, node: cst.CSTNode) -> bool:
        """Place the nodes of the expression of a long `statement` that holds `node` (an element of a
        2,000-line list, a decorator of a long class), regenerating that part alone; False where the
        statement is short, or no part holding `node` can be paired with its `ast` node."""
        paired = self._pair(statement)
        if paired is None or _span(paired[0]) <= PART_LINES:
            return False
        path = self._path_to(statement, node)
        part = None
        for libcst_node, ast_node in _descend(path, paired[0]):
            if not getattr(libcst_node, "lpar", ()):  # `ast` places a parenthesized expression inside them
                part = (libcst_node, ast_node)
                if _span(ast_node) <= PART_LINES:
                    break
        if part is None or id(part[0]) in self.done:
            return False
        self.done.add(id(part[0]))
        libcst_node, ast_node = part
        line = self.lines[ast_node.lineno - 1]
        column = len(line.encode("utf-8")[: ast_node.col_offset].decode("utf-8", "replace"))
        return self._generate(libcst_node, paired[1], ast_node.lineno, column) and node in self.resolved

    def _path_to(self, statement: cst.CSTNode, node: cst.CSTNode) -> list[cst.CSTNode]:
        """The nodes from `statement` down to `node` (empty where the walk of the statement's own code, its
        blocks aside, does not reach it), from each node's parent found once per statement."""
        parents = self._parents.get(id(statement))
        if parents is None:
            parents = self._parents[id(statement)] = _parents(statement)
        path = [node]
        while path[-1] is not statement:
            parent = parents.get(id(path[-1]))
            if parent is None:
                return []
            path.append(parent)
        return path[::-1]

    def _pair(self, statement: cst.CSTNode) -> tuple[ast.AST, tuple[str, ...]] | None:
        """The `ast` statement that starts where `statement` does, and the indentation of its block."""
        key = id(statement)
        if key in self._paired:
            return self._paired[key]
        found = None
        outer = self.enclosing.get(key, False)
        if outer is None:
            tree = self._ast()
            if tree is not None:
                found = _find(statement, [(self.module.body, tree.body, ())])
        elif outer is not False:
            above = self._pair(outer)
            if above is not None:
                found = _find(statement, _blocks(outer, above[0], above[1], self.module.default_indent))
        self._paired[key] = found
        return found

    def _ast(self) -> ast.Module | None:
        if self._tree is False:
            try:
                self._tree = ast.parse(self.source)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                self._tree = None
        return self._tree  # type: ignore[return-value]


def _find(statement: cst.CSTNode, blocks) -> tuple[ast.AST, tuple[str, ...]] | None:
    """Pair `statement` with its `ast` node in whichever of `blocks` (cst body, ast body, indents) holds
    it."""
    for body, ast_body, indents in blocks:
        cursor = 0
        for item in body:
            if cursor >= len(ast_body):
                return None
            if item is statement:
                return ast_body[cursor], indents
            # `a = 1; b = 2` is one libcst line and two ast statements
            cursor += len(item.body) if isinstance(item, cst.SimpleStatementLine) else 1
    return None


def _blocks(owner: cst.CSTNode, node: ast.AST, indents: tuple[str, ...], default_indent: str):
    """(libcst statements, ast statements, indentation) of each indented block of compound statement `owner`,
    whose `ast` node is `node`."""

    def block(suite, ast_body, outer=indents):
        if isinstance(suite, cst.IndentedBlock):
            return [
                (suite.body, ast_body, (*outer, default_indent if suite.indent is None else suite.indent))
            ]
        return []

    found = block(getattr(owner, "body", None), getattr(node, "body", []))
    if isinstance(owner, (cst.Try, cst.TryStar)):
        for handler, ast_handler in zip(owner.handlers, getattr(node, "handlers", []), strict=False):
            found += block(handler.body, ast_handler.body)
        if owner.finalbody is not None:
            found += block(owner.finalbody.body, getattr(node, "finalbody", []))
    elif isinstance(owner, cst.Match):  # its cases are indented, and their bodies again
        cases = (*indents, default_indent if owner.indent is None else owner.indent)
        for case, ast_case in zip(owner.cases, getattr(node, "cases", []), strict=False):
            found += block(case.body, ast_case.body, cases)
    orelse = getattr(owner, "orelse", None)
    if isinstance(orelse, cst.Else):
        found += block(orelse.body, getattr(node, "orelse", []))
    elif isinstance(orelse, cst.If):  # `elif`: ast nests it as the only statement of `orelse`
        inner = getattr(node, "orelse", [])
        if len(inner) == 1 and isinstance(inner[0], ast.If):
            found += _blocks(orelse, inner[0], indents, default_indent)
    return found


def index_statements(module: cst.Module) -> tuple[dict[int, cst.CSTNode], dict[int, cst.CSTNode | None]]:
    """`statement_of` and `enclosing` for `module` (what the analyzer's walk records, for tests and tools)."""
    statement_of: dict[int, cst.CSTNode] = {}
    enclosing: dict[int, cst.CSTNode | None] = {}

    class Index(cst.CSTVisitor):
        def __init__(self) -> None:
            super().__init__()
            self.stack: list[cst.CSTNode] = []
            self.statements: list[cst.CSTNode | None] = [None]

        def on_visit(self, node: cst.CSTNode) -> bool:
            if type(node) in STATEMENTS and self.stack and isinstance(self.stack[-1], BLOCKS):
                enclosing[id(node)] = self.statements[-1]
                self.statements.append(node)
            if self.statements[-1] is not None:
                statement_of[id(node)] = self.statements[-1]
            self.stack.append(node)
            return True

        def on_leave(self, original_node: cst.CSTNode) -> None:
            self.stack.pop()
            if original_node is self.statements[-1]:
                self.statements.pop()

    module.visit(Index())
    return statement_of, enclosing


#: a statement longer than this many lines is placed by parts (`_resolve_part`), each part as short as the
#: expressions that hold the node allow, down to this many lines
PART_LINES = 40


def _span(node: ast.AST) -> int:
    return (getattr(node, "end_lineno", None) or node.lineno) - node.lineno + 1


def _parents(statement: cst.CSTNode) -> dict[int, cst.CSTNode]:
    """Each node's parent, by `id`, under `statement` (its indented blocks aside: their statements are
    placed on their own)."""
    parents: dict[int, cst.CSTNode] = {}
    stack: list[cst.CSTNode] = []

    class Parents(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if stack:
                parents[id(node)] = stack[-1]
            stack.append(node)
            return type(node) is not cst.IndentedBlock

        def on_leave(self, original_node: cst.CSTNode) -> None:
            stack.pop()

    walk(statement, Parents())
    return parents


def _descend(path: list[cst.CSTNode], tree: ast.AST):
    """Down `path` (a statement first, whose `ast` node is `tree`), each expression on it with its `ast`
    node, outermost first, as far as the two trees can be paired."""
    for parent, child in itertools.pairwise(path):
        tree = _child_ast(parent, tree, child)
        if tree is None:
            return
        if isinstance(child, cst.BaseExpression):
            if not isinstance(tree, ast.expr) or _AST_OF.get(type(child), type(tree)) is not type(tree):
                return
            yield child, tree


#: the `ast` class of each libcst expression class `_child_ast` descends into
_AST_OF = {cst.Call: ast.Call, cst.List: ast.List, cst.Tuple: ast.Tuple, cst.Set: ast.Set, cst.Dict: ast.Dict}
_VALUED = (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.Expr, cst.Return)
_TESTED = (cst.If, cst.While, cst.Assert)
#: the nodes that wrap one expression (their `ast` node is the expression's), and the field that holds it
_WRAPPERS = {
    cst.Element: "value",
    cst.Arg: "value",
    cst.DictElement: "value",
    cst.Decorator: "decorator",
    cst.WithItem: "item",
}


def _child_ast(parent: cst.CSTNode, tree: ast.AST, child: cst.CSTNode) -> ast.AST | None:
    """The `ast` node of `child`, a child of `parent` (whose `ast` node is `tree`), where the pairing is
    known: a wrapper (`Element`, `Arg`, `Decorator`) gets its value's, as does that value."""
    if isinstance(parent, cst.SimpleStatementLine):
        return tree if len(parent.body) == 1 else None
    if isinstance(parent, _VALUED) and child is parent.value:
        return getattr(tree, "value", None)
    if isinstance(parent, _TESTED) and child is parent.test:
        return getattr(tree, "test", None)
    if type(parent) in _WRAPPERS:
        return tree if child is getattr(parent, _WRAPPERS[type(parent)]) else None
    if isinstance(parent, (cst.FunctionDef, cst.ClassDef)) and child in parent.decorators:
        return _at(getattr(tree, "decorator_list", []), parent.decorators, child)
    if isinstance(parent, cst.With) and child in parent.items:
        return _at([item.context_expr for item in getattr(tree, "items", [])], parent.items, child)
    if isinstance(parent, (cst.List, cst.Tuple, cst.Set)) and isinstance(child, cst.Element):
        return _at(getattr(tree, "elts", []), parent.elements, child)
    if isinstance(parent, cst.Dict) and isinstance(child, cst.DictElement):
        return _at(getattr(tree, "values", []), parent.elements, child)
    if isinstance(parent, cst.Call) and isinstance(child, cst.Arg) and not child.star:
        parts = [*getattr(tree, "args", []), *(k.value for k in getattr(tree, "keywords", []))]
        return _at(sorted(parts, key=lambda n: (n.lineno, n.col_offset)), parent.args, child)
    return None


def _at(ast_nodes: list, libcst_nodes, child: cst.CSTNode) -> ast.AST | None:
    """The `ast` node at `child`'s index among `libcst_nodes`, where both lists are as long."""
    if len(ast_nodes) != len(libcst_nodes):
        return None
    return next((a for a, c in zip(ast_nodes, libcst_nodes, strict=True) if c is child), None)
