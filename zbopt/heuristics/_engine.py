"""A memory-capped list scheduler shared by the greedy heuristics (zb-greedy, v-greedy).

It simulates time to *decide* an order: every device, whenever it is free, picks its next pass
from what has arrived (B before F or the reverse, W to fill a gap or free memory), the way the
Zero Bubble auto-scheduler does. Its time estimate only ranks candidates of a grid cheaply; the
numbers users see always come from `evaluate()` on the returned orders.

Passes of one kind on one stage run in micro-batch order (docs/model.md, symmetry), so a device only
ever chooses between the next F, the next B of each of its stages and its oldest pending W.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from dataclasses import dataclass
from typing import Sequence

from ..instance import Instance, within_cap
from ..passes import stage_deltas, stage_lag

Pass = tuple[int, int, str]
_EPS = 1e-9


@dataclass(frozen=True)
class Policy:
    """The binary (and few-valued) choices of the greedy, one grid point.

    b_first: a ready B runs before a ready F (else F first while memory and `inflight` allow).
    w_fill: "gap" runs a pending W only when the device would otherwise idle for at least the
        W's duration (or to free memory for a waiting F); "balance" also when idling would make
        this device's bubble the largest of all (W delays the next pass a little instead, the
        paper's bubble balancing); "eager" whenever nothing else is ready; "lazy" only when
        memory forces it or nothing else is left. A tuple gives one value per device.
    inflight: per stage, the most micro-batches with F done and B not done (None: memory only).
    late_chunk_first: on a device with several stages (V), prefer the later stage's ready pass.
    reserve_all: a micro-batch's first-chunk F reserves room for its later chunks' F on the
        device for every micro-batch started there (else: room for one, which lets about twice
        as many micro-batches be in flight on V at the same cap).
    """

    b_first: bool = True
    w_fill: str = "gap"
    inflight: tuple[int, ...] | None = None
    late_chunk_first: bool = True
    reserve_all: bool = True


@dataclass(frozen=True)
class Outcome:
    """Per-device pass orders and the simulator's own span estimate (for ranking only)."""

    orders: tuple[tuple[Pass, ...], ...]
    estimate: float


class _Topology:
    """Stage neighbours, costs and memory of an instance, as flat lists for the hot loop."""

    def __init__(self, instance: Instance):
        self.instance = instance
        self.p = instance.devices
        stages = instance.num_stages
        self.stages = stages
        self.prev = [-1] * stages
        self.next = [-1] * stages
        self.mbs: list[tuple[int, ...]] = [()] * stages
        for chain, mbs in instance.chains:
            for a, b in zip(chain, chain[1:]):
                self.next[a] = b
                self.prev[b] = a
            for s in chain:
                self.mbs[s] = tuple(mbs)
        self.device = [instance.device_of(s) for s in range(stages)]
        self.tf = list(instance.t_f)
        self.tb = list(instance.t_b)
        self.tw = list(instance.t_w)
        # memory per pass kind and stage, from the one statement of the rules (zbopt.passes)
        deltas = stage_deltas(instance)
        self.delta = {kind: list(values) for kind, values in deltas.items()}
        self.mb_ = self.delta["F"]  # what an F adds: the activation held until B and W
        # A device's stages in chain order; `later[s]` = activation the same micro-batch will
        # still need on this device after F(s) (the V placement's second chunk), reserved so
        # that a started micro-batch can always finish its forward on this device.
        position = {}
        for chain, _ in instance.chains:
            for i, s in enumerate(chain):
                position[s] = i
        self.dev_stages = [sorted(instance.stages_of(d), key=position.__getitem__)
                           for d in range(self.p)]
        self.later = [0.0] * stages
        self.first_on_device = [False] * stages
        for d in range(self.p):
            ss = self.dev_stages[d]
            for i, s in enumerate(ss):
                self.first_on_device[s] = i == 0
                self.later[s] = sum(self.mb_[x] for x in ss[i + 1:]) if i == 0 else 0.0

        # comm paid by the output of stage s towards its next / previous stage
        self.lag_next = [self.lag(s, self.next[s]) if self.next[s] >= 0 else 0.0
                         for s in range(stages)]
        self.lag_prev = [self.lag(s, self.prev[s]) if self.prev[s] >= 0 else 0.0
                         for s in range(stages)]

    def lag(self, a: int, b: int) -> float:
        return stage_lag(self.instance, a, b)


