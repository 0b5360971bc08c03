"""The Zero Bubble automatic scheduler (Qi et al., ICLR 2024, section 3.1), memory-capped.

A list scheduler simulates time: in warm-up a device runs forwards while memory allows and
no backward has arrived; then one F, one B, with W filling any idle gap at least as long as a
W (and run early when memory must be freed for a forward); the remaining W at the end. A small
grid over its binary choices (B or F first, how eagerly W fills, in-flight limits like 1F1B's
and ZB-H2's) plus the ZB-H1 / ZB-H2 orders when they fit is judged by evaluate(); the smallest
span within the cap wins.

Registered names: `zb-greedy` (the instance's cap, unlimited if none), `zb-1p` and `zb-2p`
(caps 1p and 2p whatever the instance says). Every generator takes `memory_cap=` to override.
"""

from __future__ import annotations

import math
import threading
from dataclasses import replace
from typing import Any

from .. import bounds
from ..errors import ZboptError
from ..families.zero_bubble_handcrafted import zb_h1, zb_h2
from ..instance import Instance
from ..registry import register, schedule_bound
from ..schedule import Schedule
from . import _engine, _search
from ._search import _UNSET, CAP_CHECK, best_of, capped_instance

# Passes simulated per call before the grid is cut to its most useful prefix: keeps p=32, m=256
# (24,576 passes) well under a second (benchmarks/bench_greedy.py).
SIMULATION_BUDGET = 100_000
MIN_POLICIES = 3
W_FILLS = ("gap", "balance", "eager", "lazy")


