"""ZB-H1 and ZB-H2, the Zero Bubble paper's handcrafted schedules (B and W split).

ZB-H1 keeps 1F1B's warm-up and memory (p in-flight activations); stage r defers its W passes by
r rounds so the last stages fill their cool-down with W. ZB-H2 allows up to 2(p-r)-1 forwards in
flight on stage r: it is the seed article's time-stepped rule (B if possible, else F under the
in-flight limit, else a pending W) run once with unit costs and no comm, which fixes the order;
the order is then timed with the instance's real costs like every other schedule.
"""

from ..errors import ZboptError
from ..instance import Instance
from ..registry import register
from ..schedule import Schedule


@register("zb-h1", "contiguous", "ZB-H1: 1F1B memory, B/W split, W deferred r rounds on stage r")
def zb_h1(instance: Instance) -> Schedule:
    p, m = instance.devices, instance.microbatches
    orders = []
    for r in range(p):
        warmup = min(p - r - 1, m)
        order: list = [(r, j, "F") for j in range(warmup)]
        deferred = min(r, m)
        for i in range(m):
            if warmup + i < m:
                order.append((r, warmup + i, "F"))
            order.append((r, i, "B"))
            if i >= deferred:
                order.append((r, i - deferred, "W"))
        order += [(r, j, "W") for j in range(m - deferred, m)]
        orders.append(tuple((q,) for q in order))
    return Schedule(tuple(orders))  # every item a single pass


def unit_time_greedy(p: int, m: int, limit) -> list[list[tuple[int, int, str]]]:
    """Per-stage orders from the time-stepped rule with unit costs and no comm.

    At every step each idle stage r runs: B if its input gradient has arrived, else F if fewer
    than limit(r) forwards are in flight and the input has arrived, else its oldest pending W.
    """
    f_done = [[None] * m for _ in range(p)]  # end time of F(r, j)
    b_done = [[None] * m for _ in range(p)]
    next_f, next_b, next_w = [0] * p, [0] * p, [0] * p
    orders: list[list[tuple[int, int, str]]] = [[] for _ in range(p)]
    t = 0
    total = 3 * p * m
    while sum(len(o) for o in orders) < total:
        if t > 10 * total:
            raise ZboptError("the unit-time rule made no progress (internal error)")
        for r in range(p):
            j = next_b[r]
            if j < m:
                ready = (f_done[r][j] is not None and f_done[r][j] <= t) if r == p - 1 \
                    else (b_done[r + 1][j] is not None and b_done[r + 1][j] <= t)
                if ready and j < next_f[r]:
                    orders[r].append((r, j, "B"))
                    b_done[r][j] = t + 1
                    next_b[r] += 1
                    continue
            j = next_f[r]
            if j < m and next_f[r] - next_b[r] < limit(r):
                ready = r == 0 or (f_done[r - 1][j] is not None and f_done[r - 1][j] <= t)
                if ready:
                    orders[r].append((r, j, "F"))
                    f_done[r][j] = t + 1
                    next_f[r] += 1
                    continue
            if next_w[r] < next_b[r] and b_done[r][next_w[r]] <= t:
                orders[r].append((r, next_w[r], "W"))
                next_w[r] += 1
        t += 1
    return orders


@register("zb-h2", "contiguous", "ZB-H2: up to 2(p-r)-1 forwards in flight, B/W split")
def zb_h2(instance: Instance) -> Schedule:
    p, m = instance.devices, instance.microbatches
    orders = unit_time_greedy(p, m, lambda r: 2 * (p - r) - 1)
    return Schedule(tuple(tuple((q,) for q in order) for order in orders))  # single passes
