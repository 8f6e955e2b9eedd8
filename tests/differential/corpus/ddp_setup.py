# Exercises: a torchrun worker's DDP setup: init_process_group('nccl'), LOCAL_RANK -> torch.cuda.set_device,
# model.cuda(local_rank), DDP(device_ids=[local_rank], output_device=local_rank), an all_reduce of the loss.
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl")
    torch.cuda.set_device(local_rank)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2).cuda(local_rank)
    model = DDP(model, device_ids=[local_rank], output_device=local_rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.ones(8, 4).cuda(local_rank, non_blocking=True)
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    dist.all_reduce(loss.detach())
    print(f"rank {dist.get_rank()} of {dist.get_world_size()} loss {loss.item():.4f}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
