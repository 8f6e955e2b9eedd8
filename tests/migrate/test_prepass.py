"""The pre-pass (`prepass.py`, `lexicon.py`) only ever drops rules that cannot report: the fast path finds
exactly what the full libcst path finds. `benchmarks/scan_differential.py` checks the same over torch and
transformers."""

from __future__ import annotations

import time
from dataclasses import asdict

import pytest

from neuron_migrate.migrate import scanner
from neuron_migrate.migrate.fixes import FixStyle
from neuron_migrate.migrate.lexicon import lexicon
from neuron_migrate.migrate.prepass import candidates
from neuron_migrate.migrate.rule import load_rules
from neuron_migrate.migrate.scanner import scan_file, scan_text
from neuron_migrate.migrate.sources import SourceText

from .helpers import EXAMPLE_LAYOUT

RULES = load_rules()
CODES = tuple(code for code, rule in RULES.items() if not rule.file_level)
EXAMPLES = [(code, i, ex.code) for code, rule in RULES.items() for i, ex in enumerate(rule.INVALID)]
SOURCES = EXAMPLES + [(code, i, src) for code, rule in RULES.items() for i, src in enumerate(rule.VALID)]


@pytest.mark.parametrize(
    ("code", "index", "source"), EXAMPLES, ids=[f"{c}-invalid-{i}" for c, i, _ in EXAMPLES]
)
def test_a_rule_is_kept_for_every_example_it_flags(code, index, source):
    assert code in candidates(source, CODES)


def _findings(function, source: str) -> list[dict]:
    style = FixStyle(EXAMPLE_LAYOUT)
    return [asdict(f) for f in function("example.py", SourceText(source), CODES, style)]


@pytest.mark.parametrize(("code", "index", "source"), SOURCES, ids=[f"{c}-{i}" for c, i, _ in SOURCES])
def test_fast_path_finds_what_the_full_path_finds(code, index, source):
    """All rules at once, so a rule dropped from a file cannot change what the others report there."""
    assert _findings(scan_file, source) == _findings(scan_text, source)


def test_words_in_comments_docstrings_and_messages_cost_no_libcst_parse(monkeypatch):
    source = (
        '"""Trains on cuda; see torch.cuda.synchronize."""\n'
        "# x = x.cuda()  torch.cuda.amp.autocast()\n"
        "print('move the model with .cuda() first')\n"
    )
    assert candidates(source, CODES) == ()
    monkeypatch.setattr(scanner.cst, "parse_module", lambda text: pytest.fail("libcst parsed the file"))
    assert scan_file("example.py", SourceText(source), CODES) == []


def test_code_the_rules_read_keeps_them():
    kept = candidates("import torch\nx = torch.ones(2, device='cuda:0')\ntorch.cuda.synchronize()\n", CODES)
    assert {"NM101", "NM401"} <= set(kept)


def test_a_prepass_failure_falls_back_to_the_full_analysis(monkeypatch):
    source = "import torch\ntorch.cuda.synchronize()\n"
    monkeypatch.setattr(scanner, "candidates", lambda text, codes: 1 / 0)
    assert [f.code for f in scan_file("example.py", SourceText(source), CODES)] == ["NM401"]


def test_code_ast_cannot_parse_gets_the_full_analysis():
    source = "type Alias = list[int]\ntorch.cuda.synchronize()\n"  # 3.12 syntax, which libcst reads
    assert _findings(scan_file, source) == _findings(scan_text, source)


def test_lexicon_reads_code_not_comments_and_every_string_value():
    lex = lexicon('a = "cu" "da"  # comment_word\nb = f"cuda:{rank}"\nc = r"x\\n"\nimport os.path as p\n')
    assert "comment_word" not in lex.names and {"a", "b", "rank", "os", "p"} <= lex.names
    assert {"cuda", "cu", "da", "cuda:{rank}", "cuda:", "x\\n"} <= lex.strings
    assert {"os", "path", "p"} <= lex.imported


def test_lexicon_of_a_comment_banner_after_a_docstring_is_linear():
    """A `####` line right after a literal once made the regular expression backtrack exponentially
    (22 of them took 2.4 s)."""
    source = 'def f():\n    """Doc."""\n    ' + "#" * 22 + "\n    return 1\n"
    start = time.perf_counter()
    lexicon(source)
    assert time.perf_counter() - start < 0.5
