"""The step control's states: at every moment an item starts or ends, how many activations
each device holds for a backward still to come and how many weight gradients (W) are pending.

Counted from an evaluated timeline with the pass rules of zbopt.passes: what a block takes
(an F, memory_delta > 0) is held from the block's start; a B ends an activation's flight and
leaves its W pending; a W ends that. A count is in units of one micro-batch's activation over
all of the device's layers on one pipeline, so a chunk of an interleaved or V device is a
fraction (its share of the device's activation memory) and 1F1B peaks at p on device 0.
"""

from __future__ import annotations

from ..instance import Instance
from ..passes import stage_deltas
from ..schedule import Timeline, format_item


def activation_shares(instance: Instance) -> tuple[float, ...]:
    """Per stage: its part of one micro-batch's activation on its device (1 when one stage)."""
    shares = []
    for stage in range(instance.num_stages):
        device = instance.device_of(stage)
        chain = instance.chain_of_stage(stage)
        mine = [s for s in chain if instance.device_of(s) == device]
        total = sum(instance.m_b[s] for s in mine)
        shares.append(instance.m_b[stage] / total if total else 1 / len(mine))
    return tuple(shares)


def _compact(x: float) -> float | int:
    x = round(x, 6) + 0.0  # + 0.0 turns -0.0 into 0.0
    return int(x) if x.is_integer() else x


def step_states(timeline: Timeline) -> dict:
    """Every distinct start or end time, in order, with what happened then and the state just
    after it: per device the activations in flight and the pending W, sent as changes (only the
    devices whose counts moved, [device, in flight, pending W]; all start at 0).

    Also each device's largest in-flight and pending-W count over the whole schedule."""
    instance = timeline.instance
    share = activation_shares(instance)
    deltas = stage_deltas(instance)  # memory_delta per kind and stage, looked up once
    # (time, starts, device, item): at one time, ends before starts, then by device
    happenings = []
    for device, order in enumerate(timeline.schedule.orders):
        for item, (t0, t1) in zip(order, timeline.item_times[device]):
            happenings.append((t0, 1, device, item))
            happenings.append((t1, 0, device, item))
    happenings.sort(key=lambda h: (h[0], h[1], h[2]))
    p = instance.devices
    in_flight, pending = [0.0] * p, [0.0] * p
    peak_flight, peak_pending = [0.0] * p, [0.0] * p
    times, changes, started, ended = [], [], [], []
    k, count = 0, len(happenings)
    while k < count:
        t = happenings[k][0]
        began, finished, moved = [], [], set()
        while k < count and happenings[k][0] == t:
            _, starts, device, item = happenings[k]
            k += 1
            if starts:
                began.append([device, format_item(item)])
                for q in item:
                    if deltas[q[2]][q[0]] > 0:  # held from the block's start
                        in_flight[device] += share[q[0]]
                        moved.add(device)
            else:
                finished.append([device, format_item(item)])
                for q in item:
                    if q[2] == "B":
                        in_flight[device] -= share[q[0]]
                        pending[device] += share[q[0]]
                        moved.add(device)
                    elif q[2] == "W":
                        pending[device] -= share[q[0]]
                        moved.add(device)
        for d in moved:
            peak_flight[d] = max(peak_flight[d], in_flight[d])
            peak_pending[d] = max(peak_pending[d], pending[d])
        times.append(_compact(t))
        changes.append([[d, _compact(in_flight[d]), _compact(pending[d])] for d in sorted(moved)])
        started.append(began)
        ended.append(finished)
    return {"time": times, "changes": changes, "started": started, "ended": ended,
            "peak_in_flight": [_compact(x) for x in peak_flight],
            "peak_pending_w": [_compact(x) for x in peak_pending],
            "unit": "micro-batch activations of one device"}
