"""Device strings count only in device positions (NM101–NM105, NM109), and the combined fixes run on CPU."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import libcst as cst
import pytest
import torch

from neuron_migrate.migrate.fixer import fix_text
from neuron_migrate.migrate.layout import Layout

from .helpers import findings, fixed, fixed_until_stable

CODES = ("NM101", "NM102", "NM103", "NM104", "NM105", "NM109")

DECOYS = {
    "comment": "import torch\n# use cuda here\nx = 1\n",
    "docstring": 'def f():\n    """Runs on CUDA."""\n',
    "print": 'd = 0\nprint("cuda device", d)\nprint("cuda")\n',
    "log": 'import logging\nlogger = logging.getLogger()\ni = 0\nlogger.info("using cuda:%d", i)\n',
    "fstring-log": 'import logging\nrank = 0\nlogging.info(f"cuda:{rank} ready")\n',
    "help": "import argparse\nparser = argparse.ArgumentParser()\n"
    'parser.add_argument("--device", help="e.g. cuda:0")\n',
    "help-of-other-option": "import argparse\np = argparse.ArgumentParser()\n"
    'p.add_argument("--backend", default="cuda")\n',
    "annotation": 'x: "cuda" = None\ndef f(d: "cuda" = None) -> "cuda":\n    return d\n',
    "lightning-dict": 'cfg = {"accelerator": "gpu"}\nmeta = {"accelerator": "cuda", "strategy": "ddp"}\n',
    "lightning-trainer": 'from lightning import Trainer\ntrainer = Trainer(accelerator="cuda")\n',
    "note": 'cuda_note = "see docs"\nprint(cuda_note)\n',
    "nccl": 'backend = "nccl"\nif backend == "nccl":\n    pass\n',
    "name-only-logged": 'import logging\nname = "cuda"\nlogging.info("running on %s", name)\n',
    "backend-map-key": 'backends = {"cuda": "nccl", "cpu": "gloo"}\n',
    "env-var": 'import os\nos.environ["CUDA_VISIBLE_DEVICES"] = "0"\n',
    "version": "import torch\nprint(torch.version.cuda)\n",
    "other-string-test": 'import sys\nif "cuda" in sys.argv:\n    pass\nif op.startswith("cuda"):\n'
    "    pass\n",
    "is-cuda-setter": "class Holder:\n    def __init__(self):\n        self.is_cuda = True\n",
}


@pytest.mark.parametrize("source", DECOYS.values(), ids=DECOYS.keys())
def test_decoy_is_not_reported(source):
    assert [f"{f.code} {f.location}" for f in findings(source, CODES)] == []


def test_all_decoys_in_one_file_are_not_reported():
    source = "\n".join(DECOYS.values())
    assert findings(source, CODES) == []


POSITIONS = {
    "to-positional": ('x = x.to("cuda")\n', 1),
    "to-keyword": ('x = x.to(device="cuda:1", non_blocking=True)\n', 1),
    "device-keyword": ('import torch\nx = torch.zeros(2, device="cuda")\n', 1),
    "map-location": ('import torch\ns = torch.load("f.pt", map_location="cuda")\n', 1),
    "map-location-positional": ('import torch\ns = torch.load("f.pt", "cuda")\n', 1),
    "set-default-device": ('import torch\ntorch.set_default_device("cuda")\n', 1),
    # a device mesh's first argument is a device type (openrlhf, review 44)
    "device-mesh": (
        "from torch.distributed.device_mesh import init_device_mesh, DeviceMesh\n"
        'm = init_device_mesh("cuda", (2,))\nn = DeviceMesh("cuda", [0, 1])\n',
        2,
    ),
    "named-device": ('device = "cuda"\n', 1),
    "named-suffix": ('TRAIN_DEVICE = "cuda:0"\nself_dev = None\n', 1),
    "attribute-target": ('class M:\n    def __init__(self):\n        self.device = "cuda"\n', 1),
    "flows-into-to": ('target = "cuda"\nx = x.to(target)\n', 1),
    "flows-through-copy": ('t = "cuda"\ndevice = t\n', 1),
    "flows-into-local-function": ('def run(m, where):\n    return m.to(where)\nrun(m, "cuda")\n', 1),
    "param-default": ('def f(dev="cuda"):\n    pass\n', 1),
    "param-default-flow": ('def f(m, where="cuda"):\n    return m.to(where)\n', 1),
    "cli-default": (
        'import argparse\np = argparse.ArgumentParser()\np.add_argument("--device", default="cuda")\n',
        1,
    ),
    "click-default": (
        'import click\n@click.option("--train-device", default="cuda")\ndef main(train_device):\n    pass\n',
        1,
    ),
    "dict-setting": ('cfg = {"device": "cuda"}\n', 1),
    "subscript-setting": ('cfg["device"] = "cuda"\ncfg["name"] = "cuda"\n', 1),
    "get-default": (
        'import os\nd = os.environ.get("DEVICE", "cuda")\ne = getattr(args, "device", "cuda")\n',
        2,
    ),
    "returned-by-device-function": ('def get_device():\n    return "cuda"\n', 1),
    "or-default": ('device = args.device or "cuda"\n', 1),
    "user-function-keyword": ('run(model, device="cuda")\n', 1),
    "format-forms": (
        'a_device = "cuda:{}".format(r)\nb_device = "cuda:%d" % r\nc_device = "cuda:" + str(r)\n',
        3,
    ),
    "unused-name": ('where = "cuda"\nprint(where)\n', 0),
    "inside-torch-device": ('import torch\nd = torch.device("cuda")\n', 0),
    "autocast-is-nm2xx": ('import torch\nwith torch.autocast(device_type="cuda"):\n    pass\n', 0),
    "comparison-is-nm105": ('ok = device == "cuda"\n', 0),
    "conditional-is-nm105": ('import torch\nd = "cuda" if torch.cuda.is_available() else "cpu"\n', 0),
}


@pytest.mark.parametrize(("source", "count"), POSITIONS.values(), ids=POSITIONS.keys())
def test_device_positions(source, count):
    assert len(findings(source, ("NM101",))) == count


def test_guarded_code_is_still_reported_with_its_guard():
    source = 'import torch\nif torch.cuda.is_available():\n    x = x.to("cuda")\n    y = x.cuda()\n'
    got = findings(source, CODES)
    assert [f.code for f in got] == ["NM101", "NM103"]
    assert all(f.guard == "torch.cuda.is_available()" for f in got)


def test_index_reaching_map_location_is_kept_only_with_an_accelerator(tmp_path):
    """`torch.load` rejects `cpu:N`: an index that reaches `map_location` must not survive on a CPU-only
    box."""
    torch.save({"w": torch.ones(1)}, tmp_path / "m.pt")
    source = (
        f'import torch\nrank = 0\ndevice = f"cuda:{{rank}}"\n'
        f"state = torch.load({str(tmp_path / 'm.pt')!r}, map_location=device)\n"
    )
    (finding,) = findings(source, ("NM101",))
    assert finding.fix.safety == "safe"
    after = fix_text(source, [finding]).text
    assert 'torch.accelerator.is_available() else "cpu"' in after
    if not torch.accelerator.is_available():
        namespace: dict = {}
        exec(after, namespace)
        assert namespace["device"] == "cpu" and namespace["state"]["w"].device.type == "cpu"


def test_capability_gates_get_no_fix():
    source = (
        "import torch\nfused = device.type == 'cuda'\nopt = torch.optim.AdamW(p, fused=x.is_cuda)\n"
        "if x.is_cuda and torch.cuda.get_device_capability()[0] >= 8:\n    pass\n"
        # litgpt: keyword arguments in a dict; no Neuron kernel of `_fused_adamw_` is known
        "extra_kwargs = {'fused': fabric.device.type == 'cuda'}\n"
    )
    got = [f for f in findings(source, CODES, unsafe=True) if f.code in ("NM104", "NM105")]
    assert [f.code for f in got] == ["NM105", "NM104", "NM104", "NM105"]
    assert all(f.fix is None and "CUDA-only" in f.message for f in got)


def test_a_device_setting_whose_choices_leave_out_neuron_gets_an_unsafe_default():
    """ColossalAI's `choices=["cpu", "cuda"]`, nerfstudio's `Literal["cpu", "cuda", "mps"]`: a default of
    `neuron` would be refused on Trainium, or break the type."""
    source = (
        "import argparse\nfrom typing import Literal\np = argparse.ArgumentParser()\n"
        'p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")\n'
        'p.add_argument("--dev", choices=("cpu", "cuda", "neuron"), default="cuda")\n'
        'class Config:\n    device_type: Literal["cpu", "cuda", "mps"] = "cuda"\n'
        '    other_device: Literal["cpu", "cuda", "neuron"] = "cuda"\n'
    )
    got = {f.line: f for f in findings(source, CODES)}
    assert got[4].fix.safety == "unsafe" and "its `choices=` do not list `neuron`" in got[4].message
    assert got[5].fix.safety == "safe" and "choices" not in got[5].message
    assert got[7].fix.safety == "unsafe" and "its type does not list `neuron`" in got[7].message
    assert got[8].fix.safety == "safe" and "its type" not in got[8].message


def test_unknown_type_owner_is_unsafe():
    """`node.type` may not be a device's (torch's RPC backend validates `d.type` against CUDA's device
    count): the fix is for review."""
    (finding,) = findings('ok = node.type == "cuda"\n', ("NM105",))
    assert finding.fix.safety == "unsafe" and "check that `node` is a device" in finding.message
    (finding,) = findings('ok = x.device.type == "cuda"\n', ("NM105",))
    assert finding.fix.safety == "safe"
    assert (
        fixed('ok = node.type == "cuda"\n', ("NM105",), unsafe=True)
        == 'ok = node.type in ("cuda", "neuron")\n'
    )


TRAIN = """\
import argparse
import io
import os

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda", help="where to train, e.g. cuda:0")
args = parser.parse_args([])
local_rank = int(os.environ.get("LOCAL_RANK", 0))
device = f"cuda:{local_rank}"
model = torch.nn.Linear(4, 2).to(device)
model = model.cuda(local_rank)
x = torch.randn(3, 4).cuda()
if x.is_cuda:
    x = x.float()
