"""model: the Llama architecture as llama.cpp's "llama" GGUF runs it, in PyTorch.

RoPE rotates adjacent pairs (llama.cpp's normal mode), so the trained q/k weights export as they
are, with no permutation; grouped-query attention; RMSNorm; SwiGLU; untied output.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Config:
    def __init__(self, vocab, dim, layers, heads, kv_heads, ffn, ctx, rope_base=10000.0,
                 eps=1e-5):
        self.vocab, self.dim, self.layers, self.heads = vocab, dim, layers, heads
        self.kv_heads, self.ffn, self.ctx, self.rope_base, self.eps = kv_heads, ffn, ctx, rope_base, eps
        self.head_dim = dim // heads


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(cfg, n):
    inv = cfg.rope_base ** (-torch.arange(0, cfg.head_dim, 2, dtype=torch.float32) / cfg.head_dim)
    ang = torch.arange(n, dtype=torch.float32)[:, None] * inv[None, :]
    return ang.cos(), ang.sin()


def rope(x, cos, sin):
    """x: [batch, heads, seq, head_dim]; pairs (2i, 2i+1) rotate by position * theta_i."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)
    return out.flatten(-2)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        hd = cfg.head_dim
        self.cfg = cfg
        self.attn_norm, self.ffn_norm = RMSNorm(cfg.dim, cfg.eps), RMSNorm(cfg.dim, cfg.eps)
        self.wq = nn.Linear(cfg.dim, cfg.heads * hd, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.kv_heads * hd, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.kv_heads * hd, bias=False)
        self.wo = nn.Linear(cfg.heads * hd, cfg.dim, bias=False)
        self.gate = nn.Linear(cfg.dim, cfg.ffn, bias=False)
        self.up = nn.Linear(cfg.dim, cfg.ffn, bias=False)
        self.down = nn.Linear(cfg.ffn, cfg.dim, bias=False)

    def forward(self, x, cos, sin, mask):
        c, (b, t, _) = self.cfg, x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(b, t, c.heads, c.head_dim).transpose(1, 2)
        k = self.wk(h).view(b, t, c.kv_heads, c.head_dim).transpose(1, 2)
        v = self.wv(h).view(b, t, c.kv_heads, c.head_dim).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        rep = c.heads // c.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(c.head_dim) + mask
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, -1)
        x = x + self.wo(y)
        h = self.ffn_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.dim, cfg.eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * cfg.layers) if name.endswith(("wo.weight", "down.weight")) else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, ids):
        t = ids.shape[1]
        cos, sin = rope_tables(self.cfg, t)
        mask = torch.full((t, t), float("-inf")).triu(1)
        x = self.embed(ids)
        for blk in self.blocks:
            x = blk(x, cos, sin, mask)
        return self.output(self.norm(x))

    def n_params(self):
        return sum(p.numel() for p in self.parameters())
