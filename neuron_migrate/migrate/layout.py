"""The project's line length and formatter, and keeping the lines a fix writes within them.

The line length comes from the nearest configuration above the file: `line-length` in `[tool.ruff]` or
`[tool.black]` of a `pyproject.toml`, in `ruff.toml` / `.ruff.toml`, or `max-line-length` (or
`max_line_length`) in the `[flake8]` section of `setup.cfg`, `tox.ini` or `.flake8`; 88 (black's and
ruff's default) when there is none.

In a file the project's configured formatter (ruff or black, when installed) already accepts, every line a
fix changed goes through that formatter's range mode, so the file still passes its check: long lines are
wrapped, and a bracket the fix made short enough for one line is joined. Elsewhere, lines that a fix changed
and that end up longer than the line length are re-wrapped, never the code around them: with a
formatter's range mode (`ruff format --range`, `black --line-ranges`) — the project's own when it configures
one that is installed, else whichever of the two is installed, at the project's line length — and without
one by splitting the way black does: at the last bracket pair (body on its own indented line), an
assignment's right-hand side or a condition in parentheses, at commas, conditionals and boolean operators.
"""

from __future__ import annotations

import configparser
import difflib
import io
import shutil
import subprocess
import sys
import tokenize
from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import pairwise
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_LINE_LENGTH = 88
_OPEN, _CLOSE = "([{", ")]}"


@dataclass(frozen=True)
class Layout:
    """How a project lays out code: its line length and the formatter it uses (None: none configured)."""

    line_length: int = DEFAULT_LINE_LENGTH
    formatter: str | None = None  # "ruff" | "black"
    config: Path | None = None


@lru_cache(maxsize=256)
def layout_for(folder: Path) -> Layout:
    """The layout configured at or above `folder`."""
    for directory in (folder, *folder.parents):
        found = _read_folder(directory)
        if found is not None:
            return found
    return Layout()


@lru_cache(maxsize=1024)  # every file's search passes the same parent folders
def _read_folder(directory: Path) -> Layout | None:
    pyproject = directory / "pyproject.toml"
    if pyproject.is_file():
        tool = _toml(pyproject).get("tool", {})
        ruff, black = tool.get("ruff"), tool.get("black")
        if isinstance(black, dict) or isinstance(ruff, dict):
            length = (black or {}).get("line-length") if isinstance(black, dict) else None
            length = length or (ruff.get("line-length") if isinstance(ruff, dict) else None)
            formatter = "black" if isinstance(black, dict) else "ruff"
            return Layout(_length(length), formatter, pyproject)
    for name in ("ruff.toml", ".ruff.toml"):
        path = directory / name
        if path.is_file():
            return Layout(_length(_toml(path).get("line-length")), "ruff", path)
    for name in (".flake8", "setup.cfg", "tox.ini"):
        path = directory / name
        if path.is_file():
            length = _flake8_length(path)
            if length is not None:
                return Layout(length, None, path)
    return None


def _toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}


def _length(value: object) -> int:
    return (
        value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else DEFAULT_LINE_LENGTH
    )


def _flake8_length(path: Path) -> int | None:
    parser = configparser.ConfigParser()
    try:
        parser.read(path, encoding="utf-8")
        # flake8 reads either spelling (MONAI's setup.cfg: `max_line_length = 120`)
        value = parser.get("flake8", "max-line-length", fallback=None) or parser.get(
            "flake8", "max_line_length", fallback=None
        )
    except (configparser.Error, OSError, UnicodeDecodeError):
        return None
    return int(value) if value and value.strip().isdigit() else None


# --- re-wrapping the changed lines -------------------------------------------------------------------------


def changed_lines(before: str, after: str) -> list[int]:
    """1-based numbers of the lines of `after` that are not in `before` (added or rewritten)."""
    import difflib

    old, new = before.splitlines(), after.splitlines()
    changed: list[int] = []
    for tag, _, _, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if tag in ("replace", "insert"):
            changed.extend(range(j1 + 1, j2 + 1))
    return changed


