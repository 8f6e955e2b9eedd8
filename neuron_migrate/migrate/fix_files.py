"""`fix` on files: rewrite each file in memory (several passes until nothing changes), prove it parses, and
write it back atomically with its encoding, BOM, line endings and (for notebooks) JSON layout kept.

A file that changed on disk since it was read is refused, never overwritten. One file's failure is recorded
and the run goes on.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import stat
import tempfile
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from neuron_migrate.migrate.cache import content_hash
from neuron_migrate.migrate.file_scan import scan_file
from neuron_migrate.migrate.fixer import fix_text
from neuron_migrate.migrate.fixes import FixStyle
from neuron_migrate.migrate.generated import generated_marker
from neuron_migrate.migrate.scanner import ScanOptions, open_cache, plan, run_tasks
from neuron_migrate.migrate.sources import SourceFile, SourceText, decode, notebook_cells, read_bytes
from neuron_migrate.model import FileError, Finding

MAX_PASSES = 4


@dataclass
class FileFix:
    """What `fix` did (or would do) to one file."""

    rel: str
    path: Path
    original: bytes
    new: bytes | None = None  # None: unchanged
    applied: list[Finding] = field(default_factory=list)
    left: list[tuple[Finding, str]] = field(default_factory=list)
    error: str | None = None
    skipped: list[str] = field(default_factory=list)  # parts not fixed, and why (notebook cells)
    #: the fixes are written for the default torch: the project says nothing of the torch it supports
    default_torch: bool = False
    #: where the project caps torch below the torch TorchNeuron needs (`FixStyle.torch_cap`)
    torch_cap: str = ""

    def diff(self) -> str:
        """A unified diff `git apply` takes (a/ b/ prefixes, paths relative to the scan root)."""
        if self.new is None:
            return ""
        old_text, new_text = _display(self.original, self.rel), _display(self.new, self.rel)
        lines = difflib.unified_diff(
            old_text.splitlines(keepends=True),
            new_text.splitlines(keepends=True),
            fromfile=f"a/{self.rel}",
            tofile=f"b/{self.rel}",
        )
        out = []
        for line in lines:
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
        return "".join(out)


def _display(data: bytes, rel: str) -> str:
    return data.decode("utf-8-sig" if rel.endswith(".ipynb") else "utf-8", errors="surrogateescape")


def fix_file(source: SourceFile, codes: tuple[str, ...], style: FixStyle) -> FileFix:
    """Compute the fixed content of one file; never raises."""
    data = read_bytes(source)
    if not isinstance(data, bytes):
        return FileFix(source.rel, source.path, b"", error=data.reason)
    result = FileFix(
        source.rel, source.path, data, default_torch=style.default_torch, torch_cap=style.torch_cap
    )
    try:
        if source.kind == "notebook":
            _fix_notebook(result, codes, style)
        else:
            _fix_python(result, codes, style)
    except Exception as err:  # a bug in a fix must not lose the other files
        result.new, result.error = None, f"fix failed: {type(err).__name__}: {err}"
    return result


def fix_tree(
    options: ScanOptions, unsafe: bool, progress=None, include_generated: bool = False
) -> list[FileFix]:
    """`fix` on every selected file, through the scan's pipeline: files no rule can match, and files whose
    cached scan found nothing, are not parsed; the rest are fixed in the process pool (files marked generated
    only with `include_generated`)."""
    cache, rules = open_cache(options)
    errors: list[FileError] = []
    fixes: list[FileFix] = []
    tasks, sizes = [], []
    for item in plan(options, rules, cache, errors):
        if item.source.kind == "kernel":
            continue
        if item.findings is not None and not item.findings:
            continue  # nothing to fix: no rule can match, or the cached scan found nothing
        if item.findings is not None and all(f.code.startswith("NM9") for f in item.findings):
            fixes.append(FileFix(item.source.rel, item.source.path, b"", error=item.findings[0].message))
            continue
        codes = item.active or tuple(rules())
        tasks.append(
            (item.source, codes, replace(item.style, unsafe=unsafe, include_generated=include_generated))
        )
        sizes.append(len(item.text.text) if item.text is not None else 0)
    cache.save()
    fixes.extend(run_tasks(fix_file, tasks, options.jobs, progress, sizes))
    return sorted(fixes, key=lambda f: f.rel)


def fix_until_stable(
    text: str,
    rel: str,
    codes: tuple[str, ...],
    style: FixStyle,
    bound: frozenset[str] = frozenset(),
    path: Path | None = None,
):
    """Fix, rescan, fix again until a pass changes nothing; returns (text, applied, left). `applied` also
    holds the findings another fix took with it (`_taken_along`); `left` has the positions of the fixed
    text."""
    applied: list[Finding] = []
    first_left: list[tuple[Finding, str]] = []
    left: list[tuple[Finding, str]] = []
    for number in range(MAX_PASSES):
        found = scan_file(rel, SourceText(text, bound_modules=bound), codes, style)
        outcome = fix_text(text, found, unsafe=style.unsafe, layout=style.layout, path=path)
        if number == 0:
            first_left, first_applied = outcome.left, len(outcome.applied)
        applied.extend(outcome.applied)
        left = outcome.left
        if outcome.text == text:
            break
        text = outcome.text
    return text, applied + _taken_along(first_left, left, applied[first_applied:]), left


def _taken_along(
    first_left: list[tuple[Finding, str]], final_left: list[tuple[Finding, str]], later_applied: list[Finding]
) -> list[Finding]:
    """Findings the first pass left that no later pass fixes or finds again: a fix of another finding took
    them with it (it replaced the expression around them), so they are fixed
    too. Matched by rule code, since the fixes move lines."""
    remaining = Counter(f.code for f, _ in final_left) + Counter(f.code for f in later_applied)
    taken = []
    for finding, _ in first_left:
        if remaining[finding.code]:
            remaining[finding.code] -= 1
        else:
            taken.append(finding)
    return taken


def _fix_python(result: FileFix, codes: tuple[str, ...], style: FixStyle) -> None:
    decoded = decode(SourceFile(result.path, result.rel), result.original)
    if not isinstance(decoded, SourceText):
        result.error = decoded.reason
        return
    bom = result.original.startswith(b"\xef\xbb\xbf")
    crlf = b"\r\n" in result.original
    text = decoded.text.replace("\r\n", "\n") if crlf else decoded.text
    if not style.include_generated and (marker := generated_marker(text)) is not None:
        found = scan_file(result.rel, SourceText(text), codes, style)
        result.left = [(finding, "in a generated file: change what generates it") for finding in found]
        if found:
            result.skipped.append(f"a generated file ({marker}); --include-generated fixes it anyway")
        return
    new_text, result.applied, result.left = fix_until_stable(text, result.rel, codes, style, path=result.path)
    if new_text == text:
        return
    if crlf:
        new_text = new_text.replace("\n", "\r\n")
    encoding = "utf-8" if decoded.encoding == "utf-8-sig" else decoded.encoding
    try:
        encoded = new_text.encode(encoding)
    except UnicodeEncodeError:
        result.error = f"the fixed text cannot be encoded as {encoding}; left unchanged"
        result.applied = []
        return
    result.new = (b"\xef\xbb\xbf" if bom and not encoded.startswith(b"\xef\xbb\xbf") else b"") + encoded


#: IPython lines that are not Python: `%magic`, `!shell`, `x?` help, and `files = !ls` / `x = %time f()`
_MAGIC_LINE = re.compile(r"^\s*([%!]|\?|[\w.]+\?\s*$|\w+\s*=\s*[%!])")


def mask_magics(cell: str) -> tuple[str, list[str]]:
    """The cell with each IPython magic line replaced by a placeholder statement at its indentation (so the
    cell parses and line numbers stay), and the original lines in order."""
    lines = cell.split("\n")
    originals = []
    for index, line in enumerate(lines):
        if _MAGIC_LINE.match(line):
            indent = line[: len(line) - len(line.lstrip())]
            lines[index] = f"{indent}{_placeholder(len(originals))}"
            originals.append(line)
    return "\n".join(lines), originals


def unmask_magics(cell: str, originals: list[str]) -> str | None:
    """The masked cell with its magic lines back; None when a fix touched one (the cell is left as it was)."""
    lines = cell.split("\n")
    found = 0
    for index, line in enumerate(lines):
        if line.strip() == _placeholder(found) and found < len(originals):
            lines[index] = originals[found]
            found += 1
    return "\n".join(lines) if found == len(originals) else None


def _placeholder(number: int) -> str:
    return f"__neuron_migrate_magic_{number}__"


def _fix_notebook(result: FileFix, codes: tuple[str, ...], style: FixStyle) -> None:
    """Cells are fixed one by one, in order, each after the code of the cells above it (as the kernel runs
    them), so a fix reuses a `device` an earlier cell binds, as `scan` does on the notebook as one module."""
    cells = notebook_cells(result.original)
    new_cells = list(cells)
    bound: set[str] = set()
    above: list[str] = []  # the masked, fixed code of the cells above
    as_python = result.path.with_suffix(".py")  # where a formatter finds the project's settings
    for index, cell_text in enumerate(cells):
        masked, magics = mask_magics(cell_text)
        bound |= _imported_modules(masked)
        if not cell_text.strip():
            continue
        if cell_text.lstrip().startswith("%%"):
            result.skipped.append(f"cell {index + 1}: a `%%` cell magic, not Python")
            continue
        new_text, applied, left = fix_until_stable(
            masked, result.rel, codes, style, frozenset(bound), as_python
        )
        if new_text != masked and above:  # only a cell that changes pays for the code above it
            after = _fix_after(above, masked, result.rel, codes, style, bound, as_python)
            new_text, applied, left = after or (new_text, applied, left)
        restored = unmask_magics(new_text, magics)
        if restored is None:
            result.skipped.append(f"cell {index + 1}: a fix would move an IPython magic line")
            above.append(masked)
            continue
        above.append(new_text)
        result.applied += [_in_cell(f, index + 1) for f in applied]
        result.left += [(_in_cell(f, index + 1), why) for f, why in left]
        new_cells[index] = restored
    if new_cells != cells:
        result.new = _write_cells(result.original, new_cells)


def _fix_after(
    above: list[str],
    cell: str,
    rel: str,
    codes: tuple[str, ...],
    style: FixStyle,
    bound: set[str],
    as_python: Path,
):
    """The cell fixed as the code after the cells `above`: (text, applied, left) with positions in the cell,
    or None when the fixes would change the code above (an import they drop, a line they move there)."""
    prefix = "".join(text if text.endswith("\n") else text + "\n" for text in above)
    offset = prefix.count("\n")
    new_text, applied, left = fix_until_stable(prefix + cell, rel, codes, style, frozenset(bound), as_python)
    if not new_text.startswith(prefix):
        return None

    def in_cell(finding: Finding) -> Finding | None:
        if finding.line <= offset:
            return None
        return replace(finding, line=finding.line - offset, end_line=finding.end_line - offset)

    applied_here = [moved for f in applied if (moved := in_cell(f)) is not None]
    left_here = [(moved, why) for f, why in left if (moved := in_cell(f)) is not None]
    return new_text[len(prefix) :], applied_here, left_here


def _imported_modules(cell_text: str) -> set[str]:
    """Module names a cell imports under their own name (`import torch`), magics ignored."""
    import libcst as cst

    from neuron_migrate.migrate.names import import_bindings
    from neuron_migrate.migrate.parsing import parse

    try:
        module = parse(cell_text)
    except cst.ParserSyntaxError:
        return set()
    found: set[str] = set()
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Import):
                    found |= {local for local, full in import_bindings(small) if local == full}
    return found


def _in_cell(finding: Finding, cell: int) -> Finding:
    from dataclasses import replace

    return replace(finding, cell=cell)


def _write_cells(original: bytes, cells: list[str]) -> bytes:
    """The notebook with new code-cell sources, keeping its indent, key order and source form (list or
    str)."""
    text = original.decode("utf-8-sig")
    notebook = json.loads(text)
    code_cells = [c for c in notebook["cells"] if isinstance(c, dict) and c.get("cell_type") == "code"]
    for cell, source in zip(code_cells, cells, strict=True):
        if isinstance(cell.get("source"), list):
            cell["source"] = source.splitlines(keepends=True)
        else:
            cell["source"] = source
    indent = _json_indent(text)
    dumped = json.dumps(notebook, indent=indent, ensure_ascii=False)
    return (dumped + ("\n" if text.endswith("\n") else "")).encode("utf-8")


def _json_indent(text: str) -> int | None:
    for line in text.splitlines()[1:3]:
        stripped = line.lstrip(" ")
        if stripped != line:
            return len(line) - len(stripped)
    return None


def write_fixed(fix: FileFix) -> str | None:
    """Replace the file atomically with its fixed content; returns why not, or None on success."""
    if fix.new is None:
        return None
    current = read_bytes(SourceFile(fix.path, fix.rel))
    if not isinstance(current, bytes) or content_hash(current) != content_hash(fix.original):
        return "file changed on disk since it was read; rerun fix"
    folder = fix.path.resolve().parent
    try:
        mode = stat.S_IMODE(fix.path.stat().st_mode)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{fix.path.name}.", suffix=".nm-tmp")
        with os.fdopen(fd, "wb") as out:
            out.write(fix.new)
        os.chmod(tmp, mode)
        os.replace(tmp, fix.path.resolve())
    except OSError as err:
        if "tmp" in locals():
            Path(tmp).unlink(missing_ok=True)
        return f"cannot write ({err.strerror})"
    return None
