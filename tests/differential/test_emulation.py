"""The CUDA emulation itself: torch's signatures and errors, what it records and normalises, and that it
leaves the process as it found it (these run in the test process: the emulation is a context manager)."""

from __future__ import annotations

import inspect

import pytest
import torch

from tests.differential import cuda_api, streams
from tests.differential.apis import TorchCall, check_call, torch_calls
from tests.differential.calls import device_key
from tests.differential.emulation import emulate_cuda
from tests.differential.libraries import COMPILE_MODES


def _parameters(function) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


@pytest.mark.parametrize("name", sorted(n for n, f in cuda_api.FUNCTIONS.items() if inspect.isfunction(f)))
def test_emulated_cuda_function_has_torchs_parameters(name):
    assert _parameters(cuda_api.FUNCTIONS[name]) == _parameters(getattr(torch.cuda, name))


def test_emulated_streams_and_events_have_torchs_parameters():
    assert _parameters(streams.CudaStream.__init__)[1:] == _parameters(torch.cuda.Stream)
    assert _parameters(streams.CudaEvent.__init__)[1:] == _parameters(torch.cuda.Event)
    for name in ("range_push", "range_pop", "mark"):
        assert _parameters(cuda_api.NVTX[name]) == _parameters(getattr(torch.cuda.nvtx, name))


def test_compile_modes_are_torchs():
    import torch._inductor

    assert list(COMPILE_MODES) == list(torch._inductor.list_mode_options())


def test_emulation_reports_cuda_and_restores_everything():
    before = (
        torch.cuda.is_available,
        torch.cuda.synchronize,
        torch.accelerator.synchronize,
        torch.Stream,
        torch.manual_seed,
        torch.load,
        torch.compile,
        torch.distributed.init_process_group,
        torch._C._accelerator_getAccelerator,
    )
    with emulate_cuda(device_count=2):
        assert torch.cuda.is_available() and torch.accelerator.is_available()
        assert torch.accelerator.current_accelerator() == torch.device("cuda")
        assert torch.accelerator.device_count() == torch.cuda.device_count() == 2
        assert torch.get_device_module() is torch.cuda
        assert torch.cuda.get_device_capability() == (8, 0) and torch.cuda.is_bf16_supported()
        assert (
            torch.distributed.get_default_backend_for_device(torch.accelerator.current_accelerator())
            == "nccl"
        )
    after = (
        torch.cuda.is_available,
        torch.cuda.synchronize,
        torch.accelerator.synchronize,
        torch.Stream,
        torch.manual_seed,
        torch.load,
        torch.compile,
        torch.distributed.init_process_group,
        torch._C._accelerator_getAccelerator,
    )
    assert before == after
    assert not torch.cuda.is_available() and torch.accelerator.current_accelerator() is None
    assert torch.get_device_module() is torch.cpu  # the cached CUDA answer did not leak out


def test_calls_raise_where_torch_raises():
    with emulate_cuda(device_count=2):
        with pytest.raises(TypeError, match="positional-only"):
            torch.accelerator.synchronize(device="cuda")
        with pytest.raises(ValueError, match="specified index"):
            torch.accelerator.set_device_index("cuda")
        with pytest.raises(ValueError, match="specified index"):
            torch.cuda.set_device("cuda")
        with pytest.raises(ValueError, match="doesn't match the current accelerator"):
            torch.accelerator.synchronize("cpu")
        with pytest.raises(ValueError, match="Expected a cuda device"):
            torch.cuda.synchronize("cpu")
        with pytest.raises(torch.AcceleratorError, match="invalid device ordinal"):
            torch.cuda.set_device(2)
        with pytest.raises(torch.AcceleratorError, match="invalid device ordinal"):
            torch.ones(1, device="cuda:2")
        with pytest.raises(TypeError, match="unexpected keyword"):
            torch.cuda.synchronize(dev=0)
        with pytest.raises(RuntimeError, match="Both events must be recorded"):
            torch.cuda.Event(enable_timing=True).elapsed_time(torch.cuda.Event(enable_timing=True))
        with pytest.raises(TypeError, match="numpy"):
            torch.ones(2, device="cuda").numpy()
        with pytest.raises(RuntimeError, match="same device"):
            torch.ones(2, device="cuda") + torch.ones(2)
        with pytest.raises(RuntimeError, match="same device"):
            torch.ones(2, device="cuda:0") + torch.ones(2, device="cuda:1")


