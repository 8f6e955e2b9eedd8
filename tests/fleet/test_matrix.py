"""Verdicts, the matrix, the op ranking, the unlock order, the shares, merging and rendering, on synthetic
records (no torch)."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from neuron_migrate.errors import InputFileError
from neuron_migrate.fleet.enumerate import Architecture
from neuron_migrate.fleet.matrix import arch_result, build_result, greedy_unlock, rank_ops
from neuron_migrate.fleet.merge import merge
from neuron_migrate.reports.fleet import render
from tests.fleet.records import failed, traced, use


def _moe(**extra):
    """transformers' MoE routing: histc on int32 raised on the stand-in; it steps on CPU."""
    record = failed(
        "moe",
        "step",
        "NotImplementedError",
        line="\"histogram_cpu\" not implemented for 'Int'",
        cpu_checked=True,
    )
    record.update(error_op="aten::histc", error_dtypes=["int32"], **extra)
    return record


@pytest.mark.parametrize(
    ("record", "verdict"),
    [
        (traced("a", [use("aten::mm", "native"), use("aten::add.Tensor", "native")]), "native"),
        (traced("b", [use("aten::mm", "native"), use("aten::softmax.int", "cpu_fallback")]), "fallbacks"),
        (traced("c", [use("aten::mm", "native"), use("aten::weird", "unknown")]), "fallbacks"),
        (
            traced("d", [use("aten::histc", "unsupported"), use("aten::softmax.int", "cpu_fallback")]),
            "fails_on_neuron",
        ),
        (failed("e", "build", "ValueError"), "does_not_build"),
        (failed("f", "start", "Timeout", outcome="timeout"), "does_not_build"),
        (
            failed("h", "step", cpu_checked=True, cpu_error="IndexError: list index out of range"),
            "does_not_build",
        ),
        # library code rejecting the device, outside any op, while CPU steps: what a Trainium user sees
        (failed("g", "step", cpu_checked=True, cpu_error=None), "fails_on_neuron"),
        # the stand-in timed out / crashed where CPU steps: the stand-in's problem, not TorchNeuron's
        (failed("i", "step", "Timeout", outcome="timeout", cpu_checked=True), "stand_in_limitation"),
        (failed("j", "cpu-check", "Timeout", outcome="timeout"), "does_not_build"),
        (failed("l", "step", "Timeout", outcome="timeout"), "does_not_build"),  # killed before any CPU check
        (_moe(error_status="native"), "stand_in_limitation"),
        # a fallback op runs this very CPU kernel on TorchNeuron: its dtype gap is real there
        (_moe(error_status="cpu_fallback"), "fails_on_neuron"),
        (_moe(error_status="unsupported"), "fails_on_neuron"),
        (_moe(), "stand_in_limitation"),  # no opdb status recorded: the CPU kernel's dtype gap says enough
        # the stand-in's own word (issue 11) wins over the evidence
        (_moe(error_status="native", error_kind="neuron"), "fails_on_neuron"),
        (failed("k", "step", cpu_checked=True) | {"error_kind": "stand_in"}, "stand_in_limitation"),
        (
            failed(
                "m",
                "step",
                line=".tolist() is not supported for tensor subclasses, got NeuronTensor",
                cpu_checked=True,
            ),
            "stand_in_limitation",
        ),
    ],
)
def test_verdicts(record, verdict):
    assert arch_result(record, "inference").verdict == verdict


def test_a_real_device_failure_is_a_neuron_failure():
    record = failed("g", "step", "RuntimeError", cpu_checked=True, outcome="crash")
    assert arch_result(record, "train", "torch-neuronx").verdict == "fails_on_neuron"


def test_reasons_name_the_op_dtype_and_missing_package():
    blocked = arch_result(traced("d", [use("aten::histc", "unsupported", dtype="int64")]))
    assert blocked.reason == "unsupported on neuron: aten::histc (int64)"
    stand_in = arch_result(_moe(error_status="native"))
    assert "`aten::histc` (int32)" in stand_in.reason and "opdb calls native" in stand_in.reason
    timm = failed(
        "gemma3n", "build", "ImportError", line="`pip install timm`. Please note that you may need ..."
    )
    result = arch_result(timm)
    assert result.verdict == "does_not_build"
    assert result.reason.startswith("needs the optional package `timm`, not installed here")
    mixed = arch_result(traced("x", [use("aten::floor", "cpu_fallback"), use("aten::mul.Tensor", "unknown")]))
    assert mixed.reason == (
        "1 op(s) run on CPU: aten::floor; "
        "1 op(s) the opdb knows nothing of (check on a device): aten::mul.Tensor"
    )


