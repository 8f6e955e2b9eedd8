"""NM110: catching out-of-memory errors by their CUDA name."""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from neuron_migrate.migrate.patterns import QualifiedNameRule
from neuron_migrate.migrate.rule import Invalid

_SAME_CLASS = (
    "the same class under its CUDA name, so this already catches a `torch.OutOfMemoryError` from any "
    "device: no change needed"
)


class CudaOomError(QualifiedNameRule):
    """`torch.cuda.OutOfMemoryError` in `except` clauses and `isinstance` checks.

    What it does
    Flags `torch.cuda.OutOfMemoryError`, however it was imported.

    Why it matters on Trainium
    It does not: `torch.cuda.OutOfMemoryError` is `torch.OutOfMemoryError` (the same class since torch 2.4,
    and TorchNeuron needs torch 2.13), the device-neutral error PyTorch's allocators raise, so the handler
    already catches what it would catch under its generic name. The finding says so, for a reader who would
    otherwise port or drop the handler by hand.

    Example
    except torch.cuda.OutOfMemoryError:
        batch_size //= 2

    Use instead
    The same code; `except torch.OutOfMemoryError:` reads better in new code.

    Fix safety
    No change: renaming the class changes nothing on any device (maintainers rejected the rename as noise in
    16 of 20 reviewed hunks). A handler an earlier one of the same `try` makes unreachable (`except
    RuntimeError:` above it catches every out-of-memory error) says that instead.
    """

    code = "NM110"
    name = "cuda-oom-error"
    message = "`torch.cuda.OutOfMemoryError` is the device-neutral `torch.OutOfMemoryError`"
    severity = "info"
    fix_safety = "none"
    triggers = (b"OutOfMemoryError",)
    names_only = True
    NAMES: ClassVar[dict[str, str | None]] = {"torch.cuda.OutOfMemoryError": "torch.OutOfMemoryError"}
    VALID = (
        "import torch\ntry:\n    step()\nexcept torch.OutOfMemoryError:\n    pass\n",
        "try:\n    step()\nexcept MemoryError:\n    pass\n",
    )
    INVALID = (
        Invalid("import torch\ntry:\n    step()\nexcept torch.cuda.OutOfMemoryError:\n    batch //= 2\n"),
        Invalid(  # FlagEmbedding: `except RuntimeError` above catches it first
            "import torch\ntry:\n    step()\nexcept RuntimeError:\n    pass\n"
            "except torch.cuda.OutOfMemoryError:\n    pass\n",
        ),
        Invalid(
            "from torch.cuda import OutOfMemoryError\n\ndef is_oom(e):\n"
            "    return isinstance(e, OutOfMemoryError)\n",
        ),
    )

    def on_use(self, node: cst.Name | cst.Attribute, call: cst.Call | None, name: str) -> None:
        earlier = self._caught_earlier()
        self.report(
            node,
            no_change=_SAME_CLASS
            if earlier is None
            else f"`{earlier}` above it catches every out-of-memory error first, so this handler never runs",
        )

    def _caught_earlier(self) -> str | None:
        """For a use in the type of an `except` clause, the broader type an earlier clause of the same `try`
        catches (`RuntimeError`, `Exception`, a bare `except`), which leaves this clause unreachable."""
        stack = self.ctx.stack
        at = next((i for i in range(len(stack) - 1, 0, -1) if isinstance(stack[i], cst.ExceptHandler)), None)
        if at is None or at + 1 >= len(stack) or stack[at + 1] is not stack[at].type:
            return None
        handler, statement = stack[at], stack[at - 1]
        for earlier in getattr(statement, "handlers", ()):
            if earlier is handler:
                return None
            if earlier.type is None:
                return "except"
            kinds = (
                [e.value for e in earlier.type.elements]
                if isinstance(earlier.type, cst.Tuple)
                else [earlier.type]
            )
            for kind in kinds:
                if isinstance(kind, cst.Name) and kind.value in _BROADER:
                    return f"except {kind.value}"
        return None


#: the built-in exceptions `torch.OutOfMemoryError` derives from
_BROADER = frozenset({"RuntimeError", "Exception", "BaseException"})
