"""A mixture-of-experts decoder shaped like DeepSeek-V3: 61 layers, 256 routed experts and one
shared expert per MoE layer (the first three layers dense), multi-head latent attention.

For ``py:tests/benchmarks/moe_model.py:build`` with "Structure only": on the ``meta``
device it allocates nothing (671 B parameters as shapes). Small sizes build real tensors::

    model = build(layers=2, experts=4, hidden=16, expert_hidden=8, vocab=32)
"""

from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    """Root-mean-square layer norm."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Expert(nn.Module):
    """A SwiGLU feed-forward block."""

    def __init__(self, hidden: int, inner: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inner, bias=False)
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class MoE(nn.Module):
    """Top-k routed experts plus a shared expert."""

    def __init__(self, hidden: int, inner: int, experts: int, top_k: int = 8) -> None:
        super().__init__()
        self.top_k = min(top_k, experts)
        self.gate = nn.Linear(hidden, experts, bias=False)
        self.experts = nn.ModuleList(Expert(hidden, inner) for _ in range(experts))
        self.shared_experts = Expert(hidden, inner)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, chosen = self.gate(x).softmax(-1).topk(self.top_k, dim=-1)
        out = self.shared_experts(x)
        for k in range(self.top_k):
            for e in chosen[..., k].unique().tolist():
                mask = (chosen[..., k] == e).unsqueeze(-1)
                out = out + mask * weights[..., k : k + 1] * self.experts[e](x)
        return out


class Attention(nn.Module):
    """Multi-head latent attention's projections (low-rank queries and keys/values)."""

    def __init__(self, hidden: int, heads: int, q_rank: int, kv_rank: int, head_dim: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.q_a_proj = nn.Linear(hidden, q_rank, bias=False)
        self.q_a_layernorm = RMSNorm(q_rank)
        self.q_b_proj = nn.Linear(q_rank, heads * head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(hidden, kv_rank, bias=False)
        self.kv_a_layernorm = RMSNorm(kv_rank)
        self.kv_b_proj = nn.Linear(kv_rank, 2 * heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv_b_proj(self.kv_a_layernorm(self.kv_a_proj_with_mqa(x))).chunk(2, dim=-1)
        k = k.reshape(b, t, self.heads, self.head_dim).transpose(1, 2)
        v = v.reshape(b, t, self.heads, self.head_dim).transpose(1, 2)
        out = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class Layer(nn.Module):
    """A decoder layer: attention, then a dense or an MoE feed-forward block."""

    def __init__(self, hidden: int, inner: int, expert_inner: int, experts: int, dense: bool, heads: int,
                 q_rank: int, kv_rank: int, head_dim: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(hidden)
        self.self_attn = Attention(hidden, heads, q_rank, kv_rank, head_dim)
        self.post_attention_layernorm = RMSNorm(hidden)
        self.mlp: nn.Module = Expert(hidden, inner) if dense else MoE(hidden, expert_inner, experts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class MoEModel(nn.Module):
    """Embedding, decoder layers, final norm and the language-model head."""

    def __init__(self, layers: int, experts: int, hidden: int, inner: int, expert_hidden: int, vocab: int,
                 dense_layers: int, heads: int, q_rank: int, kv_rank: int, head_dim: int) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(
            Layer(hidden, inner, expert_hidden, experts, i < dense_layers, heads, q_rank, kv_rank, head_dim)
            for i in range(layers)
        )
        self.norm = RMSNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))


def build(layers: int = 61, experts: int = 256, hidden: int = 7168, expert_hidden: int = 2048, vocab: int = 129280,
          inner: int | None = None, dense_layers: int = 3, heads: int = 128, q_rank: int = 1536, kv_rank: int = 512,
          head_dim: int = 128) -> nn.Module:
    """The model (DeepSeek-V3's sizes by default: build it on the ``meta`` device).

    Args:
        layers: decoder layers.
        experts: routed experts per MoE layer.
        hidden: model width.
        expert_hidden: an expert's inner width.
        vocab: vocabulary size.
        inner: a dense layer's inner width (default ``9 * expert_hidden``).
        dense_layers: the first layers with a dense feed-forward block.
        heads: attention heads.
        q_rank / kv_rank: ranks of the query and key/value projections.
        head_dim: width of one head.

    Returns:
        The model.
    """
    small = min(hidden, 64)
    return MoEModel(layers, experts, hidden, inner or 9 * expert_hidden, expert_hidden, vocab,
                    min(dense_layers, layers), heads if hidden >= heads else 2, min(q_rank, max(small, 8)),
                    min(kv_rank, max(small, 8)), head_dim if hidden >= 1024 else 4)
