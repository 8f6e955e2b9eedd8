"""A small CUDA-style mixed-precision trainer: cuda amp aliases, GradScaler and an fp32 loss decorator.

A one-layer transformer encoder over random token ids learns to predict the next token. Written for
neuron-migrate's tests.
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.cuda import amp
from torch.cuda.amp import GradScaler
from torch.cuda.amp import autocast as cuda_autocast

VOCAB, WIDTH, SEQ, BATCH = 48, 32, 12, 4


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.encoder = nn.TransformerEncoderLayer(
            WIDTH, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True
        )
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens)))


@amp.autocast(enabled=False)
def token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The loss in float32 whatever the forward pass ran in."""
    return F.cross_entropy(logits.float().reshape(-1, VOCAB), targets.reshape(-1))


def main() -> None:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(7)
    data = torch.randint(0, VOCAB, (BATCH, SEQ + 1))
    model = TinyLM().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    scaler = GradScaler()

    for step in range(4):
        tokens = data[:, :-1].to(device)
        targets = data[:, 1:].to(device)
        optimizer.zero_grad()
        with cuda_autocast():
            logits = model(tokens)
        loss = token_loss(logits, targets)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        print(f"step {step} loss {loss.item():.6f}")
    print(f"device {logits.device.type} logits {logits.dtype}")


if __name__ == "__main__":
    main()
