"""Every rule's own VALID and INVALID examples, as tests (the same examples generate docs/rules.md)."""

from __future__ import annotations

import libcst as cst
import pytest

from neuron_migrate.migrate.rule import DOC_SECTIONS, load_rules

from .helpers import findings, fixed

RULES = load_rules()
VALID = [(code, i, src) for code, rule in RULES.items() for i, src in enumerate(rule.VALID)]
INVALID = [(code, i, ex) for code, rule in RULES.items() for i, ex in enumerate(rule.INVALID)]


@pytest.mark.parametrize(("code", "index", "source"), VALID, ids=[f"{c}-valid-{i}" for c, i, _ in VALID])
def test_valid_example_is_not_flagged(code, index, source):
    assert [f.location for f in findings(source, (code,))] == []


@pytest.mark.parametrize(
    ("code", "index", "example"), INVALID, ids=[f"{c}-invalid-{i}" for c, i, _ in INVALID]
)
def test_invalid_example_is_flagged_and_fixed(code, index, example):
    got = findings(example.code, (code,))
    assert len(got) == example.count, [f"{f.location} {f.message}" for f in got]
    assert all(f.code == code for f in got)
    rule = RULES[code]
    after = fixed(example.code, (code,), unsafe=True)
    if example.fixed is None:
        assert after == example.code, "rule fixed an example that declares no fix"
        return
    assert after == example.fixed
    cst.parse_module(after)
    assert fixed(after, (code,), unsafe=True) == after, "fix is not idempotent"
    assert rule.fix_safety != "none"


@pytest.mark.parametrize("code", list(RULES))
def test_rule_is_documented_and_has_examples(code):
    rule = RULES[code]
    assert rule.name and rule.message and rule.__doc__
    assert list(rule.doc_sections()) == list(DOC_SECTIONS), f"{code} docstring sections"
    if not rule.file_level:
        assert rule.VALID and rule.INVALID, f"{code} needs VALID and INVALID examples"
        has_fix = any(ex.fixed is not None for ex in rule.INVALID)
        assert has_fix == (rule.fix_safety != "none"), f"{code}: fix_safety and examples disagree"


@pytest.mark.parametrize(
    ("code", "index", "example"), INVALID, ids=[f"{c}-invalid-{i}" for c, i, _ in INVALID]
)
def test_prefilter_never_skips_a_flagged_example(code, index, example):
    """A rule's byte triggers let through every example it flags (too narrow a trigger would hide
    findings)."""
    from neuron_migrate.migrate.scanner import _triggered

    assert _triggered(RULES[code], example.code.encode()), f"{code}'s triggers {RULES[code].triggers} skip it"
