"""Lower bounds over every partition of a layered model (contiguous placement).

On a contiguous placement the per-device bound of zbopt.bounds (`device_bound`: load plus
forced ramp and drain idle) is taken on every device; where the cap cannot hold
every micro-batch at once a memory throughput bound (`_throughput`) can raise it. Device d's bound
depends only on the layers of its own stage and on sums over the stages after it: the forward
round trip needs the t_f of every layer from the stage's first layer on, the backward the t_b of
every layer after the stage's last. So the bound of a partition is a max over its segments of a
function of (stage, first layer, last layer), and the least bound over all partitions, the number
of partitions below a threshold, and those partitions themselves come from a dynamic programme
over (stage, first layer). Bounds of zbopt.bounds that couple several stages are not in the
segment bound; the search adds them per partition (`registry.schedule_bound`). tests/test_plan.py
checks the segment bound against zbopt.bounds.device_bound on every partition of small models and
against CP-SAT optima where it is higher.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import accumulate
from typing import Iterator

from ..bounds import knapsack_max
from ..instance import within_cap
from ..layers import LayeredModel

INF = math.inf


@dataclass(frozen=True)
class SegmentBounds:
    """bound[d][i][j]: least span of device d holding layers i..j (inf: does not fit the cap);
    excess[d][i][j]: memory beyond the cap that stage needs (static plus one micro-batch's
    activations), 0 where it fits."""

    model: LayeredModel
    bound: tuple[tuple[tuple[float, ...], ...], ...]
    excess: tuple[tuple[tuple[float, ...], ...], ...]

    @property
    def stages(self) -> int:
        return len(self.bound)

    @property
    def layers(self) -> int:
        return self.model.num_layers

    def partition_bound(self, sizes) -> float:
        out, i = 0.0, 0
        for d, n in enumerate(sizes):
            out = max(out, self.bound[d][i][i + n - 1])
            i += n
        return out


def segment_bounds(model: LayeredModel) -> SegmentBounds:
    """The bound of every (stage, segment) of a contiguous placement (see the module doc)."""
    if model.placement != "contiguous":
        raise ValueError("segment bounds describe the contiguous placement")
    layers = model.expanded
    n, p, m, comm = len(layers), model.devices, model.microbatches, model.comm

    def prefix(key):
        return (0.0, *accumulate(getattr(x, key) for x in layers))

    tf, tb, tw, mb, mw, st = (prefix(k) for k in ("t_f", "t_b", "t_w", "m_b", "m_w", "static"))
    caps = _caps(model)
    bound, excess = [], []
    for d in range(p):
        rows_b, rows_e = [], []
        for i in range(n):
            row_b, row_e = [INF] * n, [0.0] * n
            # stage d needs layers i..j with room for the d stages before and p-1-d after it
            for j in range(i, n):
                if i < d or n - 1 - j < p - 1 - d:
                    continue
                seg = {k: v[j + 1] - v[i] for k, v in
                       (("t_f", tf), ("t_b", tb), ("t_w", tw), ("m_b", mb), ("m_w", mw),
                        ("static", st))}
                need = seg["static"] + seg["m_b"]
                if caps is not None and not within_cap(need, caps[d]):
                    row_e[j] = need - caps[d]
                    continue
                wait = (tf[n] - tf[i]) + (tb[n] - tb[j + 1]) + 2 * (p - 1 - d) * comm
                capacity = INF if caps is None else caps[d] - seg["static"]
                row_b[j] = _device_bound(seg, m, wait, capacity)
            rows_b.append(tuple(row_b))
            rows_e.append(tuple(row_e))
        bound.append(tuple(rows_b))
        excess.append(tuple(rows_e))
    return SegmentBounds(model, tuple(bound), tuple(excess))


def _caps(model: LayeredModel) -> tuple[float, ...] | None:
    cap = model.memory_cap
    if cap is None:
        return None
    if isinstance(cap, (list, tuple)):
        return tuple(float(x) for x in cap)
    return (float(cap),) * model.devices


def _device_bound(seg: dict, m: int, wait: float, capacity: float) -> float:
    """zbopt.bounds.device_bound for a device with one stage of these totals, raised by the
    memory throughput bound where the cap cannot hold every micro-batch at once."""
    load = m * (seg["t_f"] + seg["t_b"] + seg["t_w"])
    if math.isfinite(capacity):
        ramp_busy = knapsack_max([(seg["m_b"], seg["t_f"], m)], capacity)
        items = [(seg["m_b"], seg["t_b"] + seg["t_w"], m - 1), (seg["m_w"], seg["t_w"], m - 1)]
        drain_busy = seg["t_f"] + knapsack_max(items, capacity - seg["m_b"])
        drain = max(0.0, wait - drain_busy)
    else:
        ramp_busy, drain = m * seg["t_f"], 0.0
    ramp = max(0.0, wait - ramp_busy)
    if m * seg["m_b"] > capacity + 1e-9:
        # some forward starts after the first B: disjoint windows
        return max(load + ramp + drain, _throughput(seg, m, wait, capacity))
    return load + max(ramp, drain)


def _throughput(seg: dict, m: int, wait: float, capacity: float) -> float:
    """Memory throughput: a micro-batch holds m_b from the start of its F to the end of its B,
    at least the round trip plus t_b; at most k = floor(capacity / m_b) are held at once, so the
    m intervals split into k chains of disjoint ones (interval colouring), the longest holds
    ceil(m / k), and the W of its last B still follows on the device."""
    if seg["m_b"] <= 0:
        return 0.0
    k = math.floor(capacity / seg["m_b"] + 1e-9)
    if k < 1:
        return INF
    return math.ceil(m / k) * (wait + seg["t_b"]) + seg["t_w"]


# ----- the dynamic programme over (stage, first layer) -----------------------------------------

def suffix_minmax(table: SegmentBounds) -> list[list[float]]:
    """best[d][i]: least possible max bound of stages d.. when stage d starts at layer i."""
    p, n = table.stages, table.layers
    best = [[INF] * (n + 1) for _ in range(p + 1)]
    best[p][n] = 0.0
    for d in range(p - 1, -1, -1):
        for i in range(n):
            row = table.bound[d][i]
            value = INF
            for j in range(i, n):
                value = min(value, max(row[j], best[d + 1][j + 1]))
            best[d][i] = value
    return best


def least_bound(table: SegmentBounds) -> float:
    """The least partition bound over every partition (inf: none fits the cap)."""
    return suffix_minmax(table)[0][0]


def count_below(table: SegmentBounds, threshold: float) -> int:
    """How many partitions have a bound strictly below `threshold`."""
    p, n = table.stages, table.layers
    ways = [[0] * (n + 1) for _ in range(p + 1)]
    ways[p][n] = 1
    for d in range(p - 1, -1, -1):
        for i in range(n):
            row = table.bound[d][i]
            ways[d][i] = sum(ways[d + 1][j + 1] for j in range(i, n) if row[j] < threshold)
    return ways[0][0]


def partitions_below(table: SegmentBounds, threshold: float,
                     best: list[list[float]] | None = None) -> Iterator[tuple[int, ...]]:
    """Every partition (layers per stage) whose bound is below `threshold`."""
    best = best or suffix_minmax(table)
    p, n = table.stages, table.layers

    def walk(d: int, i: int, sizes: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
        if d == p:
            if i == n:
                yield sizes
            return
        row = table.bound[d][i]
        for j in range(i, n):
            if row[j] < threshold and best[d + 1][j + 1] < threshold:
                yield from walk(d + 1, j + 1, sizes + (j - i + 1,))

    if best[0][0] < threshold:
        yield from walk(0, 0, ())


def argmin_partition(table: SegmentBounds, best: list[list[float]] | None = None) -> tuple[int, ...] | None:
    """A partition with the least bound; among those, each stage as long as the others allow
    (ties go to the segment whose own bound is smallest)."""
    best = best or suffix_minmax(table)
    target = best[0][0]
    if not math.isfinite(target):
        return None
    sizes, i = [], 0
    for d in range(table.stages):
        row = table.bound[d][i]
        options = [j for j in range(i, table.layers)
                   if max(row[j], best[d + 1][j + 1]) <= target]
        j = min(options, key=lambda k: (best[d + 1][k + 1], row[k]))
        sizes.append(j - i + 1)
        i = j + 1
    return tuple(sizes)


def least_excess(table: SegmentBounds) -> tuple[float, int, tuple[int, ...]]:
    """(least over partitions of the largest memory shortfall, the device short by it, that
    partition) for a cap that no partition fits."""
    p, n = table.stages, table.layers
    best = [[INF] * (n + 1) for _ in range(p + 1)]
    choice = [[-1] * (n + 1) for _ in range(p + 1)]
    best[p][n] = 0.0
    for d in range(p - 1, -1, -1):
        for i in range(d, n):
            for j in range(i, n - (p - 1 - d)):
                value = max(table.excess[d][i][j], best[d + 1][j + 1])
                if value < best[d][i]:
                    best[d][i], choice[d][i] = value, j
    sizes, i, worst, device = [], 0, -1.0, 0
    for d in range(p):
        j = choice[d][i]
        if table.excess[d][i][j] > worst:
            worst, device = table.excess[d][i][j], d
        sizes.append(j - i + 1)
        i = j + 1
    return best[0][0], device, tuple(sizes)
