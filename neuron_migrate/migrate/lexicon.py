"""What a file's code spells, read in one regular-expression pass: its identifiers, its string values, the
modules its import lines name.

This is the input of the pre-pass (`prepass.py`), which must never miss a finding, so every set here is a
superset of what libcst will see: identifiers are collected everywhere outside comments and string literals
(and inside f-strings, whose replacement fields are code); string values are collected for every literal
(docstrings too), for every run of adjacent literals joined (implicit concatenation), and for the text parts
of f-strings. Numbers may add junk identifiers (`x1f` from `0x1f`), which only makes the sets larger.

The expression lexes Python up to 3.11 exactly: the only constructs in which `#` and quotes mean something
else are strings and comments, and scanning left to right finds whichever starts first. From 3.12 on an
f-string may nest its own quote character, which a regular expression cannot follow, so there a file with
f-strings goes through the standard tokenizer (itself written in C from 3.12 on).
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from dataclasses import dataclass
from operator import itemgetter

#: an escape, or a backslash line continuation (CRLF included)
_ESCAPE = r"\\(?:\r\n|.)"
_TRIPLE_SINGLE = rf"'''(?:[^'\\]|{_ESCAPE}|'(?!''))*'''"
_TRIPLE_DOUBLE = rf'"""(?:[^"\\]|{_ESCAPE}|"(?!""))*"""'
_SINGLE = rf"'(?:[^'\\\r\n]|{_ESCAPE})*'"
_DOUBLE = rf'"(?:[^"\\\r\n]|{_ESCAPE})*"'
_PIECE = rf"[rRbBuUfF]{{0,2}}(?:{_TRIPLE_SINGLE}|{_TRIPLE_DOUBLE}|{_SINGLE}|{_DOUBLE})"
#: what may stand between adjacent literals of one concatenation: blanks, comments, continuations
_GAP = r"(?:\s|\\\r?\n|#[^\r\n]*)*"
#: a comment (consumed, not captured) | a run of adjacent string literals | an identifier (or keyword)
_TOKENS = re.compile(rf"#[^\r\n]*|({_PIECE}(?:{_GAP}{_PIECE})*)|([^\W\d]\w*)", re.S)
_PIECES = re.compile(_PIECE, re.S)
_IDENTIFIER = re.compile(r"[^\W\d]\w*")
#: `import a.b as c, d` (every identifier on the rest of the logical line) and `from a.b import c` (`a`)
_IMPORT_LINE = re.compile(r"\bimport\b((?:[^\r\n#;\\]|\\\r?\n)*)|\bfrom(?:\s|\\\r?\n)+([\w.]+)")
_BRACES = re.compile(r"[{}]")
_NESTING_FSTRINGS = sys.version_info >= (3, 12)


@dataclass(frozen=True)
class Lexicon:
    """`names`: identifiers and keywords in the code; `strings`: string literal values (see the module
    docstring); `imported`: the first component of each module an import line names, and the other
    identifiers on those lines."""

    names: frozenset[str]
    strings: frozenset[str]
    imported: frozenset[str]


def lexicon(text: str) -> Lexicon:
    """The `Lexicon` of Python source `text`; meaningful for valid Python (the caller checks that)."""
    if _NESTING_FSTRINGS and re.search(r"[fF][rRbB]?['\"]", text):
        return _tokenized(text)
    found = _TOKENS.findall(text)
    names = set(map(itemgetter(1), found))
    strings: set[str] = set()
    for run, _ in found:
        if run:
            _add_run(_PIECES.findall(run), strings, names)
    names.discard("")
    return Lexicon(frozenset(names), frozenset(strings), _imported(text))


def _add_run(pieces: list[str], strings: set[str], names: set[str]) -> None:
    """Record each literal of a concatenation and the value of every concatenation in it: libcst nests
    `"a" "b" "c"` as `"a" ("b" "c")`, and a rule may visit the inner one, so every suffix counts."""
    values = [_value(piece, strings, names) for piece in pieces]
    if len(values) > 1:
        suffix = ""
        for value in reversed(values):
            suffix = (value or "") + suffix
            strings.add(suffix)


def _value(piece: str, strings: set[str], names: set[str]) -> str | None:
    """Record the value(s) of one literal; return its value (an f-string's text) for a concatenation."""
    start = 0
    while piece[start] not in "'\"":
        start += 1
    prefix = piece[:start].lower()
    quotes = 3 if piece[start:start + 3] in ('"""', "'''") else 1
    body = piece[start + quotes:len(piece) - quotes]
    if "b" in prefix:
        return None  # bytes: no rule reads them as text
    if "f" in prefix:
        strings.add(body)
        strings.update(_BRACES.split(body))  # libcst keeps the text parts of f-strings unescaped
        names.update(_IDENTIFIER.findall(body))
        return body
    strings.add(body)
    if "r" not in prefix and "\\" in body:
        try:
            body = ast.literal_eval(piece)
        except (SyntaxError, ValueError):
            return body
        strings.add(body)
    return body


def _imported(text: str) -> frozenset[str]:
    if "import" not in text:
        return frozenset()
    heads: set[str] = set()
    for rest, module in _IMPORT_LINE.findall(text):
        if module:
            heads.add(module.split(".")[0])
        heads.update(_IDENTIFIER.findall(rest))
    return frozenset(heads)


def _tokenized(text: str) -> Lexicon:
    """The same sets from the standard tokenizer (Python >= 3.12, for files with f-strings)."""
    names: set[str] = set()
    strings: set[str] = set()
    run: list[str] = []
    middle = getattr(tokenize, "FSTRING_MIDDLE", None)
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.STRING:
            run.append(token.string)
            continue
        if token.type in (tokenize.NL, tokenize.COMMENT) and run:
            continue
        if run:
            _add_run(run, strings, names)
            run = []
        if token.type == tokenize.NAME:
            names.add(token.string)
        elif token.type == middle:
            strings.add(token.string)
            strings.update(_BRACES.split(token.string))
    if run:
        _add_run(run, strings, names)
    return Lexicon(frozenset(names), frozenset(strings), _imported(text))
