"""A lower bound from every device at once, the W passes dropped: the F/B relaxation.

The one-device and window relaxations (zbopt.plan.device_bound, zbopt.plan.window_bound) keep a
few devices exactly and reduce the others to delays; on a split whose pace is set by devices far
apart (the 128k-vocabulary tight split of results/plan.md: device 1 holds four activations and
no pending W beside them, device 7 one) none of them sees both. This one keeps every device and
drops what is cheapest to lose, the W passes.

The relaxation. On a contiguous pipeline (one stage per device, passes never overlapping) assume,
as the exact solvers do (docs/model.md, symmetry), that every stage runs F, B and W in
micro-batch order. Drop the W passes and keep, with the costs rounded down to a grid (so the
relaxation is no longer than with the true costs):
- the chains: F(d + 1, j) after F(d, j) and the comm lag, B(d, j) after B(d + 1, j) and the lag,
  B(p - 1, j) after F(p - 1, j);
- F and B of each stage in micro-batch order, one pass at a time on each device;
- each device's memory as the rule of zbopt.plan.memory_bound: F(d, j + k_d) starts after B(d, j)
  ends plus the release gap delta_d (k_d the activations d holds at most; delta_d where k_d
  activations leave no room for a pending W, so a W or another B must come first).
Every in-order schedule meets these, and its span is at least device 0's own: from F(0, 0)'s start
to the end of W(0, m - 1), which follows B(0, m - 1)'s end by t_w(0). So the least time from
F(0, 0)'s start to B(0, m - 1)'s end, plus t_w(0), is a lower bound on the span of every in-order
schedule of the split.

With F and B in order and F(j + k_d) after B(j), the chains already order every pair of passes
on a device but F(j + i) and B(j) for 0 < i < k_d; so "one pass at a time" is a choice for those
pairs only: a literal x(j, i) says F(j + i) runs before B(j). If it does, so do F(j + i - 1) (the
forwards are in order) and, before B(j + 1), F(j + i). CP-SAT proves the optimum of the
relaxation stated this way five to ten times faster than with AddNoOverlap (the 128k tight
split's window of 21 micro-batches: 8.7 s against 83 s); where it runs out of time, its proven
bound is the value.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Optional

from ortools.sat.python import cp_model

from ..instance import Instance
from ..solvers import interruptible
from .memory_bound import applies, held_counts, release_gaps

# it runs beside another search (Background: zbopt plan's steps 5 and 6, solve()'s backend) with
# at least FROM_SECONDS left, two threads or more, and at most MAX_CHOICES choices of order
# (`choices`: the p=8, m=32 tight splits of results/plan.md have 456 and 640 and are proven in
# 40-85 s; a p=16, m=64 tight split has 5,440 and was not in 90 s), while the gap between the
# best schedule and the bound known exceeds GAP (below it the core is the search's: the p=8 mid
# splits, 937 and 1,049 choices, were not proven in 90 s either)
FROM_SECONDS = 20.0
MAX_CHOICES = 2000
GAP = 0.01

# the grid the costs are rounded down to: a power of ten of the instance's time unit, at most this
# share of the least positive F or B cost (each pass loses less than one step); whole-number
# costs keep their own grid of 1
GRID_SHARE = 1e-3


def grid_unit(instance: Instance) -> float:
    """The step the relaxation's times are counted in (module doc)."""
    values = [*instance.t_f, *instance.t_b]
    if all(float(v).is_integer() for v in [*values, instance.comm]):
        return 1.0
    least = min((v for v in values if v > 0), default=1.0)
    return 10.0 ** math.floor(math.log10(least * GRID_SHARE))


