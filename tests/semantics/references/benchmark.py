"""CPU reference for scripts/benchmark.py: the timed steps, without timing or memory statistics."""

import torch
from torch import nn

torch.manual_seed(3)
model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 4))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
inputs = torch.randn(32, 16)
labels = torch.randint(0, 4, (32,))
for step in range(5):
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(inputs), labels)
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.6f}")
print("device cpu")
