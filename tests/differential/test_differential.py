"""Do no harm, checked by running: every fixable rule example and every corpus snippet, original and rewritten.

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
from tests.differential.compare import difference


class KnownFailure(Exception):
    """A check failed exactly the way KNOWN_FAILURES says."""


@dataclass(frozen=True)
class Known:
    """Why a check fails today (`reason`) and a piece of its failure message that identifies it (`signature`)."""

    reason: str
    signature: str


def _each(checks: str, reason: str, signature: str) -> dict[str, Known]:
    return {check: Known(reason, signature) for check in checks.split()}


#: check id -> why it fails today. Ids: `<case>/cuda` (safe rewrite vs original under the CUDA emulation),
#: `<case>/cpu`, `<case>/neuron` (the full rewrite runs), `emitted/<call>` (test_emitted_apis.py).
#: "codemod NMxxx:" entries are for the codemod; "stand-in:" entries are limits of the Python stand-in device (neuron_migrate/opdb/device.py), not of the rewrite.
KNOWN_FAILURES: dict[str, Known] = {
    # --- safe fixes that change what happens on CUDA -----------------------------------------------------
    **_each("NM105-invalid-1/cuda",
            "codemod NM105: `not args.device.startswith('cuda:')` became `torch.device(args.device).type == 'cpu'`; "
            "with args.device == 'cuda' the original synchronizes and the rewrite does not",
            "original:  synchronize(cuda)"),
    **_each("corpus/timing_synchronize/cuda corpus/timing_synchronize/neuron",
            "codemod NM401: `torch.cuda.synchronize(device=device)` became `torch.accelerator.synchronize(device=...)`, "
            "whose parameter is positional-only in torch 2.13 (TypeError on every accelerator)",
            "positional-only arguments passed as keyword"),
    **_each("corpus/device_arg_index/cuda corpus/device_arg_index/neuron",
            "codemod NM106 (with NM105): `if args.device.startswith('cuda:'): torch.cuda.set_device(args.device)` "
            "became an accelerator guard around `set_device_index(args.device)`, which raises ValueError for a "
            "device without an index ('cuda', 'neuron')",
            "Expected a torch.device with a specified index"),
    **_each("NM408-invalid-0/cuda NM408-invalid-1/cuda corpus/nvtx_ranges/cuda",
            "codemod NM408: NVTX ranges became torch.profiler.record_function, which emits no NVTX range outside "
            "emit_nvtx(): the ranges vanish from Nsight timelines on CUDA (make it unsafe, or keep NVTX on CUDA)",
            "nvtx.range_push"),
    **_each("NM411-invalid-0/cuda NM411-invalid-2/cuda corpus/capability_tf32/cuda",
            "codemod NM411: `torch.backends.cuda.matmul.allow_tf32 = True` became "
            "`torch.set_float32_matmul_precision('high')`, which also switches CPU (oneDNN) fp32 matmuls to TF32; "
            "the original changed CUDA matmuls only",
            "mkldnn.matmul.fp32_precision"),
    **_each("corpus/timing_events/cuda corpus/timing_events/cpu corpus/timing_events/neuron",
            "codemod NM406: the elapsed_time guard puts `float(\"nan\")` inside a double-quoted f-string: a "
            "SyntaxError before Python 3.12 (the project supports 3.10+)",
            "f-string: unmatched"),
    # --- full rewrites that still fail on CPU ------------------------------------------------------------
    **_each("NM102-invalid-3/cpu",
            "codemod NM102: `torch.device('cuda', rank)` became `torch.device(<accelerator or cpu>.type, rank)`, "
            "i.e. `cpu:0` on CPU, which torch.load(map_location=...) rejects",
            "tagged with cpu:0"),
    **_each("NM106-invalid-4/cpu corpus/device_context/cpu",
            "codemod NM106: `with torch.accelerator.device_index(i):` raises without an accelerator and is not "
            "guarded (device_index(None) is the no-op form)",
            "Cannot access accelerator device when none is available"),
    **_each("NM403-invalid-3/cpu",
            "codemod NM403: `torch.accelerator.get_memory_info()` raises without an accelerator and is not guarded",
            "Cannot access accelerator device when none is available"),
    **_each("NM406-invalid-0/cpu NM406-invalid-6/cpu corpus/stream_overlap/cpu",
            "codemod NM406: `torch.accelerator.current_stream(...)` raises without an accelerator and is not guarded",
            "Cannot access accelerator device when none is available"),
    **_each("NM406-invalid-4/cpu",
            "codemod NM406: `done.record()` on a torch.Event stays unguarded (the name is rebound in f, so the rule "
            "does not treat it as an event) and CPU events cannot be recorded",
            "cpu backend doesn't support events"),
    **_each("corpus/rng_state_checkpoint/cpu",
            "codemod NM405: `torch.cuda.get_rng_state()` became `torch.get_device_module(dev).get_rng_state()`; "
            "torch.cpu has no get_rng_state",
            "module 'torch.cpu' has no attribute 'get_rng_state'"),
    **_each("corpus/nvtx_ranges/cpu corpus/nvtx_ranges/neuron",
            "codemod NM408: `torch.cuda.nvtx.range_push/range_pop` calls are left (only the range context manager "
            "and decorator are rewritten); off CUDA they raise 'NVTX functions not installed'",
            "NVTX functions not installed"),
    # --- full rewrites that fail on neuron because of the codemod ----------------------------------------
    **_each("corpus/capability_tf32/neuron corpus/device_properties/neuron",
            "codemod NM106/NM107: the availability guard (and device_count) around a CUDA-only capability call "
            "became torch.accelerator while get_device_capability / get_device_properties stayed torch.cuda: on "
            "neuron the CUDA call is reached (a guard whose body keeps CUDA-only calls must stay a CUDA guard)",
            "Torch not compiled with CUDA enabled"),
    **_each("corpus/ddp_backend_from_args/neuron",
            "codemod NM301: NCCL through an argparse default and a variable (`backend = args.dist_backend`) is not "
            "seen, so init_process_group still asks for NCCL",
            "doesn't have NCCL built in"),
    **_each("corpus/lightning_config/neuron",
            "codemod NM106/NM101: the is_available() that picks Lightning's 'gpu' became torch.accelerator, and "
            "Fabric(accelerator='cuda') became a torch device type; Lightning's names are not torch devices (it "
            "has no neuron accelerator): leave them and report them for a person",
            "CUDAAccelerator can not run"),
    # --- limits of the stand-in neuron device ------------------------------------------------------------
    **_each("NM101-invalid-4/neuron NM102-invalid-3/neuron corpus/checkpoint_loading/neuron",
            "stand-in: torch.load(map_location=<neuron>) needs torch.neuron.device, which the stand-in's device "
            "module lacks", "'NeuronModule' object has no attribute 'device'"),
    **_each("NM301-invalid-0/neuron NM301-invalid-1/neuron NM301-invalid-2/neuron NM301-invalid-3/neuron "
            "corpus/ddp_setup/neuron",
            "stand-in: no distributed backend is registered for neuron (torch-neuronx registers one), so "
            "get_default_backend_for_device('neuron') raises", "Default backend not registered for device : neuron"),
    **_each("NM401-invalid-0/neuron NM401-invalid-3/neuron",
            "stand-in: torch.accelerator.synchronize is not supported", "doesn't support synchronizing"),
    **_each("NM402-invalid-1/neuron NM403-invalid-0/neuron NM403-invalid-1/neuron NM403-invalid-2/neuron "
            "NM403-invalid-3/neuron corpus/memory_logging/neuron corpus/multi_gpu_report/neuron "
            "corpus/oom_retry/neuron",
            "stand-in: empty_cache and memory stats need a DeviceAllocator, which Python cannot register",
            "is not a DeviceAllocator"),
    **_each("NM406-invalid-3/neuron", "stand-in: Event.elapsed_time is not supported", "doesn't support elapsedTime"),
    **_each("NM412-invalid-1/neuron corpus/pinned_loader/neuron corpus/stream_overlap/neuron",
            "stand-in: pinning memory for PrivateUse1 needs getPinnedMemoryAllocator, which Python cannot provide",
            "getPinnedMemoryAllocator"),
    **_each("corpus/device_idiom/neuron", "stand-in: Tensor.tolist() is not supported on NeuronTensor",
            ".tolist() is not supported for tensor subclasses"),
    # --- emitted APIs that torch 2.13 rejects (test_emitted_apis.py) ---------------------------------------
    **_each("emitted/torch.accelerator.synchronize(device=)",
            "codemod NM401: keyword to the positional-only parameter of torch.accelerator.synchronize",
            "positional only"),
    **_each("emitted/corpus/timing_events/safe emitted/corpus/timing_events/full",
            "codemod NM406: `float(\"nan\")` inside a double-quoted f-string (Python < 3.12 cannot parse it)",
            "does not parse"),
}

#: check id -> why the harness does not judge it, decided by hand (the other skips follow from the runs)
NOT_JUDGED: dict[str, str] = {
    "NM301-invalid-3/cpu": "the example makes new_group([0, 1]): two ranks, and the CPU run is a one-process job",
}

#: check id -> why the harness cannot judge it (asserted by test_skipped_cases_are_the_known_ones; "the safe
#: tier changes nothing" skips are not listed: they follow from the rewrite, not from the harness)
SKIPPED: dict[str, str] = {
    **NOT_JUDGED,
    "NM109-invalid-0/cuda": "the CUDA emulation does not cover: setup(): TypeError: type torch.cuda.FloatTensor not "
                            "available. Torch not compiled with CUDA enabled.",
    "NM109-invalid-1/cuda": "the CUDA emulation does not cover: line 3: buf = HalfTensor(4, 8): TypeError: type "
                            "torch.cuda.HalfTensor not available. Torch not compiled with CUDA enabled.",
    **{f"NM201-invalid-4/{check}": "the example itself is not runnable: step(): NameError: name 'torch' is not defined"
       for check in ("cuda", "cpu", "neuron")},
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
    original, rewritten = results.outcome("cuda", case_id, "original"), results.outcome("cuda", case_id, "safe")
    _require_harness(original, rewritten)
    found = difference(original, rewritten)
    if found:
        _fail(f"{case_id}/cuda", f"{found}\n--- safe rewrite ---\n{results.safe[case_id]}")


def _check_runs(results: Results, case_id: str, env: str) -> None:
    reason = _skip_reason(results, case_id, env)
    if reason:
        pytest.skip(reason)
    run = results.outcome(env, case_id, "full")
    _require_harness(run)
    if run.error:
        _fail(f"{case_id}/{env}", f"{run.error} ({run.error_at})\n--- full rewrite ---\n{results.full[case_id]}")


@pytest.mark.parametrize("case_id", _params("cpu"))
def test_rewrite_runs_on_cpu(results, case_id):
    _check_runs(results, case_id, "cpu")


@pytest.mark.parametrize("case_id", _params("neuron"))
def test_rewrite_runs_on_standin_neuron(results, case_id):
    _check_runs(results, case_id, "neuron")


def test_skipped_cases_are_the_known_ones(results):
    skipped = {f"{case.id}/{check}": reason for case in CASES for check in ("cuda", "cpu", "neuron")
               if (reason := _skip_reason(results, case.id, check))}
    print("\nskipped by the differential harness:\n" + "\n".join(f"  {k}: {v}" for k, v in sorted(skipped.items())))
    assert skipped == SKIPPED


def test_fragments_are_exercised(results):
    """The original of every judged rule example runs its module code and each of its functions to the end."""
    partial = {}
    for case in CASES:
        if not case.fragment or _skip_reason(results, case.id, "cuda"):
            continue
        original = results.outcome("cuda", case.id, "original")
        parts = original.not_called + [f"{name} {value}" for name, value in original.values.items()
                                       if value.startswith("raised ")]
        if parts:
            partial[case.id] = "; ".join(parts)
    assert set(partial) == set(NOT_EXERCISED), partial
    assert all(partial[key].startswith(NOT_EXERCISED[key].split(" (")[0]) for key in partial), partial


def test_known_failures_name_existing_checks():
    ids = {f"{case.id}/{check}" for case in CASES for check in ("cuda", "cpu", "neuron")}
    named = {key for key in KNOWN_FAILURES if not key.startswith("emitted/")} | set(SKIPPED)
    assert named <= ids, sorted(named - ids)
    assert not set(KNOWN_FAILURES) & set(SKIPPED), "a skipped check cannot also be a known failure"
