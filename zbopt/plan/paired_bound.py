"""Lower bounds over every partition of a layered model on the placements that give each
device two stages: V (stages d and 2p-1-d), interleaved with two chunks (d and d+p) and
dualpipe (model part d forwards and part p-1-d backwards, half the micro-batches each).

A device's bound then depends on two segments that are not neighbours, and the dynamic
programme of zbopt.plan.bound (one segment per device) does not apply. What holds for every
schedule of single passes and every partition, the span being at least each device's busy window
(docs/model.md):
- load: the window holds r times the t_f + t_b + t_w of each of its two stages, r the
  micro-batches through the stage (m; m/2 on dualpipe, each direction taking half);
- memory throughput (as zbopt.plan.bound's for one stage): a micro-batch holds stage s's m_b on
  its device from the start of F(s) to the end of B(s), at least the forward and backward path
  from s to its chain's end and back (the t_f and t_b of every layer from s's first on, and
  comm on each hop between devices); at most k = floor((cap - static) / m_b(s)) are held at
  once, so ceil(r / k) of those intervals are disjoint, and the W of the last of them follows:
  the window is at least ceil(r / k) times that path plus t_w(s), for each of the device's two
  stages (at least one round with no cap);
- memory area (zbopt.bounds, memory_area): those activations, held at least that path (and m_w
  of them t_w(s) longer, until W), summed over both stages times r, fit under the room the cap
  leaves above the static memory for the whole window, so the window is at least their sum over
  that room; it sees the two stages' memory add up, which the per-stage rounds do not;
- fit: a partition no schedule runs (a device whose static memory and the two activations of one
  micro-batch, held together from the F of its later stage to the B of its earlier one, exceed
  its cap; on dualpipe, where no micro-batch runs through both, the larger of the two) is not a
  partition to bound.

`v_floor`, `interleaved_floor` and `dualpipe_floor` are the least over all fitting partitions of
the largest device bound, by dynamic programmes whose state is the two cuts where the next
device's segments start; every path depends on a segment's first layer alone, so each device
bound is known when its two segments are. V goes from the outside in (device d takes the segment
right after stages 0..d-1 and the one right before stages 2p-d..2p-1; the last device's two
stages meet), and so does dualpipe over its p parts (devices q and p-1-q both hold parts q and
p-1-q; with p odd the middle part runs both directions on the middle device). Interleaved goes
along both chunks at once (device d takes the segment after stage d-1 and the one after stage
p+d-1), for every cut where the second chunk starts. None is below the total load over p, the
average of the device loads, and they are higher when whole layers cannot share the load evenly
(a heavy output layer, few layers per stage) or the cap holds few micro-batches.

Where no partition fits the cap, `least_shortfall` says by how much it falls short at best, on
any placement: the partition whose largest memory shortfall over the devices (static memory
and one micro-batch's activations on its chain, zbopt.bounds.min_feasible_cap, beyond the
device's cap) is least, by CP-SAT over the cuts (zbopt.plan.load_floor's model, with that
shortfall for the objective), and the device short by it, for plan's error message.
"""

from __future__ import annotations

import itertools
import math
import time
from typing import Optional, Sequence

import numpy as np

from ..bounds import held_area
from ..instance import cap_limit, within_cap
from ..layers import LayeredModel, even_partition
from ..solvers import interruptible
from .bound import device_caps

# element operations of a programme (V, dualpipe: p n^4 / 4, interleaved: p n^5 / 30): at p = 16
# on 82 layers (1.8e8) V takes about 0.7 s and dualpipe 2.6 s on this project's 2-core machine,
# on 102 (4.3e8) 3 s and 7 s; past this budget the plan would spend too much of its time here
# and keeps the total load over p
BUDGET = 4e8


SHORTFALL_SECONDS = 2.0  # least_shortfall's CP-SAT, for an error message


