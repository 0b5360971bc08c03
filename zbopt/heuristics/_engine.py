"""A memory-capped list scheduler shared by the greedy heuristics (zb-greedy, v-greedy).

It simulates time to *decide* an order: every device, whenever it is free, picks its next pass
from what has arrived (B before F or the reverse, W to fill a gap or free memory), the way the
Zero Bubble auto-scheduler does. Its time estimate only ranks candidates of a grid cheaply; the
numbers users see always come from `evaluate()` on the returned orders.

Passes of one kind on one stage run in micro-batch order (docs/model.md, symmetry), so a device only
ever chooses between the next F, the next B of each of its stages and its oldest pending W.

Its surface for other modules: `Policy`, `Outcome`, `Topology`, `run()`, `replay()`, `bounded()`
and `simulate()` (one policy on an instance within its cap, a topology reused, pruned by a span
bound); names starting with `_` are the simulator's own. (The `_` of the module's name only
keeps the registry from importing it as a method module.)
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Iterator, Sequence

from ..instance import Instance, cap_limit, within_cap
from ..passes import stage_deltas, stage_lag

Pass = tuple[int, int, str]
_EPS = 1e-9

# A span estimate the caller no longer needs to beat (see `bounded`); infinite: run to the end.
_BOUND: ContextVar[float] = ContextVar("zbopt_engine_bound", default=math.inf)


@contextmanager
def bounded(bound: float) -> Iterator[None]:
    """Within the block, run() and replay() give up (None) once their span estimate is
    certain to exceed `bound`: a device's span is at least its busy time so far plus the work
    it has left (every pass starts when the device is free, up to _EPS), so the search among
    candidates (zbopt.heuristics._search.best_of) loses nothing by skipping the rest."""
    token = _BOUND.set(bound)
    try:
        yield
    finally:
        _BOUND.reset(token)


class _Pruned(Exception):
    """The run's span estimate is certain to exceed the bound."""


@dataclass(frozen=True)
class Policy:
    """The binary (and few-valued) choices of the greedy, one grid point.

    b_first: a ready B runs before a ready F (else F first while memory and `inflight` allow).
    w_fill: "gap" runs a pending W only when the device would otherwise idle for at least the
        W's duration (or to free memory for a waiting F); "balance" also when idling would make
        this device's bubble the largest of all (W delays the next pass a little instead, the
        paper's bubble balancing); "eager" whenever nothing else is ready; "lazy" only when
        memory forces it or nothing else is left.
    inflight: per stage, the most micro-batches with F done and B not done (None: memory only).
    late_chunk_first: on a device with several stages (V), prefer the later stage's ready pass.
    reserve_all: a micro-batch's first-chunk F reserves room for its later chunks' F on the
        device for every micro-batch started there (else: room for one, which lets about twice
        as many micro-batches be in flight on V at the same cap).
    sequence: (first, size): on a device with several stages, forwards run in a fixed order,
        the first `first` micro-batches through each of its stages in chain order, then groups
        of `size` (Megatron's interleaved order is (p, p)); the device waits for the next one
        of that order rather than run another. None: the earliest ready micro-batch first.

    b_first, w_fill, late_chunk_first and reserve_all take one value for every device or a
    tuple of one per device (zbopt.heuristics.policy_search tunes them device by device).
    """

    b_first: bool | tuple[bool, ...] = True
    w_fill: str | tuple[str, ...] = "gap"
    inflight: tuple[int, ...] | None = None
    late_chunk_first: bool | tuple[bool, ...] = True
    reserve_all: bool | tuple[bool, ...] = True
    sequence: tuple[int, int] | None = None


