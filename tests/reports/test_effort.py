"""The effort model: buckets, the learning-curve discount, fallback frequency, merging, levers, config."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from neuron_migrate.errors import ConfigError
from neuron_migrate.model import CallSite, OpUse
from neuron_migrate.reports.effort import (
    DEFAULT_REPEAT_FACTOR,
    DEFAULT_WEIGHTS,
    EffortSettings,
    build_effort,
    estimate_findings,
    estimate_ops,
    merge_ops,
    settings_from_config,
)
from tests.support.records import MODEL, example_trace, finding, line_of

DEFAULT = EffortSettings()


def weights(bucket):
    return DEFAULT_WEIGHTS[bucket][:3]


@pytest.mark.parametrize(
    ("code", "fixable", "bucket"),
    [
        ("NM101", "safe", "safe-fix"),
        ("NM410", "unsafe", "unsafe-fix"),
        ("NM601", "none", "no-equivalent"),
        ("NM701", "none", "cuda-library"),
        ("NM703", "none", "custom-kernel"),
        ("NM704", "none", "custom-kernel"),
        ("NM901", "none", "unanalysed-file"),
    ],
)
def test_each_finding_costs_its_bucket(code, fixable, bucket):
    [item] = estimate_findings([finding(code, fixable=fixable)], DEFAULT)
    assert (item.bucket, (item.low, item.likely, item.high)) == (bucket, weights(bucket))
    assert item.reason and "\n" not in item.reason


def test_a_fix_that_waits_for_cuda_code_it_is_tied_to_costs_a_review_not_a_rewrite_by_hand():
    """The bundled example's streams wait for its NVTX ranges: the ranges are the hand work (counted at their
    own findings); `fix` rewrites the streams once they are gone."""
    (item,) = estimate_findings([replace(finding("NM406", fixable="none"), tied=True)], DEFAULT)
    assert (item.bucket, (item.low, item.likely, item.high)) == ("tied-fix", weights("tied-fix"))
    assert "`fix` rewrites it once that is done" in item.reason


def test_repeats_of_a_rule_in_one_file_cost_the_repeat_factor():
    findings = [finding("NM401", line=n) for n in (30, 10, 20)] + [finding("NM401", path="other.py", line=5)]
    items = estimate_findings(findings, EffortSettings(repeat_factor=0.5))
    first, second, third, elsewhere = items[1], items[2], items[3], items[0]
    assert (first.line, first.occurrence, first.likely) == (10, 1, weights("safe-fix")[1])
    assert second.likely == third.likely == pytest.approx(0.5 * weights("safe-fix")[1], abs=1e-3)
    assert (second.occurrence, third.occurrence) == (2, 3) and "repeat #3 of NM401" in third.reason
    assert (elsewhere.path, elsewhere.occurrence, elsewhere.likely) == ("other.py", 1, weights("safe-fix")[1])


def test_library_reason_names_the_replacement_the_rule_recorded():
    """The finding's `replacement` field, not its wording: rewording NM701 cannot change the report."""
    library = replace(
        finding("NM701", fixable="none", message="reworded: no `use` clause"),
        replacement="`torch.nn.functional.sdpa`",
    )
    (item,) = estimate_findings([library], DEFAULT)
    assert item.reason == "CUDA-only library: move to `torch.nn.functional.sdpa`"


def test_an_extension_is_not_counted_twice_when_its_cu_source_is_seen():
    (alone,) = estimate_findings([finding("NM702", "setup.py", fixable="none")], DEFAULT)
    both = estimate_findings(
        [finding("NM702", "setup.py", fixable="none"), finding("NM703", "k.cu", fixable="none")], DEFAULT
    )
    assert alone.bucket == "custom-kernel"
    assert {i.code: i.bucket for i in both} == {"NM702": "no-equivalent", "NM703": "custom-kernel"}


@pytest.mark.parametrize("calls", [1, 10, 1000])
def test_cpu_fallback_cost_grows_with_log_calls(calls):
    use = OpUse("aten::x", ("float32",), calls, "forward", (CallSite(MODEL, 3, "f", calls),), "cpu_fallback")
    (item,) = estimate_ops((use,), DEFAULT)
    factor = 1 + math.log10(calls)
    assert item.likely == pytest.approx(weights("cpu-fallback")[1] * factor, abs=1e-3)
    assert f"{calls} call" in item.reason


def test_ops_items_fold_phases_and_skip_native_ops():
    items = estimate_ops(example_trace().ops, DEFAULT, snippet=lambda path, line: f"{path}:{line}")
    by_op = {i.code: i for i in items}
    assert "aten::addmm" not in by_op and len(items) == 5
    unknown = by_op["aten::_log_softmax"]
    assert (unknown.bucket, unknown.likely, unknown.source) == (
        "unknown-op",
        weights("unknown-op")[1],
        f"{MODEL}:{line_of('F.log_softmax(logits.double()')}",
    )
    assert by_op["aten::_scaled_dot_product_efficient_attention_backward"].bucket == "unsupported-op"
    no_site = by_op["aten::_foreach_add_.Scalar"]
    assert (no_site.path, no_site.source, no_site.calls) == ("", "", 1000)


