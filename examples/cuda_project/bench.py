"""Micro-benchmarks for the tiny GPT: step time, copy/compute overlap, and a profiler table.

All timings are measured with CUDA events on the GPU's own clock, not with time.perf_counter().
"""
import argparse
import os
import subprocess
from dataclasses import dataclass
from typing import Literal

import torch
from torch.profiler import ProfilerActivity, profile

from model import GPT, GPTConfig


@dataclass
class BenchResult:
    name: str
    ms_per_step: float
    platform: "Literal['cuda', 'rocm']"


def environment_report():
    """Print what the benchmark ran on, for pasting into issues."""
    print("torch", torch.__version__)
    print("cuda runtime", torch.version.cuda)
    print("gpu", torch.cuda.get_device_name())
    print("NCCL_DEBUG", os.environ.get("NCCL_DEBUG", "unset"))
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv"],
                         capture_output=True, text=True, check=False)
    print(smi.stdout.strip())


def time_ms(fn, warmup=3, iters=20):
    """Mean milliseconds per call of fn(), timed with CUDA events after a warm-up."""
    for _ in range(warmup):
        fn()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def train_step(model, optimizer, x, y):
    _, loss = model(x, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def overlapped_steps(model, optimizer, batches, device):
    """Run steps while the next batch is copied to the GPU on a side stream."""
    copy_stream = torch.cuda.Stream()
    main_stream = torch.cuda.current_stream()
    pending = None
    for i, (x, y) in enumerate(batches):
        torch.cuda.nvtx.range_push(f"step {i}")
        with torch.cuda.stream(copy_stream):
            x_dev = x.pin_memory().to(device, non_blocking=True)
            y_dev = y.pin_memory().to(device, non_blocking=True)
        if pending is not None:
            train_step(model, optimizer, *pending)
        main_stream.wait_stream(copy_stream)
        # Tensors born on the side stream are used on the main one: keep the allocator from reusing them early.
        x_dev.record_stream(main_stream)
        y_dev.record_stream(main_stream)
        pending = (x_dev, y_dev)
        torch.cuda.nvtx.range_pop()
    if pending is not None:
        train_step(model, optimizer, *pending)


def profile_table(model, x, y, rows=15):
    """The top ops of one forward+backward, as the profiler's text table."""
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        _, loss = model(x, y)
        loss.backward()
    return prof.key_averages().table(sort_by="cpu_time_total", row_limit=rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description="Benchmark the tiny GPT.")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--profile", action="store_true", help="also print a profiler table")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("bench.py needs a CUDA GPU; see train.py for a CPU smoke run")

    device = torch.device("cuda")
    environment_report()
    config = GPTConfig()
    model = GPT(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    shape = (args.batch_size, config.block_size)
    x = torch.randint(0, config.vocab_size, shape, device=device)
    y = torch.randint(0, config.vocab_size, shape, device=device)

    step_ms = time_ms(lambda: train_step(model, optimizer, x, y))
    host = [(torch.randint(0, config.vocab_size, shape), torch.randint(0, config.vocab_size, shape))] * 8
    overlap_ms = time_ms(lambda: overlapped_steps(model, optimizer, host, device)) / len(host)
    results = [BenchResult("train_step", step_ms, device.type), BenchResult("overlapped", overlap_ms, device.type)]
    for r in results:
        print(f"{r.name:>16}: {r.ms_per_step:8.3f} ms ({r.platform})")
    cuda_note = "see README.md for reference numbers"
    print(cuda_note)
    if args.profile:
        print(profile_table(model, x, y))


if __name__ == "__main__":
    main()
