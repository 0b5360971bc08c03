"""A lower bound over every partition of a layered model on the V placement.

On V, device d runs model stage d and stage 2p-1-d, so its bound depends on two segments that
are not neighbours, and the dynamic programme of zbopt.plan.bound (one segment per device) does
not apply. What holds for every schedule of single passes and every partition, the span being at
least each device's busy window (docs/model.md):
- load: the window holds m times the t_f + t_b + t_w of both its stages;
- memory throughput (as zbopt.plan.bound's for one stage): a micro-batch holds stage s's m_b on
  its device from the start of F(s) to the end of B(s), at least the forward and backward path
  from s to the model's end and back (the t_f and t_b of every layer from s's first on, and
  comm on each hop between devices); at most k = floor((cap - static) / m_b(s)) are held at
  once, so ceil(m / k) of those intervals are disjoint, and the W of the last of them follows:
  the window is at least ceil(m / k) times that path plus t_w(s), for each of d's two stages
  (at least one round with no cap);
- fit: a partition no schedule runs (a device whose static memory and the two activations of one
  micro-batch, held together from the F of its second stage to the B of its first, exceed its
  cap) is not a partition to bound.

`v_floor` is the least over all fitting partitions of the largest device bound, by a dynamic
programme from the outside in: device d takes the segment right after stages 0..d-1 and the one
right before stages 2p-d..2p-1, the state is the two cuts left between them (i, j), and the last
device's two stages meet (i = j); the paths depend on a segment's first layer alone, so every
device bound is known when its two segments are. It is never below the total load over p, the
average of the loads, and is higher when whole layers cannot share the load evenly (a heavy
output layer, few layers per stage) or the cap holds few micro-batches.
"""

from __future__ import annotations

import math
from itertools import accumulate
from typing import Optional

import numpy as np

from ..instance import within_cap
from ..layers import LayeredModel
from .bound import _caps

# p * n**4 / 4 element operations: 82 layers on p = 16 (1.8e8) take about 3.5 s on this
# project's 2-core machine; past this the plan would spend too much of its time here
BUDGET = 4e8


def v_floor(model: LayeredModel) -> Optional[float]:
    """The least over V partitions that fit the cap of the largest device bound (see the module
    doc); inf when no partition fits the cap; None when the programme is too large (BUDGET)."""
    layers = model.expanded
    n, p, m, comm = len(layers), model.devices, model.microbatches, model.comm
    if 2 * p > n or p * n ** 4 / 4 > BUDGET:
        return None

    def prefix(key: str) -> np.ndarray:
        return np.array((0.0, *accumulate(getattr(x, key) for x in layers)))

    tf, tb, tw, mb, st = (prefix(k) for k in ("t_f", "t_b", "t_w", "m_b", "static"))
    load = m * (tf + tb + tw)
    # each cut's forward and backward path to the end of the model and back
    trip = (tf[n] - tf) + (tb[n] - tb)
    caps = _caps(model)
    cut = np.arange(n + 1)
    a, b = cut[:, None], cut[None, :]  # device d holds layers [i, a) and [b, j)
    after = np.full((n + 1, n + 1), math.inf)
    np.fill_diagonal(after, 0.0)  # past the last device the two stages have met
    for d in range(p - 1, -1, -1):
        middle = 2 * (p - 1 - d)  # layers the devices after d need between its two segments
        for_first = trip + 2 * (2 * p - 2 - d) * comm  # stage d's round trip, from its layer i
        for_second = trip + 2 * d * comm  # stage 2p-1-d's, from its first layer b
        now = np.full((n + 1, n + 1), math.inf)
        for i in range(d, n - d - 1):
            js = np.arange(i + 2 + middle, n - d + 1)
            if not len(js):
                continue
            j = js[:, None, None]
            ok = (a > i) & (b < j) & (b - a >= middle)
            cost = (load[a] - load[i]) + (load[j] - load[b])
            first_mb, second_mb = mb[a] - mb[i], mb[j] - mb[b]
            static = (st[a] - st[i]) + (st[j] - st[b])
            room = math.inf if caps is None else caps[d] - static
            if caps is not None:  # elementwise on the arrays
                ok &= within_cap(static + first_mb + second_mb, caps[d])
            with np.errstate(divide="ignore", invalid="ignore"):
                for held, path, w in ((first_mb, for_first[i], tw[a] - tw[i]),
                                      (second_mb, for_second[b], tw[j] - tw[b])):
                    cost = np.maximum(cost, _rounds(m, room, held) * path + w)
            value = np.where(ok, np.maximum(cost, after[None, :, :]), math.inf)
            now[i, js] = value.reshape(len(js), -1).min(axis=1)
        after = now
    return float(after[0, n])


def _rounds(m: int, room, held) -> np.ndarray:
    """ceil(m / k), k = floor(room / held) activations held at once (at least 1 round)."""
    slots = np.floor(np.where(held > 0, room / np.where(held > 0, held, 1.0), math.inf) + 1e-9)
    return np.where(np.isfinite(slots) & (slots >= 1), np.ceil(m / np.maximum(slots, 1.0)), 1.0)
