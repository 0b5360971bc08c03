"""A lower bound from one device scheduled exactly, the others reduced to delays and memory rules.

On a contiguous pipeline (one stage per device, overlap 0), take device e and assume, as the exact
solvers do (docs/model.md, symmetry), that every stage runs its F, B and W in micro-batch order.
Then any schedule restricted to e satisfies, with F_j, B_j, W_j the starts of e's passes of
micro-batch j (R_d, wait_d, fwd, bwd as in zbopt.plan.memory_bound):

- e runs one pass at a time, each kind in micro-batch order; B_j >= F_j + wait_e, W_j after B_j;
- e's memory, exactly: m_b - m_w from F_j's start to B_j's end and m_w until W_j's end, within
  cap - static at every moment;
- a device d before e holds at most k_d activations and releases them in order, so F(d, j) waits
  for the end of B(d, j - k_d) and the release gap delta_d (zbopt.plan.memory_bound); in e's time
  that is F_j >= end of B_{j - k_d} + R_d - R_e + delta_d (the forward path from d to e and the
  backward path back);
- a device d after e: its F starts x_j follow F_j by the forward path, each other by t_f(d), and
  the (j - k_d)-th by R_d + delta_d (its activation freed), and B_j follows x_j by the least path
  from F(d, j) to the start of B(e, j).

The span is at least e's own (F_0 to the end of W_{m-1}) and, for every d before e, the end of
B_{m-1} plus R_d - R_e plus t_w(d) from F_0 (d's first F precedes F_0 by the forward path, its
last W follows B(e, m-1) by the backward path and a t_w). Unlike zbopt.plan.memory_bound, the
relaxation sees how F, B and W of one device collide under the exact memory of e (few pending W
while several activations are held).

Its optimum, by a dynamic programme over e's order of passes. Fix the order in which e runs its
passes. Every rule above puts a start at or after an earlier event plus a constant (max-plus), so
starting each pass as early as e and its rules allow meets every rule and makes every start, and
the span, least. And e's memory at an F's start depends on the order alone: e runs one pass at a
time, so a B or W before the F in the order has ended by then and one after it has not started.
So the relaxation's optimum is the least, over orders that keep each kind in micro-batch order,
with B_j after F_j and W_j after B_j and memory within the room at every F, of the earliest-start
span. The programme builds the orders pass by pass; a state counts the F, B and W done (this
decides the memory and which rules are met), and a label holds what the rest of the order still
reads: when e is free, when each micro-batch in flight may start its B, the recent B starts (the
rules of the devices before e) and the recent x of each device after e. Values no later pass can
feel (below what e's free time already forces) are raised to that level, which changes nothing.
Each step is monotone in every value of the label, so a label no earlier than another everywhere
can be dropped, and two labels can be replaced by their earliest values (componentwise minimum):
its every continuation is at most theirs, so the least span found stays a lower bound. At most
`labels` labels are kept per state (the closest pair is merged when there are more); with no
merge the result is the relaxation's exact optimum.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from itertools import chain
from typing import Optional

from ..bounds import activation_capacity, round_trip
from ..dominance import Labels, keep_or_merge, labels_of
from ..instance import Instance, within_cap
from .memory_bound import applies, held_counts, release_gaps, round_trips

LABELS = (1, 4, 16, 64)  # labels per state of successive passes, while time is left


def device_relaxation(instance: Instance, device: int, time_limit: float) -> float:
    """The relaxation's optimum on `device` (a lower bound on every in-order schedule's span),
    or a lower bound of it when labels had to be merged: the best over the passes of LABELS
    that finish within `time_limit` seconds (0 if none does, or if no order fits: that would
    mean no in-order schedule, and the bound claims nothing about the others)."""
    return _device_pass(instance, device, time_limit)[0]


def _device_pass(instance: Instance, device: int, time_limit: float,
                 memo: Optional[dict] = None) -> tuple[float, bool]:
    """(device_relaxation, whether the time limit cut it short). `memo` (device -> (value,
    label passes done, complete)) carries what earlier calls on the same instance finished: a
    complete device is not run again, a cut one goes on from its next pass of LABELS."""
    if not applies(instance) or time_limit <= 0:
        return 0.0, False
    memo = {} if memo is None else memo
    done, start, complete = memo.get(device, (0.0, 0, False))
    if complete:
        return done, False
    rules, finished = _Rules(instance, device), []

    def least_span(limit: int, deadline: float):
        value, exact = rules.least_span(limit, deadline)
        if value is not None:
            finished.append(limit)
        return value, exact

    value, short = passes_bound(least_span, LABELS[start:], time.perf_counter() + time_limit)
    memo[device] = (max(value, done), start + len(finished), not short)
    return memo[device][0], short


def passes_bound(least_span, labels: tuple[int, ...], deadline: float) -> tuple[float, bool]:
    """(the best least_span(n, deadline) over the label limits n in `labels`, in order, until
    one is exact (nothing merged) or `deadline` (perf_counter) passes (0 if none finishes);
    whether the deadline cut it short)."""
    best = 0.0
    for limit in labels:
        value, exact = least_span(limit, deadline)
        if value is None:
            return best, True
        if not math.isfinite(value):
            break
        best = max(best, value)
        if exact:
            break
    return best, False


class _Rules:
    """The relaxation of one device as data for the programme."""

    def __init__(self, instance: Instance, e: int):
        p, m = instance.devices, instance.microbatches
        trip, held, gaps = round_trips(instance), held_counts(instance), release_gaps(instance)
        self.m = m
        self.t_f, self.t_b, self.t_w = instance.t_f[e], instance.t_b[e], instance.t_w[e]
        self.wait = round_trip(instance, e, e)  # F_j's start to B_j's start
        self.m_b, self.m_w = instance.m_b[e], instance.m_w[e]
        self.room = activation_capacity(instance, e)
        # devices before e: F_j >= B_{j-k} + c (the end of B_{j-k} plus R_d - R_e + delta_d)
        strongest: dict[int, float] = {}
        for d in range(e):
            if 1 <= held[d] < m:
                c = self.t_b + trip[d] - trip[e] + gaps[d]
                strongest[held[d]] = max(strongest.get(held[d], -math.inf), c)
        self.ups = tuple(sorted(strongest.items()))
        self.depth = max((k for k, _ in self.ups), default=0)  # B starts a label keeps
        self.reach = max((c for _, c in self.ups), default=0.0)
        self.tail = max((self.t_b + trip[d] - trip[e] + instance.t_w[d] for d in range(e)),
                        default=-math.inf)
        # devices after e: (ahead, t_f(d), k_d, R_d + delta_d, how many x a label keeps)
        self.downs = tuple((self.wait - round_trip(instance, d, e), instance.t_f[d], held[d],
                            trip[d] + gaps[d], max(1, min(held[d], m)))
                           for d in range(e + 1, p))

    def fits(self, n_f: int, n_b: int, n_w: int) -> bool:
        """Whether e may start its next F with n_f, n_b, n_w passes of each kind done."""
        level = (n_f + 1 - n_b) * (self.m_b - self.m_w) + (n_f + 1 - n_w) * self.m_w
        return not math.isfinite(self.room) or within_cap(level, self.room)

    def least_span(self, labels: int, deadline: float) -> tuple[Optional[float], bool]:
        """(least span over the orders, exact) keeping at most `labels` labels per state;
        (None, False) when `deadline` (perf_counter) passes first."""
        m, exact, best = self.m, True, math.inf
        # a label: (free, B releases of the micro-batches in flight, recent B starts,
        #            per device after e its recent x)
        layers: dict[int, dict] = defaultdict(dict)
        layers[0][(0, 0, 0)] = [(0.0, (), (), tuple(() for _ in self.downs))]
        for done in range(3 * m):
            if time.perf_counter() > deadline:
                return None, False
            for (n_f, n_b, n_w), group in layers.pop(done, {}).items():
                after = layers[done + 1]
                for label in group:
                    if n_f < m and self.fits(n_f, n_b, n_w):
                        step = self._forward(label, n_f, n_b)
                        if step is not None:
                            exact &= _keep(labels_of(after, (n_f + 1, n_b, n_w)), step,
                                           labels)
                    if n_b < n_f:
                        free, releases, starts, xs = label
                        start = max(free, releases[0])
                        free = start + self.t_b
                        if n_b + 1 == m:  # the rest of the W, then the span
                            best = min(best, max(free + (m - n_w) * self.t_w, start + self.tail))
                        else:
                            # B starts from max(0, n_f - depth) on feed the rules of later F
                            kept = starts + (start,) if n_f - self.depth <= n_b else ()
                            exact &= _keep(labels_of(after, (n_f, n_b + 1, n_w)),
                                           (free, tuple(max(r, free) for r in releases[1:]),
                                            tuple(max(s, free - self.reach) for s in kept), xs),
                                           labels)
                    if n_w < n_b:
                        free, releases, starts, xs = label
                        exact &= _keep(labels_of(after, (n_f, n_b, n_w + 1)),
                                       (free + self.t_w, releases, starts, xs), labels)
        return best, exact

    def _forward(self, label, n_f: int, n_b: int):
        """The label after e starts F_{n_f} (None when a device before e still holds it back
        behind a B that e has not run)."""
        free, releases, starts, xs = label
        start = held_back(self.ups, starts, n_f, n_b, free)
        if start is None:
            return None
        release = start + self.wait
        free = start + self.t_f
        release, new_xs = advance_downs(self.downs, xs, start, free, n_f, release, self.wait)
        starts = trim_starts(starts, n_f, n_b, self.depth, free, self.reach)
        releases = tuple(max(r, free) for r in releases + (release,))
        return free, releases, starts, new_xs


def held_back(ups, starts: tuple, n_f: int, n_b: int, start: float) -> Optional[float]:
    """The start of F_{n_f} on e, at least `start`, under the rules of the devices before e
    (`ups`: F_{n_f} waits for the start of B_{n_f - k} plus c; `starts`: e's recent B starts,
    the last of its n_b); None when one of those B has not run yet."""
    for k, c in ups:
        j = n_f - k
        if j >= 0:
            if j >= n_b:
                return None
            start = max(start, starts[j - (n_b - len(starts))] + c)
    return start


def trim_starts(starts: tuple, n_f: int, n_b: int, depth: int, free: float,
                reach: float) -> tuple:
    """e's recent B starts after F_{n_f} (e free again at `free`): only those a later F can
    still wait for, none held below `free - reach` (a start that early binds no later F)."""
    keep = n_b - max(0, n_f + 1 - depth)
    starts = starts[len(starts) - keep:] if keep < len(starts) else starts
    return tuple(max(s, free - reach) for s in starts)


def advance_downs(downs, xs, begin: float, free: float, n_f: int, release: float,
                  wait: float) -> tuple[float, tuple]:
    """The devices after e (`downs`, their recent x `xs`) once F_{n_f} starts at `begin` on
    the device the relaxation schedules (free again at `free`, its F to B wait `wait`): (the
    release of B_{n_f}, `release` raised by their paths back, and their new recent x)."""
    new_xs = []
    for (ahead, t_f, k, slot, kept), recent in zip(downs, xs):
        x = begin + ahead
        if n_f >= 1:
            x = max(x, recent[-1] + t_f)
        if 1 <= k <= n_f:
            x = max(x, recent[-k] + slot)
        release = max(release, x + wait - ahead)
        floor = free + ahead - max(t_f, slot)  # an x below it binds no later x
        new_xs.append(tuple(max(v, floor) for v in (recent + (x,))[-kept:]))
    return release, tuple(new_xs)


def _flat(label) -> tuple[float, ...]:
    free, releases, starts, xs = label
    return (free, *releases, *starts, *chain.from_iterable(xs))


def _keep(group: Labels, label, limit: int) -> bool:
    return keep_or_merge(group, label, limit, _flat, _earliest)


def _earliest(a, b):
    """The componentwise earliest of two labels of one state."""
    def low(x, y):
        return tuple(min(u, v) for u, v in zip(x, y))
    return (min(a[0], b[0]), low(a[1], b[1]), low(a[2], b[2]),
            tuple(low(x, y) for x, y in zip(a[3], b[3])))


# seconds one device's relaxation may take: at p=8, m=32 a pass of the programme with one label
# per state takes a tenth of a second, with 16 a second or two
DEVICE_LIMIT = 2.0


def relaxation_bound(instance: Instance, deadline: float, memo: Optional[dict] = None) -> float:
    """The largest device relaxation bound found before `deadline` (perf_counter); devices that
    hold the fewest activations first, deeper first among equals (the first device, which holds
    the most, is rarely the highest), each given an even share of the time (at most
    DEVICE_LIMIT seconds; what a device leaves over is not handed to the next, which would give
    most to the last devices, the least likely to raise the bound), and then with what is left
    those cut short, in the same order (sweep). `memo`, a dict kept
    by the caller for this instance (_device_pass): a later call goes on where this one stopped
    (within a call too, a device the sweep runs again goes on from its next pass)."""
    if not applies(instance):
        return 0.0
    memo = {} if memo is None else memo
    held = held_counts(instance)
    order = sorted(range(instance.devices), key=lambda d: (held[d], -d))
    base = min(DEVICE_LIMIT, (deadline - time.perf_counter()) / len(order))
    best = sweep(order, deadline, lambda left, remaining: min(base, left / remaining),
                 lambda device, seconds: _device_pass(instance, device, seconds, memo))[0]
    return max([best, *(value for value, _, _ in memo.values())])


def sweep(items, deadline: float, share, relax) -> tuple[float, object]:
    """(the largest relax(item, seconds) over `items` before `deadline` (perf_counter), the item
    that gave it or None): each item in order gets share(seconds left, items left) seconds;
    then, while time is left, those whose relaxation that cut short run again, in the same
    order (the likeliest to raise the bound first), each with all that is left: a slower
    machine needs more than the per-item share, and a relaxation that finishes hands the rest
    to the next. relax(item, seconds) returns (value, whether the seconds cut it short)."""
    best, which, cut = 0.0, None, []
    for index, item in enumerate(items):
        left = deadline - time.perf_counter()
        if left <= 0.05:
            return best, which
        value, short = relax(item, share(left, len(items) - index))
        if value > best:
            best, which = value, item
        if short:
            cut.append(item)
    for item in cut:
        left = deadline - time.perf_counter()
        if left <= 0.05:
            break
        value, _ = relax(item, left)
        if value > best:
            best, which = value, item
    return best, which
