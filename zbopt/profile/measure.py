"""Time and memory of one model layer, split the way torch.distributed.pipelining runs it.

Per repetition a layer runs F (its forward on a fresh copy of its input), B
(`stage_backward_input`: gradients of the inputs only, the graph retained, the output side
dropped) and W (`stage_backward_weight`: the weight gradients from the intermediates B kept),
then, as a peer measured in the same run, F again and a full backward (`stage_backward`). The
model's first layer has no B: torch's runtime never runs B on the first stage (whatever its
input's dtype; the model input needs no gradient) and runs the whole backward as W, and so does
this (`first=True`: the input is a leaf without gradient), as for any layer whose input is not
floating point (token ids).

Memory (one untimed forward under `saved_tensors_hooks`, then B):
- m_b: bytes of the distinct storages autograd saved for backward during F, parameters and
  buffers excluded (they are static memory), the layer's input included if an op saved it.
- m_w: what is still held after B for W: the saved storages of the graph nodes B kept alive
  (those on the paths to the weights) plus the output gradients B stored for W. It can exceed
  m_b (a lone nn.Linear keeps its input and gets its output gradient); the layered format
  needs m_w <= m_b, so the layer writes min(m_w, m_b) and says so (`m_w_clamped`).
"""

from __future__ import annotations

import gc
import statistics
import time
import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.distributed.pipelining._backward import (
    stage_backward,
    stage_backward_input,
    stage_backward_weight,
)


@dataclass(frozen=True)
class LayerTimes:
    """Samples in microseconds (warm-up excluded) and the memory of one measured layer."""

    name: str
    group: str  # layers measured apart but written as one layer with a count share a group
    t_f: tuple[float, ...]
    t_b: tuple[float, ...]
    t_w: tuple[float, ...]
    t_full: tuple[float, ...]  # the full backward (stage_backward) of the same layer
    m_b: int
    m_w: int  # as measured, before any clamp to m_b
    parameters: int


def median(samples: tuple[float, ...]) -> float:
    return statistics.median(samples) if samples else 0.0


def iqr(samples: tuple[float, ...]) -> float:
    if len(samples) < 2:
        return 0.0
    q = statistics.quantiles(samples, n=4, method="inclusive")
    return q[2] - q[0]


class _Saved:
    """What the pack hook stores: a weakref-able box, alive exactly as long as its graph node."""

    __slots__ = ("tensor", "key", "nbytes", "__weakref__")

    def __init__(self, tensor: torch.Tensor, key: int, nbytes: int) -> None:
        self.tensor = tensor
        self.key = key
        self.nbytes = nbytes


def _storage(t: torch.Tensor) -> tuple[int, int] | None:
    try:
        s = t.untyped_storage()
    except (RuntimeError, NotImplementedError):  # sparse or wrapper tensors have none
        return None
    return s.data_ptr(), s.nbytes()


def _unique_bytes(pairs) -> int:
    seen: dict[int, int] = {}
    for key, nbytes in pairs:
        seen[key] = max(seen.get(key, 0), nbytes)
    return sum(seen.values())


def _fresh(x: Any, first: bool = False) -> Any:
    """A new leaf like the runtime's received activation: it needs grad if it is floating point,
    unless it is the model's input (`first`), whose gradient no stage computes."""
    if isinstance(x, torch.Tensor):
        leaf = x.detach()
        if leaf.is_floating_point() and not first:
            leaf.requires_grad_(True)
        return leaf
    return x