dev = torch.device("cuda")
y = torch.zeros(3, 2, device="cuda")
kind = "cuda" if torch.cuda.is_available() else "cpu"
out = model(x) + y.to(args.device)
if "cuda" in device and dev.type == "cuda":
    out = out.cuda(non_blocking=True)
buf = torch.cuda.FloatTensor(2, 2)
blob = io.BytesIO()
torch.save({"w": model.weight}, blob)
blob.seek(0)
state = torch.load(blob, map_location="cuda")
print(out.device.type, buf.device.type, kind, state["w"].device.type)
"""


def _run(source: str, tmp_path) -> subprocess.CompletedProcess:
    script = tmp_path / "train.py"
    script.write_text(source)
    return subprocess.run(
        [sys.executable, str(script)],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "LOCAL_RANK": "0"},
    )


def test_combined_fixes_do_not_overlap_and_run_on_cpu(tmp_path):
    got = findings(TRAIN, CODES)
    assert {f.code for f in got} == set(CODES)
    outcome = fix_text(TRAIN, got, unsafe=True)
    assert outcome.left == [], [(f.code, f.line, why) for f, why in outcome.left]
    after = outcome.text
    cst.parse_module(after)
    assert fixed(after, CODES, unsafe=True) == after
    assert findings(after, CODES) == []
    assert _run(TRAIN, tmp_path).returncode != 0  # the CUDA original fails on this CPU-only machine
    result = _run(after, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["cpu", "cpu", "cpu", "cpu"]


def test_rewritten_strings_stay_strings(tmp_path):
    source = textwrap.dedent("""\
        import torch
        def pick(device="cuda"):
            return device
        d = pick()
        assert isinstance(d, str) and not ("cuda" in d and d.startswith("cuda"))
        rank_device = "cuda:%d" % 0
        assert rank_device.split(":")[1] == "0", rank_device
        t = torch.ones(1).to(rank_device)
        print(d, rank_device, t.device.type)
    """)
    after = fixed(source, CODES, unsafe=True)
    result = _run(after, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["cpu", "cpu:0", "cpu"]


def test_cuda_in_a_stringified_device_is_a_device_check():
    source = 'import torch\nm = torch.nn.Linear(2, 2)\non_gpu = "cuda" in str(next(m.parameters()).device)\n'
    assert fixed(source, ("NM105",)) == (
        "import torch\nm = torch.nn.Linear(2, 2)\n"
        'on_gpu = next(m.parameters()).device.type in ("cuda", "neuron")\n'
    )
    assert fixed('x = "cuda" in str(name)\n', ("NM105",)) == 'x = "cuda" in str(name)\n'


def test_a_device_in_a_parameter_default_is_an_unsafe_fix():
    """The default is the function's interface and is computed at import: the safe tier leaves it for a
    person (with why), `--unsafe-fixes` names the device once at module level."""
    before = (
        "import torch\n\n\n"
        'def save_on_cpu(pin_memory: bool = False, device_type: str = "cuda") -> None:\n'
        "    return getattr(torch, device_type)\n"
    )
    assert fixed(before, ("NM101",)) == before
    [finding] = findings(before, ("NM101",))
    assert finding.fix.safety == "unsafe" and "computed when the function is defined" in finding.message
    assert fixed(before, ("NM101",), unsafe=True) == (
        "import torch\n\n\n"
        "accelerator_type = (torch.accelerator.current_accelerator(check_available=True) or"
        ' torch.device("cpu")).type\n\n\n'
        "def save_on_cpu(pin_memory: bool = False, device_type: str = accelerator_type) -> None:\n"
        "    return getattr(torch, device_type)\n"
    )


def test_a_device_type_name_the_module_only_compares_is_an_unsafe_fix():
    """accelerate's `expected_device_type = "cuda"` is matched against `torch.device(d).type`: on a CPU-only
    machine the idiom would make it "cpu", and the CPU entry of the memory map would count as a device."""
    before = (
        "import torch\ndef count(max_memory):\n    expected_device_type = 'cuda'\n"
        "    return len([d for d in max_memory if torch.device(d).type == expected_device_type])\n"
    )
    assert fixed(before, ("NM101",)) == before
    [finding] = findings(before, ("NM101",))
    assert finding.fix.safety == "unsafe" and "the name is compared" in finding.message
    used = "import torch\ndef f(x):\n    target_device = 'cuda'\n    return x.to(target_device)\n"
    assert "target_device = (torch.accelerator" in fixed(used, ("NM101",))


def test_a_device_test_that_also_asks_for_the_index_keeps_the_meta_device_out():
    """Lightning's device mixin: `if device.type == "cuda" and device.index is None:` gives a device without
    an index the current CUDA index. The fix lets neuron in and keeps every other device out, the meta
    device (which has no index either) among them."""
    source = (
        "import torch\ndef device_of(module):\n    device = module.weight.device\n"
        "    if device.type == 'cuda' and device.index is None:\n"
        "        return torch.device(device.type, torch.cuda.current_device())\n    return device\n"
    )
    after = fixed(source)
    assert "    if device.type in ('cuda', 'neuron') and device.index is None:\n" in after
    plain = source.replace(" and device.index is None", "")
    assert "    if device.type in ('cuda', 'neuron'):\n" in fixed(plain)


def test_code_under_a_device_type_test_names_that_type():
    """Lightning's device mixin: under `if device.type == "cuda" ...` the device's type is the current
    accelerator's, so the index is added to `device.type`, not to a second lookup of the accelerator."""
    source = (
        "import torch\ndef device_of(module):\n    device = module.weight.device\n"
        "    if device.type == 'cuda' and device.index is None:\n"
        "        return torch.device(f'cuda:{torch.cuda.current_device()}')\n    return device\n"
    )
    after = fixed_until_stable(source)
    assert "torch.device(f'{device.type}:{torch.accelerator.current_device_index()}')\n" in after
    assert "current_accelerator" not in after


