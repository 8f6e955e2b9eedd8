"""The bundled example: every hand-labelled construct is found, no decoy is reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuron_migrate.migrate.rule import load_rules
from neuron_migrate.migrate.scanner import ScanOptions, scan
from tests.conftest import EXAMPLE

EXPECTED = json.loads((Path(__file__).parent / "expected_example.json").read_text())


@pytest.fixture(scope="module")
def result():
    return scan(ScanOptions(paths=(EXAMPLE,), root=EXAMPLE, jobs=1))


def test_labels_use_known_rule_codes():
    known = set(load_rules())
    labelled = {
        item["code"] for key in ("findings", "notebook_findings", "file_findings") for item in EXPECTED[key]
    }
    assert labelled <= known, sorted(labelled - known)


def test_every_labelled_construct_is_found(result):
    got = {(f.path, f.cell, f.line, f.code) for f in result.findings}
    want = {(i["path"], None, i["line"], i["code"]) for i in EXPECTED["findings"]}
    want |= {(i["path"], i["cell"], i["line"], i["code"]) for i in EXPECTED["notebook_findings"]}
    want |= {(i["path"], None, 1, i["code"]) for i in EXPECTED["file_findings"]}
    assert sorted(want - got, key=str) == []


def test_nothing_is_reported_beyond_the_labels(result):
    want = {(i["path"], None, i["line"], i["code"]) for i in EXPECTED["findings"]}
    want |= {(i["path"], i["cell"], i["line"], i["code"]) for i in EXPECTED["notebook_findings"]}
    want |= {(i["path"], None, 1, i["code"]) for i in EXPECTED["file_findings"]}
    extra = [
        f"{f.location} {f.code} {f.source}"
        for f in result.findings
        if (f.path, f.cell, f.line, f.code) not in want
    ]
    assert extra == []


def test_no_decoy_is_reported(result):
    decoys = {(d["path"], d["line"]) for d in EXPECTED["decoys"]}
    hits = [
        f"{f.location} {f.code}" for f in result.findings if f.cell is None and (f.path, f.line) in decoys
    ]
    assert hits == []


def test_example_scans_without_errors(result):
    assert result.errors == ()
