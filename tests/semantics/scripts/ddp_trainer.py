"""A small CUDA-style DDP trainer: NCCL, one GPU per process, `f"cuda:{local_rank}"`.

Launched by torchrun (WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR/PORT set) it trains under DDP; run as a plain
script (WORLD_SIZE unset) it trains the same model in a single process. Written for neuron-migrate's tests.
"""

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 1))


def main() -> None:
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    distributed = "WORLD_SIZE" in os.environ
    torch.cuda.set_device(local_rank)
    device = f"cuda:{local_rank}"
    if distributed:
        dist.init_process_group("nccl")

    torch.manual_seed(1234)
    torch.cuda.manual_seed_all(1234)
    features = torch.randn(64, 8)
    targets = features.sum(dim=1, keepdim=True).sin()
    model = build_model().to(device)
    if distributed:
        model = DDP(model, device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    for step in range(5):
        batch = slice(16 * (step % 4), 16 * (step % 4 + 1))
        x = features[batch].to(device, non_blocking=True)
        y = targets[batch].to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        if not distributed or dist.get_rank() == 0:
            print(f"step {step} loss {loss.item():.6f}")
    print(f"device {next(model.parameters()).device.type}")
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