def run(instance: Instance, caps: Sequence[float] | None, policy: Policy,
        topology: _Topology | None = None) -> Outcome | None:
    """Simulate the greedy under `policy`; None if it gets stuck (not seen with a feasible cap,
    see tests/test_heuristics.py; the grid just skips such a point)."""
    top = topology or _Topology(instance)
    return _Greedy(instance, top, caps, policy).go()


def replay(instance: Instance, caps: Sequence[float] | None,
           orders: Sequence[Sequence[Pass]], topology: _Topology | None = None) -> Outcome | None:
    """Rank a fixed per-device order (e.g. ZB-H1) with the same simulator; None if it goes over
    a cap or runs a stage's passes out of micro-batch order (not a candidate then)."""
    top = topology or _Topology(instance)
    return _Greedy(instance, top, caps, Policy(), fixed=orders).go()


class _Greedy:
    def __init__(self, instance: Instance, top: _Topology, caps, policy: Policy, fixed=None):
        self.top = top
        self.policy = policy
        p, S = top.p, top.stages
        self.caps = [math.inf] * p if caps is None else list(caps)
        self.level = list(instance.static_memory)
        self.reserve = [0.0] * p
        self.nf = [0] * S
        self.nb = [0] * S
        self.n = [len(top.mbs[s]) for s in range(S)]
        # arrival time of each F / B input (None: its producer has not been scheduled yet)
        self.f_arr = [[None] * self.n[s] for s in range(S)]
        self.b_arr = [[None] * self.n[s] for s in range(S)]
        for s in range(S):
            if top.prev[s] < 0:
                self.f_arr[s] = [0.0] * self.n[s]
        self.wq: list[deque] = [deque() for _ in range(p)]
        self.free_at = [0.0] * p
        self.first = [None] * p
        self.idle = [0.0] * p  # idle time since the device's first pass (its own bubble)
        self.orders: list[list[Pass]] = [[] for _ in range(p)]
        self.remaining = [sum(3 * self.n[s] for s in top.dev_stages[d]) for d in range(p)]
        self.heap: list = []
        self.seq = itertools.count()
        self.fixed = [deque(o) for o in fixed] if fixed is not None else None
        self.inflight = policy.inflight

    # ----- events ----------------------------------------------------------------------------

    def push(self, t: float, d: int) -> None:
        heapq.heappush(self.heap, (t, next(self.seq), d))

    def wake(self, d: int, now: float, arrival: float) -> None:
        """Tell device d an input arrives; a device busy past the arrival will see it anyway."""
        if self.free_at[d] <= arrival:
            if self.free_at[d] <= now:
                self.push(now, d)  # idle: let it re-plan with the arrival now known
            self.push(arrival, d)

    def go(self) -> Outcome | None:
        for d in range(self.top.p):
            self.push(0.0, d)
        heap, pop, free_at, remaining = self.heap, heapq.heappop, self.free_at, self.remaining
        decide = self.decide_fixed if self.fixed is not None else self.decide
        while heap:
            t, _, d = pop(heap)
            if free_at[d] > t + _EPS or not remaining[d]:
                continue
            choice = decide(d, t)
            if choice is False:
                return None  # a fixed order went over the cap
            if choice is not None:
                self.execute(d, t, choice)
        if any(self.remaining):
            return None
        top = self.top
        span = 0.0
        for d in range(top.p):
            if self.orders[d]:
                span = max(span, self.free_at[d] - self.first[d])
        return Outcome(tuple(tuple(o) for o in self.orders), span)

    def execute(self, d: int, t: float, choice: tuple[int, int, str]) -> None:
        top = self.top
        s, k, kind = choice
        free = self.free_at[d]
        now = t
        if kind == "F":
            cost = top.tf[s]
            self.level[d] += top.delta["F"][s]
            self.reserve[d] += top.later[s] if top.first_on_device[s] else -top.mb_[s]
            self.nf[s] += 1
        elif kind == "B":
            cost = top.tb[s]
            self.level[d] += top.delta["B"][s]
            self.nb[s] += 1
        else:
            cost = top.tw[s]
            self.level[d] += top.delta["W"][s]
            if free < t:
                # A W was ready since the device went idle (its B ran here) and nothing
                # depends on it: start it then, as evaluate()'s ASAP timing of this order will.
                t = free
        end = t + cost
        if self.first[d] is None:
            self.first[d] = t
        elif t > free:
            self.idle[d] += t - free
        self.free_at[d] = end
        self.remaining[d] -= 1
        self.orders[d].append((s, top.mbs[s][k], kind))
        heapq.heappush(self.heap, (end if end > now else now, next(self.seq), d))
        if kind == "F":
            nxt = top.next[s]
            if nxt >= 0:
                arrival = end + top.lag_next[s]
                self.f_arr[nxt][k] = arrival
                self.wake(top.device[nxt], now, arrival)
            else:
                self.b_arr[s][k] = end
        elif kind == "B":
            self.wq[d].append((s, k))
            prv = top.prev[s]
            if prv >= 0:
                arrival = end + top.lag_prev[s]
                self.b_arr[prv][k] = arrival
                self.wake(top.device[prv], now, arrival)

    # ----- decisions -------------------------------------------------------------------------

    def f_fits(self, d: int, s: int) -> bool:
        top = self.top
        need = top.mb_[s]
        if top.first_on_device[s]:
            # keep room for a second-chunk F: of every started micro-batch (always safe), or of
            # one (tighter; safe since a stage runs micro-batches in order, so the oldest one in
            # flight finds the room; the engine reports a stuck run anyway)
            need += top.later[s] + (self.reserve[d] if self.policy.reserve_all else 0.0)
        return within_cap(self.level[d] + need, self.caps[d])

    def decide(self, d: int, t: float):
        top, pol = self.top, self.policy
        stages = top.dev_stages[d]
        if pol.late_chunk_first and len(stages) > 1:
            stages = stages[::-1]
        ready_b = ready_f = None
        f_blocked = False
        next_arrival = math.inf
        for s in stages:
            k = self.nb[s]
            if k < self.nf[s]:
                a = self.b_arr[s][k]
                if a is None:  # producer not scheduled yet: a lower bound, never "ready"
                    a = t + top.tb[top.next[s]] + top.lag_next[s] + 2 * _EPS
                if a <= t + _EPS:
                    if ready_b is None or k < ready_b[1]:
                        ready_b = (s, k, "B")
                elif a < next_arrival:
                    next_arrival = a
            k = self.nf[s]
            if k < self.n[s]:
                a = self.f_arr[s][k]
                if a is None:
                    a = t + top.tf[top.prev[s]] + top.lag_prev[s] + 2 * _EPS
                if a <= t + _EPS:
                    if self.inflight is not None and k - self.nb[s] >= self.inflight[s]:
                        continue
                    if not self.f_fits(d, s):
                        f_blocked = True
                        continue
                    if ready_f is None or k < ready_f[1]:
                        ready_f = (s, k, "F")
                elif a < next_arrival:
                    next_arrival = a
        if ready_b is not None and (pol.b_first or ready_f is None):
            return ready_b
        if ready_f is not None:
            return ready_f
        wq = self.wq[d]
        if not wq:
            return None
        s, k = wq[0]
        only_w_left = self.remaining[d] == len(wq)
        w_fill = pol.w_fill if isinstance(pol.w_fill, str) else pol.w_fill[d]
        gap = next_arrival - t
        if f_blocked or only_w_left or w_fill == "eager" \
                or (w_fill in ("gap", "balance") and gap >= top.tw[s] - _EPS) \
                or (w_fill == "balance" and self.idle[d] + gap > max(self.idle) + _EPS):
            wq.popleft()
            return (s, k, "W")
        if w_fill != "eager":
            # a forward that will arrive and not fit must wait for memory anyway: free it now
            for s2 in top.dev_stages[d]:
                if self.nf[s2] < self.n[s2] and not self.f_fits(d, s2) \
                        and self.nb[s2] == self.nf[s2]:
                    wq.popleft()
                    return (s, k, "W")
        return None

    def decide_fixed(self, d: int, t: float):
        queue = self.fixed[d]
        if not queue:
            return None
        s, mb, kind = queue[0]
        top = self.top
        k = mb - top.mbs[s][0]  # micro-batches of a stage are consecutive
        if kind == "F":
            if k != self.nf[s]:
                return False  # not in micro-batch order: outside what the simulator tracks
            a = self.f_arr[s][k]
            if a is None or a > t + _EPS:
                return None
            if not within_cap(self.level[d] + top.delta["F"][s], self.caps[d]):
                return False
        elif kind == "B":
            if k != self.nb[s] or k >= self.nf[s]:
                return False
            a = self.b_arr[s][k]
            if a is None or a > t + _EPS:
                return None
        else:
            if (s, k) not in self.wq[d]:
                return False  # W before its B: not an order this simulator replays
            self.wq[d].remove((s, k))
        queue.popleft()
        return (s, k, kind)
