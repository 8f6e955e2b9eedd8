"""Train the tiny GPT on synthetic token sequences.

Runs on CUDA GPUs. One process by default; under torchrun it trains data-parallel over NCCL:

    python train.py --steps 50
    torchrun --nproc_per_node=8 train.py --steps 50

Prints one line per step on stdout, `step <n> loss <x.xxxx>`; timings and memory go to the log (stderr).
"""
import argparse
import logging
import os
import time

if "WORLD_SIZE" not in os.environ:
    # A single-process run takes the first GPU unless the caller picked one.
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "0")

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

from model import GPT, GPTConfig

logger = logging.getLogger("train")

# Stored with each checkpoint; mirrors the Lightning Trainer config we used before this script.
RUN_META = {"accelerator": "cuda", "strategy": "ddp", "precision": "16-mixed"}


class RandomTokens(Dataset):
    """Synthetic arithmetic-progression token sequences: learnable, no download, same every run."""

    def __init__(self, vocab_size, block_size, length=4096, seed=0):
        g = torch.Generator().manual_seed(seed)
        start = torch.randint(0, vocab_size, (length, 1), generator=g)
        stride = torch.randint(1, 8, (length, 1), generator=g)
        self.data = (start + stride * torch.arange(block_size + 1)) % vocab_size

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        row = self.data[i]
        return row[:-1], row[1:]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Train a tiny GPT on synthetic tokens.")
    parser.add_argument("--device", default="cuda",
                        help="device to use, e.g. cuda:0 (ignored under torchrun: one GPU per rank)")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps to run")
    parser.add_argument("--batch-size", type=int, default=16, help="sequences per step per process")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--amp", action=argparse.BooleanOptionalAction, default=True,
                        help="float16 autocast with loss scaling")
    parser.add_argument("--compile", action="store_true", help="wrap the model in torch.compile")
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--resume", help="checkpoint to start from")
    parser.add_argument("--save", help="where to write the final checkpoint")
    return parser.parse_args(argv)


def setup_distributed():
    """Join the NCCL process group when launched by torchrun; return (rank, local_rank, world_size)."""
    if "WORLD_SIZE" not in os.environ:
        return 0, 0, 1
    dist.init_process_group(backend="nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    return dist.get_rank(), local_rank, dist.get_world_size()


def build_loader(config, args, world_size):
    dataset = RandomTokens(config.vocab_size, config.block_size)
    sampler = DistributedSampler(dataset, seed=args.seed) if world_size > 1 else None
    return DataLoader(dataset, batch_size=args.batch_size, pin_memory=True,
                      sampler=sampler, shuffle=sampler is None, num_workers=args.num_workers, drop_last=True)


def batches(loader):
    """Cycle over the loader forever, bumping the sampler epoch so DDP ranks reshuffle."""
    epoch = 0
    while True:
        if isinstance(loader.sampler, DistributedSampler):
            loader.sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def build_model(config, args, device, local_rank, world_size):
    model = GPT(config)
    if args.resume:
        state = torch.load(args.resume, map_location="cuda")
        model.load_state_dict(state["model"])
    if world_size > 1:
        model = model.cuda(local_rank)
        model = DistributedDataParallel(model, device_ids=[local_rank], output_device=local_rank)
    else:
        model = model.to(device)
    if args.compile:
        model = torch.compile(model, mode="max-autotune")
    return model


def unwrap(model):
    """The plain GPT under torch.compile and DDP wrappers, so checkpoints load without them."""
    model = getattr(model, "_orig_mod", model)
    return model.module if isinstance(model, DistributedDataParallel) else model


def main(argv=None):
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    rank, local_rank, world_size = setup_distributed()
    if world_size > 1:
        device = f"cuda:{local_rank}"
    else:
        device = args.device
    logger.info("using CUDA device %s (rank %d of %d)", device, rank, world_size)

    torch.manual_seed(args.seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(args.seed)
    # Fixed shapes: let cuDNN benchmark its kernels once; TF32 matmuls are fine for this model.
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True

    config = GPTConfig()
    model = build_model(config, args, device, local_rank, world_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    scaler = torch.cuda.amp.GradScaler(enabled=args.amp)
    data = batches(build_loader(config, args, world_size))

    torch.cuda.reset_peak_memory_stats()
    for step in range(1, args.steps + 1):
        x, y = next(data)
        x = x.to(device, non_blocking=True)
        y = y.to(device, non_blocking=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.cuda.amp.autocast(enabled=args.amp):
            _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        torch.cuda.synchronize()
        step_ms = (time.perf_counter() - t0) * 1000
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
            logger.info("step %d took %.1f ms", step, step_ms)

    peak = torch.cuda.max_memory_allocated()
    logger.info(f"cuda memory: {peak / 2**20:.1f} MiB peak on rank {rank}")
    if args.save and rank == 0:
        torch.save({"model": unwrap(model).state_dict(), "meta": RUN_META, "steps": args.steps}, args.save)
    torch.cuda.empty_cache()
    if world_size > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
