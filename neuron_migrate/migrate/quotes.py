"""Writing new string literals in the quotes the file already uses.

The fixes write double quotes (`torch.device("cpu")`, `in ("cuda", "neuron")`); in a file whose plain string
literals are mostly single-quoted (composer, mmengine), the new code would stand out. A formatter configured
for the project already settles this for the files it accepts (`layout.reflow`); this covers the rest.
Only literals in the text a fix writes change, and only those that read the same in single quotes.
"""

from __future__ import annotations

import io
import tokenize

import libcst as cst

_PREFIXES = frozenset("rRuUfF")


#: how many single-quoted literals, and how many times the double-quoted ones, make a file's style single
_CLEAR_STYLE = (4, 2)


def quote_of(literal: cst.CSTNode) -> str:
    """The quote character of a one-line string literal, `"` for anything else."""
    if isinstance(literal, cst.SimpleString) and len(literal.quote) == 1:
        return literal.quote
    return '"'


def preferred_quote(source: str) -> str:
    """`'` when the one-line string literals of `source` are clearly single-quoted (at least four, twice as
    many as double-quoted ones: a file with a stray literal or two shows no style), else `"`."""
    single = double = 0
    for token in _strings(source):
        body = token.lstrip("rRbBuUfF")
        if body.startswith(("'''", '"""')):
            continue
        if body.startswith("'"):
            single += 1
        elif body.startswith('"'):
            double += 1
    least, times = _CLEAR_STYLE
    return "'" if single >= least and single >= times * double else '"'


def in_quotes(text: str, quote: str) -> str:
    """`text` (code a fix writes) with its double-quoted one-line literals in `quote`, where that needs no
    escape (the literal holds neither quote nor a backslash)."""
    if quote != "'" or '"' not in text:
        return text
    lines = text.splitlines(keepends=True)
    changes: list[tuple[int, int, int, str]] = []
    for token in _tokens(text):
        if token.type != tokenize.STRING or token.start[0] != token.end[0]:
            continue
        literal = token.string
        prefix = literal[: len(literal) - len(literal.lstrip("rRbBuUfF"))]
        body = literal[len(prefix) :]
        inner = body[1:-1]
        plain = not ({"'", '"', "\\"} & set(inner))
        if set(prefix) <= _PREFIXES and body.startswith('"') and not body.startswith('"""') and plain:
            changes.append((token.start[0], token.start[1], token.end[1], f"{prefix}'{inner}'"))
    for row, start, end, new in reversed(changes):
        line = lines[row - 1]
        lines[row - 1] = line[:start] + new + line[end:]
    return "".join(lines)


def _strings(source: str) -> list[str]:
    return [t.string for t in _tokens(source) if t.type == tokenize.STRING]


def _tokens(text: str) -> list[tokenize.TokenInfo]:
    """The tokens of `text` up to where it stops being tokenizable (a fix's fragment may open a bracket it
    does not close)."""
    found: list[tokenize.TokenInfo] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            found.append(token)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return found
