"""A lower bound for multi-chunk placements: one device scheduled exactly, the others as delays.

On an interleaved or V placement a device runs several stages of one chain. Take device e and
drop every rule that concerns another device, except what one micro-batch's own passes impose:
between two of e's passes of micro-batch j, the path through the other devices' passes (their
costs and the comm lags) is a least delay. What is left is exact on e:

- e runs one pass at a time, for every micro-batch its F, B and W of each of its stages;
- for two of e's passes a and b of one micro-batch, b starts at least the longest path of the
  micro-batch's dependency graph from a's start after a starts;
- e's memory, exactly as evaluate() counts it (F takes m_b at its start, B gives back
  m_b - m_w and W m_w at their ends), within cap - static at every moment.

Any schedule restricted to e satisfies these rules, and e's span is at most the schedule's span
(and its makespan). The span is the largest device span, each from the device's own first pass,
so the forward path before e's first pass does not lengthen e's; it lengthens that of the device
holding the chain's first stage f (device 0). With s e's first stage on the chain: that device's
first pass starts no later than F(f, j) for every j, which precedes F(s, j) by the forward path
(`first_stage_tail`: the longest path of one micro-batch's graph between them); its last pass
ends no earlier than W(f, j) for every j, which follows the start of B(s, j) by the backward
path and t_w(f). Take j the micro-batch of e's first pass for the one and of e's last B on s for
the other: in e's time (its first pass at 0) the schedule's span is also at least the start of
e's last B on s plus that tail (the forward path, the backward path and t_w(f)), which the
relaxation minimises together with e's own span. On a V placement at a tight cap this counts
most on the device at the turn (stages p - 1 and p), the farthest from device 0.

Within the relaxation micro-batches differ only by name, so each stage may run each kind in
micro-batch order: the k-th earliest pass of a kind can take the k-th name, since every rule
links one micro-batch's passes by a least delay (the k earliest b have k distinct a at least
that much before them) and the memory level depends only on how many passes of each kind have
run. So the bound holds for schedules in any order, as the solver's symmetry switch allows.

Small relaxations are solved exactly by a dynamic programme over e's orders (`orders_optimum`):
for a fixed order, every pass as early as e and its rules allow is best (each rule is an earlier
start plus a constant), and e's memory at each F depends only on the order (e runs one pass at a
time). The chain is a path, so a micro-batch's next pass on e waits only for its previous pass on
e plus their least delay, and a W only for its B. A state counts the passes of each stage and
kind; a label holds when e is free and when each micro-batch in flight may run its next pass;
a label no earlier than another everywhere is dropped. Where that takes longer than a share of
the time, CP-SAT minimises e's span over the relaxation; its proven bound (not only an optimum)
is a lower bound. The analytic bounds (zbopt.bounds: ramp, drain) argue about the same device
with counts; the relaxation also sees which passes are ready when, so on small pipelines it
often meets the optimum. Its model grows with e's passes (3 x stages on e x micro-batches): the
programme's labels multiply beyond a few dozen of them, and CP-SAT proves little within seconds
beyond about a hundred (MAX_PASSES). Beyond that solve() runs the programme alone, on one device
after another: under a tight cap few orders fit the memory, and at p = 8, m = 32 (192 passes a
device on V) it still finishes on some devices within seconds (results/relaxations.md, part v).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import defaultdict
from typing import Optional, Sequence

from ..bounds import activation_capacity, held_count
from ..dominance import keep_earliest, labels_of
from ..instance import Instance, cap_limit
from ..passes import dependencies, duration, lag, memory_delta, neighbours
from . import interruptible

PLACEMENTS = ("interleaved", "v")
MAX_PASSES = 100  # passes on the device beyond which solve() does not try the relaxation
ORDERS_SHARE = 0.25  # of the time: the exact programme over orders first, then CP-SAT
PROBE_MICROBATCHES = 8  # micro-batches of the instance probe_order times the programme on
PROBE_SECONDS = 0.3  # the most one probe may take (at p = 8 on V they take 0.05-0.3 s)
# the whole programme's time over its probe's where both finish: 5 to 32, median 18, on the
# devices of results/relaxations.md, part v (p = 8, m = 32); solve() gives a probed device at
# least this many times its probe's seconds, where the time is left
PROBE_GROWTH = 30


def applies(instance: Instance) -> bool:
    """A multi-chunk placement with one chain and no F&B overlap discount."""
    return instance.placement in PLACEMENTS and not instance.overlap and len(instance.chains) == 1


def device_passes(instance: Instance) -> int:
    """Passes of one device's relaxation: every device holds the same number of stages here."""
    return 3 * len(instance.stages_of(0)) * instance.microbatches


def _longest_from(instance: Instance, links, source) -> dict:
    """Least time from the start of `source` to the start of each pass of its micro-batch that
    depends on it (longest path over the dependency graph, costs and comm lags)."""
    stages, _ = instance.chains[0]
    mb = source[1]
    order = [(s, mb, "F") for s in stages] + [(s, mb, "B") for s in reversed(stages)] + \
        [(s, mb, "W") for s in stages]
    dist = {source: 0.0}
    for q in order:  # a topological order of one micro-batch's passes
        for a in dependencies(instance, q, links):
            if a in dist:
                value = dist[a] + duration(instance, a) + lag(instance, a, q)
                if value > dist.get(q, -math.inf):
                    dist[q] = value
    return dist


