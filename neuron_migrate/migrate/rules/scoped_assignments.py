"""The last value assigned to each name, per function scope: how the environment rules (NM601–NM603) follow
`env` and `cmd` names to what they hold."""

from __future__ import annotations

import libcst as cst

from neuron_migrate.migrate.rule import Rule


class ScopedAssignments(Rule):
    """Remembers the last value assigned to each plain name, per function scope, to follow `env`/`cmd`
    names."""

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._scopes: list[dict[str, cst.BaseExpression]] = [{}]

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._scopes.append({})

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._scopes.pop()

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                self._scopes[-1][target.target.value] = node.value

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if isinstance(node.target, cst.Name) and node.value is not None:
            self._scopes[-1][node.target.value] = node.value

    def assigned(self, node: cst.CSTNode) -> cst.BaseExpression | None:
        if isinstance(node, cst.Name):
            for scope in reversed(self._scopes):
                if node.value in scope:
                    return scope[node.value]
        return None
