"""Lower bounds on the span and the makespan of any schedule (no solver needed).

Every bound here holds for every valid schedule of the instance (any order, any placement), so
a solver's optimum and every family's value must lie at or above it. The bounds:

- ideal: a device cannot finish before it has run all its passes (max device load).
- critical_path (makespan only): the longest dependency chain, lags included.
- memory_ramp: on device d, between its first pass and its first B only forwards can run, at most
  as many as fit under the cap, yet that first B waits for a forward to cross the rest of the
  pipeline and the backward to come back. The idle part of that window adds to d's load. On a
  contiguous placement with uniform costs, device 0 gives exactly the issue's formula
  m(T_F+T_B+T_W) + max(0, (p-k)T_F + (p-1)(T_B + 2 comm)), k = min(m, floor(cap / m_b)).
- ramp_and_drain: the same argument at the end. After d's last forward starts, its own B is
  at least the same round trip away, and the device can only fill that wait with B and W passes
  of the activations it holds, which the cap limits. When the cap cannot hold every forward of
  d at once, the two windows are disjoint and both idle parts add up.
- bottleneck: device d's first pass precedes every micro-batch's F on d's first stage f of a
  chain; a later stage k of that chain on device e then runs, after the forward path f -> k,
  every F and B of k and of e's later stages on the chain (they all precede the last B(k, j)
  to end); from that B the backward path leads back to f, and W(f, j) ends d's window. So
  d's span is at least path_F(f -> k) + that busy time + path_B(k -> f) + t_w(f). Tight when
  the micro-batches are few for the pipeline (e.g. m = 3p at cap 2p).
For the makespan every per-device bound also adds the earliest time any pass of d can start.
The bounds describe schedules whose blocks last the sum of their passes (overlap 0): an
overlap discount lets DualPipe's F&B blocks go below them.
"""

from __future__ import annotations

import math
from typing import Iterable

from .dag import critical_path_length
from .errors import ZboptError
from .instance import Instance
from .passes import stage_lag

OBJECTIVES = ("span", "makespan")

# Exact knapsack enumeration is used when it visits at most this many count combinations;
# beyond it the fractional relaxation (still an upper bound on the busy time) is used.
_ENUMERATION_LIMIT = 50_000

Item = tuple[float, float, int]  # (weight, value, how many are available)


def _check_objective(objective: str) -> None:
    if objective not in OBJECTIVES:
        raise ZboptError(f"unknown objective {objective!r}: use 'span' or 'makespan'")


def device_loads(instance: Instance) -> tuple[float, ...]:
    """Total pass time of each device (per stage: its micro-batches times F + B + W)."""
    return tuple(sum(_count(instance, s) * (instance.t_f[s] + instance.t_b[s] + instance.t_w[s])
                     for s in instance.stages_of(d)) for d in range(instance.devices))


def min_feasible_cap(instance: Instance) -> tuple[float, ...]:
    """The smallest cap per device that admits any schedule.

    A micro-batch's forward reaches every stage of device d on its chain before the backward
    of the first of them can run, so d holds all those activations at once; running one
    micro-batch at a time (with W right after B) needs no more. Static memory adds on top.
    """
    need = []
    for d in range(instance.devices):
        per_chain = [sum(instance.m_b[s] for s in stages if instance.device_of(s) == d)
                     for stages, _ in instance.chains]
        need.append(instance.static_memory[d] + max(per_chain))
    return tuple(need)


def _chain_position(instance: Instance, stage: int) -> tuple[tuple[int, ...], int]:
    stages = instance.chain_of_stage(stage)
    return stages, stages.index(stage)


def forward_head(instance: Instance, stage: int) -> float:
    """Earliest start of any F on `stage`: the forward path from its chain's first stage."""
    stages, i = _chain_position(instance, stage)
    total = 0.0
    for a, b in zip(stages[:i], stages[1:i + 1]):
        total += instance.t_f[a] + stage_lag(instance, a, b)
    return total


def round_trip(instance: Instance, from_stage: int, to_stage: int) -> float:
    """Least time from the start of F(from_stage, j) to the start of B(to_stage, j).

    from_stage <= to_stage on one chain: the forward runs from `from_stage` to the chain's end,
    then the backward comes back to just after `to_stage` (lags included).
    """
    stages, i = _chain_position(instance, from_stage)
    k = stages.index(to_stage)
    total = 0.0
    for idx in range(i, len(stages)):
        total += instance.t_f[stages[idx]]
        if idx + 1 < len(stages):
            total += stage_lag(instance, stages[idx], stages[idx + 1])
    for idx in range(len(stages) - 1, k, -1):
        total += instance.t_b[stages[idx]] + stage_lag(instance, stages[idx], stages[idx - 1])
    return total