def own_first_stage(instance: Instance, device: int) -> int:
    """The device's first stage along the chain (the s of the module doc)."""
    return min(instance.stages_of(device), key=instance.chains[0][0].index)


def first_stage_tail(instance: Instance, links, device: int) -> float:
    """The module doc's tail of `device` (0 for the device holding the chain's first stage): the
    least time from the start of F(first stage, j) to the start of F(s, j), with s the device's
    first stage on the chain (own_first_stage), plus that from the start of B(s, j) to the end
    of W(first stage, j)."""
    mb = instance.chains[0][1][0]
    first = instance.chains[0][0][0]
    own = own_first_stage(instance, device)
    if own == first:
        return 0.0
    head = _longest_from(instance, links, (first, mb, "F"))[(own, mb, "F")]
    back = _longest_from(instance, links, (own, mb, "B"))[(first, mb, "W")]
    return head + back + duration(instance, (first, mb, "W"))


def chunk_relaxation(instance: Instance, device: int, time_limit: float, threads: int = 1,
                     hint: Optional[dict] = None, programme_only: bool = False) -> float:
    """The proven lower bound of device `device`'s relaxation (0 if none was proven in time):
    the least, over its schedules, of the larger of e's span and the first stage's device's
    (module doc).

    `instance` must have integer costs and memory (solve() scales them); the bound is in its
    time units. `hint`: start times of the device's passes (e.g. of the warm start).
    programme_only: the programme over orders alone, with all the time (CP-SAT proves little
    on models beyond MAX_PASSES)."""
    from ortools.sat.python import cp_model

    if not applies(instance) or time_limit <= 0:
        return 0.0
    share = 1.0 if programme_only else ORDERS_SHARE
    exact = orders_optimum(instance, device, time.perf_counter() + share * time_limit)
    if exact is not None:
        return exact
    if programme_only:
        return 0.0
    time_limit *= 1 - ORDERS_SHARE
    links = neighbours(instance)
    stages = instance.stages_of(device)
    mbs = instance.chains[0][1]
    mine = [(s, j, k) for s in stages for j in mbs for k in "FBW"]
    cost = {q: int(duration(instance, q)) for q in mine}
    # running one micro-batch at a time through the whole chain fits the relaxation
    horizon = int(instance.microbatches * sum(
        instance.t_f[s] + instance.t_b[s] + instance.t_w[s] + 2 * instance.comm
        for s in range(instance.num_stages)) + 1)
    model = cp_model.CpModel()
    start = {q: model.new_int_var(0, horizon, "") for q in mine}
    model.add_no_overlap([model.new_fixed_size_interval_var(start[q], cost[q], "") for q in mine])
    first = (stages[0], mbs[0], "F")
    model.add(start[first] == 0)  # every other pass of e follows it (delays below)
    delays = {}
    for s in stages:
        for kind in "FBW":
            dist = _longest_from(instance, links, (s, mbs[0], kind))
            for (t, _, k), value in dist.items():
                if (t, k) != (s, kind) and t in stages:
                    delays[(s, kind), (t, k)] = int(math.ceil(value - 1e-9))
    for j in mbs:
        for ((s, a), (t, b)), value in delays.items():
            model.add(start[(t, j, b)] >= start[(s, j, a)] + value)
    for s in stages:  # micro-batch order per stage and kind (see the module doc)
        for kind in "FBW":
            for i, j in zip(mbs, mbs[1:]):
                model.add(start[(s, j, kind)] >= start[(s, i, kind)] + cost[(s, i, kind)])
    if instance.cap is not None:
        times, changes = [], []
        for q in mine:
            delta = int(memory_delta(instance, q))
            if delta:
                # B and W give memory back at their ends, but no F can start while they run,
                # and the level only rises at an F's start: their starts give the same rule
                times.append(start[q])
                changes.append(delta)
        room = int(instance.cap[device] - instance.static_memory[device])
        model.add_reservoir_constraint(times, changes, 0, room)
    span = model.new_int_var(0, horizon, "span")
    for q in mine:
        model.add(span >= start[q] + cost[q])
    tail = first_stage_tail(instance, links, device)
    if tail > 0:  # the first stage's device's span (module doc)
        last_b = (own_first_stage(instance, device), mbs[-1], "B")
        model.add(span >= start[last_b] + math.floor(tail + 1e-9))
    model.minimize(span)
    if hint:
        offset = hint.get(first, 0)
        for q in mine:
            if q in hint:
                model.add_hint(start[q], int(hint[q] - offset))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit)
    solver.parameters.num_workers = max(1, int(threads))
    status = interruptible.solve(solver, model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN):
        return 0.0  # infeasible (the cap): solve() reports that on its own
    # proven whether or not a solution was found
    return max(0.0, float(solver.best_objective_bound))


