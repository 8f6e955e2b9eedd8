"""The base of the dtype rules (NM801 float64, NM802 complex): where a dtype counts.

A dtype counts where it makes or converts data (`dtype=torch.float64`, `.to(torch.double)`, `.double()`,
`set_default_dtype`), not where code only inspects one (`x.dtype == torch.float64`, dict keys, `torch.finfo`).
"""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from neuron_migrate.migrate.device_literals import string_value
from neuron_migrate.migrate.lexicon import Lexicon
from neuron_migrate.migrate.patterns import QualifiedNameRule, spells_names

#: calls whose dtype argument is only inspected
_INSPECTORS = {
    "torch.finfo",
    "torch.iinfo",
    "isinstance",
    "issubclass",
    "torch.is_complex",
    "torch.is_floating_point",
}
_LOADERS = ("from_pretrained", "from_config")  # Hugging Face loaders take dtype names as strings


class DtypeRule(QualifiedNameRule):
    """Uses of dtype names in `NAMES`, zero-argument conversion methods in `METHODS`, dtype strings."""

    METHODS: ClassVar[tuple[str, ...]] = ()
    DTYPE_STRINGS: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """A use of NAMES, a call of one of METHODS, or a dtype string passed as `dtype=` / `torch_dtype=`;
        a rule with checks of its own adds what they need."""
        return (
            spells_names(cls, lex)
            or not lex.names.isdisjoint(cls.METHODS)
            or (bool({"dtype", "torch_dtype"} & lex.names) and not lex.strings.isdisjoint(cls.DTYPE_STRINGS))
        )

    def on_use(self, node: cst.Name | cst.Attribute, call: cst.Call | None, name: str) -> None:
        if call is None and _only_inspected(self.ctx):
            return
        self.report(call or node, self.message_for(name))

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in self.METHODS and not node.args:
            self.report(node, self.message_for(f".{func.attr.value}()"))
            return
        name = self.ctx.call_name(node) or ""
        loader = isinstance(func, cst.Attribute) and func.attr.value in _LOADERS
        for arg in node.args:
            if arg.keyword is None or string_value(arg.value) not in self.DTYPE_STRINGS:
                continue
            if arg.keyword.value == "torch_dtype" or (
                arg.keyword.value == "dtype" and (loader or name.startswith("torch."))
            ):
                self.report(arg.value, self.message_for(string_value(arg.value)))


def _only_inspected(ctx) -> bool:
    """Whether the visited dtype is compared, used as a dict key or annotation, or passed to `torch.finfo`."""
    child = ctx.node
    for level in range(1, 8):
        parent = ctx.ancestor(level)
        if isinstance(parent, (cst.Element, cst.Tuple, cst.List, cst.Set)):
            child = parent
            continue
        if isinstance(parent, (cst.Comparison, cst.ComparisonTarget, cst.Annotation)):
            return True
        if isinstance(parent, cst.DictElement):  # a key, or a value in a dtype -> dtype table
            return child is parent.key or (ctx.qualified_name(parent.key) or "").startswith("torch.")
        if isinstance(parent, cst.Arg):
            call = ctx.ancestor(level + 1)
            return isinstance(call, cst.Call) and ctx.call_name(call) in _INSPECTORS
        return False
    return False