def test_matrix_row_takes_worst_status_and_sums_calls_over_dtypes_and_phases():
    record = traced(
        "a",
        [
            use("aten::mm", "native", 3),
            use("aten::mm", "cpu_fallback", 2, "backward", "bfloat16"),
            use("aten::add.Tensor", "native", 1),
        ],
    )
    cell = arch_result(record, "train").ops["aten::mm"]
    assert (cell.status, cell.calls, cell.dtypes, cell.phases) == (
        "cpu_fallback",
        5,
        ("bfloat16", "float32"),
        ("backward", "forward"),
    )


def _archs(*records):
    return [arch_result(r, "inference") for r in records]


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
    assert (ranks["aten::y"].blocks, ranks["aten::y"].slows, ranks["aten::y"].architectures) == (
        2,
        0,
        ("b", "c"),
    )
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


def _run(records, modes=("inference",), shard=None, selection=None):
    archs = [Architecture(r["model_type"], r["task"], r["architecture"]) for r in records]
    keyed = {(r["model_type"], mode): r for r in records for mode in modes}
    return SimpleNamespace(
        versions={"torch": "t", "transformers": "tf", "torch-neuronx": None, "neuron-migrate": "nm"},
        opdb_version="snap",
        opdb_pre_release=True,
        architectures=archs,
        records=keyed,
        traced=len(keyed),
        from_cache=0,
        selection=tuple(selection or [r["model_type"] for r in records]),
        shard=shard,
        ran_on="stand-in",
    )


def test_summary_shares_follow_the_documented_definition():
    records = [
        traced("a", [use("aten::mm", "native")]),
        traced("b", [use("aten::x", "cpu_fallback")]),
        traced("c", [use("aten::y", "unsupported")]),
        _moe(error_status="native"),
        failed("d", "build"),
    ]
    result = build_result(_run(records), "causal-lm", ("inference",), "neuron")
    s = result.summary
    assert s.counts == {
        "native": 1,
        "fallbacks": 1,
        "fails_on_neuron": 1,
        "stand_in_limitation": 1,
        "does_not_build": 1,
    }
    assert (s.runs, s.runs_share, s.native_share, s.buildable) == (2, 0.4, 0.2, 4)
    assert (s.runs_share_of_buildable, s.native_share_of_buildable) == (0.5, 0.25)
    assert s.native_if_all_unlocked == 3
    assert (
        "over all 5 architectures and over the 4 that build here" in s.definition
        and "forward" in s.definition
    )
    assert [a.model_type for a in result.architectures] == ["a", "b", "c", "moe", "d"]


def test_both_modes_are_summarised_side_by_side():
    records = [traced("a", [use("aten::mm", "native")]), failed("d", "build")]
    result = build_result(
        _run(records, ("train", "inference")), "causal-lm", ("train", "inference"), "neuron"
    )
    assert set(result.summaries) == {"train", "inference"}
    assert [(a.model_type, a.mode) for a in result.architectures] == [
        ("a", "train"),
        ("a", "inference"),
        ("d", "train"),
        ("d", "inference"),
    ]
    md = render(result, "md")
    assert (
        "| | train | inference |" in md
        and "| **runs** on neuron (of all 2) | **1 (50.0%)** | **1 (50.0%)** |" in md
    )


def test_renderers_escape_html_and_markdown_and_carry_every_architecture():
    hostile = failed("evil<b>", "build", "ValueError", line="<script>alert(1)</script> | pipe")
    records = [traced("a", [use("aten::x<y>", "cpu_fallback")]), hostile]
    result = build_result(_run(records, ("train",)), "causal-lm", ("train",), "neuron")
    html = render(result, "html")
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "evil<b>" not in html and "evil&lt;b&gt;" in html
    assert "http://" not in html and "https://" not in html and "<link" not in html  # self-contained
    md = render(result, "md")
    assert "<script>" not in md and "&lt;script&gt;" in md and "\\| pipe" in md
    assert "`evil<b>`" in md and "`aten::x<y>`" in md  # inside code spans Markdown shows text verbatim
    assert "| `evil<b>` | evil&lt;b&gt;LM |" in md  # outside them < and > are escaped
    data = json.loads(render(result, "json"))
    assert data["schema"] == "neuron-migrate/fleet/2"
    assert data["architectures"][0]["ops"]["aten::x<y>"]["status"] == "cpu_fallback"
    assert data["rankings"]["train"][0]["op"] == "aten::x<y>"
    assert data["summaries"]["train"]["counts"]["does_not_build"] == 1


