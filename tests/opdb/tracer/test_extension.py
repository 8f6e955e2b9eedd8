"""The C++ stand-in's build: sources shipped as package data, a cache keyed by their hash, and the pure-Python
fallback where no compiler exists (held by running a trace with no compiler and an empty cache)."""

from __future__ import annotations

import os

from neuron_migrate.opdb.tracer import extension
from neuron_migrate.opdb.tracer.runner import TraceOptions, run_trace, run_traces
from neuron_migrate.opdb.tracer.targets import TargetSpec
from tests.opdb.tracer.conftest import ROOT, run_python


def test_every_source_is_package_data():
    names = {p.name for p in extension.source_dir().iterdir()}
    assert set(extension.SOURCES) | set(extension.HEADERS) <= names
    assert not {n for n in names if n.endswith((".so", ".o"))}  # no build artefact next to the sources


def test_cache_dir_is_keyed_by_the_sources(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURON_MIGRATE_STANDIN_CACHE", str(tmp_path))
    assert extension.cache_dir() == tmp_path / extension.build_key()
    assert len(extension.build_key()) == 16


def test_no_compiler_falls_back_to_the_python_stand_in(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURON_MIGRATE_STANDIN_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    result = run_python("""
        import json
        from neuron_migrate.opdb.tracer import device
        kind = device.install()
        print(json.dumps({"kind": kind, "reason": device.fallback_reason()}))
    """)
    assert result["kind"] == "stand-in-python"
    assert "no-such-compiler" in result["reason"] and "C++ compiler" in result["reason"]
    # the whole trace path says which stand-in ran, and what only the pure-Python one cannot do is its
    # limitation
    traced, tolist = run_traces(
        [
            TargetSpec("function", "tests/opdb/tracer/fixtures/sites_model.py:build"),
            TargetSpec("function", "tests/opdb/tracer/fixtures/tolist_model.py:build"),
        ],
        TraceOptions(root=str(ROOT)),
    )
    assert traced.device == "stand-in-python" and traced.error is None and traced.ops
    assert tolist.error_kind == "stand_in" and "NeuronTensor" in tolist.error
    assert os.environ["CXX"].endswith("no-such-compiler")


def test_tolist_works_on_the_cpp_stand_in():
    result = run_trace(
        TargetSpec("function", "tests/opdb/tracer/fixtures/tolist_model.py:build"),
        TraceOptions(root=str(ROOT)),
    )
    assert result.device == "stand-in" and result.error is None
    assert any(
        u.op == "aten::_to_copy" and u.phase == "forward" for u in result.ops
    )  # .tolist() copies to host
