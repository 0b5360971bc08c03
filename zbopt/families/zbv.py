"""ZB-V: the Zero Bubble paper's handcrafted V-shape schedule (placement "v").

Device d holds the "down" stage d and the "up" stage 2p-1-d, so a micro-batch starts and ends
its pass through the model on device 0 and its backward starts on device 0 too. Per device d,
over n = max(m, 2p-1) micro-batches (the pattern needs 2p-1 of them to reach its steady state;
passes of micro-batches >= m are then dropped, which keeps the order valid since dependencies
never cross micro-batches):

  warm-up    2(p-d)-1 down F; d times (up F, down F); p-d times (up F, up B, up W)
  steady     until every F ran: down F (while any is left), down B, down W, up F, up B, up W
  cool-down  d times (down B, up B); p-d times (down B, the oldest deferred down W);
             then the deferred up W passes, then the remaining down W passes

Every device keeps at most 2p forwards in flight (its peak activation is 2p stage activations,
p times the activation of all its layers: 1F1B's peak on device 0, cap "1p"), and with
t_F = t_B = t_W, comm = 0 and m >= 2p-1 the order has no bubble at all: `span == ideal` in
evaluate() (span = each device from its first to its last pass, the paper's objective). The
order is fixed; any other costs are timed as they come by the evaluator.
"""

from __future__ import annotations

from ..instance import Instance
from ..schedule import Schedule
from .registry import register


def zbv_device_order(p: int, d: int, n: int) -> list[tuple[str, str]]:
    """Device d's order for n micro-batches as (kind, "down" | "up") pairs, in order.

    Which micro-batch each pass takes follows from counting (see `number_passes`).
    """
    order: list[tuple[str, str]] = [("F", "down")] * (2 * (p - d) - 1)
    order += [("F", "up"), ("F", "down")] * d
    order += [("F", "up"), ("B", "up"), ("W", "up")] * (p - d)
    down_forwards = 2 * (p - d) - 1 + d
    for _ in range(n - p):  # steady state: each round adds one up F, ending with n of them
        if down_forwards < n:
            order.append(("F", "down"))
            down_forwards += 1
        order += [("B", "down"), ("W", "down"), ("F", "up"), ("B", "up"), ("W", "up")]
    order += [("B", "down"), ("B", "up")] * d
    order += [("B", "down"), ("W", "down")] * (p - d)
    order += [("W", "up")] * d
    order += [("W", "down")] * d
    return order


def number_passes(order: list[tuple[str, str]], stages: dict[str, int]) -> list[tuple[int, int, str]]:
    """Passes (stage, micro-batch, kind): each kind of each stage takes micro-batches in order."""
    counters: dict[tuple[str, str], int] = {}
    passes = []
    for kind, leg in order:
        j = counters.get((kind, leg), 0)
        counters[(kind, leg)] = j + 1
        passes.append((stages[leg], j, kind))
    return passes


@register("zb-v", "v", "ZB-V: handcrafted V-shape zero bubble at 1F1B's peak memory")
def zb_v(instance: Instance) -> Schedule:
    p, m = instance.devices, instance.microbatches
    n = max(m, 2 * p - 1)
    orders = []
    for d in range(p):
        passes = number_passes(zbv_device_order(p, d, n), {"down": d, "up": 2 * p - 1 - d})
        orders.append([x for x in passes if x[1] < m])
    return Schedule.build(orders)