def _needs_grad(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.requires_grad


def _output_grad(y: torch.Tensor) -> torch.Tensor | None:
    """None for a scalar loss (the runtime starts the backward from it), else a gradient
    such as the next stage would send."""
    return None if y.dim() == 0 else torch.randn_like(y)


CLOCKS = ("wall", "cpu")


class Clock:
    """`wall`: elapsed time (what a step takes; CUDA is synchronised first). `cpu`: this
    thread's CPU time, which a shared CPU's other processes do not inflate (CPU, one thread)."""

    def __init__(self, device: torch.device, kind: str = "wall") -> None:
        self.cuda = device.type == "cuda"
        self.read = time.thread_time if kind == "cpu" else time.perf_counter

    def now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return self.read()


def memory(module: nn.Module, x_in: Any, first: bool = False) -> tuple[int, int]:
    """(m_b, m_w) in bytes of one micro-batch through `module` (see the module docstring);
    `first`: the model's first layer, which has no B."""
    static = {p.untyped_storage().data_ptr() for p in list(module.parameters()) + list(module.buffers())}
    boxes: list[weakref.ref] = []
    found: list[tuple[int, int]] = []

    def pack(t: torch.Tensor):
        where = _storage(t)
        if where is None or where[0] in static or where[1] == 0:
            return t
        # detached: the box must not hold the graph it belongs to (a cycle would keep it alive)
        box = _Saved(t.detach(), *where)
        boxes.append(weakref.ref(box))
        found.append(where)
        return box

    def unpack(saved):
        return saved.tensor if isinstance(saved, _Saved) else saved

    x = _fresh(x_in, first)
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        y = module(x)
    y = _stage_output(y)
    m_b = _unique_bytes(found)
    params = list(module.parameters())
    if not _needs_grad(x):  # no B: everything stays until the full backward in W
        stage_backward(y, _output_grad(y), [x])
        return m_b, m_b
    _, groups = stage_backward_input([y], _nonscalar(_output_grad(y)), [x], iter(params))
    del y
    gc.collect()  # count what the graph references, not what a pending collection would free
    alive = [(b.key, b.nbytes) for ref in boxes if (b := ref()) is not None]
    grads = [where for g in groups for grad_tuple in g.get("grads") or ()
             for t in grad_tuple if isinstance(t, torch.Tensor) and (where := _storage(t))]
    m_w = _unique_bytes(alive + grads)
    stage_backward_weight(iter(params), groups)
    return m_b, m_w


def _nonscalar(grad: torch.Tensor | None) -> list[torch.Tensor] | None:
    return None if grad is None else [grad]


def _stage_output(y: Any) -> torch.Tensor:
    """The output as the runtime's B takes it: B detaches it in place, which a view refuses, so
    a view gets a copy (made outside the timed region; its backward passes the gradient on)."""
    if not isinstance(y, torch.Tensor):
        raise TypeError(f"a layer must return one tensor, got {type(y).__name__}")
    return y.clone() if y._is_view() else y


class Repetition:
    """One repetition of one layer: F, B (stage_backward_input), W (stage_backward_weight), then
    F again and the full backward (stage_backward) as a peer; times in seconds. `first`: the
    model's first layer, whose B the runtime skips (W is the full backward)."""

    def __init__(self, module: nn.Module, x_in: Any, clock: Clock, first: bool = False) -> None:
        self.module, self.x_in, self.clock, self.first_layer = module, x_in, clock, first
        self.params = list(module.parameters())
        self.grad: torch.Tensor | None = None
        self.first = True

    def run(self) -> tuple[float, float, float, float, float]:
        clock, module = self.clock, self.module
        x = _fresh(self.x_in, self.first_layer)
        start = clock.now()
        y = module(x)
        forward = clock.now() - start
        y = _stage_output(y)
        if self.first:
            self.grad, self.first = _output_grad(y), False
        grad = self.grad
        if _needs_grad(x):
            start = clock.now()
            _, groups = stage_backward_input([y], _nonscalar(grad), [x], iter(self.params))
            middle = clock.now()
            stage_backward_weight(iter(self.params), groups)
            end = clock.now()
            backward_input, backward_weight = middle - start, end - middle
        else:  # the runtime's first stage: B is skipped, W is the full backward
            start = clock.now()
            stage_backward(y, grad, [x])
            backward_input, backward_weight = 0.0, clock.now() - start
        del y
        x = _fresh(self.x_in, self.first_layer)
        start = clock.now()
        y = _stage_output(module(x))
        forward_again = clock.now() - start
        start = clock.now()
        stage_backward(y, grad, [x])
        full = clock.now() - start
        return forward, backward_input, backward_weight, forward_again, full


def parameter_count(module: nn.Module) -> int:
    """The module's parameters, each shared tensor once."""
    return sum({id(p): p.numel() for p in module.parameters()}.values())


def to_times(name: str, group: str, module: nn.Module, m_b: int, m_w: int,
             samples: list[tuple[float, float, float, float, float]]) -> LayerTimes:
    """Recorded repetitions (seconds) as a LayerTimes in microseconds."""
    us = lambda s: round(s * 1e6, 3)
    return LayerTimes(
        name=name, group=group, t_f=tuple(us(r[k]) for r in samples for k in (0, 3)),
        t_b=tuple(us(r[1]) for r in samples), t_w=tuple(us(r[2]) for r in samples),
        t_full=tuple(us(r[4]) for r in samples), m_b=m_b, m_w=m_w, parameters=parameter_count(module))


def measure_layer(name: str, group: str, module: nn.Module, x_in: Any, warmup: int, repeat: int,
                  device: torch.device, clock: str = "wall", first: bool = False) -> LayerTimes:
    """Times (microseconds) and memory of one layer measured on its own; its gradients are
    cleared afterwards. `first`: measure it as the model's first layer (no B)."""
    m_b, m_w = memory(module, x_in, first)
    repetition = Repetition(module, x_in, Clock(device, clock), first)
    samples = [repetition.run() for _ in range(warmup + repeat)][warmup:]
    for p in module.parameters():
        p.grad = None
    return to_times(name, group, module, m_b, m_w, samples)
