"""Tensors on the C++ stand-in are plain `torch.Tensor`s of a PrivateUse1 device (issue 11's first point):
storage from the stand-in's allocator with real data pointers, views that share it, `.tolist()` / `.item()` /
printing, a `torch.save` / `torch.load(map_location="neuron")` round trip, Dynamo over device tensors, and
`.numpy()` refused as for any non-CPU device."""

from __future__ import annotations

import pytest

from tests.opdb.tracer.conftest import run_python


@pytest.fixture(scope="module")
def seen():
    return run_python(
        """
        import io, json
        import torch
        from neuron_migrate.opdb.tracer import device
        kind = device.install()
        out = {"kind": kind}
        x = torch.arange(6, dtype=torch.float32, device="neuron").reshape(2, 3)
        out["type"] = [type(x).__name__, str(x.device), x.is_cpu]
        view = x[1]
        view.add_(10)  # a view writes through to its base
        out["view"] = [view.data_ptr() == x.data_ptr() + 3 * 4, x.cpu().tolist()]
        out["ptr"] = x.data_ptr() != 0 and x.untyped_storage().device.type == "neuron"
        out["tolist"] = x.tolist()
        out["item"] = x[0, 1].item()
        out["repr"] = repr(torch.tensor([1.5], device="neuron"))
        buffer = io.BytesIO()
        torch.save({"w": x}, buffer)
        buffer.seek(0)
        on_cpu = torch.load(io.BytesIO(buffer.getvalue()), map_location="cpu")["w"]
        back = torch.load(buffer, map_location="neuron")["w"]
        out["load"] = [str(on_cpu.device), str(back.device), back.cpu().tolist() == x.cpu().tolist()]
        try:
            x.numpy()
            out["numpy"] = "converted"
        except TypeError as err:
            out["numpy"] = str(err)
        compiled = torch.compile(lambda t: (t * 2).sum(), backend="eager", fullgraph=True)
        out["compiled"] = [compiled(x).item(), str(compiled(x).device)]
        print(json.dumps(out))
        """,
        standin="cpp",
    )


def test_tensors_are_plain_tensors_of_the_neuron_device(seen):
    assert seen["kind"] == "stand-in"
    assert seen["type"] == ["Tensor", "neuron:0", False]
    assert seen["ptr"] is True


def test_views_share_the_device_storage(seen):
    assert seen["view"] == [True, [[0.0, 1.0, 2.0], [13.0, 14.0, 15.0]]]


def test_values_read_and_print_as_on_any_device(seen):
    assert seen["tolist"] == [[0.0, 1.0, 2.0], [13.0, 14.0, 15.0]]
    assert seen["item"] == 1.0
    assert seen["repr"] == "tensor([1.5000], device='neuron:0')"


def test_checkpoints_round_trip_through_map_location(seen):
    assert seen["load"] == ["cpu", "neuron:0", True]


def test_numpy_is_refused_as_for_any_non_cpu_tensor(seen):
    assert "neuron" in seen["numpy"] and "numpy" in seen["numpy"]


def test_dynamo_compiles_over_device_tensors(seen):
    assert seen["compiled"] == [90.0, "neuron:0"]
