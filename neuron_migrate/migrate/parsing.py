"""libcst parsing without re-validating what the parser built.

Every libcst node checks its own invariants when it is constructed (`CSTNode.__post_init__` calls
`_validate`): balanced parentheses, required whitespace. That is a safeguard for nodes built by hand; a tree
the parser made from source text satisfies them by construction, and the checks are about a quarter of a
parse (accelerate's 29 CUDA files: 1.08 s → 0.81 s). `parse` turns them off for the parse alone, so nodes the
fixes build are still checked.
"""

from __future__ import annotations

import libcst as cst
from libcst._nodes.base import CSTNode


def _unchecked(self) -> None:
    """A node the parser builds: valid by construction."""


def parse(source: str) -> cst.Module:
    """`cst.parse_module(source)` (raises `cst.ParserSyntaxError`), without per-node validation."""
    checked = CSTNode.__dict__.get("__post_init__")
    if checked is None:  # a libcst that validates elsewhere: parse as it does
        return cst.parse_module(source)
    CSTNode.__post_init__ = _unchecked
    try:
        return cst.parse_module(source)
    finally:
        CSTNode.__post_init__ = checked
