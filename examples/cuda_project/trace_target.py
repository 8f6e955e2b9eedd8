"""A `neuron-migrate trace` target for the tiny GPT: builds the model, a batch and its loss, on any device.

    neuron-migrate trace examples/cuda_project/trace_target.py:build
    neuron-migrate trace examples.cuda_project.trace_target:build

The tracer calls `build()` with the default device set to `neuron`, so nothing here names a device.
"""
import torch

try:  # imported as examples.cuda_project.trace_target
    from .model import GPT, GPTConfig
except ImportError:  # loaded from its path: the folder is on sys.path, like for train.py
    from model import GPT, GPTConfig


def build(batch_size=4):
    """Return (model, inputs, loss_fn, optimizer) for one training step of the tiny GPT."""
    config = GPTConfig()
    model = GPT(config)
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, config.vocab_size, (batch_size, config.block_size + 1), generator=g)
    inputs = (idx[:, :-1].contiguous(), idx[:, 1:].contiguous())
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    return model, inputs, lambda out: out[1], optimizer
