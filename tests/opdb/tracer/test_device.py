"""The stand-in `neuron` device, exercised in a fresh interpreter (registration is permanent for a process):
the same checks on the C++ stand-in and on the pure-Python fallback."""

from __future__ import annotations

import pytest

from tests.opdb.tracer.conftest import run_python

DEVICE_CHECKS = r"""
import json, torch
from neuron_migrate.opdb.tracer import device
from neuron_migrate.opdb.db import snapshot_from_dict

snap = snapshot_from_dict({
    "schema": "neuron-migrate/opdb/1", "version": "test-1", "torch_neuronx_version": "test", "pre_release": False,
    "unlisted": None,
    "ops": {
        "aten::mm": {"status": "native"},
        "aten::addmm": {"status": "cpu_fallback"},
        "aten::add.Tensor": {"status": "native", "dtypes": {"float64": {"status": "unsupported"}}},
        "aten::empty.memory_format": {"status": "native"},
        "aten::copy_": {"status": "native"},
    },
}, "test")
out = {}
out["before"] = str(torch.accelerator.current_accelerator())
out["kind"] = device.install(snap)
device.install(snap)  # idempotent
x = torch.empty(3, device="neuron")
out["empty"] = [str(x.device), type(x).__name__]
out["accelerator"] = [str(torch.accelerator.current_accelerator()), torch.accelerator.is_available(),
                      torch.accelerator.device_count()]
out["tensor"] = torch.tensor([1, 2], device="neuron").cpu().tolist()

a = torch.ones(2, 2, device="neuron"); b = torch.ones(2, 2, device="neuron")
device.clear_op_tracking()
a.mm(b); torch.addmm(a, a, b); a + b; a - b
out["executed"] = sorted(device.get_executed_ops())
out["fallback"] = sorted(device.get_fallback_ops())
try:
    a.double() + b.double()
    out["unsupported"] = None
except RuntimeError as err:
    out["unsupported"] = str(err)
device.clear_op_tracking()
out["cleared"] = [sorted(device.get_executed_ops()), sorted(device.get_fallback_ops())]

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
model.to("neuron")
out["param"] = [type(model[0].weight).__name__, str(model[0].weight.device),
                isinstance(model[0].weight, torch.nn.Parameter)]
opt = torch.optim.AdamW(model.parameters())
x = torch.randn(5, 8, device="neuron")
before = model[0].weight.detach().cpu().clone()
loss = model(x).square().mean()
loss.backward()
opt.step()
out["trained"] = [bool((model[0].weight.detach().cpu() != before).any()), model[0].weight.grad is not None]
ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
out["same_math"] = torch.allclose(ref(x.cpu()), model(x).cpu(), atol=1e-6)

for dtype in (torch.bfloat16, torch.float16):
    with torch.autocast("neuron", dtype=dtype):
        y = model(x)
        out[f"autocast_{dtype}"] = [str(model[0](x).dtype), str(torch.relu(x).dtype)]
    y.float().sum().backward()

torch.manual_seed(7); r1 = torch.randn(3, device="neuron").cpu()
torch.manual_seed(7); r2 = torch.randn(3, device="neuron").cpu()
out["seeded"] = torch.equal(r1, r2)
with torch.random.fork_rng(device_type="neuron"):
    torch.randn(2, device="neuron")
state = torch.get_device_module("neuron").get_rng_state()
torch.get_device_module("neuron").set_rng_state(state)
out["rng_state"] = str(state.dtype)

from torch.utils._python_dispatch import TorchDispatchMode
class Names(TorchDispatchMode):
    def __init__(self):
        super().__init__(); self.names = []
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func)); return func(*args, **(kwargs or {}))
q = torch.randn(1, 2, 4, 8, device="neuron")
with Names() as names:
    torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
out["sdpa"] = names.names
with Names() as names:
    torch.nn.functional.scaled_dot_product_attention(q.cpu(), q.cpu(), q.cpu(), is_causal=True)
out["sdpa_cpu"] = names.names
out["remainder"] = (torch.arange(5, device="neuron") % 3).cpu().tolist()
print(json.dumps(out))
"""  # noqa: E501 - script source, kept as written


KINDS = {
    "cpp": ("stand-in", "Tensor", "Parameter"),
    "python": ("stand-in-python", "NeuronTensor", "NeuronTensor"),
}


