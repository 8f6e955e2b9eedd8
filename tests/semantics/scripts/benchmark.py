"""A small CUDA-style training benchmark: synchronize, CUDA events and memory statistics.

Times a few optimizer steps of an MLP and reports the peak memory. Written for neuron-migrate's tests.
"""

import time

import torch
from torch import nn


def main() -> None:
    device = torch.device("cuda")
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 4)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    inputs = torch.randn(32, 16, device=device)
    labels = torch.randint(0, 4, (32,), device=device)
    loss_fn = nn.CrossEntropyLoss()

    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    wall = time.perf_counter()
    start.record()
    for step in range(5):
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), labels)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.6f}")
    end.record()
    torch.cuda.synchronize()
    elapsed_ms = start.elapsed_time(end)
    wall_ms = (time.perf_counter() - wall) * 1000
    peak_mib = torch.cuda.max_memory_allocated() / 2**20
    print(f"timing {elapsed_ms:.1f} ms (wall {wall_ms:.1f} ms), peak memory {peak_mib:.1f} MiB")
    print(f"device {inputs.device.type}")


if __name__ == "__main__":
    main()