def test_a_setting_default_in_a_module_that_launches_work_on_a_cluster_is_unsafe():
    """GLiNER's Ray Serve CLI: `--device` defaults to `cuda` for GPU replicas; computed on a launching host
    without an accelerator it would send them `cpu`."""
    source = (
        "import argparse\nimport torch\nfrom dataclasses import dataclass\n\n"
        "p = argparse.ArgumentParser()\np.add_argument('--ray-address', default=None)\n"
        "p.add_argument('--device', default='cuda')\n\n\n"
        "@dataclass\nclass Config:\n    device: str = 'cuda'\n"
    )
    got = [f for f in findings(source) if f.code == "NM101"]
    assert [f.fix.safety for f in got] == ["unsafe", "unsafe"]
    assert all("launches work on a cluster (`--ray-address`)" in f.message for f in got)
    local = source.replace("p.add_argument('--ray-address', default=None)\n", "")
    assert [f.fix.safety for f in findings(local) if f.code == "NM101"] == ["safe", "safe"]


def test_a_device_mesh_gets_the_accelerators_type():
    source = (
        "import torch\nfrom torch.distributed.device_mesh import init_device_mesh\n\n\n"
        "def setup():\n    return init_device_mesh('cuda', (2,))\n"
    )
    after = fixed(source)
    assert "device_type = (torch.accelerator.current_accelerator(check_available=True) or" in after
    assert "return init_device_mesh(device_type, (2,))" in after


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # StyleTTS 2 (review 49): the kernel of a convolution of the input goes where the input is
        (
            "import torch\nfrom torch import nn\n\n\nclass Decoder(nn.Module):\n"
            "    def forward(self, asr, F0_curve, k):\n"
            "        return nn.functional.conv1d(F0_curve.unsqueeze(1), torch.ones(1, 1, k).to('cuda'))\n",
            "torch.ones(1, 1, k).to(F0_curve.device)",
        ),
        (
            "import torch\n\n\ndef mask(x):\n    return torch.mul(x.float(), torch.ones(3, device='cuda'))\n",
            "device=x.device",
        ),
    ],
)
def test_a_tensor_made_for_an_op_goes_where_its_other_tensor_is(source, expected):
    assert expected in fixed(source, layout=Layout(line_length=120))
    [finding] = findings(source, ("NM101",))
    assert "needs it where its other tensor is" in finding.message and finding.fix.safety == "safe"