@pytest.fixture(scope="module", params=sorted(KINDS))
def checks(request):
    result = run_python(DEVICE_CHECKS, standin=request.param)
    result["expected"] = KINDS[request.param]
    return result


def test_registers_neuron_only_in_the_child(checks):
    assert checks["before"] == "None"
    assert checks["kind"] == checks["expected"][0]
    assert checks["empty"] == ["neuron:0", checks["expected"][1]]
    assert checks["accelerator"] == ["neuron", True, 1]
    assert checks["tensor"] == [1, 2]


def test_tracking_follows_the_snapshot(checks):
    assert {"aten::mm", "aten::add.Tensor"} <= set(checks["executed"])
    # addmm is cpu_fallback in the snapshot; sub.Tensor is not listed (unknown): both take the CPU fallback
    assert {"aten::addmm", "aten::sub.Tensor"} <= set(checks["fallback"])
    assert not {"aten::addmm", "aten::sub.Tensor"} & set(checks["executed"])
    assert checks["cleared"] == [[], []]


def test_unsupported_op_raises_naming_op_and_dtype(checks):
    assert "aten::add.Tensor" in checks["unsupported"] and "float64" in checks["unsupported"]


def test_model_trains_and_computes_like_cpu(checks):
    assert checks["param"] == [checks["expected"][2], "neuron:0", True]
    assert checks["trained"] == [True, True]
    assert checks["same_math"] is True


def test_autocast_casts_matmuls_only(checks):
    assert checks["autocast_torch.bfloat16"] == ["torch.bfloat16", "torch.float32"]
    assert checks["autocast_torch.float16"] == ["torch.float16", "torch.float32"]


def test_rng(checks):
    assert checks["seeded"] is True
    assert checks["rng_state"] == "torch.uint8"


def test_sdpa_takes_the_privateuse1_math_path(checks):
    # On cpu tensors SDPA picks the CPU flash kernel; on a PrivateUse1 device it decomposes to the math path.
    assert any("flash_attention_for_cpu" in name for name in checks["sdpa_cpu"])
    assert not any("flash" in name for name in checks["sdpa"])
    assert "aten.bmm.default" in checks["sdpa"] and "aten._safe_softmax.default" in checks["sdpa"]


def test_wrapped_scalars_in_composites(checks):
    assert checks["remainder"] == [0, 1, 2, 0, 1]


def test_composite_result_resized_by_an_out_callee_keeps_its_shape():
    # logsumexp has no neuron kernel in the pre-release snapshot: its composite kernel fills an empty result
    # through logsumexp.out, which resizes it; autograd must see the real shape (it once saw [0]).
    result = run_python("""
        import json, torch
        from neuron_migrate.opdb.tracer import device
        device.install()
        x = torch.randn(4, 8, device="neuron", requires_grad=True)
        y = torch.logsumexp(x, dim=-1)
        y.pow(2).mean().backward()
        ref = torch.logsumexp(x.detach().cpu(), dim=-1)
        print(json.dumps({"shape": list(y.shape), "grad": list(x.grad.shape),
                          "close": bool(torch.allclose(y.detach().cpu(), ref)),
                          "fallbacks": sorted(device.get_fallback_ops())}))
    """)
    assert result["shape"] == [4] and result["grad"] == [4, 8] and result["close"]
    assert "aten::logsumexp.out" in result["fallbacks"]