def test_merging_traces_adds_counts_and_call_sites():
    trace = example_trace()
    merged = merge_ops([trace, trace])
    split = next(u for u in merged if u.op == "aten::split.Tensor")
    assert split.count == 48 and split.call_sites == (
        CallSite(MODEL, line_of(".split(C, dim=2)"), "forward", 48),
    )
    assert len(merged) == len(trace.ops)


def test_merging_keeps_the_worse_status():
    a = OpUse("aten::y", ("float32",), 1, "forward", (), "native")
    b = replace(a, status="unsupported")
    merged = merge_ops([replace(example_trace(), ops=(a,)), replace(example_trace(), ops=(b,))])
    assert [(u.status, u.count) for u in merged] == [("unsupported", 2)]


def test_totals_rankings_and_levers():
    findings = [finding("NM101", line=n) for n in range(1, 6)] + [finding("NM703", "k.cu", fixable="none")]
    effort = build_effort(tuple(findings), example_trace().ops, DEFAULT)
    assert effort.likely == pytest.approx(sum(i.likely for i in effort.items), abs=0.01)
    assert effort.low <= effort.likely <= effort.high
    assert effort.by_file[0].key == "k.cu"
    assert [t.likely for t in effort.by_op] == sorted((t.likely for t in effort.by_op), reverse=True)
    actions = [lever.action for lever in effort.unblocks]
    # the optimizer fallback is 1000 of the 1072 blocked calls: the biggest unblocker by far
    assert actions[0].startswith("Replace or get a kernel for `aten::_foreach_add_.Scalar`")
    # two non-native ops come from model.py:83: one rewrite of that line removes both
    line_lever = next(lv for lv in effort.unblocks if lv.action.startswith(f"Rewrite {MODEL}:83"))
    assert line_lever.removes_calls == 48
    assert any(
        lv.action.startswith("Apply the safe rewrites") and lv.removes_findings == 5 for lv in effort.unblocks
    )


def test_config_overrides_weights_and_marks_them():
    custom = settings_from_config({"safe-fix": [1, 2, 3], "repeat-factor": 1, "hours-per-day": 6})
    (item,) = estimate_findings([finding("NM101")], custom)
    assert (item.low, item.likely, item.high) == (1.0, 2.0, 3.0)
    table = {w.bucket: w for w in custom.table()}
    assert table["safe-fix"].overridden and not table["unsafe-fix"].overridden
    assert (custom.repeat_factor, custom.hours_per_day) == (1.0, 6.0)


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ({"safe-fixes": [1, 2, 3]}, "unknown key 'safe-fixes'"),
        ({"safe-fix": [1, 2]}, "[low, likely, high]"),
        ({"safe-fix": [3, 2, 1]}, "low <= likely <= high"),
        ({"safe-fix": [1, "2", 3]}, "[low, likely, high]"),
        ({"repeat-factor": 0}, "repeat-factor must be > 0"),
        ({"hours-per-day": True}, "hours-per-day must be a number"),
    ],
)
def test_bad_config_is_one_clear_line(raw, fragment):
    with pytest.raises(ConfigError) as err:
        settings_from_config(raw, "pyproject.toml: [tool.neuron-migrate.effort]")
    message = str(err.value)
    assert fragment in message and "\n" not in message and message.startswith("pyproject.toml")


@hsettings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["NM101", "NM410", "NM601", "NM701", "NM703"]),
            st.sampled_from(["a.py", "b.py"]),
            st.integers(1, 50),
        ),
        max_size=30,
    ),
    st.floats(0.05, 1.0),
)
def test_estimates_are_ordered_and_repeats_never_cost_more(entries, factor):
    fixable = {"NM101": "safe", "NM410": "unsafe"}
    findings = [finding(code, path, line, fixable.get(code, "none")) for code, path, line in entries]
    effort = build_effort(tuple(findings), (), EffortSettings(repeat_factor=factor))
    assert effort.low <= effort.likely <= effort.high
    for item in effort.items:
        assert item.low <= item.likely <= item.high
        full = DEFAULT_WEIGHTS[item.bucket][1]
        assert item.likely == pytest.approx(full if item.occurrence == 1 else full * factor, abs=1e-3)


def test_documented_table_matches_the_code():
    """docs/report.md prints the default table; it must be the one the code uses."""
    from tests.conftest import ROOT

    text = (ROOT / "docs" / "report.md").read_text()
    pattern = r"^\| `([a-z-]+)` \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|"
    rows = {m[0]: tuple(float(v) for v in m[1:]) for m in re.findall(pattern, text, flags=re.MULTILINE)}
    assert rows == {bucket: w[:3] for bucket, w in DEFAULT_WEIGHTS.items()}
    assert f"default **{DEFAULT_REPEAT_FACTOR:g}**" in text
