"""A tiny GPT-style language model: token and position embeddings, pre-LN blocks, LM head.

Runs on CUDA GPUs. Defaults are deliberately tiny so a training step takes milliseconds.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from flash_attn import flash_attn_func
except ImportError:
    flash_attn_func = None

try:
    import fused_op as _fused  # built by setup.py from csrc/
except ImportError:
    _fused = None

_GELU_C = math.sqrt(2.0 / math.pi)


@dataclass
class GPTConfig:
    vocab_size: int = 256
    block_size: int = 32
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.0


def _gelu_tanh(z):
    return 0.5 * z * (1.0 + torch.tanh(_GELU_C * (z + 0.044715 * z * z * z)))


class BiasGelu(torch.autograd.Function):
    """bias + tanh-GELU with a hand-written backward; the CUDA kernel in csrc/ does the forward."""

    @staticmethod
    @torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)
    def forward(ctx, x, bias):
        ctx.save_for_backward(x, bias)
        if _fused is not None and x.is_cuda:
            return _fused.bias_gelu(x, bias)
        return _gelu_tanh(x + bias)

    @staticmethod
    @torch.cuda.amp.custom_bwd
    def backward(ctx, grad_out):
        x, bias = ctx.saved_tensors
        z = x + bias
        t = torch.tanh(_GELU_C * (z + 0.044715 * z * z * z))
        dz = 0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * _GELU_C * (1.0 + 3 * 0.044715 * z * z)
        grad_x = grad_out * dz
        grad_bias = grad_x.reshape(-1, grad_x.shape[-1]).sum(dim=0)
        return grad_x, grad_bias


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.n_head = config.n_head
        self.dropout = config.dropout
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        # (B, T, n_head, head_dim): the layout flash-attn wants; SDPA wants heads first.
        q = q.view(B, T, self.n_head, C // self.n_head)
        k = k.view(B, T, self.n_head, C // self.n_head)
        v = v.view(B, T, self.n_head, C // self.n_head)
        p = self.dropout if self.training else 0.0
        # flash-attn only has half-precision CUDA kernels; SDPA covers fp32 and other devices.
        if flash_attn_func is not None and q.is_cuda and q.dtype in (torch.float16, torch.bfloat16):
            y = flash_attn_func(q, k, v, dropout_p=p, causal=True)
        else:
            y = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), dropout_p=p, is_causal=True
            ).transpose(1, 2)
        return self.proj(y.reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=False)
        self.fc_bias = nn.Parameter(torch.zeros(4 * config.n_embd))
        self.proj = nn.Linear(4 * config.n_embd, config.n_embd)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.drop(self.proj(BiasGelu.apply(self.fc(x), self.fc_bias)))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config=None):
        super().__init__()
        self.config = config or GPTConfig()
        c = self.config
        self.tok_emb = nn.Embedding(c.vocab_size, c.n_embd)
        self.pos_emb = nn.Embedding(c.block_size, c.n_embd)
        self.drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList([Block(c) for _ in range(c.n_layer)])
        self.ln_f = nn.LayerNorm(c.n_embd)
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.lm_head.weight = self.tok_emb.weight  # weight tying
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx, targets=None):
        """Return (logits, loss); loss is None without targets."""
        _, T = idx.shape
        if T > self.config.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.config.block_size}")
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            z_loss = 1e-4 * torch.logsumexp(logits.float(), dim=-1).pow(2).mean()  # keeps logits from drifting
            loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1)) + z_loss
        return logits, loss

    @torch.no_grad()
    def eval_nll(self, idx, targets):
        """Mean negative log-likelihood in float64, so eval numbers compare across runs and GPUs."""
        logits, _ = self(idx)
        logp = F.log_softmax(logits.double(), dim=-1)
        return -logp.gather(-1, targets.unsqueeze(-1)).mean().item()

    def num_parameters(self):
        return sum(p.numel() for p in self.parameters())