def probe_order(instance: Instance, order: Sequence[int],
                deadline: float) -> tuple[list[int], dict[int, float]]:
    """(`order` with the devices whose programme (orders_optimum) likely finishes soonest
    first, the probe's seconds on each device where it finished).

    The programme's states count the passes a device has in flight, which its memory bounds.
    Where every stage of a device holds fewer activations than PROBE_MICROBATCHES, memory bounds
    them on the instance cut to that many micro-batches as on the whole one, so the programme's
    time there (the probe, at most PROBE_SECONDS, none past `deadline`) ranks such devices by
    how fast the whole programme runs; where a stage holds more, the count of micro-batches
    bounds them in the probe and not on the whole, and the probe says little. The devices whose
    probe finished come first, fastest first; the others follow in their order in `order`. How
    long the programme takes follows neither the analytic bound nor the place in the chain: on
    V at p = 8, m = 32 and the 128k model's tight cap device 0, near last by its analytic bound,
    gives the highest value, and solve() reached it only once probed (results/relaxations.md,
    part v; docs/model.md)."""
    order = list(order)
    small = dataclasses.replace(instance, microbatches=PROBE_MICROBATCHES)
    taken: dict[int, float] = {}
    for device in order:
        room = activation_capacity(instance, device)
        if any(held_count(room, instance.m_b[s], PROBE_MICROBATCHES) >= PROBE_MICROBATCHES
               for s in instance.stages_of(device)):
            continue
        began = time.perf_counter()
        if began >= deadline:
            break
        if orders_optimum(small, device, min(deadline, began + PROBE_SECONDS)) is not None:
            taken[device] = time.perf_counter() - began
    # a stable sort: the unprobed and the unfinished keep their order
    return sorted(order, key=lambda d: (d not in taken, taken.get(d, 0.0))), taken


def orders_optimum(instance: Instance, device: int, deadline: float) -> Optional[float]:
    """The relaxation's optimum on `device` by the programme over its orders (module doc), or
    None when `deadline` (perf_counter) passes first or no order fits the cap."""
    links = neighbours(instance)
    order = instance.chains[0][0]
    stages = sorted(instance.stages_of(device), key=order.index)
    mb = instance.chains[0][1][0]
    m = instance.microbatches
    chain = [(s, "F") for s in stages] + [(s, "B") for s in reversed(stages)]
    kinds = chain + [(s, "W") for s in stages]
    n = len(chain)
    cost = [duration(instance, (s, mb, k)) for s, k in kinds]
    delta = [memory_delta(instance, (s, mb, k)) for s, k in kinds]
    # least delay from each pass of the chain to the next (a path: nothing else can be longer)
    step = [_longest_from(instance, links, (s, mb, k))[(t, mb, k2)]
            for (s, k), (t, k2) in zip(chain, chain[1:])]
    after = [chain.index((s, "B")) for s in stages]  # the W of a stage follows its B
    room = instance.cap[device] - instance.static_memory[device] \
        if instance.cap is not None else math.inf
    limit = cap_limit(room)  # the cap test of within_cap, its tolerance folded in once
    total = m * len(kinds)
    tail = first_stage_tail(instance, links, device)
    # a label: (free, release of the next chain pass of each micro-batch in flight, oldest
    # first, the span the first stage's device needs after the last B of e's first stage)
    layers: dict[int, dict] = defaultdict(dict)
    layers[0][(0,) * len(kinds)] = [(0.0, (), 0.0)]
    best = math.inf
    for done in range(total):
        if time.perf_counter() > deadline:
            return None
        for counts, group in layers.pop(done, {}).items():
            level = sum(c * d for c, d in zip(counts, delta))
            oldest = counts[n - 1]  # micro-batches below it have left the chain
            moves = [i for i in range(n) if counts[i] < m and (i == 0 or counts[i] < counts[i - 1])]
            moves += [n + w for w in range(len(stages)) if counts[n + w] < counts[after[w]]]
            for i in moves:
                if delta[i] > 0 and level + delta[i] > limit:
                    continue
                grown = counts[:i] + (counts[i] + 1,) + counts[i + 1:]
                for free, releases, late in group:
                    j = counts[i] - oldest
                    start = free if i == 0 or i >= n else max(free, releases[j])
                    free_after = start + cost[i]
                    if i == 0:
                        releases = releases + (start + step[0],)
                    elif i == n - 1:
                        releases = releases[1:]
                        if grown[i] == m:  # the last B of e's first stage
                            late = start + tail
                    elif i < n:
                        releases = releases[:j] + (start + step[i],) + releases[j + 1:]
                    if done + 1 == total:
                        best = min(best, max(free_after, late))
                        continue
                    keep_earliest(labels_of(layers[done + 1], grown),
                                  (free_after, tuple(max(r, free_after) for r in releases), late),
                                  _flat)
    return best if math.isfinite(best) else None


def _flat(label) -> tuple[float, ...]:
    free, releases, late = label
    return (free, *releases, late)
