# Exercises: a DataLoader with pin_memory=True feeding non_blocking copies, and an explicitly pinned batch.
import torch
from torch.utils.data import DataLoader, TensorDataset

data = TensorDataset(torch.arange(16, dtype=torch.float32).reshape(8, 2), torch.arange(8))
loader = DataLoader(data, batch_size=4, pin_memory=True)
device = torch.device("cuda")
total = 0.0
for inputs, labels in loader:
    inputs = inputs.to(device, non_blocking=True)
    labels = labels.to(device, non_blocking=True)
    total += inputs.sum().item()
extra = torch.ones(4).pin_memory().to(device, non_blocking=True)
print("total", total, "extra", extra.sum().item())
