"""Interleaved 1F1B (Megatron's depth-first looped schedule) with Llama 3's group size N.

Device r holds chunks c = 0..v-1, i.e. global stages c*p + r. Virtual micro-batch k of device r
maps to chunk (k // N) % v and micro-batch (k // (N v)) N + k % N: groups of N micro-batches go
through one chunk before the next. N = p is Megatron's depth-first order, N = m breadth-first.
Warm-up: 2(p-r-1) + (v-1)N forwards; then one forward, one (fused) backward; then cool-down.
"""

import numbers
from typing import Any

from ..errors import ZboptError
from ..instance import Instance
from ..registry import register
from ..schedule import Schedule, fused


def check_group_size(method: str, value: Any) -> None:
    """A group size must be None or a whole number of at least 1 (no instance has fewer than
    one device), whatever the instance; else ZboptError."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
        fix = f"write group_size = {int(value)}" if isinstance(value, float) \
            and value.is_integer() else \
            "give a whole number at least the number of devices, or None for N = p"
        raise ZboptError(f"{method}: group_size must be a whole number, got {value!r}: {fix}")
    if value is not None and value < 1:
        raise ZboptError(f"{method}: group_size must be at least the number of devices, got "
                         f"{int(value)}: give a whole number >= p, or None for N = p")


def _group_size(value: Any, p: int) -> int:
    """The group size N of `value` (None: p), a whole number >= p; else ZboptError."""
    check_group_size("interleaved-1f1b", value)
    if value is None:
        return p
    n = int(value)  # a plain int, whatever integer type it came as
    if n < p:
        raise ZboptError(f"interleaved-1f1b needs group size N >= p = {p}, got {n}")
    return n


@register("interleaved-1f1b", "interleaved",
          "Interleaved 1F1B: Megatron depth-first order over v chunks, fused backward", chunks=2,
          checks={"group_size": check_group_size})
def interleaved_1f1b(instance: Instance, group_size: int | None = None) -> Schedule:
    p, m, v = instance.devices, instance.microbatches, instance.chunks
    n = _group_size(group_size, p)
    if m % n:
        raise ZboptError(f"interleaved-1f1b needs microbatches ({m}) to be a multiple of the "
                         f"group size N = {n}: use m = {((m + n - 1) // n) * n} or another N")
    total = m * v

    def chunk_mb(k: int, backward: bool) -> tuple[int, int]:
        chunk = (k // n) % v
        if backward:
            chunk = v - 1 - chunk
        return chunk, (k // (n * v)) * n + k % n

    orders = []
    for r in range(p):
        warmup = min(2 * (p - r - 1) + (v - 1) * n, total)
        order: list = []
        for k in range(warmup):
            c, j = chunk_mb(k, False)
            order.append(((c * p + r, j, "F"),))
        for i in range(total - warmup):
            c, j = chunk_mb(warmup + i, False)
            order.append(((c * p + r, j, "F"),))
            c, j = chunk_mb(i, True)
            order.append(fused(c * p + r, j))
        for i in range(total - warmup, total):
            c, j = chunk_mb(i, True)
            order.append(fused(c * p + r, j))
        orders.append(tuple(order))
    return Schedule(tuple(orders))  # items already blocks of passes: nothing to convert
