"""CPU reference for scripts/benchmark.py: the timed steps, without timing or memory statistics.

With --device-generator the batch is drawn the way an accelerator with its own generator draws it (CUDA, the
stand-in neuron device): `torch.manual_seed(3)` seeds that generator too, and the model's CPU initialisation
does not advance it.
"""

import sys

import torch
from torch import nn

torch.manual_seed(3)
model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 4))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
generator = torch.Generator().manual_seed(3) if "--device-generator" in sys.argv else None
inputs = torch.randn(32, 16, generator=generator)
labels = torch.randint(0, 4, (32,), generator=generator)
for step in range(5):
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(inputs), labels)
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.6f}")
print("device cpu")