def test_cpu_dtype_gaps_follow_the_opdb():
    # histc and mm are native in this snapshot, addmm is a CPU fallback, bitwise_and has no exact wider dtype
    result = run_python(
        r"""
        import json, torch
        from neuron_migrate.opdb.tracer import device
        from neuron_migrate.opdb.db import snapshot_from_dict
        snap = snapshot_from_dict({"schema": "neuron-migrate/opdb/1", "version": "gaps", "torch_neuronx_version": "t",
            "pre_release": False, "unlisted": None, "ops": {
            "aten::histc": {"status": "native"}, "aten::mm": {"status": "native"},
            "aten::addmm": {"status": "cpu_fallback"}, "aten::bitwise_and.Tensor": {"status": "native"}}}, "t")
        device.install(snap)
        out = {}
        x = torch.tensor([1, 2, 2, 3, 7], dtype=torch.int32, device="neuron")
        h = torch.histc(x, bins=3, min=1, max=3)
        out["histc"] = [str(h.device), str(h.dtype), h.cpu().tolist()]
        m = torch.tensor([[True, False], [False, False]], device="neuron")
        out["mm"] = (m @ m).cpu().tolist()
        out["widened"] = {f"{op}/{','.join(d)}": note for (op, d), note in device.get_widened_ops().items()}
        def fails(fn):
            try:
                fn()
            except Exception as err:
                return f"{type(err).__name__}: {err}"
        out["addmm"] = fails(lambda: torch.addmm(m, m, m))
        f = torch.ones(2, device="neuron")
        out["bitwise"] = fails(lambda: torch.bitwise_and(f, f))
        big = torch.tensor([2**60, 1], device="neuron")
        out["histc_int64"] = torch.histc(torch.tensor([1, 3], device="neuron"), bins=2, min=1, max=3).cpu().tolist()
        out["histc_big"] = fails(lambda: torch.histc(big, bins=2, min=0, max=1))
        out["executed"] = sorted(device.get_executed_ops())
        print(json.dumps(out))
    """,  # noqa: E501 - script source, kept as written
        standin="cpp",
    )
    assert result["histc"] == ["neuron:0", "torch.int32", [1, 2, 1]]  # 7 is outside [1, 3]: not counted
    assert result["mm"] == [[True, False], [False, False]]
    assert "float64" in result["widened"]["aten::histc/int32"] and "aten::mm/bool" in result["widened"]
    assert {"aten::histc", "aten::mm"} <= set(result["executed"])  # recorded as native
    assert result["addmm"].startswith(
        "RuntimeError: fails on neuron: aten::addmm (bool) runs through the CPU fallback"
    )
    assert "stand-in limitation: aten::bitwise_and.Tensor (float32) is native" in result["bitwise"]
    assert result["histc_int64"] == [1, 1]  # int64 widened to float64: exact below 2**53
    assert "stand-in limitation: aten::histc (int64)" in result["histc_big"]  # 2**60 is not exact in float64


def test_torch_neuron_module_on_the_cpp_stand_in():
    result = run_python(
        r"""
        import json, torch
        from neuron_migrate.opdb.tracer import device
        device.install()
        n, out = torch.neuron, {}
        out["device"] = [n.is_available(), n.device_count(), n.current_device(), n.is_bf16_supported()]
        n.manual_seed(5); a = torch.randn(4, device="neuron").cpu()
        state = n.get_rng_state(); b = torch.randn(4, device="neuron").cpu()
        n.set_rng_state(state); c = torch.randn(4, device="neuron").cpu()
        out["rng"] = [n.initial_seed(), torch.equal(b, c), not torch.equal(a, b), str(state.dtype)]
        n.manual_seed(5); out["reseeded"] = torch.equal(torch.randn(4, device="neuron").cpu(), a)
        s = n.Stream()
        with n.stream(s):
            out["stream"] = n.current_stream() == s
        out["default_stream"] = n.default_stream().stream_id == 0 and n.current_stream() != s
        x = torch.ones(1024, device="neuron")
        x.record_stream(s)
        start, end = n.Event(enable_timing=True), n.Event(enable_timing=True)
        start.record(); (x * 2).sum(); end.record(); n.synchronize()
        out["elapsed"] = start.elapsed_time(end) >= 0
        out["memory"] = [n.memory_allocated() >= 4096, n.max_memory_allocated() >= n.memory_allocated(),
                         n.memory_reserved() >= n.memory_allocated(), "allocated_bytes.all.current" in n.memory_stats()]
        out["summary"] = n.memory_summary().splitlines()[0]
        props = n.get_device_properties()
        free, total = n.mem_get_info()
        out["props"] = [props.total_memory == total, 0 < free <= total, "stand-in" in props.name]
        del x; n.empty_cache(); n.reset_peak_memory_stats(); n.reset_accumulated_memory_stats()
        out["tracking"] = "aten::record_stream" in n.get_executed_ops() | n.get_fallback_ops()
        print(json.dumps(out))
    """,  # noqa: E501 - script source, kept as written
        standin="cpp",
    )
    assert result["device"] == [True, 1, 0, True]
    assert result["rng"] == [5, True, True, "torch.uint8"] and result["reseeded"]
    assert result["stream"] and result["default_stream"] and result["elapsed"]
    assert result["memory"] == [True, True, True, True]
    assert result["summary"] == "neuron:0 memory summary (stand-in)"
    assert result["props"] == [True, True, True] and result["tracking"]
