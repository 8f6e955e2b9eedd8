"""End-to-end traces in child processes: prediction vs observation, fake vs stand-in, sites, phases,
failures."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from neuron_migrate.errors import TargetError, UsageError
from neuron_migrate.model import Coverage, TraceResult, from_json
from neuron_migrate.opdb.tracer.runner import TraceOptions, run_trace, run_traces
from neuron_migrate.opdb.tracer.targets import TargetSpec
from tests.opdb.tracer.conftest import FIXTURES, ROOT, marker_line

HF_MODELS = ("llama", "gpt2", "qwen2", "mistral", "gemma", "t5")
EXAMPLE = "examples/cuda_project/trace_target.py:build"
SITES = "tests/opdb/tracer/fixtures/sites_model.py"

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def stand_in():
    """Every HF model, the bundled example (path and module forms) and the sites fixture, in ONE child."""
    specs = [TargetSpec("hf", m) for m in HF_MODELS] + [
        TargetSpec("function", EXAMPLE),
        TargetSpec("function", "examples.cuda_project.trace_target:build"),
        TargetSpec("function", f"{SITES}:build"),
        TargetSpec("function", f"{SITES}:build_dict"),
        TargetSpec("function", f"{SITES}:not_a_model"),
        TargetSpec("function", f"{SITES}:missing"),
        TargetSpec("hf", "no_such_model_type"),
    ]
    results = run_traces(specs, TraceOptions(root=str(ROOT)))
    return {spec.ref: result for spec, result in zip(specs, results, strict=True)}


@pytest.fixture(scope="module")
def fake():
    specs = [
        TargetSpec("hf", "llama"),
        TargetSpec("function", EXAMPLE),
        TargetSpec("function", f"{SITES}:build_data_dependent"),
    ]
    results = run_traces(specs, TraceOptions(root=str(ROOT), fake=True))
    return {spec.ref: result for spec, result in zip(specs, results, strict=True)}


def _observed_native(result: TraceResult) -> dict[str, bool]:
    return {use.op: use.observed == "native" for use in result.ops}


@pytest.mark.parametrize("ref", [*HF_MODELS, EXAMPLE])
def test_opdb_prediction_equals_what_the_stand_in_observed(stand_in, ref):
    result = stand_in[ref]
    assert result.error is None and result.device == "stand-in"
    assert result.phases == ("forward", "backward", "optimizer")
    assert {use.phase for use in result.ops} == {"forward", "backward", "optimizer"}
    predicted: dict[str, bool] = {}
    for use in result.ops:  # an op is native only if it is native for every dtype it ran with
        predicted[use.op] = predicted.get(use.op, True) and use.status == "native"
    assert all(use.observed is not None for use in result.ops), "the device never saw an op the recorder saw"
    assert predicted == _observed_native(result)
    assert set(result.observed_fallbacks) == {op for op, native in predicted.items() if not native}
    assert result.coverage == Coverage.of(result.ops)


def test_path_and_module_forms_trace_the_same_ops(stand_in):
    by_path = [(u.op, u.dtypes, u.phase, u.count) for u in stand_in[EXAMPLE].ops]
    by_module = [
        (u.op, u.dtypes, u.phase, u.count) for u in stand_in["examples.cuda_project.trace_target:build"].ops
    ]
    assert by_path == by_module and by_path


def test_sdpa_in_the_example_runs_the_math_path(stand_in):
    ops = {use.op for use in stand_in[EXAMPLE].ops}
    assert "aten::bmm" in ops
    assert not any("flash" in op or "scaled_dot_product" in op for op in ops)


def test_call_sites_name_the_user_line_and_backward_maps_to_forward(stand_in):
    result = stand_in[f"{SITES}:build"]
    path = SITES
    line = {m: marker_line(FIXTURES / "sites_model.py", m) for m in ("linear", "tanh", "cumsum", "loss")}

    def sites(op, phase):
        return {(s.path, s.line) for u in result.ops if u.op == op and u.phase == phase for s in u.call_sites}

    assert sites("aten::addmm", "forward") == {(path, line["linear"])}
    assert sites("aten::tanh", "forward") == {(path, line["tanh"])}
    assert sites("aten::tanh_backward", "backward") == {(path, line["tanh"])}
    assert sites("aten::cumsum", "forward") == {(path, line["cumsum"])}
    assert (path, line["linear"]) in sites("aten::mm", "backward")
    assert sites("aten::pow.Tensor_Scalar", "forward") == {(path, line["loss"])}
    optimizer_ops = {u.op for u in result.ops if u.phase == "optimizer"}
    assert any(op.startswith("aten::_foreach_") for op in optimizer_ops)  # AdamW picks foreach on neuron


def test_dict_protocol_with_device_parameter(stand_in):
    result = stand_in[f"{SITES}:build_dict"]
    assert result.error is None and any(u.op == "aten::addmm" for u in result.ops)


def test_bad_function_targets_fail_alone(stand_in):
    assert (
        "not a torch.nn.Module" in stand_in[f"{SITES}:not_a_model"].error
        or "returned int" in stand_in[f"{SITES}:not_a_model"].error
    )
    assert "has no function 'missing'" in stand_in[f"{SITES}:missing"].error
    assert "has no such model_type" in stand_in["no_such_model_type"].error
    assert {stand_in[k].error_kind for k in (f"{SITES}:missing", "no_such_model_type")} == {"target"}
    assert stand_in["llama"].error is None  # the others in the same child were unaffected


@pytest.mark.parametrize("ref", ["llama", EXAMPLE])
def test_fake_gives_the_same_op_list_as_the_stand_in(stand_in, fake, ref):
    assert fake[ref].device == "fake" and fake[ref].error is None
    ours = [(u.op, u.dtypes, u.phase, u.count, u.status) for u in stand_in[ref].ops]
    theirs = [(u.op, u.dtypes, u.phase, u.count, u.status) for u in fake[ref].ops]
    assert ours == theirs
    assert all(u.observed is None for u in fake[ref].ops)  # nothing executes under FakeTensorMode


def test_fake_notes_data_dependent_ops_instead_of_crashing(fake):
    result = fake[f"{SITES}:build_data_dependent"]
    assert result.error is None
    line = marker_line(FIXTURES / "sites_model.py", "nonzero")
    assert any("aten::nonzero" in note and f"sites_model.py:{line}" in note for note in result.notes)
    assert any(u.op == "aten::cumsum" for u in result.ops)  # the trace went on past it


def test_inference_with_a_custom_opdb_lists_unsupported_ops(tmp_path):
    from neuron_migrate.opdb.db import dump_snapshot, load_snapshot, snapshot_from_dict, snapshot_to_dict

    data = snapshot_to_dict(load_snapshot())
    data["version"] = "test-unsupported"
    data["ops"]["aten::tanh"] = {"status": "unsupported", "note": "made up for the test", "dtypes": {}}
    path = tmp_path / "opdb.json"
    dump_snapshot(snapshot_from_dict(data, "test"), path)
    result = run_trace(
        TargetSpec("function", f"{SITES}:build"), TraceOptions(root=str(ROOT), inference=True, opdb=str(path))
    )
    assert result.phases == ("forward",) and {u.phase for u in result.ops} == {"forward"}
    assert result.opdb_version == "test-unsupported"
    (tanh,) = [u for u in result.ops if u.op == "aten::tanh"]
    assert (tanh.status, tanh.observed, tanh.note) == ("unsupported", "unsupported", "made up for the test")
    assert any("aten::tanh" in note and "stops" in note for note in result.notes)
    assert any(u.op == "aten::cumsum" for u in result.ops)  # listed, not stopped at


def test_real_torch_neuronx_is_preferred_and_its_tracking_api_used():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FIXTURES / "fake_neuronx"), str(ROOT)])}
    proc = subprocess.run(
        [sys.executable, "-m", "neuron_migrate", "trace", f"{SITES}:build", "--format", "json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    result = from_json(proc.stdout, TraceResult, "stdout")
    assert result.device == "torch-neuronx"
    assert all(u.observed == ("native" if u.status == "native" else "cpu_fallback") for u in result.ops)


def test_agnostic_script_runs_on_neuron_with_phases_from_hooks():
    spec = TargetSpec("script", "tests/opdb/tracer/fixtures/agnostic_train.py", ("--steps", "2"))
    result = run_trace(spec, TraceOptions(root=str(ROOT)))
    assert result.phases == ("forward", "backward", "optimizer")
    relu = [u for u in result.ops if u.op == "aten::relu"]
    assert relu and relu[0].count == 2  # two steps
    assert all(
        s.path == "tests/opdb/tracer/fixtures/agnostic_train.py" for u in result.ops for s in u.call_sites
    )
    assert not any(u.op == "aten::randn" for u in result.ops)  # host-side data prep is not a device op


def test_cuda_script_points_at_fix():
    spec = TargetSpec("script", "tests/opdb/tracer/fixtures/cuda_train.py")
    with pytest.raises(TargetError, match=r"cuda_train.py:3: the code asks for CUDA .* `neuron-migrate fix "):
        run_trace(spec, TraceOptions(root=str(ROOT)))


def test_crash_in_user_code_is_one_line():
    with pytest.raises(TargetError) as err:
        run_trace(TargetSpec("script", "tests/opdb/tracer/fixtures/crash.py"), TraceOptions(root=str(ROOT)))
    assert "ValueError: boom in user code" in str(err.value) and "crash.py:2" in str(err.value)
    assert "\n" not in str(err.value)
    assert err.value.kind == "target"  # the user's code failed, not the device


def test_timeout_kills_the_child():
    start = time.monotonic()
    with pytest.raises(TargetError, match=r"sleepy.py: timed out after 5 s \(raise --timeout") as err:
        run_trace(
            TargetSpec("script", "tests/opdb/tracer/fixtures/sleepy.py"),
            TraceOptions(root=str(ROOT), timeout=5),
        )
    assert err.value.kind == "timeout"
    assert time.monotonic() - start < 60  # the script sleeps 120 s: it was killed, not waited for


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS semantics")
def test_memory_limit_is_reported_as_out_of_memory():
    with pytest.raises(
        TargetError, match=r"ran out of memory \(limit --max-memory 1500 MB\) at .*hog.py:3"
    ) as err:
        run_trace(
            TargetSpec("script", "tests/opdb/tracer/fixtures/hog.py"),
            TraceOptions(root=str(ROOT), max_memory_mb=1500),
        )
    assert err.value.kind == "memory"


def test_bad_options_are_usage_errors():
    with pytest.raises(UsageError, match="--device"):
        TraceOptions(device="cuda").check()
    with pytest.raises(UsageError, match="--timeout"):
        TraceOptions(timeout=0).check()


def test_cli_text_summary_and_json_output(run_cli, tmp_path):
    out = tmp_path / "trace.json"
    proc = run_cli("trace", f"{SITES}:build", "--top", "3", "--output", str(out), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    result = from_json(out.read_text(), TraceResult, str(out))
    assert result.target == f"{SITES}:build" and result.ops and not proc.stdout
    assert "coverage" in proc.stderr and "stand-in" in proc.stderr and result.opdb_version in proc.stderr
    assert ("PRE-RELEASE" in proc.stderr) == result.opdb_pre_release
    worst = max((u for u in result.ops if u.status != "native"), key=lambda u: u.count, default=None)
    if worst is not None:
        assert worst.op in proc.stderr


def test_cli_errors_exit_2(run_cli):
    proc = run_cli("trace", "tests/opdb/tracer/fixtures/cuda_train.py", cwd=ROOT)
    assert proc.returncode == 2 and "neuron-migrate fix" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli("trace", "--hf", "llama", "--hf-config", "oops", cwd=ROOT)
    assert proc.returncode == 2 and "KEY=VALUE" in proc.stderr
