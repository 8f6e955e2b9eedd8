"""The gate as a pure function: thresholds, allow-lists, baseline matching and the ratchet."""

from __future__ import annotations

import pytest

from neuron_migrate.checks.baseline import Baseline, load_baseline, write_baseline
from neuron_migrate.checks.gate import evaluate
from neuron_migrate.checks.policy import Policy, parse_allowance, policy_from
from neuron_migrate.errors import ConfigError, InputFileError, UsageError
from neuron_migrate.model import CallSite, Finding, OpUse


def finding(code="NM401", path="a.py", line=3, source="torch.cuda.synchronize()", severity="error"):
    return Finding(code, severity, "runtime", path, line, 0, line, 5, "msg", source=source)


def op(name="aten::add.Tensor", status="native", count=10, dtype="float32"):
    return OpUse(name, (dtype,), count, "forward", (CallSite("m.py", 7),), status=status)


OPS = [op(count=90), op("aten::linalg_qr", "cpu_fallback", 5), op("aten::_fft_r2c", "unsupported", 5)]


def test_findings_fail_at_or_above_the_severity():
    assert not evaluate([finding()], [], Policy()).passed
    assert evaluate([finding(severity="info")], [], Policy()).passed
    assert not evaluate([finding(severity="info")], [], Policy(fail_on_severity="info")).passed
    assert evaluate([finding()], [], Policy(fail_on_severity=None)).passed


def test_fail_on_codes():
    policy = Policy(fail_on_codes=("NM1",))
    assert evaluate([finding("NM401")], [], policy).passed
    assert not evaluate([finding("NM103")], [], policy).passed


def test_default_policy_fails_on_unsupported_ops_only():
    verdict = evaluate([], OPS, Policy())
    assert [p.name for p in verdict.problems] == ["max-unsupported-ops"]
    assert evaluate([], OPS[:2], Policy()).passed


@pytest.mark.parametrize(
    ("policy", "fails"),
    [
        (Policy(min_op_coverage=0.95, max_unsupported_ops=None), True),  # 90 of 100 calls native
        (Policy(min_op_coverage=0.9, max_unsupported_ops=None), False),
        (Policy(min_op_coverage=0.5, coverage_by="ops", max_unsupported_ops=None), True),  # 1 of 3 ops native
        (Policy(max_fallback_ops=0, max_unsupported_ops=None), True),
        (Policy(max_fallback_ops=1, max_unsupported_ops=None), False),
        (Policy(max_unsupported_ops=1), False),
        (Policy(max_unknown_ops=0), True),
    ],
)
def test_each_threshold(policy, fails):
    ops = OPS + ([op("aten::mystery", "unknown", 0)] if policy.max_unknown_ops == 0 else [])
    assert evaluate([], ops, policy).passed is not fails


def test_allow_lists_by_op_dtype_rule_and_path():
    policy = Policy(allow=(parse_allowance("op", "aten::_fft_r2c:float32=FFT runs once"),))
    verdict = evaluate([], OPS, policy)
    assert verdict.passed and verdict.allowed == ("op aten::_fft_r2c:float32 — FFT runs once",)
    other_dtype = Policy(allow=(parse_allowance("op", "aten::_fft_r2c:bfloat16=only bf16"),))
    assert not evaluate([], OPS, other_dtype).passed
    base_name = Policy(allow=(parse_allowance("op", "_fft_r2c=any overload"),))
    assert evaluate([], OPS, base_name).passed
    assert evaluate([finding("NM410")], [], Policy(allow=(parse_allowance("rule", "NM4=perf flags"),))).passed
    assert evaluate(
        [finding(path="vendor/x.py")], [], Policy(allow=(parse_allowance("path", "vendor=3rd party"),))
    ).passed
    assert not evaluate(
        [finding(path="src/x.py")], [], Policy(allow=(parse_allowance("path", "vendor=x"),))
    ).passed


def test_allowance_needs_a_reason():
    with pytest.raises(UsageError, match="reason is required"):
        parse_allowance("op", "aten::linalg_qr")


def test_baseline_fails_only_on_new_and_survives_moves():
    old = [finding(line=3), finding("NM103", line=9, source="x.cuda()")]
    baseline = Baseline.of(old, OPS)
    moved = [finding(line=30), finding("NM103", line=1, source="x.cuda()")]
    assert evaluate(moved, OPS, Policy(max_unsupported_ops=None), baseline).passed
    added = [*moved, finding(line=40)]  # a second copy of an old line is new
    verdict = evaluate(added, OPS, Policy(max_unsupported_ops=None), baseline)
    assert [(p.kind, p.location) for p in verdict.problems] == [("finding", "a.py:40:1")]


def test_baseline_new_fallback_op_is_named_and_fixed_items_are_removable():
    baseline = Baseline.of(
        [finding(), finding("NM103", source="x.cuda()")], [op("aten::linalg_qr", "cpu_fallback")]
    )
    now = [finding()]
    verdict = evaluate(now, [op("aten::histc", "cpu_fallback"), op(count=3)], Policy(), baseline)
    assert [(p.kind, p.name) for p in verdict.problems] == [("op", "aten::histc")]
    assert verdict.removable == ("NM103 a.py: x.cuda()", "aten::linalg_qr (cpu_fallback)")


def test_baseline_file_round_trip_and_ratchet(tmp_path):
    path = tmp_path / "baseline.json"
    first = Baseline.of([finding(), finding()], OPS)
    write_baseline(path, first, allow_growth=False)
    assert load_baseline(path) == first
    smaller = Baseline.of([finding()], OPS[:2])
    write_baseline(path, smaller, allow_growth=False)  # shrinking is always allowed
    with pytest.raises(UsageError, match="only shrinks"):
        write_baseline(path, first, allow_growth=False)
    write_baseline(path, first, allow_growth=True)
    assert load_baseline(path) == first


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        '{"schema": "other"}',
        '{"schema": "neuron-migrate/baseline/1"}',
        '{"schema": "neuron-migrate/baseline/1", "findings": [{"code": 1}], "ops": []}',
    ],
)
def test_malformed_baseline_is_an_input_error(tmp_path, content):
    path = tmp_path / "b.json"
    path.write_text(content)
    with pytest.raises(InputFileError, match=r"b\.json"):
        load_baseline(path)


def test_policy_from_config_and_flags():
    policy = policy_from(
        {"min-op-coverage": 0.9, "allow": [{"rule": "NM8", "reason": "numerics reviewed"}]},
        {"min-op-coverage": 0.95, "fail-on-findings": "NM1,NM2"},
        "pyproject.toml",
    )
    assert policy.min_op_coverage == 0.95 and policy.fail_on_codes == ("NM1", "NM2")
    assert policy.allow[0].kind == "rule"
    with pytest.raises(ConfigError, match="unknown key"):
        policy_from({"max-fallbacks": 1}, {}, "pyproject.toml")
    with pytest.raises(ConfigError, match="needs exactly one"):
        policy_from({"allow": [{"op": "aten::x"}]}, {}, "pyproject.toml")
    with pytest.raises(UsageError, match="out of range"):
        policy_from({}, {"min-op-coverage": 1.5}, "pyproject.toml")