def _forward_sequence(top: "Topology", device: int, first: int, size: int) -> list[tuple[int, int]]:
    """The device's forwards as (stage, index among the stage's micro-batches) in the order of
    Policy.sequence: the first `first` micro-batches through each of its stages in chain order,
    then groups of `size`."""
    stages = top.dev_stages[device]
    if first < 1 or size < 1:
        raise ValueError(f"a forward sequence takes groups of at least one micro-batch, got "
                         f"({first}, {size})")
    count = len(top.mbs[stages[0]])
    if any(top.mbs[s] != top.mbs[stages[0]] for s in stages):
        raise ValueError("a forward sequence needs the same micro-batches on every stage of "
                         "a device")
    order, at, group = [], 0, first
    while at < count:
        order.extend((s, k) for s in stages for k in range(at, min(count, at + group)))
        at, group = at + group, size
    return order


def _per_device(value, p: int) -> list:
    """A policy choice as one value per device."""
    return list(value) if isinstance(value, tuple) else [value] * p


@dataclass(frozen=True)
class Outcome:
    """Per-device pass orders and the simulator's own span estimate (for ranking only)."""

    orders: tuple[tuple[Pass, ...], ...]
    estimate: float


class Topology:
    """Stage neighbours, costs and memory of an instance, as flat lists for the hot loop.

    It depends on the instance only (not on caps or policy): build it once and pass it to
    every run(), replay() or simulate() of that instance."""

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
        topology: Topology | None = None) -> Outcome | None:
    """Simulate the greedy under `policy`; None if it gets stuck (not seen with a feasible cap,
    see tests/test_heuristics.py; the grid just skips such a point)."""
    top = topology or Topology(instance)
    return _Greedy(instance, top, caps, policy).go()


def replay(instance: Instance, caps: Sequence[float] | None,
           orders: Sequence[Sequence[Pass]], topology: Topology | None = None) -> Outcome | None:
    """Rank a fixed per-device order (e.g. ZB-H1) with the same simulator; None if it goes over
    a cap or runs a stage's passes out of micro-batch order (not a candidate then)."""
    top = topology or Topology(instance)
    if caps is not None and not _orders_fit(instance, top, caps, orders):
        return None  # the replay would stop at the F that goes over (memory follows the order)
    return _Greedy(instance, top, caps, Policy(), fixed=orders).go()


def simulate(instance: Instance, policy: Policy, topology: Topology | None = None,
             bound: float = math.inf) -> Outcome | None:
    """Simulate the greedy under `policy` on `instance` within its own cap (`instance.cap`),
    reusing `topology` (Topology(instance)) when given; run() within `bounded(bound)`, so None
    also when the span estimate is certain to exceed `bound` (the default, infinite, runs to the
    end whatever bound an enclosing block set)."""
    with bounded(bound):
        return run(instance, instance.cap, policy, topology)


def _orders_fit(instance: Instance, top: Topology, caps: Sequence[float],
                orders: Sequence[Sequence[Pass]]) -> bool:
    """Whether every F of the fixed orders fits its device's cap, with the levels summed in
    the order the replay sums them (a device's level changes only with its own passes)."""
    delta = top.delta
    for d, order in enumerate(orders):
        level = instance.static_memory[d]
        cap = caps[d]
        for s, _, kind in order:
            if kind == "F" and not within_cap(level + delta["F"][s], cap):
                return False
            level += delta[kind][s]
    return True


