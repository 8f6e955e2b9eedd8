"""Error kinds: how a failure is classified, and that check and report show a stand-in limitation as such,
never as a neuron failure."""

from __future__ import annotations

import json

from neuron_migrate.model import Coverage, TraceResult, from_json, to_json
from neuron_migrate.opdb.tracer.verdicts import NEURON_PREFIX, STAND_IN_PREFIX, kind_of


def _failed(kind: str, error: str) -> TraceResult:
    return TraceResult(
        target="hf:mixtral",
        device="stand-in",
        phases=(),
        opdb_version="v",
        opdb_pre_release=False,
        ops=(),
        coverage=Coverage.of(()),
        error=error,
        error_kind=kind,
    )


def test_kind_of_reads_the_device_prefixes():
    assert kind_of(f"RuntimeError: {NEURON_PREFIX}aten::x (int32) runs through the CPU fallback") == "neuron"
    assert kind_of(f"NotImplementedError: {STAND_IN_PREFIX}the stand-in cannot hold UInt4") == "stand_in"
    assert kind_of("ValueError: boom in user code") == "target"


def test_error_kind_round_trips_and_old_files_read_as_none():
    result = _failed("stand_in", "x")
    assert from_json(to_json(result), TraceResult, "t").error_kind == "stand_in"
    older = json.loads(to_json(result))
    del older["error_kind"]  # a trace file written before the field existed
    assert from_json(json.dumps(older), TraceResult, "t").error_kind is None


def test_check_and_report_label_a_stand_in_limitation(run_cli, tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text(to_json(_failed("stand_in", f"{STAND_IN_PREFIX}no wider dtype computes it")))
    (tmp_path / "src").mkdir()
    proc = run_cli("check", "src", "--trace", str(trace))
    assert "stand-in limitation, not a neuron failure" in proc.stderr, proc.stderr
    assert "fails on neuron" not in proc.stderr
    html = tmp_path / "report.html"
    proc = run_cli("report", "src", "--trace", str(trace), "--format", "html", "--output", str(html))
    assert proc.returncode == 0, proc.stderr
    assert "stand-in limitation (not a neuron failure)" in html.read_text()


def test_trace_cli_says_a_stand_in_limitation_is_not_a_neuron_failure(run_cli):
    from tests.opdb.tracer.conftest import ROOT

    proc = run_cli("trace", "tests/opdb/tracer/fixtures/standin_gap.py", cwd=ROOT)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "stand-in limitation: the stand-in neuron device cannot hold UInt4" in proc.stderr
    assert "a limitation of the stand-in device, not of Trainium" in proc.stderr
