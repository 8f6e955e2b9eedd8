"""NM111: Lightning's own accelerator vocabulary tied to CUDA (`accelerator="cuda"`/`"gpu"`,
`CUDAAccelerator`)."""

from __future__ import annotations

import libcst as cst

from neuron_migrate.migrate.conditions import any_string, uses
from neuron_migrate.migrate.device_literals import string_value
from neuron_migrate.migrate.lexicon import Lexicon
from neuron_migrate.migrate.patterns import QualifiedNameRule, keyword, spells_names
from neuron_migrate.migrate.rule import Invalid

_ENTRY_POINTS = (
    {
        f"{package}.{name}"
        for package in (
            "lightning",
            "lightning.pytorch",
            "pytorch_lightning",
            "lightning.fabric",
            "lightning_fabric",
        )
        for name in ("Trainer", "Fabric")
    }
    | {  # where the classes are defined: lm-eval's `from lightning.pytorch.trainer.trainer import Trainer`
        f"{package}.trainer.trainer.Trainer" for package in ("lightning.pytorch", "pytorch_lightning")
    }
    | {f"{package}.fabric.Fabric" for package in ("lightning.fabric", "lightning_fabric")}
)
_CUDA_ACCELERATORS = {
    f"{package}.accelerators.CUDAAccelerator"
    for package in ("lightning.pytorch", "pytorch_lightning", "lightning.fabric", "lightning_fabric")
} | {
    f"{package}.accelerators.cuda.CUDAAccelerator"
    for package in ("lightning.pytorch", "pytorch_lightning", "lightning.fabric", "lightning_fabric")
}
_CUDA_NAMES = ("cuda", "gpu")
_USES_ENTRY_POINT = uses(_ENTRY_POINTS)


class LightningCudaAccelerator(QualifiedNameRule):
    """Lightning set up for CUDA: `Trainer(accelerator="gpu")`, `Fabric(accelerator="cuda")`, `CUDAAccelerator`.

    What it does
    Reports `accelerator="cuda"` / `"gpu"` given to Lightning's `Trainer` or `Fabric` (`lightning`,
    `pytorch_lightning`, `lightning_fabric`), and uses of Lightning's `CUDAAccelerator`.

    Why it matters on Trainium
    These are Lightning's accelerator names, not torch devices: `"cuda"`/`"gpu"` select Lightning's CUDA
    accelerator, which fails on a Trainium instance. Lightning has no `neuron` accelerator yet, so
    `accelerator="neuron"` raises and `"auto"` falls back to the CPU.

    Example
    trainer = L.Trainer(accelerator="gpu", devices=8)

    Use instead
    trainer = L.Trainer(accelerator="gpu", devices=8)  # kept for CUDA; on Trainium use a plain PyTorch loop
    # (or register a custom Lightning Accelerator for the `neuron` device)

    Fix safety
    No automatic fix: renaming Lightning's accelerator breaks Lightning, and there is no neuron accelerator to
    rename it to. The finding is for a person to plan the Trainium path.
    """  # noqa: E501 - rendered verbatim into docs/rules.md

    code = "NM111"
    name = "lightning-cuda-accelerator"
    message = (
        "Lightning's `accelerator={value!r}` selects its CUDA accelerator, and Lightning has no `neuron` "
        "accelerator yet: keep it for CUDA and plan the Trainium run (plain PyTorch, or a custom "
        "Lightning `Accelerator`)"
    )
    severity = "warning"
    triggers = (b"accelerator", b"CUDAAccelerator")
    NAMES = dict.fromkeys(_CUDA_ACCELERATORS)
    VALID = (
        "import lightning as L\ntrainer = L.Trainer(accelerator='cpu')\n",
        "import lightning as L\ntrainer = L.Trainer(accelerator='auto', devices=1)\n",
        "import mylib\nrun = mylib.Trainer(accelerator='gpu')\n",
    )
    INVALID = (
        Invalid("import lightning as L\ntrainer = L.Trainer(accelerator='gpu', devices=8)\n"),
        Invalid(  # lm-eval's NeMo backend imports the class from where it is defined
            "from lightning.pytorch.trainer.trainer import Trainer\ntrainer = Trainer(accelerator='gpu')\n"
        ),
        Invalid("from lightning.fabric import Fabric\nfabric = Fabric(accelerator='cuda', devices=2)\n"),
        Invalid("from pytorch_lightning.accelerators import CUDAAccelerator\nacc = CUDAAccelerator()\n"),
        Invalid(
            "import lightning as L\nimport torch\nfabric = L.Fabric(accelerator='cuda' if "
            "torch.cuda.is_available() else 'cpu')\n"
        ),
    )

    @classmethod
    def can_report(cls, lex: Lexicon) -> bool:
        """A use of `CUDAAccelerator`, or `accelerator=` with a CUDA name in a file that uses `Trainer` or
        `Fabric`."""
        return spells_names(cls, lex) or (
            "accelerator" in lex.names
            and _USES_ENTRY_POINT(lex)
            and any_string(lex, lambda s: s.lower() in _CUDA_NAMES)
        )

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.call_name(node) not in _ENTRY_POINTS:
            return
        arg = keyword(node, "accelerator")
        if arg is None:
            return
        values = (arg.value.body, arg.value.orelse) if isinstance(arg.value, cst.IfExp) else (arg.value,)
        for value in (string_value(v) for v in values):
            if value is not None and value.lower() in _CUDA_NAMES:
                self.report(arg, self.message.format(value=value))
                return

    def message_for(self, name: str) -> str:
        return (
            "Lightning's `CUDAAccelerator` drives CUDA only, and Lightning has no `neuron` accelerator yet: "
            "keep it for CUDA and plan the Trainium run (plain PyTorch, or a custom Lightning `Accelerator`)"
        )
