"""Replacing attributes for the length of a block and putting every one back, in reverse order."""

from __future__ import annotations

import contextlib
import sys
from typing import Any

_MISSING = object()


class Patches:
    """A stack of attribute replacements; `restore()` undoes them all (also after a failure half-way)."""

    def __init__(self) -> None:
        self._undo: list[tuple[Any, str, Any]] = []

    def set(self, owner: Any, name: str, value: Any) -> None:
        """`owner.name = value` until `restore()` (an attribute that did not exist is deleted again)."""
        self._undo.append(
            (
                owner,
                name,
                owner.__dict__.get(name, _MISSING)
                if hasattr(owner, "__dict__")
                else getattr(owner, name, _MISSING),
            )
        )
        setattr(owner, name, value)

    def everywhere(self, replacements: list[tuple[Any, Any]], prefixes: tuple[str, ...]) -> int:
        """Replace each `real` by its `fake` in every loaded module under one of `prefixes` that exports it
        (so that `from torch.cuda.memory import memory_stats` gets the fake too); returns how many were
        replaced. One pass over the modules for all replacements: this runs once per snippet."""
        fakes = {id(real): fake for real, fake in replacements}
        replaced = 0
        for module_name, module in list(sys.modules.items()):
            if module is None or not any(
                module_name == p or module_name.startswith(p + ".") for p in prefixes
            ):
                continue
            for name, value in list(vars(module).items()):
                if id(value) in fakes:
                    self.set(module, name, fakes[id(value)])
                    replaced += 1
        return replaced

    def restore(self) -> None:
        while self._undo:
            owner, name, old = self._undo.pop()
            if old is _MISSING:
                with contextlib.suppress(AttributeError):
                    delattr(owner, name)
            else:
                setattr(owner, name, old)
