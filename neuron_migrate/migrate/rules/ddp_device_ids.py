"""NM302: `DistributedDataParallel` given CUDA device ids (`device_ids=[local_rank]`, `output_device`)."""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from neuron_migrate.migrate.fixes import AVAILABLE as _ON
from neuron_migrate.migrate.guards import accelerator_certain
from neuron_migrate.migrate.lexicon import Lexicon
from neuron_migrate.migrate.patterns import keyword, positional, spells_names
from neuron_migrate.migrate.rule import FixSpec, Invalid, Replacement, Rule


class DdpDeviceIds(Rule):
    """`DistributedDataParallel(model, device_ids=[local_rank], output_device=local_rank)`.

    What it does
    Flags `DistributedDataParallel` calls that pass a non-empty `device_ids` list or an `output_device`,
    unless the call already sits under an accelerator-availability check.

    Why it matters on Trainium
    `device_ids` names the one device a single-device accelerator module lives on; DDP moves the inputs
    there. For a CPU module DDP rejects any `device_ids`/`output_device` (ValueError). On `neuron` the ids
    are NeuronCore indices: whether `local_rank` is the right index depends on how many cores each process
    sees (`NEURON_RT_VISIBLE_CORES`).

    Example
    model = DistributedDataParallel(model, device_ids=[local_rank], output_device=local_rank)

    Use instead
    model = DistributedDataParallel(
        model,
        device_ids=[local_rank] if torch.accelerator.is_available() else None,
        output_device=local_rank if torch.accelerator.is_available() else None,
    )

    Fix safety
    Unsafe: the ids are kept where there is an accelerator and dropped (None) without one, which is the
    same on CUDA and lets the CPU fallback run. Check that the index is right for the NeuronCores each
    process sees, or pass `device_ids=None` and move the inputs to the device yourself.
    """

    code = "NM302"
    name = "ddp-device-ids"
    message = (
        "`device_ids`/`output_device` name CUDA devices and fail for CPU modules: pass them only when an "
        "accelerator is present"
    )
    severity = "warning"
    fix_safety = "unsafe"
    triggers = (b"DistributedDataParallel",)
    NAMES: ClassVar[set[str]] = {
        "torch.nn.parallel.DistributedDataParallel",
        "torch.nn.parallel.distributed.DistributedDataParallel",
    }
    VALID = (
        "from torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(model)\n",
        "import torch\nmodel = torch.nn.parallel.DistributedDataParallel(model, device_ids=None)\n",
        (
            "import torch\nif torch.accelerator.is_available():\n"
            "    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])\n"
        ),
        "import torch\nmodel = torch.nn.DataParallel(model, device_ids=[0, 1])\n",
    )
    INVALID = (
        Invalid(
            "from torch.nn.parallel import DistributedDataParallel as DDP\n"
            "model = DDP(model, device_ids=[local_rank], output_device=local_rank)\n",
            "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(\n"
            "    model,\n    device_ids=[local_rank] if torch.accelerator.is_available() else None,\n"
            "    output_device=local_rank if torch.accelerator.is_available() else None,\n)\n",
        ),
        Invalid(
            "import torch.nn as nn\nmodel = nn.parallel.DistributedDataParallel(model, [args.gpu])\n",
            "import torch\nimport torch.nn as nn\n"
            "model = nn.parallel.DistributedDataParallel(model, [args.gpu] if"
            " torch.accelerator.is_available() else None)\n",
        ),
    )

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """A use of `DistributedDataParallel`: every finding is a call of one of NAMES."""
        return spells_names(cls, lex)

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.call_name(node) not in self.NAMES or accelerator_certain(self.ctx):
            return
        device_ids = keyword(node, "device_ids") or positional(node, 1)
        output_device = keyword(node, "output_device") or positional(node, 2)
        flagged = []
        if (
            device_ids is not None
            and isinstance(device_ids.value, (cst.List, cst.Tuple))
            and device_ids.value.elements
        ):
            flagged.append(device_ids.value)
        if (
            output_device is not None
            and not isinstance(output_device.value, cst.IfExp)
            and not (isinstance(output_device.value, cst.Name) and output_device.value.value == "None")
        ):
            flagged.append(output_device.value)
        if flagged:
            edits = tuple(Replacement(v, f"{self.ctx.code(v)} if {_ON} else None") for v in flagged)
            self.report(
                node,
                fix=FixSpec(
                    "Pass the device ids only when an accelerator is present", edits, imports=("torch",)
                ),
            )