def _long_lines(before: str, after: str, limit: int) -> list[int]:
    """1-based numbers of the changed lines of `after` over `limit`, except a line rewritten in place that is
    no longer than the line it replaces: the project kept that one long, and wrapping it is a change of
    layout nobody asked for."""
    import difflib

    old, new = before.splitlines(), after.splitlines()
    long: list[int] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if tag not in ("replace", "insert"):
            continue
        in_place = tag == "replace" and i2 - i1 == j2 - j1
        for j in range(j1, j2):
            line = new[j]
            if _too_long(line, limit) and not (
                in_place and len(line.rstrip()) <= len(old[i1 + j - j1].rstrip())
            ):
                long.append(j + 1)
    return long


def reflow(before: str, after: str, layout: Layout, path: Path | None = None) -> str:
    """`after` with its changed lines laid out as the project would: in a file its configured formatter
    already accepted, that formatter's range mode on every changed line (it also joins a bracket the fix
    made short enough for one line); elsewhere only the changed lines that are too long are wrapped (a
    formatter, else our split)."""
    if path is not None and layout.formatter and _formatter_accepts(before, layout, path.resolve()):
        changed = changed_lines(before, after)
        formatted = _run_formatter(after, changed, layout, path) if changed else after
        if formatted is not None and _contained(after, formatted, len(changed)):
            return _untouched_blank_lines(after, formatted)
    limit = _evident_limit(before, layout)
    long = _long_lines(before, after, limit)
    if not long:
        return after
    layout = replace(layout, line_length=limit)
    if path is not None:
        formatted = _run_formatter(after, long, layout, path)
        if formatted is not None and _contained(after, formatted, len(long)):
            return _untouched_blank_lines(after, formatted)
    lines = after.splitlines(keepends=True)
    whole = _whole_statement_lines(after)
    for number in sorted(long, reverse=True):
        if number not in whole:  # a line inside a bracket: splitting it as a statement would break the code
            continue
        line = lines[number - 1]
        ending = line[len(line.rstrip("\r\n")) :]
        wrapped = wrap(line.rstrip("\r\n"), layout.line_length)
        if wrapped is not None:
            lines[number - 1] = "".join(part + (ending or "\n") for part in wrapped)
            if not ending:
                lines[number - 1] = lines[number - 1][:-1]
    return "".join(lines)


_LAYOUT_TOKENS = (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)


def _evident_limit(text: str, layout: Layout) -> int:
    """The line length to keep new lines within: the configured one; in a project that configures none, the
    default, or the longest line of code the file already has where several are longer (StyleTTS 2's
    130-column lines, ms-swift's 118: a fix there wrapped at 88 what the project writes on one line, reviews
    49 and 50). Lines that hold a string or a comment do not count: a formatter leaves those long in a file
    it keeps at 88 (torchao, axolotl: review 51), nor do one or two lines it could not split."""
    if layout.config is not None:
        return layout.line_length
    longer = [n for n in _code_line_lengths(text) if n > layout.line_length]
    # two lines a formatter could not split (torchao's 89-column ones) do not make a project's width
    return max(longer) if len(longer) >= _WIDER_LINES else layout.line_length


#: how many lines of code longer than the default show that a project writes wider code
_WIDER_LINES = 3


def _code_line_lengths(text: str) -> list[int]:
    """The lengths of the lines of `text` without a string or a comment on them (none when it does not
    tokenize)."""
    lines = text.splitlines()
    worded: set[int] = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type in (tokenize.STRING, tokenize.COMMENT) or tok.type == getattr(
                tokenize, "FSTRING_START", None
            ):
                worded.update(range(tok.start[0], tok.end[0] + 1))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []
    return [len(line.rstrip()) for n, line in enumerate(lines, 1) if n not in worded]


def _untouched_blank_lines(before: str, after: str) -> str:
    """`after` (a formatter's output for `before`) with the blank lines between statements as they were: a
    range formatter also cleans the whitespace-only line above the statement it was given and joins two blank
    lines below it (outetts, StyleTTS 2: review 49), lines `fix` had no reason to touch. Blank lines are
    matched by the line of code they precede: an unchanged line, or the first line of a rewritten block,
    gets the blank lines its counterpart had; a line inside a rewritten block keeps the formatter's."""
    old_code, old_blanks = _code_lines(before)
    new_code, new_blanks = _code_lines(after)
    matcher = difflib.SequenceMatcher(None, old_code, new_code, autojunk=False)
    anchors: dict[int, int] = {}  # new code line -> the old code line whose blank lines it takes
    for tag, i1, _, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            anchors.update({j1 + k: i1 + k for k in range(j2 - j1)})
        elif tag == "replace":
            anchors[j1] = i1
    out = []
    for index, line in enumerate(new_code):
        out.extend(old_blanks[anchors[index]] if index in anchors else new_blanks[index])
        out.append(line)
    out.extend(new_blanks[len(new_code)])
    return "".join(out)