def test_device_arguments_are_normalised():
    assert device_key(None) == device_key("cuda") == device_key(torch.device("cuda")) == "cuda"
    assert device_key(torch.device("cuda", 0)) == device_key(0) == device_key("cuda:0") == "cuda:0"
    assert device_key("cuda") != device_key("cuda:0")
    with emulate_cuda() as recorder:
        torch.cuda.synchronize()
        torch.accelerator.synchronize()
        torch.accelerator.synchronize(torch.device("cuda"))
        torch.cuda.synchronize(0)
    assert [call.key for call in recorder.calls] == ["synchronize(cuda)"] * 3 + ["synchronize(cuda:0)"]


def test_tensors_live_on_the_emulated_device():
    with emulate_cuda(device_count=2) as recorder:
        model = torch.nn.Linear(2, 2).cuda()
        x = torch.ones(3, 2).to("cuda:0", non_blocking=True)
        model(x).sum().backward()
        assert model.weight.device == torch.device("cuda", 0) and model.weight.is_cuda
        assert model.weight.grad.device == torch.device("cuda", 0)
        torch.cuda.set_device(1)
        y = torch.zeros(2, device="cuda")
        assert y.device == torch.device("cuda", 1) and y.cpu().device == torch.device("cpu")
        assert "device='cuda:1'" in repr(y)
    keys = [call.key for call in recorder.calls]
    assert keys[:3] == ["to(cuda, non_blocking=False)"] * 2 + ["to(cuda:0, non_blocking=True)"]
    assert "alloc(cuda)" in keys and keys[-1] == "to(cpu, non_blocking=False)"


def test_a_seed_that_changes_nothing_is_not_recorded():
    with emulate_cuda(device_count=2) as recorder:
        torch.manual_seed(3)
        torch.cuda.manual_seed_all(3)  # already seeded by torch.manual_seed: no effect
        torch.cuda.manual_seed(3)
        torch.randn(2, device="cuda")  # draws from cuda:0's generator
        torch.cuda.manual_seed(3)  # now it matters
    assert [call.key for call in recorder.calls] == [
        "manual_seed(cpu, 3)",
        "manual_seed(cuda:0, 3)",
        "manual_seed(cuda:1, 3)",
        "alloc(cuda)",
        "manual_seed(cuda:0, 3)",
    ]


def test_device_draws_use_the_device_generator():
    with emulate_cuda():
        torch.cuda.manual_seed(7)
        first = torch.randn(3, device="cuda")
        torch.randn(5)  # a CPU draw in between does not move the device's generator
        torch.cuda.manual_seed(7)
        assert torch.equal(first, torch.randn(3, device="cuda"))


def test_emitted_api_checker_finds_a_bad_call_style():
    calls = torch_calls(
        "import torch.distributed as dist\nimport torch\n"
        "torch.accelerator.synchronize(device=0)\ndist.init_process_group(backend='gloo')\n"
        "torch.get_device_module(d).get_rng_state()\ntorch.accelerator.no_such_api()\n"
    )
    by_name = {call.name: call for call in calls}
    assert set(by_name) == {
        "torch.accelerator.synchronize",
        "torch.distributed.init_process_group",
        "torch.get_device_module",
        "torch.cuda.get_rng_state",
        "torch.accelerator.no_such_api",
    }
    assert "positional only" in check_call(by_name["torch.accelerator.synchronize"])
    assert "does not exist" in check_call(by_name["torch.accelerator.no_such_api"])
    assert check_call(by_name["torch.distributed.init_process_group"]) is None
    assert check_call(TorchCall("torch.accelerator.synchronize", 1, (), False)) is None


def test_standin_device_module_is_found_without_installing_it():
    from tests.differential.adapters import standin_device_module

    module = standin_device_module()
    assert callable(module.install) and not module.is_installed()