def _one_at_a_time(model: cp_model.CpModel, f: list, b: list, t_f: int, t_b: int,
                   held: int) -> None:
    """One pass at a time on a device whose F and B run in micro-batch order and whose F(j +
    held) follows B(j): the literals x(j, i) of the module doc and their implications."""
    m = len(f)
    before = {}
    for j in range(m):
        for i in range(1, min(held, m - j)):
            x = model.NewBoolVar("")
            before[j, i] = x
            model.Add(b[j] >= f[j + i] + t_f).OnlyEnforceIf(x)
            model.Add(f[j + i] >= b[j] + t_b).OnlyEnforceIf(x.Not())
    for (j, i), x in before.items():
        if i > 1:
            model.AddImplication(x, before[j, i - 1])
            if (j + 1, i - 1) in before:
                model.AddImplication(x, before[j + 1, i - 1])


def window_model(instance: Instance, e: int, last: int, unit: float,
                 known: Optional[dict] = None) -> cp_model.CpModel:
    """The CP-SAT model of the window from F(e, 0)'s start to B(e, last)'s end (window_optimum),
    times in steps of `unit`."""
    p, m = instance.devices, last + 1
    grid = lambda x: math.floor(x / unit + 1e-9)  # noqa: E731
    t_f = [grid(instance.t_f[d]) for d in range(p)]
    t_b = [grid(instance.t_b[d]) for d in range(p)]
    comm, counts = grid(instance.comm), held_counts(instance)
    gaps = [grid(x) for x in release_gaps(instance)]
    horizon = m * sum(t_f[d] + t_b[d] + 2 * comm for d in range(p))
    model = cp_model.CpModel()
    f = [[model.NewIntVar(-horizon, horizon, "") for _ in range(m)] for _ in range(p)]
    b = [[model.NewIntVar(-horizon, horizon, "") for _ in range(m)] for _ in range(p)]
    for j in range(m):
        for d in range(p - 1):
            model.Add(f[d + 1][j] >= f[d][j] + t_f[d] + comm)
            model.Add(b[d][j] >= b[d + 1][j] + t_b[d + 1] + comm)
        model.Add(b[p - 1][j] >= f[p - 1][j] + t_f[p - 1])
    for d in range(p):
        for j in range(m - 1):
            model.Add(f[d][j + 1] >= f[d][j] + t_f[d])
            model.Add(b[d][j + 1] >= b[d][j] + t_b[d])
        for j in range(m - counts[d]):
            model.Add(f[d][j + counts[d]] >= b[d][j] + t_b[d] + gaps[d])
        _one_at_a_time(model, f[d], b[d], t_f[d], t_b[d], counts[d])
    ends = [b[e][j] + t_b[e] for j in range(m)]
    for n, value in (known or {}).items():
        if n < last:
            for a in range(m - n):
                model.Add(ends[a + n] - f[e][a] >= math.floor(value / unit + 1e-9))
    model.Add(f[e][0] == 0)
    model.Minimize(ends[last])
    return model


def _solver(seconds: float, threads: int) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.0, seconds)
    solver.parameters.num_workers = threads
    solver.parameters.catch_sigint_signal = False  # Ctrl-C is the command's (interruptible)
    if threads == 1:
        # the proof is a tree search whose linear relaxation stays far below the optimum: one
        # worker without it proved the 128k tight split in 40-45 s, with it in 80-90 s
        solver.parameters.linearization_level = 0
    return solver


def _value(solver: cp_model.CpSolver, status: int, unit: float) -> tuple[bool, float]:
    if status == cp_model.OPTIMAL:
        return True, solver.ObjectiveValue() * unit
    if status in (cp_model.FEASIBLE, cp_model.UNKNOWN):
        return False, max(0.0, solver.BestObjectiveBound() * unit)
    return False, 0.0


def window_optimum(instance: Instance, e: int, last: int, time_limit: float,
                   known: Optional[dict] = None, unit: Optional[float] = None,
                   threads: int = 2) -> tuple[bool, float]:
    """(proven, value): the least time from F(e, 0)'s start to B(e, last)'s end over the
    relaxation of micro-batches 0..last alone (module doc). `proven` says CP-SAT proved the
    value optimal within `time_limit`; otherwise it is its proven bound. Times are counted in
    steps of `unit` (grid_unit by default), the costs rounded down. `known[n]`: values of
    shorter windows (n micro-batches after the first), which any n + 1 consecutive micro-batches
    of this one also need, added as cuts."""
    unit = grid_unit(instance) if unit is None else unit
    model = window_model(instance, e, last, unit, known)
    solver = _solver(time_limit, threads)
    status = interruptible.solve(solver, model)  # Ctrl-C and SIGUSR1 end it as any search
    return _value(solver, status, unit)


