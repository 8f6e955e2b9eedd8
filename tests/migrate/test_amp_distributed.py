"""The amp and distributed fixes (NM201–NM205, NM301–NM304) keep what the CUDA code did on a CPU-only machine.

Each test rewrites a snippet and runs both versions here (torch CPU build, no accelerator): where the CUDA
original ran, the rewrite must compute the same thing; where it failed only for want of CUDA (NCCL, DDP
device ids), the rewrite must run.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.distributed as dist

from .helpers import findings, fixed

AMP = ("NM201", "NM202", "NM203", "NM204", "NM205")
DIST = ("NM301", "NM302", "NM303", "NM304")
MINE = ("NM107", "NM108", "NM110", *AMP, *DIST)

TRAIN = """
import torch
from torch.cuda.amp import GradScaler, autocast, custom_bwd, custom_fwd

class Scale(torch.autograd.Function):
    @staticmethod
    @custom_fwd(cast_inputs=torch.float32)
    def forward(ctx, x):
        return x * 2

    @staticmethod
    @custom_bwd
    def backward(ctx, grad):
        return grad * 2

@autocast()
def predict(model, x):
    return Scale.apply(model(x))

def train():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = GradScaler(init_scale=1024.0)
    x, y = torch.randn(8, 4), torch.randn(8, 2)
    for _ in range(3):
        with autocast(enabled=True):
            out = model(x)
            loss = torch.nn.functional.mse_loss(predict(model, x) + out, y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    return out.dtype, scaler.is_enabled(), scaler.get_scale(), model.weight.detach()

result = train()
"""


def run(source: str) -> dict:
    """Execute `source` as a module (deprecation and 'CUDA is not available' warnings silenced)."""
    namespace: dict = {"__name__": "snippet"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(source, "snippet.py", "exec"), namespace)
    return namespace


@pytest.fixture
def no_accelerator():
    if torch.accelerator.is_available():
        pytest.skip("these comparisons are about a machine without an accelerator")


def test_fixed_training_step_matches_the_cuda_original_without_an_accelerator(no_accelerator):
    after = fixed(TRAIN, AMP)
    assert "torch.cuda.amp" not in after and "enabled=torch.accelerator.is_available()" in after
    dtype, enabled, scale, weight = run(TRAIN)["result"]
    new_dtype, new_enabled, new_scale, new_weight = run(after)["result"]
    assert (dtype, enabled, scale) == (torch.float32, False, 1.0)  # CUDA amp was off here
    assert (new_dtype, new_enabled, new_scale) == (dtype, enabled, scale)
    assert torch.equal(new_weight, weight)


def test_without_the_enabled_guard_cpu_autocast_would_differ(no_accelerator):
    # why the guard exists: the same rewrite minus `enabled=` turns float16 autocast and scaling on
    unguarded = fixed(TRAIN, AMP).replace(", enabled=torch.accelerator.is_available()", "")
    dtype, enabled, scale, _ = run(unguarded)["result"]
    assert (dtype, enabled) == (torch.float16, True) and scale != 1.0


def test_autocast_cuda_and_default_scaler_rewrites_match_without_an_accelerator(no_accelerator):
    source = (
        "import torch\n"
        "a, b = torch.ones(2, 2), torch.ones(2, 2)\n"
        "with torch.autocast('cuda'):\n    plain = (a @ b).dtype\n"
        "with torch.amp.autocast(device_type='cuda', dtype=torch.bfloat16):\n    bf16 = (a @ b).dtype\n"
        "scaler_on = torch.amp.GradScaler().is_enabled()\n"
    )
    after = fixed(source, AMP)
    assert "'cuda'" not in after
    before_ns, after_ns = run(source), run(after)
    for name in ("plain", "bf16", "scaler_on"):
        assert after_ns[name] == before_ns[name], name


def test_amp_fixes_leave_nothing_for_a_second_run():
    after = fixed(TRAIN, AMP)
    assert [f.code for f in findings(after, AMP)] == []
    assert fixed(after, AMP) == after


@pytest.mark.parametrize(
    "backend",
    [
        "'nccl'",
        "backend='nccl'",
        "'cpu:gloo,cuda:nccl'",
        "dist.Backend.NCCL",
        "'nccl' if torch.cuda.is_available() else 'gloo'",
    ],
)
def test_fixed_nccl_backend_starts_a_process_group_without_cuda(backend, no_accelerator):
    source = (
        "import torch\nimport torch.distributed as dist\n"
        f"dist.init_process_group({backend}, store=dist.HashStore(), rank=0, world_size=1)\n"
        "t = torch.ones(2)\ndist.all_reduce(t)\nname = dist.get_backend()\ndist.destroy_process_group()\n"
    )
    after = fixed(source, DIST)
    if "is_available" not in backend:
        assert "nccl" not in after.lower()
        with pytest.raises(RuntimeError, match="NCCL"):
            run(source)
    namespace = run(after)
    assert namespace["name"] in ("gloo", "cpu:gloo")
    assert namespace["t"].tolist() == [1.0, 1.0]


def test_backend_map_rewrite_gives_the_original_map_on_cuda_and_the_cpu_entry_without_an_accelerator(
    monkeypatch,
):
    after = fixed(
        "import torch.distributed as dist\ndist.init_process_group('cpu:gloo,cuda:nccl')\n", ("NM301",)
    )
    program = after.replace("dist.init_process_group(", "spec = (")
    if not torch.accelerator.is_available():
        assert run(program)["spec"] == "cpu:gloo"
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(
        torch.accelerator, "current_accelerator", lambda check_available=False: torch.device("cuda")
    )
    assert run(program)["spec"] == "cpu:gloo,cuda:nccl"


def test_fixed_ddp_wraps_a_cpu_module(no_accelerator):
    source = (
        "import torch\nimport torch.distributed as dist\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "dist.init_process_group('gloo', store=dist.HashStore(), rank=0, world_size=1)\n"
        "local_rank = 0\n"
        "try:\n"
        "    model = DDP(torch.nn.Linear(2, 2), device_ids=[local_rank], output_device=local_rank)\n"
        "    out = model(torch.ones(1, 2)).shape\n"
        "finally:\n"
        "    dist.destroy_process_group()\n"
    )
    with pytest.raises(ValueError, match="device_ids"):
        run(source)
    after = fixed(source, DIST, unsafe=True)
    assert fixed(source, DIST) == source  # the fix is unsafe: not applied by default
    assert run(after)["out"] == torch.Size([1, 2])


def test_fixed_backend_dict_is_unchanged_here_and_builds_without_error():
    source = "BACKENDS = {'cpu': 'gloo', 'cuda': 'nccl'}\n"
    after = fixed(source, DIST)
    assert run(after)["BACKENDS"] == {
        **run(source)["BACKENDS"],
        **(
            {
                torch.accelerator.current_accelerator().type: dist.get_default_backend_for_device(
                    torch.accelerator.current_accelerator()
                )
            }
            if torch.accelerator.is_available()
            else {}
        ),
    }
    assert fixed(after, DIST) == after


def test_an_oom_handler_by_its_cuda_name_needs_no_change():
    """`torch.cuda.OutOfMemoryError` is `torch.OutOfMemoryError`: the handler already catches every device's
    out-of-memory error, and renaming it is noise (16 of 20 reviewed hunks rejected it as such)."""
    assert torch.OutOfMemoryError is torch.cuda.OutOfMemoryError
    source = "import torch\ntry:\n    pass\nexcept torch.cuda.OutOfMemoryError:\n    pass\n"
    assert fixed(source, ("NM110",)) == source
    (note,) = findings(source, ("NM110",))
    assert note.severity == "info" and "no change needed" in note.message


def test_names_in_strings_comments_and_other_libraries_are_not_flagged():
    source = (
        '"""Uses torch.cuda.amp.autocast and NCCL via init_process_group("nccl")."""\n'
        "import torch, logging, mylib\n"
        "# scaler = torch.cuda.amp.GradScaler()\n"
        "logging.info('backend nccl, cuda %s', torch.__version__)\n"
        "parser.add_argument('--scaler', help='torch.amp.GradScaler() on cuda')\n"
        "mylib.init_process_group('nccl')\n"
        "mylib.GradScaler()\n"
        "x: 'torch.cuda.OutOfMemoryError' = None\n"
        "meta = {'accelerator': 'cuda', 'backend': 'nccl'}\n"
    )
    assert [f.location for f in findings(source, MINE)] == []


def test_rules_together_fix_a_script_in_one_pass():
    source = (
        "import torch\nimport torch.distributed as dist\nfrom torch.cuda.amp import autocast, GradScaler\n"
        "BACKENDS = {'cpu': 'gloo', 'cuda': 'nccl'}\n"
        "def main(args, model, rank):\n"
        "    dist.init_process_group(BACKENDS['cuda'] if args.gpu else 'nccl')\n"
        "    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])\n"
        "    scaler = GradScaler(enabled=args.amp)\n"
        "    with autocast(dtype=torch.bfloat16):\n"
        "        pass\n"
    )
    codes = [f.code for f in findings(source, MINE)]
    assert codes == ["NM304", "NM301", "NM302", "NM202", "NM201"]
    after = fixed(source, MINE, unsafe=True)
    assert [f.code for f in findings(after, MINE)] == []
    assert fixed(after, MINE, unsafe=True) == after
    assert "from torch.cuda.amp" not in after


@pytest.mark.parametrize(
    "source",
    [
        "import torch\nwith torch.cuda.amp.autocast(\n    enabled=use_amp,  # off for eval\n):\n    pass\n",
        "import torch\ns = torch.amp.GradScaler(\n    init_scale=1024,  # small model\n)\n",
    ],
)
def test_a_rebuilt_call_that_held_comments_is_an_unsafe_fix(source):
    (finding,) = findings(source, AMP)
    assert finding.fix.safety == "unsafe"
    assert fixed(source, AMP) == source
    assert "#" not in fixed(source, AMP, unsafe=True)


def test_a_backend_map_with_a_neuron_entry_needs_nothing():
    """transformers' DISTRIBUTED_BACKEND_MAP already names `neuron`: a computed accelerator entry first would
    be overridden by it (and would look the device up at import)."""
    before = (
        "DISTRIBUTED_BACKEND_MAP = {\n"
        '    "cuda": "nccl",\n    "cpu": "gloo",\n    "xpu": "xccl",\n    "neuron": "neuron",\n}\n'
    )
    assert fixed(before) == before
    assert findings(before, ("NM304",)) == []


def test_a_backend_map_the_module_reads_back_by_value_gets_an_unsafe_fix():
    """ColossalAI's DeviceMesh finds a device by its backend: with the accelerator's entry first, `gloo`
    would be found as `mps` on an Apple host (torch maps MPS to gloo, like CPU)."""
    assert torch.distributed.Backend.default_device_backend_map["mps"] == "gloo"
    source = (
        "class Mesh:\n"
        "    _BACKEND = {'cuda': 'nccl', 'cpu': 'gloo'}\n\n"
        "    def device_of(self, backend):\n"
        "        for device, name in Mesh._BACKEND.items():\n"
        "            if name == backend:\n"
        "                return device\n"
    )
    (finding,) = findings(source, ("NM304",))
    assert finding.fix.safety == "unsafe" and "`_BACKEND.items()`" in finding.message
    lookup_only = source.replace("for device, name in Mesh._BACKEND.items():", "for name in names:")
    (finding,) = findings(lookup_only, ("NM304",))
    assert finding.fix.safety == "safe"


def test_a_scaler_waits_for_the_autocast_that_stays_cuda():
    """MONAI's trainer: `torch.autocast("cuda", **engine.amp_kwargs)` keeps CUDA (its fix is unsafe), so the
    scaler of the same module waits for it: a neuron scaler without neuron autocast scales float32 losses.
    With --unsafe-fixes both are rewritten."""
    source = (
        "import torch\n\n\nclass Trainer:\n    def run(self):\n"
        "        self.scaler = torch.cuda.amp.GradScaler() if self.amp else None\n\n"
        "    def step(self, batch):\n"
        '        with torch.autocast("cuda", **self.amp_kwargs):\n            return self.model(batch)\n'
    )
    scaler = next(f for f in findings(source) if f.code == "NM202")
    assert scaler.fix is None and scaler.tied and "other half of mixed precision" in scaler.message
    assert all(f.fix is not None for f in findings(source, unsafe=True) if f.code in ("NM202", "NM204"))


def test_subgroups_made_with_nccl_are_flagged():
    """Megatron's bridge communicator makes its broadcast groups with `new_subgroups_by_enumeration(...,
    backend='nccl')`, which NM301 did not know (review 32)."""
    source = (
        "import torch.distributed as dist\n"
        "groups, _ = dist.new_subgroups_by_enumeration(ranks, backend='nccl')\n"
        "group, _ = dist.new_subgroups(4, None, None, 'nccl')\n"
    )
    assert [f.line for f in findings(source, ("NM301",))] == [2, 3]


def test_nccl_with_nccl_options_stays_nccl():
    """torchtitan passes `pg_options=dist.ProcessGroupNCCL.Options(is_high_priority_stream=True)` (bound to
    a name) with `backend="nccl"`: the options are NCCL's, so the backend changes with them (review 32)."""
    source = (
        "import torch.distributed as dist\n\n\ndef make(ranks):\n"
        "    pg_options = dist.ProcessGroupNCCL.Options(is_high_priority_stream=True)\n"
        '    return dist.new_group(ranks=ranks, backend="nccl", pg_options=pg_options)\n'
    )
    (backend,) = findings(source, ("NM301",))
    assert backend.fix is None and "the same call keeps CUDA's `pg_options=pg_options`" in backend.message
    plain = source.replace("dist.ProcessGroupNCCL.Options(is_high_priority_stream=True)", "None")
    assert findings(plain, ("NM301",))[0].fix is not None


@pytest.mark.parametrize(
    "owner",
    [
        # a device attribute that may hold what the caller passed (a string)
        "class Head(torch.nn.Module):\n    def __init__(self, device):\n        self.device = device\n",
        # a property that returns something other than a value's `.device`
        "class Head(torch.nn.Module):\n    @property\n    def device(self):\n        return self._device\n",
        "class Head(torch.nn.Module):\n    pass\n",
    ],
)
def test_an_autocast_turned_off_in_a_module_that_may_not_know_its_device_uses_the_current_one(owner):
    source = (
        f"import torch\n{owner}"
        "    def step(self, batch):\n        with torch.autocast('cuda', enabled=False):\n"
        "            return batch.float()\n"
    )
    assert "self.device.type" not in fixed(source) and "current_accelerator" in fixed(source)