def knapsack_max(items: Iterable[Item], capacity: float) -> float:
    """Max total value of items (weight, value, count) with total weight <= capacity.

    Exact by enumerating counts when that is small, else the fractional relaxation (an upper
    bound, which is what the lower bounds need).
    """
    items = [(w, v, n) for w, v, n in items if n > 0 and v > 0]
    if capacity < 0:
        return -math.inf
    free = sum(v * n for w, v, n in items if w <= 0)  # weightless items always fit
    items = [x for x in items if x[0] > 0]
    if not items:
        return free
    combos = 1
    for _, _, n in items[:-1]:
        combos *= n + 1
    if combos > _ENUMERATION_LIMIT:
        return free + _fractional(items, capacity)
    return free + _enumerate(items, capacity)


def _fractional(items: list[Item], capacity: float) -> float:
    total = 0.0
    for w, v, n in sorted(items, key=lambda x: x[1] / x[0], reverse=True):
        take = min(n, capacity / w)
        total += take * v
        capacity -= take * w
        if capacity <= 0:
            break
    return total


def _enumerate(items: list[Item], capacity: float) -> float:
    w, v, n = items[0]
    if len(items) == 1:
        return min(n, math.floor(capacity / w + 1e-9)) * v
    best = 0.0
    for count in range(min(n, math.floor(capacity / w + 1e-9)) + 1):
        best = max(best, count * v + _enumerate(items[1:], capacity - count * w))
    return best


def _capacity(instance: Instance, device: int) -> float:
    """Activation memory device d may hold (cap less static memory); inf when uncapped."""
    if instance.cap is None:
        return math.inf
    return instance.cap[device] - instance.static_memory[device]


def _count(instance: Instance, stage: int) -> int:
    return len(instance.microbatches_of(stage))


def ramp_idle(instance: Instance, device: int) -> float:
    """Idle time forced on `device` between its first pass and its first B.

    The first B, say B(s, j), waits for F(f, j), f the first stage of d on s's chain, to cross
    the pipeline and come back: round_trip(f, s). Before it only forwards run, and the
    activations they leave must fit under the cap together.
    """
    stages = instance.stages_of(device)
    wait = min(round_trip(instance, _first_stage_on_device(instance, s), s) for s in stages)
    capacity = _capacity(instance, device)
    forwards = [(instance.m_b[s], instance.t_f[s], _count(instance, s)) for s in stages]
    busy = knapsack_max(forwards, capacity) if math.isfinite(capacity) \
        else sum(v * n for _, v, n in forwards)
    return max(0.0, wait - busy)


def _first_stage_on_device(instance: Instance, stage: int) -> int:
    stages = instance.chain_of_stage(stage)
    d = instance.device_of(stage)
    return next(s for s in stages if instance.device_of(s) == d)


def drain_idle(instance: Instance, device: int) -> float:
    """Idle time forced on `device` between the start of its last F and that pass's own B.

    If the last F is F(s, j), B(s, j) starts round_trip(s, s) later at the earliest. Meanwhile
    the device can only run that F, the B (and then W) of activations already in flight, and
    W passes already pending; with F(s, j) started, all of them fit under the cap together.
    """
    stages = instance.stages_of(device)
    capacity = _capacity(instance, device)
    best = math.inf
    # F(s, j) of an earlier stage of d on the chain precedes F(s', j) of the later one, so the
    # last F of d belongs to d's last stage on some chain
    for s in _last_stages_on_device(instance, device):
        if not math.isfinite(capacity):
            return 0.0
        items: list[Item] = []
        for u in stages:
            n = _count(instance, u) - (1 if u == s else 0)
            # in flight and then run: B and W; or only the W is left
            items.append((instance.m_b[u], instance.t_b[u] + instance.t_w[u], n))
            items.append((instance.m_w[u], instance.t_w[u], n))
        busy = instance.t_f[s] + _paired_knapsack(items, capacity - instance.m_b[s])
        best = min(best, max(0.0, round_trip(instance, s, s) - busy))
    return best


def _last_stages_on_device(instance: Instance, device: int) -> list[int]:
    out = []
    for stages, _ in instance.chains:
        mine = [s for s in stages if instance.device_of(s) == device]
        if mine:
            out.append(mine[-1])
    return out


