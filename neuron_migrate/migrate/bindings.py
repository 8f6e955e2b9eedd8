"""The one assignment index of a file: where each name gets its value, filled by the analyzer's single walk.

Keys are dotted names as written (`device`, `self.device`, `args.dist_backend`) or subscripts with a string
key (`cfg["device"]`). A binding records the value (None when it is not an expression: a loop variable, a
parameter without default), what kind of binding it is, the statement that makes it and the block that holds
that statement (for "does this binding run before that use"), and its scope (module, function, class, lambda).

Sources: assignments (tuples unpacked element by element), annotated and augmented assignments, `for` and
`with ... as` targets, function parameters (with their defaults), argparse options (`add_argument("--dist-
backend", default="nccl")` binds `*.dist_backend`, since the namespace's name is not known), and dict literals
assigned to a name (`cfg = {"device": "cuda"}` binds `cfg["device"]`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

import libcst as cst

from neuron_migrate.migrate.device_literals import literal_value
from neuron_migrate.migrate.names import dotted

#: the methods that declare a command-line option (argparse, optparse, click-like wrappers)
_OPTION_METHODS = frozenset({"add_argument", "add_option"})
_OPTION = re.compile(r"^--?([A-Za-z][\w-]*)$")


@dataclass(frozen=True)
class Binding:
    """One place where `key` gets a value."""

    key: str
    value: cst.BaseExpression | None
    kind: str  # assign | augassign | loop | with | param | option | item
    statement: cst.CSTNode | None
    block: cst.CSTNode | None
    scope: cst.CSTNode
    order: int


def key_of(target: cst.CSTNode) -> str | None:
    """The key a target or reference is indexed by: `a`, `self.dev`, `cfg["device"]`; None otherwise."""
    if isinstance(target, (cst.Name, cst.Attribute)):
        return dotted(target)
    if (
        isinstance(target, cst.Subscript)
        and len(target.slice) == 1
        and isinstance(target.slice[0].slice, cst.Index)
    ):
        index = target.slice[0].slice.value
        base = dotted(target.value) if isinstance(target.value, (cst.Name, cst.Attribute)) else None
        if base is not None and isinstance(index, cst.SimpleString) and isinstance(literal_value(index), str):
            return f'{base}["{literal_value(index)}"]'
    return None


def option_dest(call: cst.Call) -> str | None:
    """The attribute an `add_argument(...)` call stores its value in (`dest=`, else the first long option)."""
    names: list[str] = []
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "dest":
            value = arg.value
            return literal_value(value) if isinstance(value, cst.SimpleString) else None
        if arg.keyword is None and isinstance(arg.value, cst.SimpleString):
            text = literal_value(arg.value)
            match = _OPTION.match(text) if isinstance(text, str) else None
            if match:
                names.append(text)
    if not names:
        return None
    long = [n for n in names if n.startswith("--")]
    return (long or names)[0].lstrip("-").replace("-", "_")


class Bindings:
    """Every binding of a file, by key; queried by rules after (or during) the walk."""

    def __init__(self) -> None:
        self.by_key: dict[str, list[Binding]] = defaultdict(list)
        self.options: dict[str, list[Binding]] = defaultdict(list)  # attribute name -> argparse defaults
        # the same bindings (options aside) by the block and by the scope that make them, for the queries that
        # ask about every name of a block or scope (a scan of all bindings per query was quadratic)
        self._by_block: dict[cst.CSTNode | None, list[Binding]] = defaultdict(list)
        self._by_scope: dict[cst.CSTNode, list[Binding]] = defaultdict(list)
        self._order = 0

    # --- recording (the analyzer's walk calls these) -------------------------------------------------------

    def add(
        self,
        key: str | None,
        value: cst.BaseExpression | None,
        kind: str,
        statement: cst.CSTNode | None,
        block: cst.CSTNode | None,
        scope: cst.CSTNode,
    ) -> None:
        if key is None:
            return
        self._order += 1
        binding = Binding(key, value, kind, statement, block, scope, self._order)
        if kind == "option":
            self.options[key].append(binding)
            return
        self.by_key[key].append(binding)
        self._by_block[block].append(binding)
        self._by_scope[scope].append(binding)

    def record_assign(
        self,
        targets: list[cst.CSTNode],
        value: cst.BaseExpression | None,
        kind: str,
        statement: cst.CSTNode | None,
        block: cst.CSTNode | None,
        scope: cst.CSTNode,
    ) -> None:
        """Bind each target to its part of `value` (element-wise for `a, b = x, y`)."""
        for target in targets:
            if isinstance(target, (cst.Tuple, cst.List)):
                parts = value.elements if isinstance(value, (cst.Tuple, cst.List)) else None
                elements = [e.value for e in target.elements]
                if (
                    parts is not None
                    and len(parts) == len(elements)
                    and not any(isinstance(e, cst.StarredElement) for e in (*target.elements, *parts))
                ):
                    self.record_assign(elements, None, kind, statement, block, scope)
                    for element, part in zip(elements, parts, strict=True):
                        self.add(key_of(element), part.value, kind, statement, block, scope)
                    continue
                for element in elements:
                    self.record_assign([element], None, kind, statement, block, scope)
                continue
            self.add(key_of(target), value, kind, statement, block, scope)
            if kind == "assign" and isinstance(target, cst.Name) and isinstance(value, cst.Dict):
                for element in value.elements:
                    if isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString):
                        name = literal_value(element.key)
                        if isinstance(name, str):
                            self.add(
                                f'{target.value}["{name}"]', element.value, "item", statement, block, scope
                            )

    def record_params(self, function: cst.FunctionDef | cst.Lambda) -> None:
        params = function.params
        for param in (*params.posonly_params, *params.params, *params.kwonly_params):
            self.add(param.name.value, param.default, "param", None, None, function)
        for star in (params.star_arg, params.star_kwarg):
            if isinstance(star, cst.Param):
                self.add(star.name.value, None, "param", None, None, function)

    def record_option(
        self, call: cst.Call, statement: cst.CSTNode | None, block: cst.CSTNode | None, scope: cst.CSTNode
    ) -> None:
        method = call.func.attr.value if isinstance(call.func, cst.Attribute) else None
        if method not in _OPTION_METHODS:
            return
        dest = option_dest(call)
        default = next(
            (a.value for a in call.args if a.keyword is not None and a.keyword.value == "default"), None
        )
        if dest is not None:
            self.add(dest, default, "option", statement, block, scope)

    # --- queries -------------------------------------------------------------------------------------------

    def of(self, key: str | None) -> list[Binding]:
        """Every binding of `key` in the file, in source order; for `x.attr`, argparse defaults of `attr` too
        when `x` itself has no binding but a parser's result (the namespace is not tracked by name)."""
        if key is None:
            return []
        found = list(self.by_key.get(key, ()))
        if "." in key and not found:
            found.extend(self.options.get(key.rsplit(".", 1)[1], ()))
        return found

    def values(self, key: str | None) -> list[cst.BaseExpression | None]:
        return [b.value for b in self.of(key)]

    def in_scope(self, key: str, scope: cst.CSTNode) -> list[Binding]:
        """The bindings of `key` made in `scope` itself."""
        return [b for b in self.by_key.get(key, ()) if b.scope is scope]

    def in_block(self, block: cst.CSTNode) -> list[Binding]:
        """The bindings the statements of `block` make (not those of the blocks inside them), in source
        order."""
        return list(self._by_block.get(block, ()))

    def keys_bound_in(self, scope: cst.CSTNode) -> set[str]:
        return {b.key for b in self._by_scope.get(scope, ())}

    def defaults(self) -> list[Binding]:
        """Every argparse option default (`add_argument(..., default=...)`)."""
        return [b for bindings in self.options.values() for b in bindings if b.value is not None]
