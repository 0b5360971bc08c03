"""The modules that run one layer of a transformers decoder with the calling convention the
profiler uses (one tensor in, one tensor out; the last layer returns the loss)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional


class PositionalEmbedding(nn.Module):
    """Token plus learned position embeddings (GPT-2's first layer)."""

    def __init__(self, tokens: nn.Module, table: nn.Module, dropout: nn.Module,
                 positions: torch.Tensor) -> None:
        super().__init__()
        self.tokens, self.table, self.dropout = tokens, table, dropout
        self.positions = positions

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.tokens(ids) + self.table(self.positions))


class Block(nn.Module):
    """One decoder block; rotary tables and positions are computed once, as torchtitan does."""

    def __init__(self, block: nn.Module, kwargs: dict) -> None:
        super().__init__()
        self.block, self.kwargs = block, kwargs

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        out = self.block(hidden, attention_mask=None, **self.kwargs)  # no mask: causal SDPA
        return out[0] if isinstance(out, tuple) else out


class Head(nn.Module):
    """Final norm, output layer and cross-entropy loss (on float32 logits, as trainers do)."""

    def __init__(self, norm: nn.Module, output: nn.Module, labels: torch.Tensor) -> None:
        super().__init__()
        self.norm, self.output, self.labels = norm, output, labels

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.output(self.norm(hidden))
        return functional.cross_entropy(logits.float().flatten(0, 1), self.labels.flatten(0, 1))
