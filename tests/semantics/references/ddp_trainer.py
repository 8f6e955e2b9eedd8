"""CPU reference for scripts/ddp_trainer.py: the same training in one process, no device code at all."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(1234)
features = torch.randn(64, 8)
targets = torch.sin(features.sum(dim=1, keepdim=True))
model = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for step in range(5):
    rows = features[16 * (step % 4):16 * (step % 4) + 16], targets[16 * (step % 4):16 * (step % 4) + 16]
    optimizer.zero_grad()
    loss = F.mse_loss(model(rows[0]), rows[1])
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.6f}")
print("device cpu")