def warmup_counts(instance: Instance, overshoot: bool) -> tuple[int, ...]:
    """Forwards each stage can run before micro-batch 0's backward reaches it.

    Micro-batch 0's forward goes down the pipeline ASAP while every stage keeps running
    forwards back to back; its backward comes back up. Stage s counts the forwards that end
    by the backward's arrival (`overshoot`: one more, which covers the wait but delays the
    backward). Counts never grow down the pipeline (a stage cannot hold more in flight than
    its upstream sends), as in 1F1B.
    """
    p, comm = instance.devices, instance.comm
    t_f, t_b = instance.t_f, instance.t_b
    start = [0.0] * p
    for s in range(1, p):
        start[s] = start[s - 1] + t_f[s - 1] + comm
    counts = [1] * p
    b_end = start[p - 1] + t_f[p - 1] + t_b[p - 1]
    for s in range(p - 2, -1, -1):
        arrival = b_end + comm
        pace = max(t_f[: s + 1])  # forwards reach stage s no faster than its slowest upstream
        if pace <= 0:  # free forwards: all of them fit before any backward
            counts[s] = instance.microbatches
            b_end = max(arrival, start[s]) + t_b[s]
            continue
        n = max(1, int((arrival - start[s] - t_f[s]) // pace) + 1)
        if overshoot and start[s] + (n - 1) * pace + t_f[s] < arrival:
            n += 1
        counts[s] = min(n, instance.microbatches)
        b_end = max(arrival, start[s] + (counts[s] - 1) * pace + t_f[s]) + t_b[s]
    for s in range(1, p):  # non-increasing down the pipeline
        counts[s] = max(1, min(counts[s], counts[s - 1]))
    return tuple(counts)


LIMIT_KINDS = ("memory", "1f1b", "h2", "h2+1", "warmup", "warmup+")


def inflight_limit(instance: Instance, kind: str) -> tuple[int, ...] | None:
    """Per-stage in-flight limit: none (memory alone decides), 1F1B's, ZB-H2's (and one more),
    or the warm-up counts (see warmup_counts)."""
    p = instance.devices
    if kind == "memory":
        return None
    if kind == "1f1b":
        return tuple(p - s for s in range(p))
    if kind == "h2":
        return tuple(2 * (p - s) - 1 for s in range(p))
    if kind == "h2+1":
        return tuple(2 * (p - s) for s in range(p))
    if kind in ("warmup", "warmup+"):
        return warmup_counts(instance, overshoot=kind == "warmup+")
    raise ValueError(kind)


# The grid, most useful first: the order in which its points won over the paper settings, the
# unit-cost grid and random instances (a greedy set cover); large instances only run a prefix.
PRIORITY = (("warmup+", False, "eager"), ("warmup", False, "balance"), ("h2+1", True, "balance"),
            ("warmup", False, "eager"), ("h2", False, "eager"), ("memory", True, "eager"),
            ("h2", False, "balance"), ("warmup", True, "eager"), ("1f1b", False, "balance"))


def grid(instance: Instance) -> list[_engine.Policy]:
    """Every (in-flight limit, B first, W fill) combination, PRIORITY first, duplicates dropped."""
    points = list(PRIORITY) + [(kind, b_first, w_fill) for kind in LIMIT_KINDS
                               for b_first in (True, False) for w_fill in W_FILLS]
    policies: list[_engine.Policy] = []
    for kind, b_first, w_fill in points:
        policy = _engine.Policy(b_first=b_first, w_fill=w_fill,
                                inflight=inflight_limit(instance, kind))
        if policy not in policies:
            policies.append(policy)
    return policies


# The first-B wave (zbopt.bounds.first_b_wave) relaxes the ramp of every device; the forwards
# its relaxation runs before each device's first B, at the bound and at a few looser spans, are
# tried as in-flight limits first (with W run whenever nothing else is ready, or balanced): on
# uniform costs at 2p they meet the bound, i.e. they are optimal. WAVE_BUDGET bounds the
# simulated passes they add, as SIMULATION_BUDGET does for the grid.
WAVE_SETTINGS = 8
WAVE_STEPS = 128  # spans tried: the bound plus multiples of the least t_f / 32
WAVE_BUDGET = 120_000


def wave_policies(instance: Instance) -> list[_engine.Policy]:
    """Policies with the first-B wave's forwards as in-flight limits, tightest span first."""
    positive = [f for f in instance.t_f if f > 0]
    if instance.placement != "contiguous" or not positive:
        return []
    value, step = bounds.first_b_wave(instance), min(positive) / 32
    settings: list[tuple[int, ...]] = []
    for i in range(WAVE_STEPS):
        counts = bounds.wave_forwards(instance, value + i * step)
        if counts is not None and counts not in settings:
            settings.append(counts)
            if len(settings) == WAVE_SETTINGS:
                break
    policies = [_engine.Policy(b_first=False, w_fill=w_fill, inflight=counts)
                for i, counts in enumerate(settings)
                for w_fill in (("eager", "balance") if i == 0 else ("eager",))]
    return policies[:max(2, WAVE_BUDGET // max(1, instance.num_passes))]


def budgeted(policies: list, passes: int) -> list:
    """The whole grid on small instances; on large ones the PRIORITY prefix that fits the budget
    (deterministic: it depends on the instance's size, never on the clock)."""
    if len(policies) * passes <= SIMULATION_BUDGET:
        return policies
    return policies[:max(MIN_POLICIES, SIMULATION_BUDGET // passes)]


def _orders(schedule: Schedule):
    return [[item[0] for item in order] for order in schedule.orders]


# The last few searches, by instance and the settings that shape the grid: zb-greedy under a
# 2p cap is zb-2p's search again (compare runs both), and the search is deterministic.
_RECENT: dict[tuple, Schedule] = {}
_RECENT_SIZE = 2
_RECENT_LOCK = threading.Lock()  # the server generates from worker threads


def zb_schedule(instance: Instance, method: str) -> Schedule:
    """The best schedule of the grid for `instance` under its own cap (see module doc)."""
    if instance.placement != "contiguous":
        raise ZboptError(f"{method} runs on placement 'contiguous', the instance is "
                         f"{instance.placement!r}")
    key = (instance, SIMULATION_BUDGET, MIN_POLICIES, _search.LARGE, _search.FINALISTS)
    with _RECENT_LOCK:
        schedule = _RECENT.get(key)
    if schedule is None:
        schedule = _search_grid(instance, method)
        with _RECENT_LOCK:
            while len(_RECENT) >= _RECENT_SIZE:
                del _RECENT[next(iter(_RECENT))]
            _RECENT[key] = schedule
    return replace(schedule, method=method)


def _search_grid(instance: Instance, method: str) -> Schedule:
    caps = instance.cap
    top = _engine.Topology(instance)
    # The grid's first point runs first: its estimate prunes a wave setting that goes badly
    # (in-flight limits that serialise the pipeline: 25 times the span at p=64, m=256 with
    # comm) early in its simulation, instead of at its end (_engine.bounded).
    waves = wave_policies(instance)
    policies = budgeted(grid(instance), instance.num_passes)
    policies = policies[:1] + [pol for pol in waves if pol not in policies[:1]] \
        + [pol for pol in policies[1:] if pol not in waves]
    candidates = [lambda pol=pol: _engine.run(instance, caps, pol, top) for pol in policies]
    # The handcrafted orders are in the grid so the greedy never does worse than them.
    for handcrafted in (zb_h1, zb_h2):
        candidates.append(lambda h=handcrafted: _engine.replay(
            instance, caps, _orders(h(instance)), top))
    bound = schedule_bound(instance)
    return best_of(instance, candidates, method, lambda: _needed_cap(instance),
                   enough=bound[1] if bound is not None else -math.inf)


def _needed_cap(instance: Instance) -> str:
    need = [instance.static_memory[d] + max(instance.m_b[s] for s in instance.stages_of(d))
            for d in range(instance.devices)]
    return (f"every device needs room for one activation: memory_cap of at least "
            f"{max(need):g} would fit")


@register("zb-greedy", "contiguous",
          "Zero Bubble auto-scheduler: greedy F/B/W order under the instance's cap",
          kind="heuristic", checks=CAP_CHECK)
def zb_greedy(instance: Instance, memory_cap: Any = _UNSET) -> Schedule:
    return zb_schedule(capped_instance(instance, memory_cap, "zb-greedy"), "zb-greedy")


@register("zb-1p", "contiguous",
          "Zero Bubble auto-scheduler at cap 1p (1F1B's activation memory)", kind="heuristic",
          checks=CAP_CHECK)
def zb_1p(instance: Instance, memory_cap: Any = "1p") -> Schedule:
    return zb_schedule(capped_instance(instance, memory_cap, "zb-1p"), "zb-1p")


@register("zb-2p", "contiguous",
          "Zero Bubble auto-scheduler at cap 2p (twice 1F1B's activation memory)",
          kind="heuristic", checks=CAP_CHECK)
def zb_2p(instance: Instance, memory_cap: Any = "2p") -> Schedule:
    return zb_schedule(capped_instance(instance, memory_cap, "zb-2p"), "zb-2p")