def least_shortfall(model: LayeredModel, time_limit: float = SHORTFALL_SECONDS
                    ) -> Optional[tuple[float, int, tuple[int, ...], bool]]:
    """For a cap no partition fits (see the module doc): (the largest shortfall of a device
    on the partition where that is least, the first device short by it, the partition, whether
    CP-SAT proved it least within `time_limit`; else it is the least it found). None without a
    cap, or when CP-SAT finds no partition in time (or its model is too large to set up in it,
    zbopt.plan.load_floor.affordable). Memory is scaled to integers as in
    zbopt.plan.load_floor; the shortfall returned is the partition's own, in floats."""
    from ortools.sat.python import cp_model

    from ..bounds import min_feasible_cap
    from .load_floor import _integers, affordable, cut_variables, table_entries

    caps = device_caps(model)
    if caps is None or time_limit <= 0 or not affordable(table_entries(model, 2), time_limit):
        return None  # without a cap, or a model too large to set up in the time
    layers, p, parts = model.expanded, model.devices, model.num_parts
    n = len(layers)
    free = model.with_settings(memory_cap=None)
    probe = free.instance(even_partition(free))  # chains and devices, whatever the split
    scale, (static, held) = _integers([x.static for x in layers], [x.m_b for x in layers],
                                      top=max(caps))
    cp = cp_model.CpModel()
    cuts, sums = cut_variables(cp, n, parts)
    static_at, held_at = sums(static, "s"), sums(held, "a")
    rooms = [math.floor(c * scale) for c in caps]
    worst = cp.NewIntVar(-max(rooms) - 1, 2 * static[-1] + held[-1] + 1, "worst")
    for d in range(p):
        own = [s for s in range(probe.num_stages) if probe.device_of(s) == d]
        pinned = sum(static_at[s % parts + 1] - static_at[s % parts] for s in own)
        for stages, _ in probe.chains:  # one micro-batch's activations on each of its chains
            on = [s % parts for s in stages if probe.device_of(s) == d]
            cp.Add(pinned + sum(held_at[k + 1] - held_at[k] for k in on) - rooms[d] <= worst)
    cp.Minimize(worst)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = 1
    status = interruptible.solve(solver, cp)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    at = [solver.Value(c) for c in cuts]
    sizes = tuple(b - a for a, b in zip(at, at[1:]))
    short = [need - cap for need, cap in zip(min_feasible_cap(free.instance(sizes)), caps)]
    device = max(range(p), key=lambda d: (short[d], -d))
    return short[device], device, sizes, status == cp_model.OPTIMAL


def v_floor(model: LayeredModel, budget: float = BUDGET,
            deadline: Optional[float] = None) -> Optional[float]:
    """The least over V partitions that fit the cap of the largest device bound (see the module
    doc); inf when no partition fits the cap; None when the programme is larger than `budget`
    element operations, or when `deadline` (perf_counter) passes before it ends."""
    n, p = model.num_layers, model.devices
    if 2 * p > n or p * n ** 4 / 4 > budget:
        return None
    costs = _Costs(model)
    after = np.full((n + 1, n + 1), math.inf)
    np.fill_diagonal(after, 0.0)  # past the last device the two stages have met
    # device d: stage d's path runs 2p-2-d hops each way (p-1 and p share a device), 2p-1-d's d;
    # the devices after d need 2(p-1-d) layers between its two segments
    return _outside_in(n, p, after, lambda d: 2 * (p - 1 - d),
                       lambda d, i, a, b, j: costs.device(d, (i, a, 2 * p - 2 - d), (b, j, d)),
                       deadline)


def interleaved_floor(model: LayeredModel, budget: float = BUDGET,
                      deadline: Optional[float] = None) -> Optional[float]:
    """The least over interleaved partitions (two chunks) that fit the cap of the largest device
    bound (see the module doc); inf when none fits; None for other chunk counts, one device,
    when the programme is larger than `budget` element operations, or when `deadline`
    (perf_counter) passes before it ends."""
    n, p = model.num_layers, model.devices
    if model.num_stages != 2 * p or p < 2 or 2 * p > n or p * n ** 5 / 30 > budget:
        return None
    costs = _Costs(model)
    best = math.inf
    for start in range(p, n - p + 1):  # the second chunk's first layer
        if deadline is not None and time.perf_counter() > deadline:
            return None
        # after[a, b - start]: the devices after d from stage d+1 at layer a and p+d+1 at b
        after = np.full((start + 1, n - start + 1), math.inf)
        after[start, n - start] = 0.0
        for d in range(p - 1, -1, -1):
            left = p - 1 - d  # stages after d in each chunk
            now = np.full((start + 1, n - start + 1), math.inf)
            js = np.arange(start + d, n - left)  # where stage p+d may start, whatever i is
            j = js[:, None, None]
            # stage p+d+1 starts after j and leaves a layer for each of the `left` after it
            second = np.arange(start + d + 1, n - left + 1)[None, :]
            ok = second > j
            for i in range(d, start - left):
                first = np.arange(i + 1, start - left + 1)[:, None]  # where stage d+1 starts
                # every hop is between devices: stage d runs 2p-1-d to the end, p+d runs p-1-d
                cost = costs.device(d, (i, first, 2 * p - 1 - d), (j, second, p - 1 - d))
                value = np.where(ok, np.maximum(cost, after[first, second - start][None, :, :]),
                                 math.inf)
                now[i, js - start] = value.reshape(len(js), -1).min(axis=1)
            after = now
        best = min(best, float(after[0, 0]))
    return best


