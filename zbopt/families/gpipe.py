"""GPipe (all-forward-all-backward): every forward, then every full backward."""

from ..instance import Instance
from ..registry import register
from ..schedule import Schedule, fused


@register("gpipe", "contiguous", "GPipe: all forwards, then all (fused) backwards")
def gpipe(instance: Instance) -> Schedule:
    m = instance.microbatches
    orders = []
    for d in range(instance.devices):
        orders.append(tuple([((d, j, "F"),) for j in range(m)] + [fused(d, j) for j in range(m)]))
    return Schedule(tuple(orders))  # items already blocks of passes: nothing to convert
