"""A small CUDA-style classifier that keeps its device as a string and branches on `'cuda' in device`.

Written for neuron-migrate's tests.
"""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Train a tiny classifier.")
    parser.add_argument("--steps", type=int, default=4)
    return parser.parse_args()


def make_loader(device: str) -> DataLoader:
    generator = torch.Generator().manual_seed(11)
    points = torch.randn(48, 6, generator=generator)
    classes = (points[:, 0] + points[:, 1] > 0).long()
    # Pinned host memory only helps copies to a GPU.
    return DataLoader(TensorDataset(points, classes), batch_size=12, shuffle=False,
                      pin_memory="cuda" in device)


def main() -> None:
    args = parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if "cuda" in device:
        torch.cuda.manual_seed(5)
    torch.manual_seed(5)
    non_blocking = device.startswith("cuda")

    model = nn.Sequential(nn.Linear(6, 24), nn.ReLU(), nn.Dropout(0.1), nn.Linear(24, 2)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = make_loader(device)
    model.train()
    for step, (points, classes) in zip(range(args.steps), loader):
        points = points.to(device, non_blocking=non_blocking)
        classes = classes.to(device, non_blocking=non_blocking)
        loss = nn.functional.cross_entropy(model(points), classes)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.6f}")
    on_gpu = "cuda" in str(next(model.parameters()).device)
    print(f"device {next(model.parameters()).device.type} accelerated {on_gpu}")


if __name__ == "__main__":
    main()
