"""What a file's code spells, read in one regular-expression pass: its identifiers, the dotted chains they
form (`torch.cuda.synchronize`), its string values, the modules its import lines name (and, on demand, what
those imports bind).

This is the input of the pre-pass (`prepass.py`), which must never miss a finding, so every set here is a
superset of what libcst will see: identifiers are collected everywhere outside comments and string literals
(and inside f-strings, whose replacement fields are code); string values are collected for every literal
(docstrings too), for every run of adjacent literals joined (implicit concatenation), and for the text parts
of f-strings. An f-string's replacement fields are code, read like the rest (`f"{'cuda' if gpu else 'cpu'}"`);
its text is not (`f"{name} does not support nn.DataParallel"` names no `DataParallel`). Numbers may add junk
identifiers (`x1f` from `0x1f`), which only makes the sets larger.

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
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from operator import itemgetter

#: an escape, or a backslash line continuation (CRLF included)
_ESCAPE = r"\\(?:\r\n|.)"
_TRIPLE_SINGLE = rf"'''(?:[^'\\]|{_ESCAPE}|'(?!''))*'''"
_TRIPLE_DOUBLE = rf'"""(?:[^"\\]|{_ESCAPE}|"(?!""))*"""'
_SINGLE = rf"'(?:[^'\\\r\n]|{_ESCAPE})*'"
_DOUBLE = rf'"(?:[^"\\\r\n]|{_ESCAPE})*"'
_PIECE = rf"[rRbBuUfF]{{0,2}}(?:{_TRIPLE_SINGLE}|{_TRIPLE_DOUBLE}|{_SINGLE}|{_DOUBLE})"
#: a comment to its line's end: it cannot stop earlier, or a `####...` line inside a repetition would be split
#: in exponentially many ways before a match fails
_COMMENT = r"#[^\r\n]*(?![^\r\n])"
#: what may stand between adjacent literals of one concatenation: blanks, comments, continuations
_GAP = rf"(?:\s|\\\r?\n|{_COMMENT})*"
#: a dotted chain of identifiers: blanks, continuations, comments and closing parentheses may stand before a
#: dot, blanks and continuations after it
_CHAIN_PATTERN = rf"[^\W\d]\w*+(?:(?:[\s\\)]|{_COMMENT})*+\.[\s\\]*+[^\W\d]\w*+)*+"
_CHAIN = re.compile(rf"(?<!\w){_CHAIN_PATTERN}")
_CHAIN_FILLER = " \t\f\r\n\\)"
_COMMENTS = re.compile(r"#[^\r\n]*")
_CONTINUATION = re.compile(r"\\\r?\n")
#: a comment (consumed, not captured) | a run of adjacent string literals | an identifier (or keyword), or a
#: dotted chain of them
_TOKENS = re.compile(rf"#[^\r\n]*|({_PIECE}(?:{_GAP}{_PIECE})*)|({_CHAIN_PATTERN})", re.S)
#: one string literal, prefix and quotes included (a `match` at its quote skips it whole)
STRING_LITERAL = re.compile(_PIECE, re.S)
_IDENTIFIER = re.compile(r"[^\W\d]\w*")
#: `import` or `from` as a word: where an import statement may begin (`_import_statements` checks the rest)
_IMPORT_KEYWORD = re.compile(r"(?:import|from)\b")
#: what follows an import statement's keyword: the rest of its line, across backslash continuations, and its
#: names in parentheses (comments inside them are skipped, a `)` in them included)
_IMPORT_REST = re.compile(rf"((?:[^\r\n#;\\(]|\\\r?\n)*)(?:\(((?:[^)#]|{_COMMENT})*)\))?")
#: the helpers that import a module named by a string (`importlib.import_module`, MONAI's `optional_import`,
#: `lazy_import`, `try_import`): `names` reads what they bind at a module's top the way this reads it anywhere
_DYNAMIC_PREFIXES = ("optional", "lazy", "try", "safe", "maybe")
DYNAMIC_IMPORT = rf"import_module|(?:{'|'.join(_DYNAMIC_PREFIXES)})_?import(?:_module)?"
#: where `DYNAMIC_IMPORT` can match: the same test, written to start with a literal (`import`, then what must
#: stand around it) so that the engine skips to each `import` instead of trying the alternatives everywhere
_DYNAMIC_IMPORT_SIGN = re.compile(
    "import(?:_module|" + "|".join(f"(?<={p}import)|(?<={p}_import)" for p in _DYNAMIC_PREFIXES) + ")"
)
#: `x = import_module("a.b")`, `x, ok = optional_import("a.b", name="c")`: the first target, the module, and
#: a `name=` argument
_DYNAMIC_ASSIGNMENT = re.compile(
    rf"""^[ \t]*([^\W\d]\w*)[ \t]*(?:,[^=\r\n]*)?=[ \t]*(?:[\w.]*\.)?(?:{DYNAMIC_IMPORT})[ \t]*\("""
    r"""[ \t]*['"]([\w.]+)['"](?:[^)\r\n]*?\bname[ \t]*=[ \t]*['"](\w+)['"])?""",
    re.M,
)
#: the `import` of `from module import names` (`from importlib import ...` names a module, not the keyword)
_FROM_IMPORT = re.compile(r"\s+import\b")
_BRACES = re.compile(r"[{}]")
_NESTING_FSTRINGS = sys.version_info >= (3, 12)


@dataclass(frozen=True)
class Lexicon:
    """`names`: identifiers and keywords in the code; `strings`: string literal values (see the module
    docstring); `imported`: every identifier in the import statements (the components of the modules
    they name, the names they import, their aliases)."""

    names: frozenset[str]
    strings: frozenset[str]
    imported: frozenset[str]
    #: the source itself, for the few conditions that need to see how names are combined (a call, a keyword)
    text: str = field(default="", repr=False, compare=False)
    #: every dotted chain of identifiers in the code, and its prefixes (`torch.cuda.synchronize`,
    #: `torch.cuda`), however it is spaced, parenthesized (`(torch).cuda`) or broken across lines and comments
    chains: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    @cached_property
    def import_targets(self) -> tuple[tuple[str, str], ...]:
        """What the text's absolute import statements bind, as (local name, qualified name) pairs, the way
        `names.import_bindings` reads them: `import a.b` binds `a`, `import a.b as c` binds `c` to `a.b`,
        `from a import b as c` binds `c` to `a.b`. Relative and star imports bind nothing there, nor here.
        Also what a dynamic import assigns (`cfg = import_module("torch._inductor.config")`), on any line:
        `names.dynamic_import_bindings` reads those at the module's top, and the pre-pass needs a superset."""
        pairs = import_bindings(self.text)
        dynamic = _DYNAMIC_IMPORT_SIGN.search(self.text) is not None
        for local, module, attribute in _DYNAMIC_ASSIGNMENT.findall(self.text) if dynamic else ():
            pairs.append((local, f"{module}.{attribute}" if attribute else module))
        return tuple(pairs)


def import_bindings(text: str, top_level: bool = False) -> list[tuple[str, str]]:
    """(local name, qualified name) for each name the absolute import statements of `text` bind (`import a.b`
    binds `a`, `import a.b as c` binds `c` to `a.b`, `from a import b as c` binds `c` to `a.b`); `top_level`:
    only the unindented ones (the scanner's kernel modules, `kernel_modules.py`)."""
    pairs: list[tuple[str, str]] = []
    for keyword, line, parenthesized in _import_statements(text, top_level):
        line = _CONTINUATION.sub(" ", line)
        if keyword == "import":
            for alias in line.split(","):
                _bind(alias, "", pairs)
            continue
        module, names = [*_FROM_IMPORT.split(line, maxsplit=1), ""][:2]  # not `from importlib ...`
        module = "".join(module.split())
        if not module or module.startswith("."):
            continue
        for alias in (names + "," + _COMMENTS.sub("", parenthesized)).split(","):
            _bind(alias, module, pairs)
    return pairs


def _import_statements(text: str, top_level: bool = False) -> Iterator[tuple[str, str, str]]:
    """(keyword, rest of its line, names in parentheses or "") of each import statement in `text`: `import`
    or `from` where a statement can start (a line's start, after `;` or a compound statement's `:`; only an
    unindented line's start when `top_level`), to the end of its line or its closing parenthesis. The
    keywords are found first, as words, and the start is checked backwards from each: a pattern that starts
    with a line start or a `:` is tried at every position of the file, and was a fifth of the pre-pass."""
    end = 0
    for keyword in _IMPORT_KEYWORD.finditer(text):
        start = keyword.start()
        if start < end or not _starts_statement(text, start):
            continue
        if top_level and start and text[start - 1] != "\n":
            continue
        rest = _IMPORT_REST.match(text, keyword.end())
        end = rest.end()
        yield keyword.group(), rest.group(1), rest.group(2) or ""


def _starts_statement(text: str, index: int) -> bool:
    """Whether only blanks stand between `index` and the start of its line, a `;` or a `:`."""
    while index and text[index - 1] in " \t\f":
        index -= 1
    return index == 0 or text[index - 1] in "\n:;"


def _bind(alias: str, module: str, pairs: list[tuple[str, str]]) -> None:
    """Add the binding of one `name [as local]` of an import (`module`: the `from` part, if any)."""
    words = alias.split()
    if not words or words[0] == "*":
        return
    name = words[0]
    if len(words) == 3 and words[1] == "as":
        pairs.append((words[2], f"{module}.{name}" if module else name))
    elif module:
        pairs.append((name, f"{module}.{name}"))
    else:
        head = name.split(".")[0]
        pairs.append((head, head))


def lexicon(text: str) -> Lexicon:
    """The `Lexicon` of Python source `text`; meaningful for valid Python (the caller checks that)."""
    if _NESTING_FSTRINGS and re.search(r"[fF][rRbB]?['\"]", text):
        return _tokenized(text)
    names: set[str] = set()
    strings: set[str] = set()
    chains: set[str] = set()
    _read(text, names, strings, chains)
    names.discard("")
    return _built(text, names, strings, chains)


def _read(code: str, names: set[str], strings: set[str], chains: set[str]) -> None:
    """Add what `code` spells to the three sets: the whole file, or an f-string's replacement field."""
    found = _TOKENS.findall(code)
    words = set(map(itemgetter(1), found))
    for token in [token for token in words if "." in token]:
        words.discard(token)
        _add_chain(token, words, chains)
    names.update(words)
    for run, _ in found:
        if run:
            _add_run(STRING_LITERAL.findall(run), strings, names, chains)


def _add_chain(chain: str, names: set[str], chains: set[str]) -> None:
    """Record the identifiers of a chain `_CHAIN_PATTERN` matched, and the chain and its prefixes."""
    if "#" in chain:
        chain = _COMMENTS.sub("", chain)
    parts = [part.strip(_CHAIN_FILLER) for part in chain.split(".")]
    names.update(parts)
    for end in range(2, len(parts) + 1):
        chains.add(".".join(parts[:end]))


def _add_run(pieces: list[str], strings: set[str], names: set[str], chains: set[str]) -> None:
    """Record each literal of a concatenation and the value of every concatenation in it: libcst nests
    `"a" "b" "c"` as `"a" ("b" "c")`, and a rule may visit the inner one, so every suffix counts."""
    values = [_value(piece, strings, names, chains) for piece in pieces]
    if len(values) > 1:
        suffix = ""
        for value in reversed(values):
            suffix = (value or "") + suffix
            strings.add(suffix)


def _value(piece: str, strings: set[str], names: set[str], chains: set[str]) -> str | None:
    """Record the value(s) of one literal; return its value (an f-string's text) for a concatenation."""
    start = 0
    while piece[start] not in "'\"":
        start += 1
    prefix = piece[:start].lower()
    quotes = 3 if piece[start : start + 3] in ('"""', "'''") else 1
    body = piece[start + quotes : len(piece) - quotes]
    if "b" in prefix:
        return None  # bytes: no rule reads them as text
    if "f" in prefix:
        strings.add(body)
        strings.update(_BRACES.split(body))  # libcst keeps the text parts of f-strings unescaped
        for field in _replacement_fields(body):  # code: libcst resolves names there
            _read(field, names, strings, chains)
        return body
    strings.add(body)
    if "r" not in prefix and "\\" in body:
        try:
            body = ast.literal_eval(piece)
        except (SyntaxError, ValueError):
            return body
        strings.add(body)
    return body


def _replacement_fields(body: str) -> list[str]:
    """The replacement fields of an f-string's body, outermost, without their braces, conversion and format
    spec included (`{x!r:>{width}}` gives `x!r:>{width}`, whose junk names only widen the sets). A string
    literal inside a field is skipped whole (a brace in it is text); `{{` and `}}` outside fields are
    text."""
    fields: list[str] = []
    depth = start = index = 0
    while index < len(body):
        char = body[index]
        if depth == 0:
            if char == "{" and body.startswith("{{", index):
                index += 2
                continue
            if char == "{":
                depth, start = 1, index + 1
        elif char in "'\"":
            literal = STRING_LITERAL.match(body, index)
            index = len(body) if literal is None else literal.end()
            continue
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                fields.append(body[start:index])
        index += 1
    if depth:  # cannot happen in valid code; keep the rest rather than lose names
        fields.append(body[start:])
    return fields


def _built(text: str, names: set[str], strings: set[str], chains: set[str]) -> Lexicon:
    """The `Lexicon` of `text` from the sets a reading of it found, with the modules it imports."""
    return Lexicon(
        frozenset(names | _dynamically_imported(text)),
        frozenset(strings),
        _imported(text),
        text,
        frozenset(chains),
    )


def _dynamically_imported(text: str) -> set[str]:
    """The identifiers of the modules a dynamic import names in a string (`import_module("torch._inductor")`):
    what the import binds is spelled there, not in the code."""
    if not _DYNAMIC_IMPORT_SIGN.search(text):
        return set()
    found: set[str] = set()
    for _, module, attribute in _DYNAMIC_ASSIGNMENT.findall(text):
        found.update(module.split("."))
        found.add(attribute)
    found.discard("")
    return found


def _imported(text: str) -> frozenset[str]:
    if "import" not in text:
        return frozenset()
    found: set[str] = set()
    for _, line, parenthesized in _import_statements(text):
        found.update(_IDENTIFIER.findall(line))
        found.update(_IDENTIFIER.findall(parenthesized))
    return frozenset(found)


def _tokenized(text: str) -> Lexicon:
    """The same sets from the standard tokenizer (Python >= 3.12, for files with f-strings)."""
    names: set[str] = set()
    strings: set[str] = set()
    chains: set[str] = set()
    for chain in _CHAIN.findall(text):  # from the raw text (strings and comments too): a superset
        _add_chain(chain, set(), chains)
    run: list[str] = []
    middle = getattr(tokenize, "FSTRING_MIDDLE", None)
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.STRING:
            run.append(token.string)
            continue
        if token.type in (tokenize.NL, tokenize.COMMENT) and run:
            continue
        if run:
            _add_run(run, strings, names, chains)
            run = []
        if token.type == tokenize.NAME:
            names.add(token.string)
        elif token.type == middle:
            strings.add(token.string)
            strings.update(_BRACES.split(token.string))
    if run:
        _add_run(run, strings, names, chains)
    return _built(text, names, strings, chains)
