"""Scanning and fixing strings in tests."""

from __future__ import annotations

from neuron_migrate.migrate.fixer import fix_text
from neuron_migrate.migrate.rule import load_rules
from neuron_migrate.migrate.scanner import scan_text
from neuron_migrate.migrate.sources import SourceText
from neuron_migrate.model import Finding


def findings(source: str, codes: tuple[str, ...] | None = None, path: str = "example.py") -> list[Finding]:
    """Findings of `codes` (all rules when None) in `source`."""
    return scan_text(path, SourceText(source), tuple(codes or load_rules()))


def fixed(source: str, codes: tuple[str, ...] | None = None, unsafe: bool = False) -> str:
    """`source` after applying the fixes of `codes`."""
    return fix_text(source, findings(source, codes), unsafe=unsafe).text
