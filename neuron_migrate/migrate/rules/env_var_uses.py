"""The base of the environment variable rules (NM601, NM602): where a variable name counts.

A variable name counts only where it is used as one: the key of `os.environ[...]`, `os.environ.get/pop/
setdefault/update`, `os.getenv/putenv/unsetenv`, `monkeypatch.setenv`, `"X" in os.environ`, a dict passed
as `env=` or spread with `**os.environ`, and copies of `os.environ`
(`env = os.environ.copy(); env["X"] = ..`). The same name in a comment, docstring or log message is not a
finding.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import libcst as cst

from neuron_migrate.migrate.device_literals import string_value
from neuron_migrate.migrate.patterns import keyword, positional
from neuron_migrate.migrate.rules.scoped_assignments import ScopedAssignments

#: calls whose first argument is a variable name
_NAME_FIRST = {"os.getenv", "os.putenv", "os.unsetenv"}
_ENV_METHODS = {"get", "pop", "setdefault"}  # methods of os.environ (or a copy) taking the name first
_ENV_LIKE_NAME = re.compile(r"^(env|environ|environment|env_vars|\w+_env)$")


class EnvVarRule(ScopedAssignments):
    """Reports variable names in environment positions for which `advice` returns something."""

    def advice(self, var: str) -> str | None:
        """What to do about environment variable `var`, or None when it is not this rule's (each subclass
        overrides this; the rule examples test that it does)."""
        return None

    def _report(self, node: cst.CSTNode, var: str) -> None:
        advice = self.advice(var)
        if advice is not None:
            self.report(node, self.message.format(var=var, advice=advice))

    def _is_env(self, node: cst.CSTNode, depth: int = 0) -> bool:
        """Whether `node` is `os.environ`, a copy of it, or a name holding one."""
        if depth > 3:
            return False
        if self.ctx.qualified_name(node) == "os.environ":
            return True
        if isinstance(node, cst.Name):
            value = self.assigned(node)
            return _ENV_LIKE_NAME.match(node.value) is not None or (
                value is not None and self._is_env(value, depth + 1)
            )
        if isinstance(node, cst.Dict):
            return any(
                isinstance(e, cst.StarredDictElement) and self._is_env(e.value, depth + 1)
                for e in node.elements
            )
        if isinstance(node, cst.Call):
            func = node.func
            if isinstance(func, cst.Attribute) and func.attr.value in ("copy", "keys") and not node.args:
                return self._is_env(func.value, depth + 1)
            first = positional(node, 0)
            return (
                self.ctx.call_name(node) in ("dict", "copy.copy", "copy.deepcopy")
                and first is not None
                and (self._is_env(first.value, depth + 1))
            )
        return False

    def _mapping_keys(self, node: cst.CSTNode, depth: int = 0) -> Iterator[tuple[cst.CSTNode, str]]:
        """The literal keys of a mapping expression: `{"X": ..}`, `dict(m, X=..)`, or a name bound to one."""
        if depth > 3:
            return
        if isinstance(node, cst.Dict):
            for element in node.elements:
                if isinstance(element, cst.DictElement) and (var := string_value(element.key)) is not None:
                    yield element.key, var
        elif isinstance(node, cst.Call) and self.ctx.call_name(node) == "dict":
            yield from self._call_keys(node, depth)
        elif (value := self.assigned(node)) is not None:
            yield from self._mapping_keys(value, depth + 1)

    def _call_keys(self, call: cst.Call, depth: int = 0) -> Iterator[tuple[cst.CSTNode, str]]:
        for arg in call.args:
            if arg.keyword is not None:
                yield arg.keyword, arg.keyword.value
            elif not arg.star:
                yield from self._mapping_keys(arg.value, depth + 1)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        index = node.slice[0].slice if len(node.slice) == 1 else None
        if (
            isinstance(index, cst.Index)
            and (var := string_value(index.value)) is not None
            and self._is_env(node.value)
        ):
            self._report(index.value, var)

    def visit_Comparison(self, node: cst.Comparison) -> None:
        var = string_value(node.left)
        target = node.comparisons[0]
        if (
            var is not None
            and isinstance(target.operator, (cst.In, cst.NotIn))
            and self._is_env(target.comparator)
        ):
            self._report(node.left, var)

    def visit_Dict(self, node: cst.Dict) -> None:
        if self._is_env(node):  # {**os.environ, "X": ..}
            for key, var in self._mapping_keys(node):
                self._report(key, var)

    def visit_Call(self, node: cst.Call) -> None:
        name, func = self.ctx.call_name(node), node.func
        method = func.attr.value if isinstance(func, cst.Attribute) else None
        first = positional(node, 0) or keyword(node, "key")
        if (
            name in _NAME_FIRST
            or method in ("setenv", "delenv")
            or (method in _ENV_METHODS and self._is_env(func.value))
        ):
            if first is not None and (var := string_value(first.value)) is not None:
                self._report(first.value, var)
        elif (method == "update" and self._is_env(func.value)) or (
            name == "dict" and first is not None and self._is_env(first.value)
        ):
            for key, var in self._call_keys(node):
                self._report(key, var)
        if (env := keyword(node, "env")) is not None:
            for key, var in self._mapping_keys(env.value):
                self._report(key, var)