def _paired_knapsack(items: list[Item], capacity: float) -> float:
    """Knapsack where items come in pairs sharing one count (in flight or pending W, per stage).

    The shared count is relaxed to separate counts, which can only raise the maximum, so the
    result stays an upper bound on the busy time.
    """
    return knapsack_max(items, capacity)


def device_bound(instance: Instance, device: int, with_drain: bool = True) -> float:
    """Least span of `device` in any schedule: its load plus forced idle at ramp and drain."""
    stages = instance.stages_of(device)
    load = sum(_count(instance, s) * (instance.t_f[s] + instance.t_b[s] + instance.t_w[s])
               for s in stages)
    ramp = ramp_idle(instance, device)
    if not with_drain:
        return load + ramp
    drain = drain_idle(instance, device)
    all_forwards = sum(instance.m_b[s] * _count(instance, s) for s in instance.stages_of(device))
    if all_forwards > _capacity(instance, device) + 1e-9:
        # some forward must start after the first B, so the two windows are disjoint
        return load + ramp + drain
    return load + max(ramp, drain)


def bottlenecks(instance: Instance) -> tuple[float, ...]:
    """Per device, the bottleneck bound on its span (see the module doc)."""
    best = [0.0] * instance.devices
    for stages, mbs in instance.chains:
        n = len(stages)
        count = len(mbs)
        # forward[i]: start of F(stages[0]) to start of F(stages[i]); backward[i]: end of
        # B(stages[i]) back to the end of B(stages[0])
        forward, backward = [0.0] * n, [0.0] * n
        for i in range(1, n):
            a, b = stages[i - 1], stages[i]
            forward[i] = forward[i - 1] + instance.t_f[a] + stage_lag(instance, a, b)
            backward[i] = backward[i - 1] + stage_lag(instance, b, a) + instance.t_b[a]
        busy = [0.0] * n  # F and B of stage i and of its device's later stages on the chain
        for i in range(n):
            e = instance.device_of(stages[i])
            busy[i] = sum(count * (instance.t_f[stages[x]] + instance.t_b[stages[x]])
                          for x in range(i, n) if instance.device_of(stages[x]) == e)
        first: dict[int, int] = {}
        for i, s in enumerate(stages):
            first.setdefault(instance.device_of(s), i)
        for d, f in first.items():
            tail = instance.t_w[stages[f]]
            for k in range(f, n):
                value = (forward[k] - forward[f]) + busy[k] + (backward[k] - backward[f]) + tail
                best[d] = max(best[d], value)
    return tuple(best)


def device_head(instance: Instance, device: int) -> float:
    """Earliest time any pass of `device` can start."""
    return min(forward_head(instance, s) for s in instance.stages_of(device))


def ramp_formula(instance: Instance) -> float | None:
    """The issue's closed form for device 0 (contiguous, uniform costs); None where it does not
    apply (other placements, per-stage costs or memory, per-device caps, static memory)."""
    if instance.placement != "contiguous" or instance.cap is None:
        return None
    uniform = all(len(set(getattr(instance, k))) == 1 for k in ("t_f", "t_b", "t_w", "m_b"))
    if not uniform or len(set(instance.cap)) != 1 or any(instance.static_memory):
        return None
    p, m = instance.devices, instance.microbatches
    t_f, t_b, t_w, m_b = instance.t_f[0], instance.t_b[0], instance.t_w[0], instance.m_b[0]
    k = min(m, math.floor(instance.cap[0] / m_b + 1e-9)) if m_b > 0 else m
    return m * (t_f + t_b + t_w) + max(0, (p - k) * t_f + (p - 1) * (t_b + 2 * instance.comm))


def lower_bounds(instance: Instance, objective: str = "span") -> dict[str, float]:
    """Every lower bound on `objective` by name (see the module doc)."""
    _check_objective(objective)
    p = instance.devices
    heads = [device_head(instance, d) if objective == "makespan" else 0.0 for d in range(p)]
    loads = device_loads(instance)
    out = {"ideal": max(h + load for h, load in zip(heads, loads))}
    if objective == "makespan":
        out["critical_path"] = critical_path_length(instance)
    out["memory_ramp"] = max(heads[d] + device_bound(instance, d, with_drain=False)
                             for d in range(p))
    out["ramp_and_drain"] = max(heads[d] + device_bound(instance, d) for d in range(p))
    out["bottleneck"] = max(h + b for h, b in zip(heads, bottlenecks(instance)))
    return out


def best_lower_bound(instance: Instance, objective: str = "span") -> tuple[str, float]:
    """(name, value) of the largest bound."""
    bounds = lower_bounds(instance, objective)
    name = max(bounds, key=bounds.__getitem__)
    return name, bounds[name]