def fb_bound(instance: Instance, deadline: float, threads: int = 2) -> float:
    """The F/B relaxation's bound on the span of every in-order schedule of the split (module
    doc): what CP-SAT proves of device 0's window of all micro-batches by `deadline` (a
    time.perf_counter() value), plus t_w(0); 0 where it does not apply (no cap, or not one stage
    per device on one chain) or has more than MAX_CHOICES choices of order (its bound would not
    come in time)."""
    if not applies_to(instance) or choices(instance) > MAX_CHOICES:
        return 0.0
    left = deadline - time.perf_counter()
    if left <= 0:
        return 0.0
    _, window = window_optimum(instance, 0, instance.microbatches - 1, left, threads=threads)
    return _span_bound(instance, window)


def _span_bound(instance: Instance, window: float) -> float:
    """The bound on the span from device 0's window (module doc): the window plus t_w(0), or 0
    when nothing was proven."""
    return window + instance.t_w[0] if window > 0 else 0.0


def choices(instance: Instance) -> int:
    """The literals of the model (module doc): the pairs F(j + i), B(j) with 0 < i < k_d."""
    m = instance.microbatches
    return sum(min(k, m - j) - 1 for k in held_counts(instance) for j in range(m) if k > 1)


def applies_to(instance: Instance) -> bool:
    """Whether the relaxation bounds the instance: a cap, one stage per device on one chain."""
    return instance.cap is not None and applies(instance)


def runs_beside(instance: Instance, seconds: float, threads: int, span: float,
                bound: float) -> bool:
    """Whether to run the relaxation beside a search of `seconds` on `threads` threads whose
    best schedule has `span` and whose bound is `bound` (see FROM_SECONDS)."""
    return (threads >= 2 and seconds >= FROM_SECONDS and applies_to(instance)
            and bound < span * (1 - GAP) and choices(instance) <= MAX_CHOICES)


class Background:
    """fb_bound in a thread with one CP-SAT worker, while the caller goes on (zbopt plan starts
    it when its relaxation step begins, where the one-device, window and collision relaxations
    use one core, and collects it after the solver step). `value()` stops the search where it
    is and returns the bound proven; use it as a context manager so that an exception stops it
    too."""

    def __init__(self, instance: Instance, deadline: float) -> None:
        self.instance = instance
        self.unit = grid_unit(instance)
        self.model = window_model(instance, 0, instance.microbatches - 1, self.unit)
        self.solver = _solver(deadline - time.perf_counter(), 1)
        self.status: Optional[int] = None
        self.thread = threading.Thread(target=self._run, name="fb-bound", daemon=True)
        interruptible.background_started()  # searches started meanwhile yield it its core
        self.thread.start()

    def _run(self) -> None:
        try:
            self.status = self.solver.solve(self.model)
        finally:
            interruptible.background_ended()

    def done(self) -> bool:
        """Whether the search has ended (proven, or at its deadline)."""
        return not self.thread.is_alive()

    def proven(self) -> bool:
        """Whether the search has ended with the relaxation's optimum."""
        return self.done() and self.status == cp_model.OPTIMAL

    def stop(self) -> None:
        """Stop the search and wait for its thread (again while it runs: a stop that comes
        before CP-SAT's search has begun would be lost)."""
        while self.thread.is_alive():
            self.solver.stop_search()
            self.thread.join(0.05)

    def value(self) -> float:
        """The bound on the span (fb_bound's), the search stopped first if it still runs."""
        self.stop()
        if self.status is None:
            return 0.0
        _, window = _value(self.solver, self.status, self.unit)
        return _span_bound(self.instance, window)

    def __enter__(self) -> "Background":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