def dualpipe_floor(model: LayeredModel, budget: float = BUDGET,
                   deadline: Optional[float] = None) -> Optional[float]:
    """The least over dualpipe partitions that fit the cap of the largest device bound (see the
    module doc); inf when none fits; None with one device, when the programme is larger than
    `budget` element operations, or when `deadline` (perf_counter) passes before it ends."""
    n, p, m = model.num_layers, model.devices, model.microbatches
    if p < 2 or p > n or p * n ** 4 / 4 > budget:
        return None
    costs = _Costs(model)
    half = m // 2
    after = np.full((n + 1, n + 1), math.inf)
    if p % 2:
        c = p // 2  # the middle part runs both directions on device c, m micro-batches
        for i in range(c, n - c):
            for j in range(i + 1, n - c + 1):
                after[i, j] = float(costs.device(c, (i, j, c), (i, j, c), runs=half,
                                                 together=False))
    else:
        np.fill_diagonal(after, 0.0)  # the two middle parts meet

    def pair(q, i, a, b, j):
        # device q runs part q forwards (p-1-q hops to the chain's end) and part p-1-q
        # backwards (q hops); device p-1-q the same two, so the same bound but its own cap
        return np.maximum(*(costs.device(e, (i, a, p - 1 - q), (b, j, q), runs=half,
                                         together=False) for e in (q, p - 1 - q)))
    # the parts between q and p-1-q need p-2q-2 layers
    return _outside_in(n, p // 2, after, lambda q: p - 2 * q - 2, pair, deadline)


class SplitBound:
    """The largest device bound of the module doc on one partition of V or of two-chunk
    interleaved (inf where a device cannot hold its static memory and one micro-batch's two
    activations): what v_floor and interleaved_floor take the least of over all partitions, in
    a fraction of a millisecond a partition. `applies(model)` says whether the model's
    placement is one of those two."""

    def __init__(self, model: LayeredModel):
        if not self.applies(model):
            raise ValueError(f"no per-split paired bound on {model.placement} with "
                             f"{model.num_stages} stages on {model.devices} devices")
        self.costs = _Costs(model)
        p = model.devices
        # per device, (stage, hops from it to its chain's last stage) of its two stages: on V
        # stages p-1 and p share a device (no hop), on interleaved every hop is between two
        if model.placement == "v":
            self.held = [((d, 2 * p - 2 - d), (2 * p - 1 - d, d)) for d in range(p)]
        else:
            self.held = [((d, 2 * p - 1 - d), (p + d, p - 1 - d)) for d in range(p)]

    @staticmethod
    def applies(model: LayeredModel) -> bool:
        return model.placement in ("v", "interleaved") and model.num_stages == 2 * model.devices

    def __call__(self, sizes) -> float:
        cuts = [0, *itertools.accumulate(sizes)]
        return max(float(self.costs.device(d, (cuts[one], cuts[one + 1], one_hops),
                                           (cuts[two], cuts[two + 1], two_hops)))
                   for d, ((one, one_hops), (two, two_hops)) in enumerate(self.held))

    def many(self, splits: Sequence[Sequence[int]]) -> list[float]:
        """The bound of each partition of `splits`, as __call__ gives it, each device's bound
        over all of them at once (numpy): at p = 32 a split has about 4,000 moves, and one call
        a move took 0.8 ms, 3.3 s a step of zbopt.plan.moves.descend, where this takes 17 ms
        (results/plan.md, part p32)."""
        if not len(splits):
            return []
        cuts = np.zeros((len(splits), len(splits[0]) + 1), dtype=np.int64)
        cuts[:, 1:] = np.cumsum(np.asarray(splits, dtype=np.int64), axis=1)
        values = np.full(len(splits), -math.inf)
        for d, ((one, one_hops), (two, two_hops)) in enumerate(self.held):
            values = np.maximum(values, self.costs.device(
                d, (cuts[:, one], cuts[:, one + 1], one_hops),
                (cuts[:, two], cuts[:, two + 1], two_hops)))
        return [float(v) for v in values]


def _outside_in(n: int, levels: int, after: np.ndarray, middle, cost,
                deadline: Optional[float] = None) -> Optional[float]:
    """The programme from the outside in: level l (from the last) takes layers [i, a) after the
    l outer segments on the left and [b, j) before the l on the right, leaving [a, b) with at
    least middle(l) layers for the levels inside, whose least bound from (a, b) is `after`;
    cost(l, i, a, b, j) is level l's bound, the ends a, b and j as broadcasting arrays. None
    when `deadline` (perf_counter) passes before the last level."""
    for level in range(levels - 1, -1, -1):
        if deadline is not None and time.perf_counter() > deadline:
            return None
        gap = middle(level)
        now = np.full((n + 1, n + 1), math.inf)
        for i in range(level, n - level - 1):
            js = np.arange(i + 2 + gap, n - level + 1)
            if not len(js):
                continue
            j = js[:, None, None]  # every j at once on axis 0
            # only a > i and a + gap <= b < j <= n - level can hold: the grid is cut to them
            a = np.arange(i + 1, n - level - gap)[:, None]
            b = np.arange(i + 1 + gap, n - level)[None, :]
            ok = (b < j) & (b - a >= gap)
            inner = after[a, b][None, :, :]
            value = np.where(ok, np.maximum(cost(level, i, a, b, j), inner), math.inf)
            now[i, js] = value.reshape(len(js), -1).min(axis=1)
        after = now
    return float(after[0, n])


class _Costs:
    """The device bound of the module doc for two segments of a model's layers, on arrays."""

    def __init__(self, model: LayeredModel):
        n = model.num_layers

        def prefix(key: str) -> np.ndarray:
            return np.array(model.prefix_sums(key))

        self.m, self.comm, self.caps = model.microbatches, model.comm, device_caps(model)
        tf, tb, self.tw, self.mb, self.mw, self.st = (prefix(k) for k in
                                                      ("t_f", "t_b", "t_w", "m_b", "m_w", "static"))
        self.work = tf + tb + self.tw  # one micro-batch's passes over the layers before a cut
        self.trip = (tf[n] - tf) + (tb[n] - tb)  # from a layer to the model's end and back

    def device(self, d: int, one: tuple, two: tuple, runs: Optional[int] = None,
               together: bool = True) -> np.ndarray:
        """Device d's bound holding layers [start, end) of each of `one` and `two`, given as
        (start, end, hops from that stage to the last of its chain), the ends broadcasting;
        `runs` micro-batches through each (default m); inf where the static memory and one
        micro-batch's activations exceed the cap: both of them when one micro-batch runs
        through both segments (`together`), else the larger."""
        runs = self.m if runs is None else runs
        segments = (one, two)
        cost = runs * sum(self.work[end] - self.work[start] for start, end, _ in segments)
        static = sum(self.st[end] - self.st[start] for start, end, _ in segments)
        held = [self.mb[end] - self.mb[start] for start, end, _ in segments]
        room = math.inf if self.caps is None else self.caps[d] - static
        area = 0.0  # memory x time the device's micro-batches hold, at least
        with np.errstate(divide="ignore", invalid="ignore"):
            for (start, end, hops), mb in zip(segments, held):
                path = self.trip[start] + 2 * hops * self.comm
                tw = self.tw[end] - self.tw[start]
                cost = np.maximum(cost, _rounds(runs, room, mb) * path + tw)
                if self.caps is not None:
                    area = area + held_area(runs, mb, path, self.mw[end] - self.mw[start], tw)
            if self.caps is not None:
                limit = cap_limit(self.caps[d]) - static  # the most within_cap lets them hold
                cost = np.maximum(cost, np.where(limit > 0, area / np.where(limit > 0, limit, 1.0),
                                                 0.0))
        if self.caps is not None:  # elementwise on the arrays
            need = held[0] + held[1] if together else np.maximum(held[0], held[1])
            cost = np.where(within_cap(static + need, self.caps[d]), cost, math.inf)
        return cost


def _rounds(m: int, room, held) -> np.ndarray:
    """ceil(m / k), k = floor(room / held) activations held at once (at least 1 round)."""
    slots = np.floor(np.where(held > 0, room / np.where(held > 0, held, 1.0), math.inf) + 1e-9)
    return np.where(np.isfinite(slots) & (slots >= 1), np.ceil(m / np.maximum(slots, 1.0)), 1.0)
