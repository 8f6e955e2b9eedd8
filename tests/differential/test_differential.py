"""Do no harm, checked by running: every fixable rule example and every corpus snippet, original and
rewritten.

- `test_safe_fix_keeps_cuda_behaviour`: the safe-tier rewrite makes the same device calls, with the same
  arguments, and gets the same results as the original under the CUDA emulation (two devices, rank 1 of 2).
- `test_rewrite_runs_on_cpu` / `test_rewrite_runs_on_standin_neuron`: the full rewrite (`--unsafe-fixes`)
  runs without error on plain CPU and on the stand-in `neuron` device.

KNOWN_FAILURES lists, per check, what fails today and why (strict xfails: each fix flips one to an unexpected
pass, and a case that fails differently from what is written here fails the test). A case the harness cannot
judge is skipped with its reason, and SKIPPED holds the list so that it cannot grow unnoticed.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.differential.cases import Results, all_cases
from tests.differential.compare import bound_names, difference


class KnownFailure(Exception):
    """A check failed exactly the way KNOWN_FAILURES says."""


@dataclass(frozen=True)
class Known:
    """Why a check fails today (`reason`) and a piece of its failure message that identifies it
    (`signature`)."""

    reason: str
    signature: str


def _each(checks: str, reason: str, signature: str) -> dict[str, Known]:
    return {check: Known(reason, signature) for check in checks.split()}


#: check id -> why it fails today. Ids: `<case>/cuda` (safe rewrite vs original under the CUDA emulation),
#: `<case>/cpu`, `<case>/neuron` (the full rewrite runs), `emitted/<call>` (test_emitted_apis.py).
#: "codemod NMxxx:" entries are for the codemod; "stand-in:" entries are limits of the Python stand-in device
#: (neuron_migrate/opdb/device.py), not of the rewrite.
KNOWN_FAILURES: dict[str, Known] = {
    **_each(
        "NM204-invalid-4/cuda",
        "stand-in: the tensor a function gets is a CPU tensor here (data starts on the host), so autocast is "
        "turned off for `x.device.type` == 'cpu'; on CUDA the data is on cuda and the call is the original's",
        "device call #1 differs",
    ),
    **_each(
        "corpus/operand_device/cuda",
        "by design: the kernel goes to the input's device, which the call names with its index (`cuda:0`) "
        "where `.to('cuda')` named the current device; `conv1d` only ran where the two were the same",
        "device call #2 differs",
    ),
    # --- full rewrites that fail on CPU where the original failed as well -----------------------------------
    **_each(
        "NM403-invalid-3/cpu NM403-invalid-3/neuron",
        "codemod NM403: `torch.cuda.mem_get_info()` is left for a person at the default target-torch 2.9 "
        "(`torch.accelerator.get_memory_info` is torch >= 2.13, and torch.neuron has no mem_get_info); it "
        "raises off CUDA as the original did",
        "Torch not compiled with CUDA enabled",
    ),
    **_each(
        "NM406-invalid-4/cpu",
        "codemod NM406: `done.record()` is not guarded: `done` is rebound in f, so the rule does not know it "
        "is an event, and CPU events cannot be recorded (the original's torch.cuda.Event failed on CPU too)",
        "cpu backend doesn't support events",
    ),
    **_each(
        "corpus/device_context/cpu",
        "by design: `torch.accelerator.current_device_index()` raises without an accelerator, as "
        "torch.cuda.current_device() did; the rewrite adds no CPU path the original did not have",
        "Cannot access accelerator device when none is available",
    ),
    **_each(
        "NM406-invalid-0/cpu NM406-invalid-6/cpu",
        "by design: `torch.accelerator.current_stream()` raises without an accelerator, as "
        "torch.cuda.current_stream() did (the device module's `current_stream()` ran on CPU but does not "
        "exist on MPS, and TorchNeuron documents `torch.accelerator`)",
        "Cannot access accelerator device when none is available",
    ),
    **_each(
        "corpus/pinned_loader/cpu corpus/stream_overlap/cpu",
        "by design: `.pin_memory()` is information (NM412: it works on neuron) and raises without an "
        "accelerator, as it did before the rewrite",
        "Cannot access accelerator device when none is available",
    ),
    **_each(
        "corpus/rng_state_checkpoint/cpu",
        "codemod NM405: `torch.cuda.get_rng_state()` became `torch.get_device_module().get_rng_state()`; "
        "torch.cpu has no get_rng_state (the original raised on CPU too: no CUDA)",
        "module 'torch.cpu' has no attribute 'get_rng_state'",
    ),
    **_each(
        "corpus/nvtx_ranges/cpu corpus/nvtx_ranges/neuron",
        "codemod NM408: `torch.cuda.nvtx.range_push/range_pop` are left for a person (there is no "
        "device-agnostic push/pop pair; only the range context manager and decorator are rewritten); off "
        "CUDA they raise as before",
        "NVTX functions not installed",
    ),
    # --- limits of the stand-in device, not of the rewrite --------------------------------------------------
    **_each(
        "NM101-invalid-3/neuron NM106-invalid-4/neuron",
        "stand-in: it has one neuron device and the harness runs as rank 1 of 2 (a Trn instance has many "
        "NeuronCores)",
        "neuron:1 does not exist",
    ),
    **_each(
        "NM301-invalid-0/neuron NM301-invalid-1/neuron NM301-invalid-2/neuron NM301-invalid-3/neuron "
        "NM301-invalid-4/neuron corpus/ddp_setup/neuron corpus/ddp_backend_from_args/neuron",
        "stand-in: it registers no c10d backend for `neuron`, so get_default_backend_for_device raises "
        "(torch-neuronx registers one: Backend.register_backend('neuron', ..., devices=['neuron']))",
        "Default backend not registered for device : neuron",
    ),
    **_each(
        "NM302-invalid-0/neuron NM302-invalid-1/neuron",
        "stand-in: it registers no c10d backend for `neuron`, so DDP on a neuron module finds none "
        "(torch-neuronx registers one)",
        "No backend type associated with device type neuron",
    ),
}

#: check id -> why the harness does not judge it, decided by hand (the other skips follow from the runs)
NOT_JUDGED: dict[str, str] = {
    **{
        f"NM301-invalid-{i}/cpu": "the example makes new_group([0, 1]): two ranks, and the CPU run is a "
        "one-process job"
        for i in (3, 4)
    },
    # the input stand-in is a host tensor: the original's `.to("cuda")` kernel meets it and raises, as it
    # would on CUDA with host data (corpus/operand_device has its input on the device)
    "NM101-invalid-8/cuda": "the example's input is on the device the kernel must join: the stand-in input "
    "is a CPU tensor",
}

#: check id -> why the harness cannot judge it (asserted by test_skipped_cases_are_the_known_ones; "the safe
#: tier changes nothing" skips are not listed: they follow from the rewrite, not from the harness)
SKIPPED: dict[str, str] = {
    **NOT_JUDGED,
    "NM109-invalid-0/cuda": "the CUDA emulation does not cover: setup(): TypeError: type "
    "torch.cuda.FloatTensor not available. Torch not compiled with CUDA enabled.",
    "NM109-invalid-1/cuda": "the CUDA emulation does not cover: line 3: buf = HalfTensor(4, 8): TypeError: "
    "type torch.cuda.HalfTensor not available. Torch not compiled with CUDA enabled.",
    **{
        f"NM201-invalid-4/{check}": "the example itself is not runnable: step(): NameError: name 'torch' "
        "is not defined"
        for check in ("cuda", "cpu", "neuron")
    },
}

#: rule example -> what of it the harness cannot exercise, although the rest runs (asserted by
#: test_fragments_are_exercised: a stand-in that stops fitting an example shows up there)
NOT_EXERCISED: dict[str, str] = {
    "NM406-invalid-4": "f: no stand-in for done (its body also needs a `queue`)",
}

CASES = all_cases()
pytestmark = pytest.mark.xdist_group("differential")


def _params(check: str) -> list:
    params = []
    for case in CASES:
        known = KNOWN_FAILURES.get(f"{case.id}/{check}")
        marks = [pytest.mark.xfail(strict=True, raises=KnownFailure, reason=known.reason)] if known else []
        params.append(pytest.param(case.id, marks=marks, id=case.id))
    return params


def _fail(check_id: str, message: str) -> None:
    known = KNOWN_FAILURES.get(check_id)
    if known and known.signature in message:
        raise KnownFailure(f"{known.reason}\n{message}")
    pytest.fail(message, pytrace=False)


def _require_harness(*runs) -> None:
    """A job the harness itself could not finish (a hang, a crash) fails the check: it says nothing."""
    for run in runs:
        if run.error and run.error.startswith("harness failure"):
            pytest.fail(run.error, pytrace=False)


def _skip_reason(results: Results, case_id: str, check: str) -> str | None:
    """Why the harness cannot judge this check, or None. An example whose own names are undefined cannot be
    judged anywhere; an original the emulation does not cover cannot be compared on CUDA (its rewrite can
    still be run on CPU and neuron)."""
    if f"{case_id}/{check}" in NOT_JUDGED:
        return NOT_JUDGED[f"{case_id}/{check}"]
    original = results.outcome("cuda", case_id, "original")
    if original.missing:
        return f"the example itself is not runnable: {original.missing}"
    if original.gap and check == "cuda":
        return f"the CUDA emulation does not cover: {original.gap}"
    return None


@pytest.mark.parametrize("case_id", _params("cuda"))
def test_safe_fix_keeps_cuda_behaviour(results, case_id):
    reason = _skip_reason(results, case_id, "cuda")
    if reason:
        pytest.skip(reason)
    if results.safe[case_id] == results.cases[case_id].source:
        pytest.skip("the safe tier changes nothing here (its fixes are unsafe or absent)")
    original, rewritten = (
        results.outcome("cuda", case_id, "original"),
        results.outcome("cuda", case_id, "safe"),
    )
    _require_harness(original, rewritten)
    source = results.cases[case_id].source
    binds = frozenset(bound_names(results.safe[case_id]) - bound_names(source))
    found = difference(original, rewritten, binds)
    if found:
        _fail(f"{case_id}/cuda", f"{found}\n--- safe rewrite ---\n{results.safe[case_id]}")


def _check_runs(results: Results, case_id: str, env: str) -> None:
    reason = _skip_reason(results, case_id, env)
    if reason:
        pytest.skip(reason)
    run = results.outcome(env, case_id, "full")
    _require_harness(run)
    if run.error:
        _fail(
            f"{case_id}/{env}", f"{run.error} ({run.error_at})\n--- full rewrite ---\n{results.full[case_id]}"
        )


@pytest.mark.parametrize("case_id", _params("cpu"))
def test_rewrite_runs_on_cpu(results, case_id):
    _check_runs(results, case_id, "cpu")


@pytest.mark.parametrize("case_id", _params("neuron"))
def test_rewrite_runs_on_standin_neuron(results, case_id):
    _check_runs(results, case_id, "neuron")


def test_skipped_cases_are_the_known_ones(results):
    skipped = {
        f"{case.id}/{check}": reason
        for case in CASES
        for check in ("cuda", "cpu", "neuron")
        if (reason := _skip_reason(results, case.id, check))
    }
    print(
        "\nskipped by the differential harness:\n"
        + "\n".join(f"  {k}: {v}" for k, v in sorted(skipped.items()))
    )
    assert skipped == SKIPPED


def test_fragments_are_exercised(results):
    """The original of every judged rule example runs its module code and each of its functions to the end."""
    partial = {}
    for case in CASES:
        if not case.fragment or _skip_reason(results, case.id, "cuda"):
            continue
        original = results.outcome("cuda", case.id, "original")
        parts = original.not_called + [
            f"{name} {value}" for name, value in original.values.items() if value.startswith("raised ")
        ]
        if parts:
            partial[case.id] = "; ".join(parts)
    assert set(partial) == set(NOT_EXERCISED), partial
    assert all(partial[key].startswith(NOT_EXERCISED[key].split(" (")[0]) for key in partial), partial


def test_known_failures_name_existing_checks():
    ids = {f"{case.id}/{check}" for case in CASES for check in ("cuda", "cpu", "neuron")}
    named = {key for key in KNOWN_FAILURES if not key.startswith("emitted/")} | set(SKIPPED)
    assert named <= ids, sorted(named - ids)
    assert not set(KNOWN_FAILURES) & set(SKIPPED), "a skipped check cannot also be a known failure"
