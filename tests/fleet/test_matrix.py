"""Verdicts, the matrix, the op ranking, the unlock order and the shares, on synthetic records (no torch)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from neuron_migrate.fleet.enumerate import Architecture
from neuron_migrate.fleet.matrix import arch_result, build_result, greedy_unlock, rank_ops
from neuron_migrate.fleet.render import render
from tests.fleet.records import failed, traced, use


@pytest.mark.parametrize(
    ("record", "verdict"),
    [
        (traced("a", [use("aten::mm", "native"), use("aten::add.Tensor", "native")]), "native"),
        (traced("b", [use("aten::mm", "native"), use("aten::softmax.int", "cpu_fallback")]), "fallbacks"),
        (traced("c", [use("aten::mm", "native"), use("aten::weird", "unknown")]), "fallbacks"),
        (traced("d", [use("aten::histc", "unsupported"), use("aten::softmax.int", "cpu_fallback")]),
         "fails_on_neuron"),
        (failed("e", "build", "ValueError"), "fails_to_build"),
        (failed("f", "start", "Timeout", outcome="timeout"), "fails_to_build"),
        (failed("g", "step", cpu_checked=True, cpu_error=None), "fails_on_neuron"),
        (failed("h", "step", cpu_checked=True, cpu_error="IndexError: list index out of range"), "fails_to_build"),
        (failed("i", "step", "Timeout", outcome="timeout"), "fails_on_neuron"),
        (failed("j", "cpu-check", "Timeout", outcome="timeout"), "fails_on_neuron"),
    ],
)
def test_verdicts(record, verdict):
    assert arch_result(record, inference=True).verdict == verdict


def test_matrix_row_takes_worst_status_and_sums_calls_over_dtypes_and_phases():
    record = traced("a", [use("aten::mm", "native", 3), use("aten::mm", "cpu_fallback", 2, "backward", "bfloat16"),
                          use("aten::add.Tensor", "native", 1)])
    cell = arch_result(record, inference=False).ops["aten::mm"]
    assert (cell.status, cell.calls, cell.dtypes, cell.phases) == (
        "cpu_fallback", 5, ("bfloat16", "float32"), ("backward", "forward"))


def _archs(*records):
    return [arch_result(r, inference=True) for r in records]


def test_ranking_counts_blocked_and_slowed_architectures_and_sole_blockers():
    archs = _archs(
        traced("a", [use("aten::x", "cpu_fallback")]),
        traced("b", [use("aten::x", "cpu_fallback"), use("aten::y", "unsupported")]),
        traced("c", [use("aten::y", "unsupported"), use("aten::z", "cpu_fallback")]),
        traced("d", [use("aten::mm", "native")]),
        failed("e", "build"),
    )
    ranks = {r.op: r for r in rank_ops(archs)}
    assert set(ranks) == {"aten::x", "aten::y", "aten::z"}  # native ops are not ranked
    assert (ranks["aten::y"].blocks, ranks["aten::y"].slows, ranks["aten::y"].architectures) == (2, 0, ("b", "c"))
    assert (ranks["aten::x"].blocks, ranks["aten::x"].slows, ranks["aten::x"].sole) == (0, 2, 1)
    assert next(r.op for r in rank_ops(archs)) == "aten::y"  # blocking ranks before slowing


def test_greedy_unlock_makes_the_most_architectures_native_first():
    missing = {"a": {"x"}, "b": {"x"}, "c": {"y"}, "d": {"y", "z"}, "e": {"z", "w"}}
    order = greedy_unlock(missing, limit=10)
    assert order["x"] == (1, 2, 2)
    assert order["y"] == (2, 1, 3)
    # after x and y, d needs only z; e needs z and w
    assert order["z"][1] == 1 and order["w"][2] == 5
    assert greedy_unlock(missing, limit=1) == {"x": (1, 2, 2)}


def _run(records, archs=None):
    archs = archs or [Architecture(r["model_type"], r["task"], r["architecture"]) for r in records]
    return SimpleNamespace(versions={"torch": "t", "transformers": "tf", "torch-neuronx": None,
                                     "neuron-migrate": "nm"}, opdb_version="snap", opdb_pre_release=True,
                           architectures=archs, records={r["model_type"]: r for r in records}, traced=len(records),
                           from_cache=0)


def test_summary_shares_follow_the_documented_definition():
    records = [traced("a", [use("aten::mm", "native")]), traced("b", [use("aten::x", "cpu_fallback")]),
               traced("c", [use("aten::y", "unsupported")]), failed("d", "build")]
    result = build_result(_run(records), "causal-lm", True, "neuron")
    s = result.summary
    assert s.counts == {"native": 1, "fallbacks": 1, "fails_on_neuron": 1, "fails_to_build": 1}
    assert (s.native_share, s.runs_share, s.buildable) == (0.25, 0.5, 3)
    assert s.native_share_of_buildable == pytest.approx(1 / 3)
    assert s.native_if_all_unlocked == 3
    assert "share = native / all 4 architectures" in s.definition and "forward" in s.definition
    assert [a.model_type for a in result.architectures] == ["a", "b", "c", "d"]


def test_renderers_escape_html_and_carry_every_architecture():
    hostile = failed("evil", "build", "ValueError", line="<script>alert(1)</script> | pipe")
    records = [traced("a", [use("aten::x", "cpu_fallback")]), hostile]
    result = build_result(_run(records), "causal-lm", False, "neuron")
    html = render(result, "html")
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "http://" not in html and "https://" not in html and "<link" not in html  # self-contained
    md = render(result, "md")
    assert "\\| pipe" in md and "`evil`" in md and "`aten::x`" in md
    data = json.loads(render(result, "json"))
    assert data["schema"] == "neuron-migrate/fleet/1"
    assert data["architectures"][0]["ops"]["aten::x"]["status"] == "cpu_fallback"
    assert data["ranking"][0]["op"] == "aten::x" and data["summary"]["counts"]["fails_to_build"] == 1


def test_reproduce_command_carries_fleet_overrides_and_mode():
    record = traced("codegen", [use("aten::mm", "native")], hf_config={"rotary_dim": 8})
    assert arch_result(record, inference=True).reproduce == (
        "neuron-migrate trace --hf codegen --hf-config rotary_dim=8 --inference")


def test_an_op_the_step_failed_in_counts_as_blocking_only_when_cpu_runs():
    on_neuron = failed("moe", "step", "NotImplementedError", cpu_checked=True, cpu_error=None)
    on_neuron.update(error_op="aten::histc", error_dtypes=["int32"])
    everywhere = failed("bad", "step", cpu_checked=True, cpu_error="IndexError: x")
    everywhere.update(error_op="aten::index.Tensor", error_dtypes=["float32"])
    archs = _archs(on_neuron, everywhere, traced("a", [use("aten::x", "cpu_fallback")]))
    ranks = {r.op: r for r in rank_ops(archs)}
    assert set(ranks) == {"aten::histc", "aten::x"}  # a harness failure names no device op
    assert (ranks["aten::histc"].fails, ranks["aten::histc"].blocks, ranks["aten::histc"].architectures) == (
        1, 0, ("moe",))
    assert ranks["aten::histc"].unlock_step is None  # its trace stopped: no claim it would become native
    assert next(iter(ranks)) == "aten::histc"
