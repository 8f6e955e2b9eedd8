"""NM305: `torch.nn.DataParallel`, single-process multi-GPU data parallelism, which scatters with CUDA's
kernels."""

from __future__ import annotations

from typing import ClassVar

from neuron_migrate.migrate.patterns import QualifiedNameRule
from neuron_migrate.migrate.rule import Invalid


class DataParallel(QualifiedNameRule):
    """`nn.DataParallel(model)` and `nn.parallel.data_parallel(model, inputs)`.

    What it does
    Flags `torch.nn.DataParallel` (also through `torch.nn.parallel` and `torch.nn.parallel.data_parallel`)
    and the functional `torch.nn.parallel.data_parallel`.

    Why it matters on Trainium
    DataParallel takes the devices of the accelerator it finds, `neuron` included, and splits each batch
    over them with `torch._C._scatter`, which exists only in CUDA builds of PyTorch, and TorchNeuron runs on
    the CPU build (installed from `download.pytorch.org/whl/cpu`): on a Trainium host its forward raises
    `AttributeError`, even with one device (the stand-in device reproduces it with torch 2.13). Without any
    accelerator it just calls the module, as before. Trainium runs data parallelism as one process per
    NeuronCore: `DistributedDataParallel` (or FSDP2) under `torchrun`.

    Example
    model = nn.DataParallel(model)

    Use instead
    # torchrun --nproc-per-node <NeuronCores> train.py
    model = nn.parallel.DistributedDataParallel(model)

    Fix safety
    No automatic fix: moving to one process per device changes how the script starts, samples its data and
    saves checkpoints. Code that only serves the wrapper (`if torch.cuda.device_count() > 1:` around it, a
    method that moves inputs for it) keeps its CUDA code until it is replaced; the rest of its function (the
    model moved to the device before it is wrapped) is still rewritten, as it stays right with DDP.
    """

    code = "NM305"
    name = "data-parallel"
    message = (
        "`{short}` scatters each batch with CUDA-only kernels (`torch._C._scatter`) and fails on Trainium: "
        "use `DistributedDataParallel` with one process per NeuronCore (`torchrun`), or one device"
    )
    severity = "error"
    fix_safety = "none"
    holds_function = False
    triggers = (b"DataParallel", b"data_parallel")
    names_only = True
    NAMES: ClassVar[dict[str, str | None]] = dict.fromkeys(
        (
            "torch.nn.DataParallel",
            "torch.nn.parallel.DataParallel",
            "torch.nn.parallel.data_parallel.DataParallel",
            "torch.nn.parallel.data_parallel",
            "torch.nn.parallel.data_parallel.data_parallel",
        )
    )
    VALID = (
        "import torch\nmodel = torch.nn.parallel.DistributedDataParallel(model)\n",
        "from torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(model)\n",
        "from mylib import DataParallel\nmodel = DataParallel(model)\n",
    )
    INVALID = (
        Invalid("import torch.nn as nn\nmodel = nn.DataParallel(model).cuda()\n"),
        Invalid(
            "import torch\nif torch.cuda.device_count() > 1:\n    model = torch.nn.DataParallel(model)\n"
        ),
        Invalid("from torch.nn.parallel import data_parallel\nout = data_parallel(model, batch)\n"),
    )
