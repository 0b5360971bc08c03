"""1F1B (PipeDream-Flush, Megatron's default): warm-up, one forward one backward, cool-down."""

from ..instance import Instance
from ..registry import register
from ..schedule import Schedule, fused


@register("1f1b", "contiguous", "1F1B: p-r-1 warm-up forwards, then alternate, fused backward")
def one_f_one_b(instance: Instance) -> Schedule:
    p, m = instance.devices, instance.microbatches
    orders = []
    for r in range(p):
        warmup = min(p - r - 1, m)
        order: list = [((r, j, "F"),) for j in range(warmup)]
        for i in range(m):
            if warmup + i < m:
                order.append(((r, warmup + i, "F"),))
            order.append(fused(r, i))
        orders.append(tuple(order))
    return Schedule(tuple(orders))  # items already blocks of passes: nothing to convert
