"""A GPT training benchmark as `neuron-migrate fix` leaves one: device-agnostic, timed with accelerator events
and synchronize, with memory statistics. The model is the bundled example's GPT at GPT-2-small sizes with an
untied head (about 162M parameters); batch 2 x 32 tokens. `benchmarks/trace.py` traces it as a script.

    python benchmarks/scripts/gpt_benchmark.py [--steps 20]
"""

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "cuda_project"))
from model import GPT, GPTConfig

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()

device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")
torch.manual_seed(0)
config = GPTConfig(vocab_size=50257, block_size=64, n_layer=12, n_head=12, n_embd=768)
model = GPT(config)
model.lm_head.weight = torch.nn.Parameter(
    model.tok_emb.weight.detach().clone()
)  # untied head: ~162M parameters
model = model.to(device)
params = sum(p.numel() for p in model.parameters())
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
idx = torch.randint(0, config.vocab_size, (2, 33))
x, y = idx[:, :-1].contiguous().to(device), idx[:, 1:].contiguous().to(device)
timed = torch.accelerator.is_available()
if timed:
    start, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
    torch.accelerator.reset_peak_memory_stats()
    start.record()
for step in range(args.steps):
    _, loss = model(x, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}")
if timed:
    end.record()
    torch.accelerator.synchronize()
    print(
        f"{params / 1e6:.1f}M parameters, {start.elapsed_time(end) / args.steps:.1f} ms/step, "
        f"peak {torch.accelerator.max_memory_allocated() / 2**20:.0f} MiB"
    )
