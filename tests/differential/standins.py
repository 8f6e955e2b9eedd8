"""Permissive stand-ins for the names rule examples use without defining them (`model`, `x`, `args`,
`rank`...).

Rule examples are fragments of training scripts. To execute them, their free names get small, real values of
the kind a training script would hold at that point: CPU tensors and a CPU model (data and models start on the
host), ranks that name the environment's last device (1 under the two-device CUDA emulation, so that a lost
index shows; 0 on the CPU and the one-device stand-in), an `args` namespace whose `device` is the
environment's device type. Module names (`torch`, `os`) are never stand-ins: a rewrite that forgets an import
must fail.
"""

from __future__ import annotations

import types
from typing import Any

import torch

#: environment -> (device type a user would pass, number of devices)
ENVIRONMENTS = {"cuda": ("cuda", 2), "cpu": ("cpu", 0), "neuron": ("neuron", 1)}


class TinyModel(torch.nn.Linear):
    """A Linear(2, 2) that fragments may also call without an input (`m()` in a timing helper)."""

    def __init__(self) -> None:
        super().__init__(2, 2)

    def forward(self, input: torch.Tensor | None = None) -> torch.Tensor:
        if input is None:
            input = torch.ones(1, 2, device=self.weight.device)
        return super().forward(input)


#: arguments for the parameters of a fragment's functions, where the module-level stand-in of the same name
#: would not fit (`s` is an RNG state at module level in one example and a seed parameter in another)
ARGUMENTS: dict[str, Any] = {"s": 1234, "seed": 1234}


def standins(env: str) -> dict[str, Any]:
    """Fresh stand-ins for one run in `env` (`cuda` emulation, plain `cpu`, or the `neuron` stand-in)."""
    kind, count = ENVIRONMENTS[env]
    index = max(count - 1, 0)
    torch.manual_seed(0)
    model = TinyModel()
    x = torch.arange(8, dtype=torch.float32).reshape(4, 2) / 8
    options = {
        "device": kind,
        "amp": True,
        "fp16": True,
        "fp32": False,
        "tf32": True,
        "det": True,
        "gpu": index,
        "which": index,
        "local_rank": index,
        "dist_backend": "nccl" if env == "cuda" else "gloo",
        "seed": 0,
        "batch_size": 2,
    }
    scaler = torch.cuda.amp.GradScaler() if env == "cuda" else torch.amp.GradScaler(kind)
    return {
        "model": model,
        "m": model,
        "net": model,
        "x": x,
        "y": x + 1,
        "z": x * 2,
        "a": x[0],
        "b": x[1],
        "batch": x.clone(),
        "inputs": x.clone(),
        "targets": x.flip(0),
        "labels": torch.tensor([0, 1, 0, 1]),
        "optimizer": torch.optim.SGD(model.parameters(), lr=0.1),
        "rank": index,
        "local_rank": index,
        "i": 0,
        "step": lambda *a, **k: None,
        "run": lambda *a, **k: None,
        "raw_forward": lambda *a: a[-1] if a else None,
        "args": types.SimpleNamespace(**options),
        "cfg": types.SimpleNamespace(**options),
        "use_amp": True,
        "fast": True,
        "exact": True,
        "kw": {"enabled": True},
        "EXTRA": {"cpu": "gloo"},
        "ds": torch.utils.data.TensorDataset(x, x + 1),
        "device": kind,
        "s": torch.get_rng_state(),
        "scaler": scaler,
        "state": {"cpu": torch.get_rng_state(), "cuda": [torch.get_rng_state() for _ in range(count)]},
        "ctx": types.SimpleNamespace(),
        "self": types.SimpleNamespace(inp=x.clone()),
        "e": torch.OutOfMemoryError("CUDA out of memory."),
        "node": torch.device(kind),
        "gpu": count > 0,
    }


def start_process_group(env: str, namespace: dict[str, Any]) -> None:
    """Where a training script is when it wraps its model in DDP: in the job's default process group, with the
    model on its device (`rank` names it)."""
    kind, count = ENVIRONMENTS[env]
    torch.distributed.init_process_group("nccl" if env == "cuda" else "gloo")
    if count:
        namespace["model"] = namespace["m"] = namespace["net"] = namespace["model"].to(
            torch.device(kind, namespace["rank"])
        )