class _Greedy:
    """One simulation. The hot loop (`go`) works on local names and closures: a method call and
    an attribute look-up per pass and candidate were most of its time on large instances."""

    def __init__(self, instance: Instance, top: Topology, caps, policy: Policy, fixed=None):
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
        # with a forward sequence: per device, its forwards in order, and how many have run
        self.sequence = None if policy.sequence is None else \
            [_forward_sequence(top, d, *policy.sequence) for d in range(p)]
        self.sequenced = [0] * p

    def go(self) -> Outcome | None:
        top, pol = self.top, self.policy
        p = top.p
        heap, seq = self.heap, self.seq
        heappush, heappop = heapq.heappush, heapq.heappop
        free_at, remaining, first, idle = self.free_at, self.remaining, self.first, self.idle
        level, reserve, caps = self.level, self.reserve, self.caps
        nf, nb, n = self.nf, self.nb, self.n
        f_arr, b_arr, wq, orders = self.f_arr, self.b_arr, self.wq, self.orders
        tf, tb, tw = top.tf, top.tb, top.tw
        d_f, d_b, d_w = top.delta["F"], top.delta["B"], top.delta["W"]
        mb_, later, first_on_device = top.mb_, top.later, top.first_on_device
        nxt_stage, prv_stage, device, mbs = top.next, top.prev, top.device, top.mbs
        lag_next, lag_prev = top.lag_next, top.lag_prev
        inflight = self.inflight
        sequence, sequenced = self.sequence, self.sequenced
        dev_stages = top.dev_stages
        # every choice per device (a policy gives one value, or a tuple of one per device)
        reserve_all = _per_device(pol.reserve_all, p)
        b_first = _per_device(pol.b_first, p)
        late_first = _per_device(pol.late_chunk_first, p)
        # a device's candidate stages in the order it looks at them
        scan = [s[::-1] if late_first[d] and len(s) > 1 else s
                for d, s in enumerate(top.dev_stages)]
        w_fills = _per_device(pol.w_fill, p)
        # the cap test of within_cap, with the tolerance folded into the cap once
        limit = [cap_limit(c) for c in caps]
        top_idle = [0.0]  # max(idle): a device's idle time only grows
        bound = _BOUND.get()
        pruning = bound < math.inf
        if pruning:
            # work left per device; the margin covers float rounding and the _EPS by which a
            # pass may start before its device is free
            work = [sum((tf[s] + tb[s] + tw[s]) * n[s] for s in top.dev_stages[d]) for d in range(p)]
            cut = bound + 1e-6 * max(1.0, abs(bound)) + 2 * _EPS * sum(remaining)

        inf, eps, eps2 = math.inf, _EPS, 2 * _EPS
        # per device, whether W fills gaps (gap, balance), balances bubbles, runs eagerly
        fills_gap = [w in ("gap", "balance") for w in w_fills]
        balances = [w == "balance" for w in w_fills]
        eager = [w == "eager" for w in w_fills]
        # what an F of stage s needs free besides the room reserved for started micro-batches:
        # its activation, plus (first chunk on its device) its later chunks' activations, so a
        # started micro-batch can finish its forward on this device; with reserve_all the room
        # of every started micro-batch is kept too (always safe), else of one (tighter; safe
        # since a stage runs micro-batches in order, so the oldest in flight finds the room;
        # the engine reports a stuck run anyway)
        need_f = [mb_[s] + later[s] if first_on_device[s] else mb_[s] for s in range(top.stages)]
        reserving = [first_on_device[s] and reserve_all[device[s]] for s in range(top.stages)]

        def f_fits(d: int, s: int) -> bool:
            need = mb_[s] + (later[s] + reserve[d]) if reserving[s] else need_f[s]
            return level[d] + need <= limit[d]

        def decide(d: int, t: float):
            bs = fs = -1
            bk = fk = 0
            f_blocked = False
            next_arrival = inf
            soon = t + eps
            for s in scan[d]:
                k = nb[s]
                if k < nf[s]:
                    a = b_arr[s][k]
                    if a is None:  # producer not scheduled yet: a lower bound, never "ready"
                        a = t + tb[nxt_stage[s]] + lag_next[s] + eps2
                    if a <= soon:
                        if bs < 0 or k < bk:
                            bs, bk = s, k
                    elif a < next_arrival:
                        next_arrival = a
                k = nf[s]
                if k < n[s] and (sequence is None or sequence[d][sequenced[d]] == (s, k)):
                    a = f_arr[s][k]
                    if a is None:
                        a = t + tf[prv_stage[s]] + lag_prev[s] + eps2
                    if a <= soon:
                        if inflight is not None and k - nb[s] >= inflight[s]:
                            continue
                        if not f_fits(d, s):
                            f_blocked = True
                            continue
                        if fs < 0 or k < fk:
                            fs, fk = s, k
                    elif a < next_arrival:
                        next_arrival = a
            if bs >= 0 and (b_first[d] or fs < 0):
                return bs, bk, "B"
            if fs >= 0:
                return fs, fk, "F"
            queue = wq[d]
            if not queue:
                return None
            s, k = queue[0]
            gap = next_arrival - t
            if f_blocked or remaining[d] == len(queue) or eager[d] \
                    or (fills_gap[d] and gap >= tw[s] - eps) \
                    or (balances[d] and idle[d] + gap > top_idle[0] + eps):
                queue.popleft()
                return s, k, "W"
            # (W is not eager here) a forward that will arrive and not fit must wait for
            # memory anyway: free it now
            for s2 in dev_stages[d]:
                if nf[s2] < n[s2] and nb[s2] == nf[s2] and not f_fits(d, s2):
                    queue.popleft()
                    return s, k, "W"
            return None

        for d in range(p):
            heappush(heap, (0.0, next(seq), d))
        choose = self.decide_fixed if self.fixed is not None else decide
        # The loop below runs once per event; a pass's bookkeeping (memory, counts, the order,
        # waking the device its output goes to) is written out here rather than in calls.
        try:
            while heap:
                now, _, d = heappop(heap)
                free = free_at[d]
                if free > now + _EPS or not remaining[d]:
                    continue
                choice = choose(d, now)
                if choice is None:
                    continue
                if choice is False:
                    return None  # a fixed order went over the cap
                s, k, kind = choice
                t = now
                if kind == "F":
                    cost = tf[s]
                    level[d] += d_f[s]
                    if reserve_all[d]:
                        reserve[d] += later[s] if first_on_device[s] else -mb_[s]
                    nf[s] += 1
                    sequenced[d] += 1
                elif kind == "B":
                    cost = tb[s]
                    level[d] += d_b[s]
                    nb[s] += 1
                else:
                    cost = tw[s]
                    level[d] += d_w[s]
                    if free < t:
                        # A W was ready since the device went idle (its B ran here) and nothing
                        # depends on it: start it then, as evaluate()'s ASAP timing of this order
                        # will.
                        t = free
                end = t + cost
                if first[d] is None:
                    first[d] = t
                elif t > free:
                    gone = idle[d] = idle[d] + (t - free)
                    if gone > top_idle[0]:
                        top_idle[0] = gone
                free_at[d] = end
                remaining[d] -= 1
                if pruning:
                    work[d] -= cost
                    if end + work[d] - first[d] > cut:
                        raise _Pruned
                orders[d].append((s, mbs[s][k], kind))
                heappush(heap, (end if end > now else now, next(seq), d))
                if kind == "F":
                    other = nxt_stage[s]
                    if other < 0:
                        b_arr[s][k] = end
                        continue
                    arrival = end + lag_next[s]
                    f_arr[other][k] = arrival
                elif kind == "B":
                    wq[d].append((s, k))
                    other = prv_stage[s]
                    if other < 0:
                        continue
                    arrival = end + lag_prev[s]
                    b_arr[other][k] = arrival
                else:
                    continue
                # tell the device of `other` that an input arrives; a device busy past the
                # arrival sees it anyway, an idle one re-plans now with the arrival known
                e = device[other]
                if free_at[e] <= arrival:
                    if free_at[e] <= now:
                        heappush(heap, (now, next(seq), e))
                    heappush(heap, (arrival, next(seq), e))
        except _Pruned:
            return None
        if any(remaining):
            return None
        span = 0.0
        for d in range(p):
            if orders[d]:
                span = max(span, free_at[d] - first[d])
        return Outcome(tuple(tuple(o) for o in orders), span)

    # ----- decisions -------------------------------------------------------------------------

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
