"""Scanning and fixing strings in tests."""

from __future__ import annotations

from pathlib import Path

from neuron_migrate.migrate.file_scan import scan_text
from neuron_migrate.migrate.fix_files import fix_until_stable
from neuron_migrate.migrate.fixer import fix_text
from neuron_migrate.migrate.fixes import FixStyle
from neuron_migrate.migrate.layout import Layout
from neuron_migrate.migrate.rule import load_rules
from neuron_migrate.migrate.sources import SourceText
from neuron_migrate.migrate.torch_floor import DEFAULT_TARGET_TORCH
from neuron_migrate.model import Finding

#: the rules' examples (and the documentation made from them) are written for a project with 120 columns
EXAMPLE_LAYOUT = Layout(line_length=120)


def findings(
    source: str,
    codes: tuple[str, ...] | None = None,
    path: str = "example.py",
    unsafe: bool = False,
    layout: Layout = EXAMPLE_LAYOUT,
    target_torch: tuple[int, int] = DEFAULT_TARGET_TORCH,
) -> list[Finding]:
    """Findings of `codes` (all rules when None) in `source`, their fixes shaped for a run with(out)
    unsafe, for a project that supports torch `target_torch` on."""
    style = FixStyle(layout, unsafe, target_torch=target_torch)
    return scan_text(path, SourceText(source), tuple(codes or load_rules()), style)


def fixed(
    source: str,
    codes: tuple[str, ...] | None = None,
    unsafe: bool = False,
    layout: Layout = EXAMPLE_LAYOUT,
    path: str = "example.py",
    target_torch: tuple[int, int] = DEFAULT_TARGET_TORCH,
) -> str:
    """`source` (the file at `path`) after one pass of the fixes of `codes`."""
    found = findings(source, codes, path, unsafe=unsafe, layout=layout, target_torch=target_torch)
    return fix_text(source, found, unsafe=unsafe, layout=layout).text


def fixed_until_stable(
    source: str, codes: tuple[str, ...] | None = None, unsafe: bool = False, layout: Layout = EXAMPLE_LAYOUT
) -> str:
    """`source` after `fix` (passes until nothing changes), as the command writes it."""
    style = FixStyle(layout, unsafe)
    return fix_until_stable(source, "example.py", tuple(codes or load_rules()), style)[0]


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """Write `files` (relative path -> text) under `root`, folders included; returns `root`."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root
