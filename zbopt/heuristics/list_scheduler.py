"""The memory-safe list scheduler: a fallback schedule for any placement and any cap that
admits one, used by solve() as a warm start where no family or heuristic fits the cap.

Memory follows zbopt.passes (F adds, B and W release); admission keeps the order
deadlock-free under the cap. Its output is judged by evaluate() like any other schedule.
"""

from __future__ import annotations

import math

from ..errors import ZboptError
from ..instance import Instance, within_cap
from ..passes import Pass, dependencies, lag, memory_delta, neighbours
from ..schedule import Schedule


def sequential_schedule(instance: Instance) -> Schedule:
    """One micro-batch at a time through the whole pipeline, W right after each B.

    It fits any cap that admits a schedule at all (bounds.min_feasible_cap), so every feasible
    instance has a warm start.
    """
    orders: list[list[Pass]] = [[] for _ in range(instance.devices)]
    for stages, mbs in instance.chains:
        for j in mbs:
            for s in stages:
                orders[instance.device_of(s)].append((s, j, "F"))
            for s in reversed(stages):
                orders[instance.device_of(s)] += [(s, j, "B"), (s, j, "W")]
    return Schedule.build(orders, method="sequential")


class Admission:
    """Memory bookkeeping that keeps a pass-by-pass order deadlock-free under the cap.

    A device admits a micro-batch (at its first F there) only if the activations of all its
    stages for it fit beside what the device holds and what its admitted micro-batches will
    still add; admitted micro-batches then never wait for memory. One chain: admit per device
    (the first device on the chain whose admitted micro-batches all wait further down cannot
    exist); two chains (dualpipe) run opposite ways, so a micro-batch reserves every device
    of its chain at entry.
    """

    def __init__(self, instance: Instance):
        self.instance = instance
        p = instance.devices
        self.caps = instance.cap or (math.inf,) * p
        self.footprint: dict[tuple[int, int], float] = {}  # (device, mb) -> what it adds
        for s, j, k in instance.passes():
            if k == "F":
                key = (instance.device_of(s), j)
                self.footprint[key] = self.footprint.get(key, 0) + memory_delta(instance, (s, j, k))
        self.level = list(instance.static_memory)
        self.owed = [0.0] * p  # activations admitted micro-batches will still add
        self.admitted: set[tuple[int, int]] = set()
        self.chain_devices = {j: sorted({instance.device_of(s) for s in stages})
                              for stages, mbs in instance.chains for j in mbs}

    def _admit_on(self, d: int, j: int) -> list[int]:
        return [d] if len(self.instance.chains) == 1 else self.chain_devices[j]

    def admitted_on(self, d: int, j: int) -> bool:
        return (d, j) in self.admitted

    def fits(self, q: Pass) -> bool:
        """Whether pass q may run now as far as memory goes (only a new F can be refused)."""
        s, j, k = q
        d = self.instance.device_of(s)
        if k != "F" or (d, j) in self.admitted:
            return True
        return all(within_cap(self.level[e] + self.owed[e] + self.footprint[(e, j)], self.caps[e])
                   for e in self._admit_on(d, j))

    def run(self, q: Pass) -> None:
        """Account for pass q running (admitting its micro-batch if it is a new F)."""
        s, j, k = q
        inst = self.instance
        d = inst.device_of(s)
        delta = memory_delta(inst, q)
        if k == "F":
            if (d, j) not in self.admitted:
                for e in self._admit_on(d, j):
                    self.admitted.add((e, j))
                    self.owed[e] += self.footprint[(e, j)]
            self.owed[d] -= delta
        self.level[d] += delta


def list_schedule(instance: Instance, new_before_w: bool = True) -> Schedule:
    """A memory-safe greedy for any placement, a fallback warm start where no family fits.

    Every device, whenever free, runs a ready B, else the next F of a micro-batch it already
    admitted, else (in the order `new_before_w` picks) a pending W or the F that admits a new
    micro-batch. A device admits a micro-batch (at its first stage there) only if the
    activations of all its stages for it fit beside what it holds and what its admitted
    micro-batches will still add, so admitted micro-batches never wait for memory and the
    order cannot deadlock. The order is then judged by evaluate() like any other.
    """
    p = instance.devices
    memory = Admission(instance)
    links = neighbours(instance)
    end: dict[Pass, float] = {}
    free_at = [0.0] * p
    nxt = {(s, k): 0 for s in range(instance.num_stages) for k in "FBW"}
    orders: list[list[Pass]] = [[] for _ in range(p)]
    total = instance.num_passes
    stages_of = [instance.stages_of(d) for d in range(p)]
    mbs_of = [instance.microbatches_of(s) for s in range(instance.num_stages)]
    # devices that wait for a pass on stage s: those of its chain neighbours
    watchers = [{instance.device_of(t) for t in (links[0].get(s), links[1].get(s))
                 if t is not None} for s in range(instance.num_stages)]

    def candidates(d):
        out = []
        for s in stages_of[d]:
            mbs = mbs_of[s]
            for k in "BFW":
                i = nxt[(s, k)]
                if i >= len(mbs):
                    continue
                q = (s, mbs[i], k)
                deps = dependencies(instance, q, links)
                if any(a not in end for a in deps):
                    continue
                ready = max([end[a] + lag(instance, a, q) for a in deps], default=0.0)
                if k == "B":
                    rank = 0
                elif k == "F" and memory.admitted_on(d, q[1]):
                    rank = 1
                elif k == "F":
                    if not memory.fits(q):
                        continue
                    rank = 2 if new_before_w else 3
                else:
                    rank = 3 if new_before_w else 2
                out.append((ready, rank, -s, q))
        return out

    def choice(d):
        cands = candidates(d)
        if not cands:
            return None
        now = [c for c in cands if c[0] <= free_at[d]]
        ready, rank, _, q = min(now, key=lambda c: c[1:]) if now else min(cands)
        return (max(free_at[d], ready), rank, d, q)

    # each device's next choice, recomputed only when something it depends on changed
    choices = [choice(d) for d in range(p)]
    for _done in range(total):
        best = min((c for c in choices if c is not None), default=None)
        if best is None:
            raise ZboptError("the fallback list scheduler is stuck (internal error)")
        start, _, d, q = best
        s, _, k = q
        memory.run(q)
        end[q] = start + instance.cost(s, k)
        free_at[d] = end[q]
        nxt[(s, k)] += 1
        orders[d].append(q)
        # two chains (dualpipe) admit on every device of a chain: any level change matters
        dirty = range(p) if len(instance.chains) > 1 else {d} | watchers[s]
        for e in dirty:
            choices[e] = choice(e)
    return Schedule.build(orders, method="list" + ("" if new_before_w else "-w-first"))


def single_passes(schedule: Schedule) -> Schedule:
    """The same orders with every block split into its passes (solvers schedule single passes).

    Memory levels after each item do not rise: a block adds at its start and releases at its
    end, which the split passes do no later.
    """
    orders = [[(q,) for item in order for q in item] for order in schedule.orders]
    return Schedule(tuple(tuple(o) for o in orders), schedule.method, schedule.release)
