"""The pre-pass: of the rules a file's bytes trigger, which can report anything in it, decided before libcst.

The byte triggers (`Rule.triggers`) are deliberately loose: `accelerator`, `cuda`, `autocast` occur in
comments, docstrings, log messages and in code no rule flags, and most files that pass them have no
finding at all, yet each costs a libcst parse (about ten times `ast.parse`) and a walk. So each rule states
a *necessary condition* on what the file's code spells (`lexicon.py`): its `can_report`, such as the
identifiers a qualified name needs (every component of `torch.cuda.synchronize` is an identifier somewhere
in a file that uses it, in the chain or in the import that bound its head), the string values a
device-string rule needs (`"cuda"`, `"cuda:0"`, `f"cuda:{i}"`), the modules an import must name. A rule
whose condition fails cannot report, so it is left out of the file's analysis, and a file left with no rule
is not parsed by libcst at all.

The conditions live on the rules, next to the tables they read (NAMES, the rules' module constants), so a
new name in a table is covered at once; `conditions.py` holds the tests they are built from. A rule whose
logic changes must review its own condition: a rule that states none is always analysed, and
`benchmarks/scan.py --differential` compares this path with the full one.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

from neuron_migrate.migrate.lexicon import lexicon
from neuron_migrate.migrate.rule import Rule, load_rules


def candidates(text: str, codes: Iterable[str]) -> tuple[str, ...]:
    """The rules among `codes` that can report something in Python source `text`."""
    lex = lexicon(text)
    rules = _rules()
    return tuple(code for code in codes if code not in rules or rules[code].can_report(lex))


@lru_cache(maxsize=1)
def _rules() -> dict[str, type[Rule]]:
    """The registry, loaded once: importing every rule module per file would cost more than the pre-pass."""
    return load_rules()