def _code_lines(text: str) -> tuple[list[str], list[list[str]]]:
    """The lines of `text` that are not blank, and before each of them (and after the last) the blank or
    whitespace-only lines."""
    code: list[str] = []
    blanks: list[list[str]] = [[]]
    for line in text.splitlines(keepends=True):
        if line.strip():
            code.append(line)
            blanks.append([])
        else:
            blanks[-1].append(line)
    return code, blanks


def _whole_statement_lines(text: str) -> set[int]:
    """Numbers of the lines that hold one whole logical line (a statement, or a compound statement's header),
    not part of one that brackets continue over several lines."""
    whole: set[int] = set()
    start = None
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type in _LAYOUT_TOKENS:
                continue
            if tok.type == tokenize.NEWLINE:
                if start == tok.start[0]:
                    whole.add(start)
                start = None
            elif start is None:
                start = tok.start[0]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return whole
    return whole


#: lines a formatter may rewrite per long line before its result counts as reformatting untouched code (a
#: range inside one huge statement, a table of thousands of lines, makes it reformat the whole statement)
_REWRITTEN_PER_LINE = 12


def _contained(before: str, after: str, long_lines: int) -> bool:
    """Whether the formatter kept to the statements it was given (few lines rewritten per long line)."""
    return len(changed_lines(after, before)) <= _REWRITTEN_PER_LINE * max(1, long_lines)


def _too_long(line: str, limit: int) -> bool:
    return len(line.rstrip()) > limit


def _executable(name: str) -> str | None:
    """A formatter on PATH, or installed next to this Python (a virtual environment that is not activated)."""
    found = shutil.which(name)
    if found:
        return found
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() else None


def _run_formatter(text: str, lines: list[int], layout: Layout, path: Path) -> str | None:
    """A formatter's range mode on just `lines` (merged into ranges): the project's own when it configures one
    that is installed; for a project that configures none, ruff's or black's (both wrap as black does) at the
    project's line length, keeping each string literal's quotes. None when no formatter is installed or it
    fails."""
    ranges = _ranges(lines)
    path = path.resolve()  # the formatter runs in the file's folder: a relative path would point elsewhere
    ruff, black = _executable("ruff"), _executable("black")
    tool = layout.formatter or ("ruff" if ruff else "black" if black else None)
    if tool == "ruff" and ruff:
        # a project that configures no formatter has chosen no quote style either: each literal keeps its own
        unconfigured = [f"--line-length={layout.line_length}", "--config", 'format.quote-style="preserve"']
        settings = [] if layout.formatter else unconfigured
        for start, end in reversed(ranges):  # one range per run; bottom up, so line numbers above stay right
            done = _pipe(
                [
                    ruff,
                    "format",
                    *settings,
                    f"--range={start}:1-{end + 1}:1",
                    "--stdin-filename",
                    str(path),
                    "-",
                ],
                text,
                path.parent,
            )
            if done is None:
                return None
            text = done
        return text
    if tool == "black" and black:
        args = [black, "-q", "--stdin-filename", str(path)] + (
            [] if layout.formatter else ["-l", str(layout.line_length), "--skip-string-normalization"]
        )
        for start, end in ranges:
            args.append(f"--line-ranges={start}-{end}")
        return _pipe([*args, "-"], text, path.parent)
    return None


def _formatter_accepts(text: str, layout: Layout, path: Path) -> bool:
    """Whether the project's configured formatter, installed here, leaves `text` (the file at `path`) as it
    is."""
    tool = _executable(layout.formatter) if layout.formatter else None
    if tool is None:
        return False
    check = [tool, "format", "--check"] if layout.formatter == "ruff" else [tool, "--check", "-q"]
    try:
        done = subprocess.run(
            [*check, "--stdin-filename", str(path), "-"],
            input=text,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=path.parent,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _pipe(args: list[str], text: str, cwd: Path) -> str | None:
    try:
        done = subprocess.run(args, input=text, capture_output=True, text=True, timeout=60, cwd=cwd)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 and done.stdout else None


def _ranges(lines: list[int]) -> list[tuple[int, int]]:
    ranges: list[tuple[int, int]] = []
    for number in sorted(lines):
        if ranges and number == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], number)
        else:
            ranges.append((number, number))
    return ranges


