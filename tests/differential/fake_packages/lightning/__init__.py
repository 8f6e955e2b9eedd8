"""A stand-in for `lightning` (not installed here): Trainer and Fabric accept and reject accelerator names the way
Lightning 2.x does. Its names are Lightning's own vocabulary, not torch device types: 'gpu' and 'cuda' need
CUDA, and there is no 'neuron' accelerator (Lightning raises for unknown names)."""

from __future__ import annotations

import torch

_ACCELERATORS = {"cpu": "cpu", "gpu": "cuda", "cuda": "cuda", "mps": "mps", "tpu": "xla", "auto": None}


class MisconfigurationException(Exception):
    """lightning.fabric.utilities.exceptions.MisconfigurationException"""


def _device_type(accelerator: str) -> str:
    if accelerator not in _ACCELERATORS:
        raise MisconfigurationException(
            f"You selected an invalid accelerator name: `accelerator={accelerator!r}`. Available names are: "
            f"{', '.join(sorted(_ACCELERATORS))}.")
    kind = _ACCELERATORS[accelerator]
    if kind == "cuda" and not torch.cuda.is_available():
        raise MisconfigurationException(
            "CUDAAccelerator can not run on your system since the accelerator is not available.")
    if kind is None:  # 'auto' picks CUDA when there is one (Lightning has no neuron accelerator yet)
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    return kind


class Trainer:
    """lightning.Trainer: `fit` puts the model on the accelerator's device."""

    def __init__(self, accelerator: str = "auto", devices: object = "auto", precision: str = "32-true",
                 max_epochs: int = 1) -> None:
        self.device_type = _device_type(accelerator)
        self.precision = precision
        self.max_epochs = max_epochs

    def fit(self, model: torch.nn.Module) -> torch.nn.Module:
        return model.to(self.device_type)


class Fabric(Trainer):
    """lightning.Fabric"""

    @property
    def device(self) -> torch.device:
        return torch.device(self.device_type)

    def setup(self, model: torch.nn.Module) -> torch.nn.Module:
        return model.to(self.device)


class LightningModule(torch.nn.Module):
    """lightning.LightningModule: `device` is where the module's parameters are (the CPU without any)."""

    @property
    def device(self) -> torch.device:
        return next(self.parameters(), torch.ones(0)).device
