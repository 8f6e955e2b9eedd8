"""NM110: catching out-of-memory errors by their CUDA name."""

from __future__ import annotations

from typing import ClassVar

from neuron_migrate.migrate.patterns import QualifiedNameRule
from neuron_migrate.migrate.rule import Invalid


class CudaOomError(QualifiedNameRule):
    """`torch.cuda.OutOfMemoryError` in `except` clauses and `isinstance` checks.

    What it does
    Flags `torch.cuda.OutOfMemoryError`, however it was imported.

    Why it matters on Trainium
    The name suggests only CUDA raises it, and readers port such handlers by hand or drop them.
    `torch.OutOfMemoryError` is the device-neutral name that PyTorch's allocators raise.

    Example
    except torch.cuda.OutOfMemoryError:
        batch_size //= 2

    Use instead
    except torch.OutOfMemoryError:
        batch_size //= 2

    Fix safety
    Safe: `torch.cuda.OutOfMemoryError` is `torch.OutOfMemoryError` (the same class since torch 2.4), so every
    handler catches exactly what it caught before.
    """

    code = "NM110"
    name = "cuda-oom-error"
    message = "`torch.cuda.OutOfMemoryError` is the device-neutral `torch.OutOfMemoryError`: use that name"
    severity = "warning"
    fix_safety = "safe"
    triggers = (b"OutOfMemoryError",)
    names_only = True
    NAMES: ClassVar[dict[str, str | None]] = {"torch.cuda.OutOfMemoryError": "torch.OutOfMemoryError"}
    VALID = (
        "import torch\ntry:\n    step()\nexcept torch.OutOfMemoryError:\n    pass\n",
        "try:\n    step()\nexcept MemoryError:\n    pass\n",
    )
    INVALID = (
        Invalid(
            "import torch\ntry:\n    step()\nexcept torch.cuda.OutOfMemoryError:\n"
            "    torch.cuda.empty_cache()\n",
            "import torch\ntry:\n    step()\nexcept torch.OutOfMemoryError:\n    torch.cuda.empty_cache()\n",
        ),
        Invalid(
            "from torch.cuda import OutOfMemoryError\n\ndef is_oom(e):\n"
            "    return isinstance(e, OutOfMemoryError)\n",
            "import torch\n\ndef is_oom(e):\n    return isinstance(e, torch.OutOfMemoryError)\n",
        ),
    )
