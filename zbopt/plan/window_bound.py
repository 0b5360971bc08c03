"""A lower bound from a window of neighbouring devices scheduled exactly, the others reduced to
rules.

The one-device relaxation (zbopt.plan.device_bound) sees how F, B and W of one device collide
under its exact memory, with its neighbours reduced to delays and memory rules; but a neighbour's
own passes also collide with the traffic it passes on, which no one-device relaxation sees. A
window of neighbouring devices scheduled together does: on 8 Llama-shaped blocks at p = 4, m = 8
and a tight cap, devices 1 and 2 together prove the split's optimum where every other bound left
2.15% (docs/plan-search.md, results/plan.md).

The relaxation. On a contiguous pipeline (one stage per device, passes never overlapping) take
the devices e, e + 1, ..., h (a window of n >= 2) and assume, as the exact solvers do
(docs/model.md, symmetry), that every stage runs F, B and W in micro-batch order. Keep, exactly,
the window's passes with their costs, one pass at a time per device, their dependencies (F(i + 1,
j) after F(i, j) and the comm lag, B(i, j) after B(i + 1, j) and the lag, B after F and W after B
on each device) and each device's exact memory (m_b - m_w from F's start to B's end and m_w until
W's end, within cap - static). The devices before e become the rules of zbopt.plan.device_bound
in e's time (F(e, j) waits for the start of B(e, j - k_d) plus a constant), and the devices
after h its rules in h's time (their forward starts x_j, and B(h, j) no earlier than x_j plus
the least path back). Time 0 is the start of F(e, 0), e's first pass. The span is at least e's
own (F(e, 0) to its last W's end) and, for every device d before e, the start of B(e, m - 1)
plus the path back to d and t_w(d) (device_bound's tail).

Its optimum, by a dynamic programme over the window's orders, as in device_bound: with every
order fixed each rule is a start at or after an earlier event plus a constant, so starting each
pass as early as allowed makes every start and the span least, and each device's memory at an
F's start depends on its order alone. A state counts the F, B and W each device has done; a step
adds the next pass of one device once the passes it depends on are placed (the order in which
the devices' steps interleave changes no time). A label holds what the rest still reads: each
device's free time, when each forward sent down a link may start on the next device, when each
B of h in flight may start, when each B sent up a link may start, the recent B starts of e (the
rules of the devices before e) and the recent x of each device after h. Labels no earlier than
another everywhere are dropped and, past `labels` per state, the closest pair is merged into its
componentwise minimum; both keep the result a lower bound.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from itertools import chain
from typing import Optional

from ..dominance import Labels, keep_or_merge, labels_of
from ..instance import Instance
from ..passes import stage_lag
from .device_bound import _Rules, advance_downs, held_back, passes_bound, sweep, trim_starts
from .memory_bound import applies, held_counts

LABELS = (1, 4, 16)  # labels per state of successive passes, while time is left
# windows with a device holding more activations than this are left out: the states grow with
# the product of what the devices hold, and such a device rarely sets the pace anyway
MAX_HELD = 4
# window sizes window_bound tries: on the splits measured (docs/plan-search.md) three devices gave
# what the best pair of them gave, in ten to thirty times the time
SIZES = (2,)
# seconds one window may take at first: a pair at p=8, m=32 takes 0.1-1.5 s to its exact optimum
# where it reaches it (twice that on a machine half as fast, which the second round of
# device_bound.sweep gives it from what the others left); those that do not rarely add anything
# in more time
WINDOW_LIMIT = 2.0

# a label: (free time per device, per link its forwards' arrivals, the B releases of the last
# device, per link its backwards' arrivals, recent B starts of the first device, per device
# after the window its recent x)
FREE, DOWN, RELEASE, UP, STARTS, XS = range(6)


class _Window:
    """The relaxation of devices e..e + n - 1 as data for the programme."""

    def __init__(self, instance: Instance, e: int, n: int):
        self.m, self.n = instance.microbatches, n
        devices = range(e, e + n)
        # each device's own rules: its costs and memory (fits); the first's and the last's
        # also stand for the devices before and after the window
        self.rules = tuple(_Rules(instance, d) for d in devices)
        first, last = self.rules[0], self.rules[-1]
        self.ups, self.depth, self.reach, self.tail = (first.ups, first.depth, first.reach,
                                                       first.tail)
        self.downs = last.downs
        self.wait = last.wait  # F(h, j)'s start to B(h, j)'s start
        self.lag_f = tuple(stage_lag(instance, d, d + 1) for d in devices[:-1])
        self.lag_b = tuple(stage_lag(instance, d + 1, d) for d in devices[:-1])
        self.t_f = tuple(r.t_f for r in self.rules)
        self.t_b = tuple(r.t_b for r in self.rules)
        self.t_w = tuple(r.t_w for r in self.rules)

    def least_span(self, labels: int, deadline: float) -> tuple[Optional[float], bool]:
        """(least span over the window's orders, exact) keeping at most `labels` labels per
        state; (None, False) when `deadline` (perf_counter) passes first."""
        m, n = self.m, self.n
        exact, best = True, math.inf
        layers: dict[int, dict] = defaultdict(dict)
        empty = tuple(() for _ in range(n - 1))
        layers[0][(0,) * (3 * n)] = [((0.0,) * n, empty, (), empty, (), tuple(() for _ in self.downs))]
        for done in range(3 * n * m):
            if time.perf_counter() > deadline:
                return None, False
            for state, group in layers.pop(done, {}).items():
                after = layers[done + 1]
                for label in group:
                    for i in range(n):
                        f, b, w = state[3 * i: 3 * i + 3]
                        for kind, step in self._steps(label, state, i, f, b, w):
                            if step is None:
                                continue
                            if not isinstance(step, tuple):  # e's last B: a span
                                best = min(best, step)
                                continue
                            moved = list(state)
                            moved[3 * i + "FBW".index(kind)] += 1
                            exact &= _keep(labels_of(after, tuple(moved)), step, labels)
        return best, exact

    def _steps(self, label, state, i: int, f: int, b: int, w: int):
        """(kind, label after it, or a span for e's last B, or None) of every pass device i
        may run next."""
        m, n = self.m, self.n
        if f < m and self.rules[i].fits(f, b, w) and (i == 0 or state[3 * (i - 1)] > f):
            yield "F", self._forward(label, i, f, b)
        if b < f and (i == n - 1 or state[3 * (i + 1) + 1] > b):
            yield "B", self._backward(label, i, f, b, w)
        if w < b:
            frees = list(label[FREE])
            frees[i] += self.t_w[i]
            yield "W", (tuple(frees), *label[1:])

    def _forward(self, label, i: int, n_f: int, n_b: int):
        """The label after device i starts F(i, n_f); None when a device before the window
        still holds it back behind a B that e has not run."""
        frees, down, releases, up, starts, xs = label
        begin = frees[i]
        if i > 0:
            begin = max(begin, down[i - 1][0])
            down = _replace(down, i - 1, down[i - 1][1:])
        else:
            begin = held_back(self.ups, starts, n_f, n_b, begin)
            if begin is None:
                return None
        free = begin + self.t_f[i]
        if i == 0:
            starts = trim_starts(starts, n_f, n_b, self.depth, free, self.reach)
        if i < self.n - 1:
            down = _replace(down, i, down[i] + (free + self.lag_f[i],))
        else:
            release, xs = advance_downs(self.downs, xs, begin, free, n_f, begin + self.wait,
                                        self.wait)
            releases = releases + (release,)
        return (_set(frees, i, free), down, releases, up, starts, xs)

    def _backward(self, label, i: int, n_f: int, n_b: int, n_w: int):
        """The label after device i starts B(i, n_b), or the span when it is e's last."""
        frees, down, releases, up, starts, xs = label
        if i == self.n - 1:
            begin = max(frees[i], releases[0])
            releases = releases[1:]
        else:
            begin = max(frees[i], up[i][0])
            up = _replace(up, i, up[i][1:])
        free = begin + self.t_b[i]
        if i > 0:
            up = _replace(up, i - 1, up[i - 1] + (free + self.lag_b[i - 1],))
        else:
            if n_b + 1 == self.m:  # the rest of e's W, then the span
                return max(free + (self.m - n_w) * self.t_w[0], begin + self.tail)
            kept = starts + (begin,) if n_f - self.depth <= n_b else ()
            starts = tuple(max(s, free - self.reach) for s in kept)
        return (_set(frees, i, free), down, releases, up, starts, xs)


def _set(values: tuple, i: int, value) -> tuple:
    return values[:i] + (value,) + values[i + 1:]


def _replace(queues: tuple, i: int, queue: tuple) -> tuple:
    return queues[:i] + (queue,) + queues[i + 1:]


def _flat(label) -> tuple[float, ...]:
    frees, down, releases, up, starts, xs = label
    return (*frees, *chain.from_iterable(down), *releases, *chain.from_iterable(up), *starts,
            *chain.from_iterable(xs))


def _keep(group: Labels, label, limit: int) -> bool:
    return keep_or_merge(group, label, limit, _flat, _earliest)


def _earliest(a, b):
    """The componentwise earliest of two labels of one state."""
    def low(x, y):
        return tuple(min(u, v) for u, v in zip(x, y))

    def lows(x, y):
        return tuple(low(u, v) for u, v in zip(x, y))
    return (low(a[FREE], b[FREE]), lows(a[DOWN], b[DOWN]), low(a[RELEASE], b[RELEASE]),
            lows(a[UP], b[UP]), low(a[STARTS], b[STARTS]), lows(a[XS], b[XS]))


def window_relaxation(instance: Instance, e: int, size: int, time_limit: float) -> float:
    """The relaxation's optimum on devices e..e + size - 1 (a lower bound on every in-order
    schedule's span), or a lower bound of it when labels had to be merged: the best over the
    passes of LABELS that finish within `time_limit` seconds (0 if none does or no orders
    fit)."""
    return _window_pass(instance, e, size, time_limit)[0]


def _window_pass(instance: Instance, e: int, size: int, time_limit: float) -> tuple[float, bool]:
    """(window_relaxation, whether the time limit cut it short)."""
    if not applies(instance) or time_limit <= 0 or size < 2 or \
            not 0 <= e <= instance.devices - size:
        return 0.0, False
    return passes_bound(_Window(instance, e, size).least_span, LABELS,
                        time.perf_counter() + time_limit)


def window_bound(instance: Instance, deadline: float) -> float:
    """The largest window relaxation found before `deadline` (perf_counter); see best_window."""
    return best_window(instance, deadline)[0]


def best_window(instance: Instance, deadline: float) -> tuple[float, Optional[tuple[int, int]]]:
    """(the largest window relaxation found before `deadline` (perf_counter), its first device
    and size, or None when none gave a bound): the windows of SIZES whose devices all hold at
    most MAX_HELD activations, smaller windows first and, among equals, those holding the
    fewest (the likeliest to collide), each given at most WINDOW_LIMIT seconds of what is
    left, and then the ones that limit cut short again with the time the others left over
    (zbopt.plan.device_bound.sweep)."""
    if not applies(instance):
        return 0.0, None
    held = held_counts(instance)
    windows = [(e, size) for size in SIZES for e in range(instance.devices - size + 1)
               if max(held[e: e + size]) <= MAX_HELD]
    windows.sort(key=lambda w: (w[1], sum(held[w[0]: w[0] + w[1]]), -w[0]))
    return sweep(windows, deadline, lambda left, remaining: min(WINDOW_LIMIT, left),
                 lambda w, seconds: _window_pass(instance, *w, seconds))