def test_markdown_escapes_every_name_a_record_brings():
    """Device names come from the trace records (a merged shard's fleet.json can hold anything): outside code
    spans no `<` or `>` may reach the Markdown."""
    record = traced("a<i>", [use("aten::x<y>", "cpu_fallback")])
    record["trace"]["device"] = "<img src=x>"
    md = render(build_result(_run([record], ("train",)), "causal-lm", ("train",), "neuron"), "md")
    outside_code = re.sub(r"(`+).*?\1", "", md)
    assert "&lt;img src=x&gt;" in md
    assert "<" not in outside_code and not re.search(r"[^\n]>", outside_code.replace("&gt;", ""))


def test_reproduce_command_carries_fleet_overrides_and_mode():
    record = traced("codegen", [use("aten::mm", "native")], hf_config={"rotary_dim": 8})
    assert arch_result(record, "inference").reproduce == (
        "neuron-migrate trace --hf codegen --hf-config rotary_dim=8 --inference"
    )


def test_only_a_neuron_failure_inside_an_op_blocks_it():
    on_neuron = _moe(error_status="unsupported")
    stand_in = _moe(error_status="native") | {"model_type": "moe2", "key": "moe2"}
    everywhere = failed("bad", "step", cpu_checked=True, cpu_error="IndexError: x")
    everywhere.update(error_op="aten::index.Tensor", error_dtypes=["float32"])
    archs = _archs(on_neuron, stand_in, everywhere, traced("a", [use("aten::x", "cpu_fallback")]))
    ranks = {r.op: r for r in rank_ops(archs)}
    assert set(ranks) == {"aten::histc", "aten::x"}  # a harness failure names no device op
    assert (ranks["aten::histc"].fails, ranks["aten::histc"].architectures) == (1, ("moe",))
    assert ranks["aten::histc"].unlock_step is None  # its trace stopped: no claim it would become native


def _shard_files(tmp_path, records, count):
    selection = [r["model_type"] for r in records]
    paths = []
    for index in range(1, count + 1):
        part = records[index - 1 :: count]
        result = build_result(
            _run(part, shard=f"{index}/{count}", selection=selection), "causal-lm", ("inference",), "neuron"
        )
        paths.append(tmp_path / f"shard{index}.json")
        paths[-1].write_text(render(result, "json"))
    return paths


def _stable(text: str) -> dict:
    data = json.loads(text)
    for key in ("generated", "traced", "from_cache", "shard"):
        data.pop(key)
    return data


def test_merged_shards_equal_the_whole_run(tmp_path):
    records = [
        traced("a", [use("aten::x", "cpu_fallback")]),
        traced("b", [use("aten::y", "unsupported")]),
        traced("c", [use("aten::mm", "native")]),
        _moe(error_status="native"),
        failed("d", "build"),
    ]
    whole = render(build_result(_run(records), "causal-lm", ("inference",), "neuron"), "json")
    paths = _shard_files(tmp_path, records, 3)
    assert _stable(render(merge(list(reversed(paths))), "json")) == _stable(whole)


def test_merge_refuses_missing_repeated_or_foreign_shards(tmp_path):
    records = [traced("a", [use("aten::x", "cpu_fallback")]), traced("b", [use("aten::mm", "native")])]
    one, two = _shard_files(tmp_path, records, 2)
    with pytest.raises(
        InputFileError, match=r"1 architecture\(s\) have no result \(b\): shard\(s\) 2/2 missing"
    ):
        merge([one])
    with pytest.raises(InputFileError, match="shard 1/2 is also in"):
        merge([one, one])
    other = json.loads(two.read_text())
    other["opdb_version"] = "another"
    two.write_text(json.dumps(other))
    with pytest.raises(InputFileError, match="its opdb_version differs"):
        merge([one, two])
    (tmp_path / "junk.json").write_text("{")
    with pytest.raises(InputFileError, match="not valid JSON"):
        merge([tmp_path / "junk.json"])
