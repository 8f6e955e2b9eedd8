"""NM101: `'cuda'` / `'cuda:N'` / `f"cuda:{i}"` strings where they are used as a device."""

from __future__ import annotations

import libcst as cst

from neuron_migrate.migrate.conditions import cuda_string
from neuron_migrate.migrate.device_flow import device_conditional, value_slot
from neuron_migrate.migrate.device_literals import (
    agnostic_device,
    agnostic_string,
    fit,
    has_index,
    is_cuda_string,
)
from neuron_migrate.migrate.fixes import AVAILABLE, DEVICE
from neuron_migrate.migrate.lexicon import Lexicon
from neuron_migrate.migrate.operand_device import operand_device
from neuron_migrate.migrate.patterns import without_argument
from neuron_migrate.migrate.rule import FixSpec, Invalid, Replacement, Rule

_FORK_RNG = (
    "`fork_rng(device_type='cuda')` forks CUDA's generators only, and `device_type='cpu'` raises in "
    "torch 2.13: pass the accelerator's type only when `torch.accelerator.is_available()`, or none "
    "(torch 2.13 then forks the current accelerator's, CUDA's without one)"
)
#: `torch.load(map_location=...)` rejects `cpu:N`: an index is kept only where there is an accelerator
_MAP_LOCATION_CPU = '"cpu"'


