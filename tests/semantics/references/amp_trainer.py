"""CPU reference for scripts/amp_trainer.py.

Without an accelerator the CUDA script's autocast and GradScaler are disabled (the CUDA amp APIs switch
themselves off on a machine without CUDA), so the computation it runs there is plain float32 training: this
file, by default. `--autocast float16` is the computation it runs on an accelerator: the forward pass under
float16 autocast, the loss in float32, gradients scaled by a GradScaler; the stand-in test compares with that.
"""

import sys
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import nn

mixed = sys.argv[1:] == ["--autocast", "float16"]
torch.manual_seed(7)
data = torch.randint(0, 48, (4, 13))
embed = nn.Embedding(48, 32)
layer = nn.TransformerEncoderLayer(32, 4, 64, 0.0, batch_first=True)
head = nn.Linear(32, 48)
params = [*embed.parameters(), *layer.parameters(), *head.parameters()]
optimizer = torch.optim.AdamW(params, lr=3e-3)
scaler = torch.amp.GradScaler("cpu", enabled=mixed)
for step in range(4):
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16) if mixed else nullcontext():
        logits = head(layer(embed(data[:, :-1])))
    loss = F.cross_entropy(logits.float().flatten(0, 1), data[:, 1:].flatten())
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(params, 1.0)
    scaler.step(optimizer)
    scaler.update()
    print(f"step {step} loss {loss.item():.6f}")
print(f"device cpu logits {logits.dtype}")
