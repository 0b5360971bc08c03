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

V-Min and V-Half (Qi et al., "Pipeline Parallelism with Controllable Memory", 2024) come from
that paper's building-block view: lay out one micro-batch's passes on a grid of unit slots
(every pass one slot, 6 slots per device per micro-batch: F, B, W of its two stages), then
repeat that block every 6 slots for each further micro-batch; each device's order is its
passes sorted by slot. In the block, a pass takes the earliest slot after its dependency (plus
a gap) whose slot modulo 6 is still free on its device, so repeated blocks never collide. The
chain runs F down the V (devices 0..p-1), F back up (p-1..0), B of the up stages (0..p-1),
B of the down stages (p-1..0); every W takes the first free slot after its B.

  v-min-block   every hop of the chain one slot after the previous pass
  v-half-block  the same, but two slots between up-stage forwards on consecutive devices,
                which lengthens the blocks' lifespans and shortens the bubble

(Registered with a -block suffix: `v-min` and `v-half` are the memory-capped greedy versions
in zbopt/heuristics.) The peak activation follows from the order alone, whatever the costs:
with m_w = m_b (W holds the whole activation until it runs, as the paper counts) it is
(p+4)//3 (v-min-block) and (p+2)//2 (v-half-block) activations of the device's layers, the
paper's figures, reached once m >= 2p and never exceeded; about 1/3 and 1/2 of 1F1B's p.
With unit costs their bubble (span - ideal) lies between ZB-V's zero and 1F1B's, v-half-block
below v-min-block for p >= 3 (p=16, m=49: 26 and 29.5 against 1F1B's 45). The slots assume
equal costs: other costs keep the memory but may stretch the timing.
"""

from __future__ import annotations

from ..instance import Instance
from ..registry import register
from ..schedule import Schedule


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


def number_passes(order: list[tuple[str, str]],
                  stages: dict[str, int]) -> list[tuple[int, int, str]]:
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


# Slots per device and micro-batch in the building-block grid: F, B and W of its two stages.
PERIOD = 6


def v_block(p: int, up_gap: int) -> dict[tuple[str, str, int], int]:
    """Slot of every pass of one micro-batch, keyed (kind, "down" | "up", device).

    Chain order: F down devices 0..p-1, F up p-1..0, B up 0..p-1, B down p-1..0; each pass at
    the earliest slot >= previous + gap whose residue mod PERIOD is free on its device (so the
    block repeated every PERIOD slots never puts two passes in one slot). Gaps are one slot,
    except `up_gap` between up-leg forwards on consecutive devices.
    """
    used: list[set[int]] = [set() for _ in range(p)]
    slots: dict[tuple[str, str, int], int] = {}

    def place(key: tuple[str, str, int], earliest: int) -> int:
        device = key[2]
        slot = earliest
        while slot % PERIOD in used[device]:
            slot += 1
        used[device].add(slot % PERIOD)
        slots[key] = slot
        return slot

    slot = -1
    for d in range(p):
        slot = place(("F", "down", d), slot + 1)
    for d in reversed(range(p)):
        slot = place(("F", "up", d), slot + (1 if d == p - 1 else up_gap))
    for d in range(p):
        slot = place(("B", "up", d), slot + 1)
    for d in reversed(range(p)):
        slot = place(("B", "down", d), slot + 1)
    for d in range(p):
        for leg in ("up", "down"):
            place(("W", leg, d), slots[("B", leg, d)] + 1)
    return slots


def repeat_block(p: int, m: int, slots: dict[tuple[str, str, int], int]) -> Schedule:
    """Micro-batch j's passes at their block slot + PERIOD * j; each device in slot order."""
    orders = []
    for d in range(p):
        stage = {"down": d, "up": 2 * p - 1 - d}
        timed = sorted((slot + PERIOD * j, (stage[leg], j, kind))
                       for (kind, leg, device), slot in slots.items() if device == d
                       for j in range(m))
        orders.append([x for _, x in timed])
    return Schedule.build(orders)


@register("v-min-block", "v",
          "V-Min building block (handcrafted): (p+4)//3 activations, about 1/3 of 1F1B's")
def v_min_block(instance: Instance) -> Schedule:
    p = instance.devices
    return repeat_block(p, instance.microbatches, v_block(p, up_gap=1))


@register("v-half-block", "v",
          "V-Half building block (handcrafted): (p+2)//2 activations, about 1/2 of 1F1B's")
def v_half_block(instance: Instance) -> Schedule:
    p = instance.devices
    return repeat_block(p, instance.microbatches, v_block(p, up_gap=2))