@pytest.mark.parametrize(
    "source",
    [
        # not a parameter: a module's tensor, whose device the function does not know
        "import torch\nK = torch.ones(3)\n\n\ndef mask():\n"
        "    return torch.mul(K, torch.ones(3).to('cuda'))\n",
        # not a torch op: the user's function may take tensors on different devices
        "import torch\n\n\ndef mask(x):\n    return combine(x, torch.ones(3).to('cuda'))\n",
        # `self` is no tensor
        "import torch\n\n\nclass M:\n    def f(self):\n"
        "        return torch.mul(self, torch.ones(3).to('cuda'))\n",
    ],
)
def test_a_tensor_placed_beside_something_else_gets_the_accelerator(source):
    assert "current_accelerator" in fixed(source)


def test_a_bare_parameter_beside_the_tensor_may_be_a_number():
    """`torch.pow(base, torch.ones(3).to('cuda'))`: `base` may be a float, which has no `.device`; only a
    functional op's input, or a parameter a tensor method is called on, names the device."""
    source = "import torch\n\n\ndef f(base):\n    return torch.pow(base, torch.ones(3).to('cuda'))\n"
    assert "base.device" not in fixed(source)
    functional = (
        "import torch\nimport torch.nn.functional as F\n\n\ndef f(x):\n"
        "    return F.linear(x, torch.ones(2, 2).to('cuda'))\n"
    )
    assert "torch.ones(2, 2).to(x.device)" in fixed(functional)