class CudaDeviceString(Rule):
    """A CUDA device string used as a device.

    What it does
    Flags `'cuda'`, `'cuda:N'`, `f"cuda:{i}"`, `"cuda:{}".format(i)`, `"cuda:%d" % i` and `"cuda:" + str(i)`
    where they are used as a device: the first argument of `.to()`, any `device=`, `map_location=`,
    `device_type=`, `torch.set_default_device()`, a device mesh's type (`init_device_mesh("cuda", ...)`); a
    value assigned to a name called `device`, `dev`, `device_type` or `*_device`, or to a name that reaches
    one of those places elsewhere in the module; the
    default of such a parameter, of a `--device` command-line option or of `.get("device", ...)`; a
    `{"device": ...}` value; the value returned by a `*device*` function. `'cuda'` in comments, docstrings,
    log and help texts, annotations, dict keys and Lightning's `accelerator=` is not a device and is left
    alone; `torch.device('cuda')` is NM102 and `'cuda' if ... else 'cpu'` is NM105.

    Why it matters on Trainium
    The Trainium device is `neuron`: a tensor or model sent to `'cuda'` fails with "Torch not compiled with
    CUDA enabled", and a `--device cuda` default makes every run fail unless someone passes a flag.

    Example
    device = f"cuda:{local_rank}"
    model.to(device)
    batch = torch.ones(8, device="cuda")

    Use instead
    accelerator = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")
    device = f"{accelerator.type}:{local_rank}"
    model.to(device)
    batch = torch.ones(8, device=accelerator)

    Fix safety
    Safe: on a CUDA machine every rewrite names the same device as before (`current_accelerator()` is
    `cuda`, without an index, like `'cuda'`); on `neuron` it names `neuron`; without an accelerator, `cpu`.
    A string stays a string (the accelerator's type, with the same index), so later string tests,
    formatting and serialisation keep working; `cpu:N` is a valid placement. Only where a torch API takes the
    value directly does a bare `'cuda'` become the device itself. An index that reaches `torch.load(
    map_location=...)` is kept only when there is an accelerator (`"cpu"` otherwise: `torch.load` rejects
    `cpu:N`). The device is named once per function: an existing name for it is reused, and a function that
    needs it several times gets one `device = ...` line (a test module whose tests need it, one `DEVICE =
    ...` after its imports). `fork_rng(device_type="cuda")` loses the argument:
    torch 2.13 forks the current accelerator's generators by default, and CUDA's without one, as the string
    did (no fix when the string reaches it through a name). A parameter's
    default is an unsafe fix: it is the function's interface, and it is computed when the function is defined.
    So is a value for a name that only its name calls a device and that the module compares
    (`expected_device_type = "cuda"` matched against `torch.device(d).type`): without an accelerator the idiom
    is `cpu`, which would match the CPU entries. A tensor placed for a torch op beside a parameter's tensor
    (`F.conv1d(x.unsqueeze(1), torch.ones(1, 1, k).to("cuda"))`: a parameter a tensor method is called on, or
    a `torch.nn.functional` op's input) goes where that tensor is, `x.device`: the op takes its tensors on
    one device, so wherever the original ran that was the current CUDA device, and it needs no newer torch.
    """

    code = "NM101"
    name = "cuda-device-string"
    message = (
        "CUDA device string: use the current accelerator "
        "(`torch.accelerator.current_accelerator()`, CPU when there is none)"
    )
    severity = "error"
    fix_safety = "safe"
    triggers = (b"cuda",)
    VALID = (
        (
            '"""Runs on CUDA."""\n# use cuda here\nimport logging\nlogger = logging.getLogger()\n'
            'print("cuda device", 0)\nlogger.info("using cuda:%d", 0)\nprint("cuda")\n'
        ),
        'import argparse\np = argparse.ArgumentParser()\np.add_argument("--device", help="e.g. cuda:0")\n',
        'x: "cuda" = None\ncfg = {"accelerator": "gpu", "backend": "cuda"}\nbackends = {"cuda": "nccl"}\n',
        'import lightning as L\ntrainer = L.Trainer(accelerator="cuda", devices=1)\n',
        'cuda_note = "see docs"\nprint(cuda_note)\nname = "cuda"\nprint(f"running on {name}")\n',
        (
            'import torch\nd = torch.device("cuda")\nwith torch.autocast("cuda"):\n    pass\n'
            'torch.amp.autocast(device_type="cuda")\n'
        ),
        'import torch\nok = x.device.type == "cuda"\nd = "cuda" if torch.cuda.is_available() else "cpu"\n',
        'import os\nos.environ["CUDA_VISIBLE_DEVICES"] = "0"\nkind = "cuda"\nif backend == "nccl":\n'
        "    pass\n",
    )
    INVALID = (
        Invalid(
            'import torch\nx = torch.ones(2).to("cuda")\n',
            "import torch\nx = torch.ones(2).to(torch.accelerator.current_accelerator(check_available=True)"
            ' or torch.device("cpu"))\n',
        ),
        Invalid(
            "import os\nimport torch\n\nlocal_rank = int(os.environ.get('LOCAL_RANK', 0))\n"
            'device = f"cuda:{local_rank}"\nmodel = torch.nn.Linear(2, 2).to(device)\n'
            'x = torch.ones(1, 2, device="cuda")\nif torch.cuda.is_available():\n    y = x.to("cuda:0")\n',
            "import os\nimport torch\n\nlocal_rank = int(os.environ.get('LOCAL_RANK', 0))\n"
            "accelerator = torch.accelerator.current_accelerator(check_available=True) or "
            'torch.device("cpu")\n'
            'device = f"{accelerator.type}:{local_rank}"\nmodel = torch.nn.Linear(2, 2).to(device)\n'
            "x = torch.ones(1, 2, device=accelerator)\nif torch.cuda.is_available():\n"
            "    y = x.to(torch.device(accelerator.type, 0))\n",
            count=3,
        ),
        Invalid(
            'def run(model, device="cuda"):\n    return model.to(device)\n',
            "import torch\ndef run(model,"
            " device=(torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")).type):\n    return model.to(device)\n',
        ),
        Invalid(
            "import argparse\nimport torch as th\np = argparse.ArgumentParser()\n"
            'p.add_argument("--device", default="cuda", help="e.g. cuda:0")\ncfg = {"device": "cuda:1"}\n'
            'gpu = cfg.get("device", "cuda")\nz = th.zeros(2, device=gpu)\n',
            "import argparse\nimport torch as th\np = argparse.ArgumentParser()\n"
            "device_type = (th.accelerator.current_accelerator(check_available=True) or"
            ' th.device("cpu")).type\n'
            'p.add_argument("--device", default=device_type, help="e.g. cuda:0")\n'
            'cfg = {"device": f"{device_type}:1"}\ngpu = cfg.get("device", device_type)\n'
            "z = th.zeros(2, device=gpu)\n",
            count=3,
        ),
        Invalid(
            'import torch\ntarget = "cuda:{}".format(rank)\nbatch = batch.to(target, non_blocking=True)\n'
            'ckpt = torch.load("m.pt", map_location="cuda:%d" % rank)\n',
            "import torch\ndevice_type = (torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")).type\ntarget = f"{device_type}:{rank}"\n'
            "batch = batch.to(target, non_blocking=True)\n"
            'ckpt = torch.load("m.pt", map_location=device_type + ":" + "%d" % rank if'
            ' torch.accelerator.is_available() else "cpu")\n',
            count=2,
        ),
        Invalid(
            'import torch\ndev, dtype = "cuda", torch.float16\nopts = dict(device="cuda")\n',
            "import torch\ndevice_type = (torch.accelerator.current_accelerator(check_available=True) or"
            ' torch.device("cpu")).type\ndev, dtype = device_type, torch.float16\n'
            "opts = dict(device=device_type)\n",
            count=2,
        ),
        Invalid(
            'import torch\nwith torch.random.fork_rng(enabled=True, device_type="cuda"):\n    pass\n',
            "import torch\nwith torch.random.fork_rng(enabled=True):\n    pass\n",
        ),
        Invalid(
            'import torch\ntype_ = "cuda"\nwith torch.random.fork_rng(device_type=type_):\n    pass\n',
        ),
        Invalid(  # StyleTTS 2's decoder: the kernel goes where the input is (`operand_device`)
            "import torch\nimport torch.nn.functional as F\n\n\ndef smooth(x):\n"
            '    return F.conv1d(x.unsqueeze(1), torch.ones(1, 1, 1).to("cuda"))\n',
            "import torch\nimport torch.nn.functional as F\n\n\ndef smooth(x):\n"
            "    return F.conv1d(x.unsqueeze(1), torch.ones(1, 1, 1).to(x.device))\n",
        ),
    )

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """A CUDA device string among the code's string values."""
        return cuda_string(lex)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        self._check(node)

    def visit_ConcatenatedString(self, node: cst.ConcatenatedString) -> None:
        self._check(node)

    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        self._check(node)

    def visit_Call(self, node: cst.Call) -> None:
        self._check(node)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        self._check(node)

    def _check(self, node: cst.BaseExpression) -> None:
        if not is_cuda_string(node):
            return
        parent = self.ctx.parent
        if isinstance(parent, cst.IfExp) and node is not parent.test and device_conditional(self.ctx, parent):
            return  # NM105's
        self.ctx.defer(lambda: self._decide(node))

    def _default_fork(self, node: cst.BaseExpression) -> FixSpec | None:
        """`fork_rng(..., device_type="cuda")` without the argument: torch 2.13 takes the current
        accelerator's type (CUDA's on CUDA, `neuron` on Trainium) and falls back to CUDA's without one, which
        is what an older torch always took."""
        arg, call = self.ctx.parent, self.ctx.ancestor(2)
        if not (isinstance(arg, cst.Arg) and arg.value is node and isinstance(call, cst.Call)):
            return None
        if has_index(node) or any(a.star for a in call.args):
            return None
        return FixSpec(
            "Fork the current accelerator's generators (the default)",
            (Replacement(call, without_argument(self, call, arg)),),
        )

    def _decide(self, node: cst.BaseExpression) -> None:
        """After the walk: whether `node` fills a device slot (names used as devices further down count)."""
        indexed = has_index(node)
        slot = value_slot(self.ctx, indexed)
        if slot is None:
            return
        if slot.kind == "none":
            self.report(node, _FORK_RNG, self._default_fork(node))
            return
        parent = self.ctx.parent
        if slot.kind == "device" and not indexed and (operand := operand_device(self.ctx, node)) is not None:
            text, op = operand
            short = op.rsplit(".", 1)[-1]
            self.report(
                node,
                f"CUDA device string in {slot.where}: `{short}` needs it where its other tensor is: use "
                f"`{text}`",
                FixSpec(f"Place it where `{short}`'s other tensor is", (Replacement(node, text),)),
            )
            return
        message = f"CUDA device string in {slot.where}: use the current accelerator (CPU when there is none)"
        needs_name = False
        if slot.kind == "device" and not indexed:
            text, what = fit(DEVICE, parent), "the current accelerator"
        elif slot.kind == "device" and not slot.map_location:
            (text, needs_name), what = agnostic_device(self.ctx, node), "the current accelerator, same index"
        else:
            (text, needs_name), what = agnostic_string(self.ctx, node), "the current accelerator's type"
        if indexed and slot.map_location:  # `cpu:N` cannot be loaded onto: no index without an accelerator
            text = fit(f"{text} if {AVAILABLE} else {_MAP_LOCATION_CPU}", parent, node=node)
            what += ' (`"cpu"` without one: `torch.load` rejects `cpu:N`)'
        fix = FixSpec(
            f"Replace the CUDA device string with {what}",
            (Replacement(node, text),),
            imports=("torch",),
            needs_name=needs_name,
            safety="unsafe" if slot.review else None,
        )
        self.report(node, message + slot.review, fix)
