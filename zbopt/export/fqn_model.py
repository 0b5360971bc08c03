"""A stand-in model whose modules carry a plan's module names, built alike in every process.

Each name in the model order becomes a module at that FQN: "embed" a top-level child, "layers.3"
item "3" of a top-level ModuleDict "layers" (the structure torchtitan's split understands). Each
module is a small MLP block (Linear h->w, tanh, Linear w->h, tanh); `forward` runs the modules in
model order and passes over any that a pipeline split removed (set to None, or deleted from the
ModuleDict), as torchtitan's own models do. Needs torch: import this module only when running.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from . import torch_runtime


@dataclass(frozen=True)
class FqnSpec:
    """The model (names in model order, widths) and the batch, rebuilt from the seed."""

    fqns: tuple[str, ...]
    microbatches: int
    hidden: int = 8
    widths: tuple[int, ...] = ()  # inner width per module; empty: `hidden` for all
    rows_per_microbatch: int = 1
    seed: int = 0
    dtype: str = "float64"

    @property
    def torch_dtype(self):
        return getattr(torch, self.dtype)

    def width(self, k: int) -> int:
        return self.widths[k] if self.widths else self.hidden


def _key(fqn: str) -> tuple[str, str | None]:
    top, _, item = fqn.partition(".")
    return top, item or None


def block(hidden: int, width: int, dtype) -> nn.Module:
    return nn.Sequential(nn.Linear(hidden, width, dtype=dtype), nn.Tanh(),
                         nn.Linear(width, hidden, dtype=dtype), nn.Tanh())


class FqnModel(nn.Module):
    """Modules at the given FQNs, run in the given order (see the module doc); `pairs` places
    given (fqn, module) pairs instead of the spec's stand-in blocks."""

    def __init__(self, spec: FqnSpec | None = None,
                 pairs: Sequence[tuple[str, nn.Module]] | None = None):
        super().__init__()
        if pairs is None:
            torch.manual_seed(spec.seed)
            pairs = [(f, block(spec.hidden, spec.width(k), spec.torch_dtype))
                     for k, f in enumerate(spec.fqns)]
        self._fqn_order = tuple(_key(f) for f, _ in pairs)
        for (top, item), (_, module) in zip(self._fqn_order, pairs):
            if item is None:
                self.add_module(top, module)
                continue
            if not hasattr(self, top):
                self.add_module(top, nn.ModuleDict())
            getattr(self, top)[item] = module

    def forward(self, x):
        for top, item in self._fqn_order:
            module = getattr(self, top, None)
            if module is None:
                continue
            if item is not None:
                if item not in module:
                    continue
                module = module[item]
            x = module(x)
        return x


def layer_pairs(layers: Sequence[tuple[str, nn.Module]]) -> list[tuple[str, nn.Module]]:
    """(fqn, module) pairs of named layers: a layer spanning several modules ("norm+lm_head")
    runs whole at its first name, the others hold an Identity. A layer is never split across
    stages, so its names always land in one stage together."""
    pairs = []
    for name, module in layers:
        first, *rest = name.split("+")
        pairs.append((first, module))
        pairs += [(other, nn.Identity()) for other in rest]
    return pairs


def build_batch(spec: FqnSpec):
    return torch_runtime.build_batch(spec, spec.torch_dtype)


def mse(output, target):
    return torch.nn.functional.mse_loss(output, target)


def reference(spec: FqnSpec, mean: bool) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Per-micro-batch losses and the gradients of their sum (or mean), one process."""
    model = FqnModel(spec)
    x, y = build_batch(spec)
    losses, total = [], None
    for xs, ys in zip(torch.chunk(x, spec.microbatches), torch.chunk(y, spec.microbatches)):
        loss = mse(model(xs), ys)
        losses.append(loss.item())
        total = loss if total is None else total + loss
    (total / spec.microbatches if mean else total).backward()
    return losses, {name: p.grad.detach().clone() for name, p in model.named_parameters()}


def stage_modules(model: nn.Module, fqns: Sequence[str]) -> list[str]:
    """Which of `fqns` a (split) model still holds."""
    kept = []
    for fqn in fqns:
        top, item = _key(fqn)
        module = getattr(model, top, None)
        if module is None or (item is not None and item not in module):
            continue
        kept.append(fqn)
    return kept


def split(model: FqnModel, keep: Sequence[str]) -> FqnModel:
    """A copy of `model` holding only the modules named in `keep` (one pipeline stage)."""
    import copy

    part = copy.deepcopy(model)
    kept = set(keep)
    for top, item in part._fqn_order:
        fqn = top if item is None else f"{top}.{item}"
        if fqn in kept:
            continue
        if item is None:
            setattr(part, top, None)
        elif item in getattr(part, top):
            del getattr(part, top)[item]
    return part