@dataclass(frozen=True)
class _Token:
    text: str
    start: int  # column in the line
    end: int
    kind: int


def _tokens(content: str) -> list[_Token] | None:
    """The tokens of a one-line statement, or None when it is not one complete logical line."""
    try:
        raw = list(tokenize.generate_tokens(io.StringIO(content + "\n").readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    found = []
    for tok in raw:
        if tok.type in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT):
            continue
        if tok.start[0] != 1 or tok.end[0] != 1:
            return None
        found.append(_Token(tok.string, tok.start[1], tok.end[1], tok.type))
    return found


def _pairs(tokens: list[_Token]) -> dict[int, int] | None:
    """Opening token index -> closing token index, or None when the brackets do not balance."""
    stack, pairs = [], {}
    for index, tok in enumerate(tokens):
        if tok.kind == tokenize.OP and tok.text in _OPEN:
            stack.append(index)
        elif tok.kind == tokenize.OP and tok.text in _CLOSE:
            if not stack:
                return None
            pairs[stack.pop()] = index
    return pairs if not stack else None


def wrap(line: str, limit: int, depth: int = 0) -> list[str] | None:
    """The lines black (and ruff's formatter) split `line` into, for the statements fixes write: split at the
    last bracket pair with a body, else put an assignment's value in parentheses; a body that is still too
    long is split at its commas (one element per line, trailing comma), else before `if`/`else`, else before
    `or`/`and`, else it is wrapped itself. None when `line` is not one complete statement."""
    indent = line[: len(line) - len(line.lstrip())]
    content = line[len(indent) :]
    tokens = _tokens(content)
    if not tokens or depth > 4:
        return None
    comment = ""
    if tokens[-1].kind == tokenize.COMMENT:
        comment = "  " + tokens[-1].text
        content = content[: tokens[-1].start].rstrip()
        tokens = tokens[:-1]
    pairs = _pairs(tokens)
    if pairs is None:
        return None
    inner = indent + "    "
    candidates = [
        _last_bracket(content, tokens, pairs),
        _rhs_parentheses(content, tokens, pairs),
        _header_parentheses(content, tokens),
    ]
    if _ternary_at_top(
        tokens
    ):  # black keeps `a if c else b` whole in parentheses rather than split an operand
        candidates = candidates[1:] + candidates[:1]
    for split in candidates:
        if split is None:
            continue
        head, body, tail = split
        if len(indent + head) > limit or len(indent + tail + comment) > limit:
            continue
        lines = _body_lines(body, inner, limit, depth)
        if lines is not None:
            return [indent + head, *lines, indent + tail + comment]
    return None


def _body_lines(body: str, inner: str, limit: int, depth: int) -> list[str] | None:
    if len(inner + body) <= limit:
        return [inner + body]
    tokens = _tokens(body)
    if tokens is None:
        return None
    for delimiters, keep_comma in (((",",), True), (("if", "else"), False), (("or", "and"), False)):
        parts = _split_at(body, tokens, delimiters, keep_comma)
        if parts is not None:
            lines = []
            for part in parts:
                line = inner + part
                lines.extend(_part_lines(part, inner, limit, depth) if len(line) > limit else [line])
            return lines
    return wrap(inner + body, limit, depth + 1)


def _part_lines(part: str, inner: str, limit: int, depth: int) -> list[str]:
    """A part of a split body that is still too long: wrapped itself (`else (a or b).type`); a keyword
    argument, which `key= (value,)` would make a tuple, split before its own `if`/`else` or `or`/`and` as
    black does (`map_location=f"..."` / `if ...` / `else "cpu",`); else as it is."""
    if not _keyword(part):
        return wrap(inner + part, limit, depth + 1) or [inner + part]
    tokens = _tokens(part)
    for delimiters in (("if", "else"), ("or", "and")):
        pieces = _split_at(part, tokens, delimiters, False) if tokens else None
        if pieces is not None:
            return [inner + piece for piece in pieces]
    return [inner + part]


def _keyword(part: str) -> bool:
    """Whether `part` (an argument) is `key=value`: an `=` outside every bracket."""
    return any(
        tok.kind == tokenize.OP and tok.text == "=" for _, tok in _outside_brackets(_tokens(part) or [])
    )


def _outside_brackets(tokens: list[_Token]):
    """(index, token) of each token outside every bracket pair (the brackets themselves excluded)."""
    depth = 0
    for index, tok in enumerate(tokens):
        if tok.kind == tokenize.OP and tok.text in _OPEN:
            depth += 1
        elif tok.kind == tokenize.OP and tok.text in _CLOSE:
            depth -= 1
        elif depth == 0:
            yield index, tok


def _split_at(body: str, tokens: list[_Token], delimiters: tuple[str, ...], comma: bool) -> list[str] | None:
    """`body` cut at its top-level `delimiters` (after each comma, before each operator), or None."""
    cuts = [tok.end if comma else tok.start for _, tok in _outside_brackets(tokens) if tok.text in delimiters]
    if not cuts:
        return None
    bounds = [0, *cuts, len(body)]
    parts = [body[a:b].strip() for a, b in pairwise(bounds)]
    parts = [p for p in parts if p]
    if comma:
        parts = [p if p.endswith(",") else p + "," for p in parts]
    return parts


def _last_bracket(content: str, tokens: list[_Token], pairs: dict[int, int]) -> tuple[str, str, str] | None:
    """(`head(`, body, `)tail`) at the last top-level bracket pair whose body is more than one token (black's
    right-hand split, omitting trailers such as `("cpu")` that are not worth a line of their own)."""
    nested = {i for o, c in pairs.items() for i in pairs if o < i < c}
    for open_index in sorted((i for i in pairs if i not in nested), key=lambda i: pairs[i], reverse=True):
        close_index = pairs[open_index]
        opening, closing = tokens[open_index], tokens[close_index]
        body = content[opening.end : closing.start].strip()
        if close_index == open_index + 1 or _trivial(body):
            continue
        return content[: opening.end], body, content[closing.start :]
    return None


def _trivial(body: str) -> bool:
    """A body black would not split out on its own line (a bare string or number)."""
    tokens = _tokens(body)
    return tokens is not None and len(tokens) <= 1


_HEADERS = ("if", "elif", "while", "return", "assert")


def _ternary_at_top(tokens: list[_Token]) -> bool:
    """Whether a conditional expression (`x if c else y`) stands outside every bracket, past a leading
    `if`."""
    return any(
        index > 0 and tok.kind == tokenize.NAME and tok.text == "else"
        for index, tok in _outside_brackets(tokens)
    )


def _header_parentheses(content: str, tokens: list[_Token]) -> tuple[str, str, str] | None:
    """(`if (`, condition, `):`) for `if`/`elif`/`while` headers, (`return (`, value, `)`) for `return`: the
    invisible parentheses black makes visible to split a long condition or value."""
    if not tokens or tokens[0].kind != tokenize.NAME or tokens[0].text not in _HEADERS or len(tokens) < 2:
        return None
    keyword = tokens[0].text
    colon = keyword in ("if", "elif", "while")
    if colon and tokens[-1].text != ":":
        return None
    end = tokens[-1].start if colon else len(content)
    body = content[tokens[0].end : end].strip()
    if not body:
        return None
    return f"{keyword} (", body, "):" if colon else ")"


def _rhs_parentheses(
    content: str, tokens: list[_Token], pairs: dict[int, int]
) -> tuple[str, str, str] | None:
    """(`target = (`, value, `)`) for `name = value` whose value is not one bracketed atom."""
    for index, tok in enumerate(tokens):
        if tok.kind == tokenize.OP and tok.text in _OPEN:
            return None  # a call, a subscript target: not a plain assignment
        if tok.kind == tokenize.OP and tok.text == "=":
            value = content[tok.end :].strip()
            first = index + 1
            if not value or (tokens[first].text in _OPEN and pairs.get(first) == len(tokens) - 1):
                return None
            return content[: tok.end] + " (", value, ")"
    return None
