"""The building blocks of the rules' pre-pass conditions (`Rule.can_report`): tests on a file's `Lexicon`.

A condition is necessary, never sufficient: it may keep a rule for a file in which the rule reports nothing,
never drop one for a file in which it reports. So every test here errs towards True: a qualified name
counts as used when all its identifiers occur in the code and a chain spells it from a head an import (or
nothing) binds, a regular expression over the text may match in comments and strings too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from neuron_migrate.migrate.lexicon import STRING_LITERAL, Lexicon

Condition = Callable[[Lexicon], bool]

#: what may stand between two tokens of one expression: blanks, line continuations, comments (a comment
#: runs to its line's end: were it allowed to stop earlier, a `####` line would split in exponentially many
#: ways)
BETWEEN = r"(?:\s|\\|#[^\r\n]*(?![^\r\n]))*"
#: what `is_cuda_string` accepts, as a value: 'cuda', 'cuda:1', the text 'cuda:' of f"cuda:{i}" and of
#: "cuda:" + str(i), "cuda:{}".format(i), "cuda:%d" % i
_CUDA_STRING = re.compile(r"^cuda(?::\d*|:\{\w*\}|:%[di])?$")
#: an `import a, b as c` statement's list of modules (continuation lines joined)
_IMPORT_LIST = re.compile(r"\bimport\s+((?:[^\r\n;#\\]|\\\r?\n)+)")


def spelled(qualified: Iterable[str]) -> tuple[frozenset[str], ...]:
    """Per qualified name (`torch.cuda.*` for a namespace), the identifiers a reference to it spells."""
    return tuple(frozenset(part for part in name.split(".") if part != "*") for name in qualified)


def uses(*tables: Iterable[str]) -> Condition:
    """The test that the code may reference one of the qualified names in `tables` (`references`). Build it
    once (at import), not per file."""
    names = tuple(name for table in tables for name in table)
    needed = tuple(zip(spelled(names), names, strict=True))
    return lambda lex: any(parts <= lex.names and references(lex, name) for parts, name in needed)


def references(lex: Lexicon, qualified: str) -> bool:
    """Whether the code may reference `qualified` (`a.b.c`, or `a.b.*`: anything below `a.b`) as qualified
    names are resolved (`names.py`): a chain whose head an import binds to a prefix of the name and which
    spells the rest (`tc.synchronize` after `import torch.cuda as tc`), the name an import binds to it
    (`from torch.cuda import synchronize`), or the chain spelled from its own head (`torch.cuda.synchronize`,
    whatever binds `torch`). Call it after the cheaper test that every component is an identifier."""
    namespace = qualified.endswith(".*")
    name = qualified[:-2] if namespace else qualified
    head = name.split(".")[0]
    for local, target in (*lex.import_targets, (head, head)):
        if target == name or (namespace and target.startswith(name + ".")):
            return True
        if name.startswith(target + ".") and f"{local}.{name[len(target) + 1 :]}" in lex.chains:
            return True
    return False


def cuda_string(lex: Lexicon) -> bool:
    """Whether the code has a string value a device-string check reads as CUDA (`"cuda"`, `f"cuda:{i}"`)."""
    return any(value.startswith("cuda") and _CUDA_STRING.match(value) for value in lex.strings)


def any_string(lex: Lexicon, test: Callable[[str], bool]) -> bool:
    """Whether one of the code's string values passes `test`."""
    return any(test(value) for value in lex.strings)


def module_aliases(text: str, module: str) -> set[str]:
    """The names `import` statements in `text` bind to `module` or one of its submodules (`import numpy as
    np`, `import os, numpy`, `import numpy.random as npr`)."""
    spelling = re.compile(rf"{re.escape(module)}(?:\s*\.\s*\w+)*(?:\s+as\s+(\w+))?")
    aliases = set()
    for modules in _IMPORT_LIST.findall(text):
        for name in modules.replace("\\", " ").split(","):
            found = spelling.fullmatch(name.strip())
            if found:
                aliases.add(found.group(1) or module)
    return aliases


def call_arguments(text: str, start: int) -> str | None:
    """The code between the `(` that ends at `start` and its closing parenthesis, each string literal in it
    written `""` and its comments left out (neither a parenthesis nor a `dtype=` in them counts), or None
    when that is not certain: no closing parenthesis within 2,000 characters, or a string that does not
    end."""
    depth = 1
    index = start
    code: list[str] = []
    end = min(len(text), start + 2000)
    while index < end:
        char = text[index]
        if char in "\"'":
            literal = STRING_LITERAL.match(text, index)
            if literal is None:
                return None
            code.append('""')
            index = literal.end()
            continue
        if char == "#":
            index = text.find("\n", index)
            if index < 0:
                return None
            continue
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return "".join(code)
        code.append(char)
        index += 1
    return None
