"""CPU reference for scripts/string_device.py: four SGD steps over the same unshuffled batches.

The batches come from a DataLoader as in the script, because starting to iterate one draws its base seed from
the global generator, which moves the dropout masks that follow.
"""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

points = torch.randn(48, 6, generator=torch.Generator().manual_seed(11))
classes = (points[:, 0] + points[:, 1] > 0).long()
torch.manual_seed(5)
model = nn.Sequential(nn.Linear(6, 24), nn.ReLU(), nn.Dropout(0.1), nn.Linear(24, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step, (x, y) in enumerate(DataLoader(TensorDataset(points, classes), batch_size=12)):
    loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.6f}")
print("device cpu accelerated False")
