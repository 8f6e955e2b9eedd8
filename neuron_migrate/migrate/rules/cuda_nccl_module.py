"""NM303: `torch.cuda.nccl`, PyTorch's direct bindings to NCCL."""

from __future__ import annotations

from typing import ClassVar

from neuron_migrate.migrate.patterns import QualifiedNameRule
from neuron_migrate.migrate.rule import Invalid


class CudaNcclModule(QualifiedNameRule):
    """`torch.cuda.nccl`: PyTorch's direct bindings to NCCL.

    What it does
    Flags every use of `torch.cuda.nccl` and its functions (`all_reduce`, `broadcast`, `version`, ...).

    Why it matters on Trainium
    These call NCCL on CUDA tensors directly; there is no NCCL and no CUDA tensor on a Trainium instance.
    `torch.distributed` collectives run on whichever backend the process group uses, including TorchNeuron's.

    Example
    torch.cuda.nccl.all_reduce(tensors)

    Use instead
    torch.distributed.all_reduce(tensor)

    Fix safety
    No automatic fix: the calling conventions differ (a list of per-GPU tensors in one process versus one
    tensor per rank). A `torch.cuda.nccl.version()` check is a CUDA capability gate: keep it on the CUDA path.
    """

    code = "NM303"
    name = "cuda-nccl-module"
    message = "`{name}` calls NCCL directly and is CUDA-only: use `torch.distributed` collectives"
    severity = "error"
    triggers = (b"nccl",)
    names_only = True
    NAMES: ClassVar[dict[str, str | None]] = {"torch.cuda.nccl": None, "torch.cuda.nccl.*": None}
    VALID = ("import torch.distributed as dist\ndist.all_reduce(t)\n", "import torch\nbackend = 'nccl'\n")
    INVALID = (
        Invalid(
            "import torch\ntorch.cuda.nccl.all_reduce(tensors)\n",
        ),
        Invalid(
            "from torch.cuda import nccl\nif nccl.version() >= (2, 18):\n    nccl.broadcast(ts)\n",
            count=2,
        ),
    )
