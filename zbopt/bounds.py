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
  Chain drain (part of ramp_and_drain): the same end argument from the last F of EACH stage of
  d (not only d's last stage, which on interleaved and V placements is a short trip), along the
  whole path of that micro-batch back to its last pass on d, with the other micro-batches'
  remaining work bounded by an LP over the states they can be in under the cap.
- bottleneck: device d's first pass precedes every micro-batch's F on d's first stage f of a
  chain; a later stage k of that chain on device e then runs, after the forward path f -> k,
  every F and B of k and of e's later stages on the chain (they all precede the last B(k, j)
  to end); from that B the backward path leads back to f, and W(f, j) ends d's window. So
  d's span is at least path_F(f -> k) + that busy time + path_B(k -> f) + t_w(f). Tight when
  the micro-batches are few for the pipeline (e.g. m = 3p at cap 2p).
- first_b_wave (contiguous): the ramps of all devices coupled through the first backward
  wave: a device that runs few forwards before its first B idles, one that runs many delays
  the first B of the device before it (see first_b_wave). It is what Zero Bubble schedules
  at 2p lose when t_b + 2 comm > t_f, and meets the optima proven on the paper's settings.
- memory_area (with a cap): a micro-batch holds m_b of stage s on its device from the start of
  F(s) to the end of B(s), at least the round trip from F(s) to B(s) plus t_b(s), and m_w of
  it until W(s) ends, t_w(s) later still. That memory times time, summed over d's stages and
  micro-batches, fits under the room the cap leaves above d's static memory for the whole of
  d's window, which is therefore at least the sum over that room. On a device with one stage
  the round-trip count of zbopt.plan.bound is mostly higher; with two stages (V, interleaved,
  dualpipe) their memory adds up, which no one-stage argument sees.
- w_deferral (single-chain placements): device d's last B on its first stage must travel back
  to the chain's first device, which started before d: unless d runs W work after its last
  B as long as those two paths, that device's window is the longer one. W work kept for
  after the last B is work d cannot run in its own drain, and W passes pending at its last
  forward hold memory in-flight activations would need: the two trade off (see
  w_deferral_idle). At 1p on V placements it meets the best schedules known.
For the makespan every per-device bound also adds the earliest time any pass of d can start.
The bounds describe schedules whose blocks last the sum of their passes (overlap 0): an
overlap discount lets DualPipe's F&B blocks go below them.
"""

from __future__ import annotations

import math
import weakref
from fractions import Fraction
from functools import lru_cache
from typing import Iterable, Optional

from .dag import critical_path_length
from .errors import ZboptError
from .instance import Instance, cap_limit, require_instance
from .passes import stage_lag

OBJECTIVES = ("span", "makespan")

# Exact knapsack enumeration is used when it visits at most this many count combinations;
# beyond it the fractional relaxation (still an upper bound on the busy time) is used.
_ENUMERATION_LIMIT = 500

Item = tuple[float, float, int]  # (weight, value, how many are available)


def check_objective(objective: str) -> None:
    """ZboptError unless `objective` is one of OBJECTIVES (every public entry point's check)."""
    if objective not in OBJECTIVES:
        raise ZboptError(f"unknown objective {objective!r}: use 'span' or 'makespan'")


# at most this many (device, stage) enumerations of _closed_states are kept per instance
CLOSED_KEPT = 256


class _Shape:
    """What the per-device bounds read of an instance's pipelines, made once per instance
    (_shape): each lookup is O(1) or O(a device's stages). Instance.chain_of_stage,
    microbatches_of and chains rebuild the chains (O(stages)) on every call, and an lru_cache
    keyed by the instance hashes every field (O(stages)) on every call: asked once per device,
    either made the bounds quadratic in the devices."""

    def __init__(self, instance: Instance):
        chains = instance.chains
        stages_count = instance.num_stages
        self.num_chains = len(chains)
        self.chain = [0] * stages_count  # index of each stage's chain
        self.position = [0] * stages_count  # each stage's index on its chain
        self.rank = [0] * stages_count  # its index among its device's stages on its chain
        self.count = [0] * stages_count  # micro-batches through each stage
        self.head = [0.0] * stages_count  # forward_head of each stage
        self.stages: list[tuple[int, ...]] = []  # per chain, its stages in forward order
        # per stage: (its chain, forward prefix, backward suffix), as _chain_sums documents
        self.sums: dict[int, tuple[tuple[int, ...], list[float], list[float]]] = {}
        # (chain, device): the device's stages on the chain, in forward order
        self.on_chain: dict[tuple[int, int], tuple[int, ...]] = {}
        by_device: list[list[int]] = [[] for _ in range(instance.devices)]
        for s in range(stages_count):
            by_device[instance.device_of(s)].append(s)
        self.device_stages = tuple(tuple(x) for x in by_device)  # instance.stages_of(d)
        for c, (stages, mbs) in enumerate(chains):
            self.stages.append(stages)
            on: dict[int, list[int]] = {}
            for i, u in enumerate(stages):
                self.chain[u], self.position[u], self.count[u] = c, i, len(mbs)
                on.setdefault(instance.device_of(u), []).append(u)
            for d, mine in on.items():
                self.on_chain[(c, d)] = tuple(mine)
                for r, u in enumerate(mine):
                    self.rank[u] = r
            n = len(stages)
            forward, backward = [0.0] * n, [0.0] * n
            for i in range(1, n):
                t_f, lag = instance.t_f[stages[i - 1]], stage_lag(instance, stages[i - 1], stages[i])
                forward[i] = forward[i - 1] + t_f + lag
                # forward_head's sum, added in its own order (floats: (a + b) + c != a + (b + c))
                self.head[stages[i]] = self.head[stages[i - 1]] + (t_f + lag)
            backward[n - 1] = instance.t_b[stages[n - 1]]
            for i in range(n - 2, -1, -1):
                backward[i] = backward[i + 1] + stage_lag(instance, stages[i + 1], stages[i]) \
                    + instance.t_b[stages[i]]
            for u in stages:
                self.sums[u] = (stages, forward, backward)
        self.ramp: dict[int, float] = {}  # ramp_idle per device
        self.sums_exact: Optional[bool] = None  # _sums_exact, once asked
        self.closed: dict[tuple[int, int], object] = {}  # _closed_states, CLOSED_KEPT at most
        self.forward_memory: dict[tuple[int, int], list] = {}  # _forward_memory's prefix sums

    def mine_on_chain(self, device: int, stage: int) -> tuple[int, ...]:
        """`device`'s stages on the chain of `stage`, in forward order."""
        return self.on_chain.get((self.chain[stage], device), ())


_SHAPES: dict[int, tuple[weakref.ref, _Shape]] = {}


def _shape(instance: Instance) -> _Shape:
    """The instance's _Shape, made on first use and kept while the instance lives (by its id,
    which costs nothing to look up, unlike its hash)."""
    key = id(instance)
    kept = _SHAPES.get(key)
    if kept is not None and kept[0]() is instance:
        return kept[1]
    shape = _Shape(instance)
    _SHAPES[key] = (weakref.ref(instance), shape)
    weakref.finalize(instance, _SHAPES.pop, key, None)
    return shape


def device_loads(instance: Instance) -> tuple[float, ...]:
    """Total pass time of each device (per stage: its micro-batches times F + B + W)."""
    count = _shape(instance).count
    return tuple(sum(count[s] * (instance.t_f[s] + instance.t_b[s] + instance.t_w[s])
                     for s in instance.stages_of(d)) for d in range(instance.devices))


def min_feasible_cap(instance: Instance) -> tuple[float, ...]:
    """The smallest cap per device that admits any schedule.

    A micro-batch's forward reaches every stage of device d on its chain before the backward
    of the first of them can run, so d holds all those activations at once; running one
    micro-batch at a time (with W right after B) needs no more. Static memory adds on top.
    """
    require_instance(instance, "min_feasible_cap()")
    shape = _shape(instance)
    need = []
    for d in range(instance.devices):
        per_chain = [sum(instance.m_b[s] for s in shape.on_chain.get((c, d), ()))
                     for c in range(shape.num_chains)]
        need.append(instance.static_memory[d] + max(per_chain))
    return tuple(need)


def forward_head(instance: Instance, stage: int) -> float:
    """Earliest start of any F on `stage`: the forward path from its chain's first stage."""
    return _shape(instance).head[stage]


def _chain_sums(instance: Instance) -> dict[int, tuple[tuple[int, ...], list[float], list[float]]]:
    """Per stage: (its chain, forward prefix, backward suffix). forward[i]: start of F on the
    chain's first stage to the start of F on its i-th; backward[i]: start of B on the last stage
    to the end of B on the i-th (lags included)."""
    return _shape(instance).sums


def held_area(runs, m_b, trip, m_w, t_w):
    """The memory x time `runs` micro-batches hold on a stage at the least: m_b over its round
    trip `trip` (F's start to B's end), m_w of it t_w longer (until W ends). The one formula of
    the memory_area bound (zbopt.plan's segment and paired programmes use it on arrays too)."""
    return runs * (m_b * trip + m_w * t_w)


def memory_areas(instance: Instance) -> tuple[float, ...]:
    """Per device, the memory_area bound of the module doc (0 uncapped, and where the cap leaves
    no room above the static memory: min_feasible_cap reports that)."""
    if instance.cap is None:
        return (0.0,) * instance.devices
    out = []
    for d in range(instance.devices):
        area = sum(held_area(_count(instance, s), instance.m_b[s],
                             round_trip(instance, s, s) + instance.t_b[s], instance.m_w[s],
                             instance.t_w[s])
                   for s in instance.stages_of(d))
        room = cap_limit(instance.cap[d]) - instance.static_memory[d]
        out.append(area / room if room > 0 else 0.0)
    return tuple(out)


def round_trip(instance: Instance, from_stage: int, to_stage: int) -> float:
    """Least time from the start of F(from_stage, j) to the start of B(to_stage, j).

    from_stage <= to_stage on one chain: the forward runs from `from_stage` to the chain's end,
    then the backward comes back to just after `to_stage` (lags included).
    """
    shape = _shape(instance)
    stages, forward, backward = shape.sums[from_stage]
    i, k, n = shape.position[from_stage], shape.position[to_stage], len(stages)
    total = forward[n - 1] - forward[i] + instance.t_f[stages[n - 1]]
    if k < n - 1:
        total += backward[k + 1] + stage_lag(instance, stages[k + 1], stages[k])
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
        return held_count(capacity, w, n) * v
    best = 0.0
    for count in range(held_count(capacity, w, n) + 1):
        best = max(best, count * v + _enumerate(items[1:], capacity - count * w))
    return best


def activation_capacity(instance: Instance, device: int) -> float:
    """Activation memory device d may hold (cap less static memory); inf when uncapped."""
    if instance.cap is None:
        return math.inf
    return instance.cap[device] - instance.static_memory[device]


def held_count(room: float, need: float, limit: int) -> int:
    """How many items of size `need` fit in `room` (at most `limit`; `limit` when need is 0,
    or so small against the room that the quotient overflows)."""
    if need <= 0 or not math.isfinite(room):
        return limit
    quotient = room / need
    return limit if quotient >= limit else max(0, math.floor(quotient + 1e-9))


def _count(instance: Instance, stage: int) -> int:
    return _shape(instance).count[stage]


def ramp_idle(instance: Instance, device: int) -> float:
    """Idle time forced on `device` between its first pass and its first B.

    The first B, say B(s, j), waits for F(f, j), f the first stage of d on s's chain, to cross
    the pipeline and come back: round_trip(f, s). Before it only forwards run, and the
    activations they leave must fit under the cap together. Kept per device (device_bound and
    w_deferral_idle both need it).
    """
    kept = _shape(instance).ramp
    if device not in kept:
        stages = _device_stages(instance)[device]
        wait = min(round_trip(instance, _first_stage_on_device(instance, s), s) for s in stages)
        capacity = activation_capacity(instance, device)
        forwards = [(instance.m_b[s], instance.t_f[s], _count(instance, s)) for s in stages]
        busy = knapsack_max(forwards, capacity) if math.isfinite(capacity) \
            else sum(v * n for _, v, n in forwards)
        kept[device] = max(0.0, wait - busy)
    return kept[device]


def _first_stage_on_device(instance: Instance, stage: int) -> int:
    return _shape(instance).mine_on_chain(instance.device_of(stage), stage)[0]


def drain_idle(instance: Instance, device: int) -> float:
    """Idle time forced on `device` between the start of its last F and that pass's own B.

    If the last F is F(s, j), B(s, j) starts round_trip(s, s) later at the earliest. Meanwhile
    the device can only run that F, the B (and then W) of activations already in flight, and
    W passes already pending; with F(s, j) started, all of them fit under the cap together.
    """
    stages = _device_stages(instance)[device]
    capacity = activation_capacity(instance, device)
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
    shape = _shape(instance)
    out = []
    for c in range(shape.num_chains):
        mine = shape.on_chain.get((c, device))
        if mine:
            out.append(mine[-1])
    return out


def _paired_knapsack(items: list[Item], capacity: float) -> float:
    """Knapsack where items come in pairs sharing one count (in flight or pending W, per stage).

    The shared count is relaxed to separate counts, which can only raise the maximum, so the
    result stays an upper bound on the busy time.
    """
    return knapsack_max(items, capacity)


def _device_stages(instance: Instance) -> tuple[tuple[int, ...], ...]:
    """instance.stages_of(d) for every device d, computed once."""
    return _shape(instance).device_stages


def _device_passes(instance: Instance, device: int, stage: int) -> list[tuple[int, str]]:
    """(stage, kind) of one micro-batch's passes on `device`, along the chain of `stage`."""
    return [(u, k) for u in _shape(instance).mine_on_chain(device, stage) for k in "FBW"]


def _is_before(position, a: tuple[int, str], b: tuple[int, str]) -> bool:
    """Whether pass a of a micro-batch is an ancestor of pass b of the same micro-batch
    (`position`: each stage's index on the chain, for the stages of that chain)."""
    (u, x), (v, y) = a, b
    if x == "F":
        return (y == "F" and position[u] < position[v]) or y in "BW"  # F precedes every B
    if x == "B":
        return (y == "B" and position[u] > position[v]) or (y == "W" and position[u] >= position[v])
    return False  # nothing depends on a W


def _held(instance: Instance, done: frozenset) -> float:
    """Activation memory one micro-batch holds on a device once the passes `done` ran."""
    held = 0.0
    for u, k in done:
        if k == "F" and (u, "B") not in done:
            held += instance.m_b[u]
        elif k == "B" and (u, "W") not in done:
            held += instance.m_w[u]
    return held


# most passes of a micro-batch on a device, beyond F(stage) and its ancestors, whose closed sets
# _closed_states enumerates (at 8 chunks a device holds 24 passes a micro-batch, and the 2^23
# subsets the enumeration once tested ran for minutes; past this number it claims nothing)
MAX_OPEN_PASSES = 14


def _closed_states(instance: Instance, device: int, stage: int):
    """(one micro-batch's passes on `device`, the ancestors of its F(stage) among them, every
    set of them that can have run once F(stage) has: closed under dependencies); None where
    more than MAX_OPEN_PASSES passes are left open (many chunks): the bounds built on the
    states then claim no idle, which is weaker and still a bound. The last CLOSED_KEPT are
    kept (chain_drain_idle and w_deferral_idle both need them)."""
    shape = _shape(instance)
    if _open_passes(shape, device, stage) > MAX_OPEN_PASSES:
        return None  # known without listing the passes, let alone their pairs
    kept = shape.closed
    key = (device, stage)
    if key not in kept:
        if len(kept) >= CLOSED_KEPT:
            kept.pop(next(iter(kept)))
        kept[key] = _enumerate_closed(instance, device, stage)
    return kept[key]


def _open_passes(shape: _Shape, device: int, stage: int) -> int:
    """How many of one micro-batch's passes on `device` are neither F(stage) nor among its
    ancestors (the `rest` of _enumerate_closed), in O(1): the device's stages on the chain
    give an F, a B and a W each, and F(stage)'s ancestors among them are exactly the Fs of
    the device's earlier stages on the chain (_is_before: no B or W precedes an F)."""
    return 3 * len(shape.mine_on_chain(device, stage)) - shape.rank[stage] - 1


def _enumerate_closed(instance: Instance, device: int, stage: int):
    """_closed_states, enumerated: the open passes are taken in an order where each comes after
    its ancestors (_is_before is transitive, so an ancestor has fewer ancestors), and each
    closed set so far is extended by the next pass only where that pass's ancestors are all in
    it. This lists exactly the closed sets, in time about their number times the passes,
    instead of testing every one of the 2^n subsets against every pair of passes."""
    mine = _device_passes(instance, device, stage)
    position = _shape(instance).position
    first = (stage, "F")
    ancestors = frozenset(a for a in mine if _is_before(position, a, first))
    base = ancestors | {first}
    rest = [q for q in mine if q not in base]
    if len(rest) > MAX_OPEN_PASSES:
        return None
    needs = {q: [a for a in rest if _is_before(position, a, q)] for q in rest}
    states = [base]
    for q in sorted(rest, key=lambda q: len(needs[q])):
        states += [done | {q} for done in states if all(a in done for a in needs[q])]
    return tuple(mine), ancestors, tuple(states)


def _remaining_options(instance: Instance, device: int, stage: int) \
        -> Optional[list[tuple[float, float]]]:
    """(memory held, work left) of a micro-batch on `device` once its F(stage) has run, for
    every set of its passes that can have run (closed under dependencies); dominated states
    (more memory, no more work) are dropped. None where _closed_states gives none."""
    closed = _closed_states(instance, device, stage)
    if closed is None:
        return None
    mine, _, states = closed
    cost = {q: instance.cost(q[0], q[1]) for q in mine}
    options = [(_held(instance, done), sum(cost[q] for q in mine if q not in done))
               for done in states]
    options.sort(key=lambda x: (x[0], -x[1]))
    kept: list[tuple[float, float]] = []
    for held, work in options:
        if not kept or work > kept[-1][1]:
            kept.append((held, work))
    return kept


def _lp_max_work(options: list[tuple[float, float]], room: float, count: int) -> float:
    """Max of sum x_k work_k with sum x_k held_k <= room, sum x_k <= count, x >= 0: an upper
    bound on the work `count` micro-batches in those states leave (the LP relaxation of
    picking one state each). Its optimum mixes at most two states."""
    if count <= 0 or room < 0:
        return 0.0 if count <= 0 else -math.inf
    best = 0.0
    for held, work in options:
        x = count if held <= 0 else min(count, room / held)
        best = max(best, x * work)
    for i, (h1, w1) in enumerate(options):
        for h2, w2 in options[i + 1:]:
            if h1 == h2:
                continue
            # both constraints tight: x1 + x2 = count, h1 x1 + h2 x2 = room
            x2 = (room - h1 * count) / (h2 - h1)
            x1 = count - x2
            if x1 >= 0 and x2 >= 0:
                best = max(best, x1 * w1 + x2 * w2)
    return best


def _chain_length(instance: Instance, device: int, stage: int) -> float:
    """Longest dependency path from the start of F(stage, j) to the end of the last pass of
    micro-batch j on `device` (lags included): forward to the chain's end, backward to one of
    the device's stages, then its W."""
    shape = _shape(instance)
    stages, forward, backward = shape.sums[stage]
    n = len(stages)
    ahead = forward[n - 1] - forward[shape.position[stage]] + instance.t_f[stages[n - 1]]
    return ahead + max(backward[shape.position[u]] + instance.t_w[u]
                       for u in shape.mine_on_chain(device, stage))


def chain_drain_idle(instance: Instance, device: int, stage: int) -> float:
    """Idle time forced on `device` after the start of the last F on `stage` (any stage of it).

    Let X be the item holding the last F(stage, ·), started at t, and z a micro-batch of it.
    The device's window ends no earlier than t plus the longest path from F(stage, z) to z's
    last pass on the device. After t the device runs only z's passes that follow F(stage, z)
    and what the other micro-batches have left; each of them is in a state closed under
    dependencies with F(stage, ·) run (or in X itself), so it holds that state's memory at t,
    and with z's memory it all fits under the cap. The LP over those states bounds the work
    they leave from above, so the rest of the path is idle.
    """
    capacity = activation_capacity(instance, device)
    if not math.isfinite(capacity):
        return 0.0
    options = _remaining_options(instance, device, stage)
    if options is None:  # too many passes a micro-batch on this device to enumerate: no claim
        return 0.0
    shape = _shape(instance)
    position, chain = shape.position, shape.chain[stage]
    mine = _device_passes(instance, device, stage)
    own = sum(instance.cost(u, k) for u, k in mine
              if not (k == "F" and position[u] < position[stage]))
    held_z = sum(instance.m_b[u] for u, k in mine if k == "F" and position[u] <= position[stage])
    others = _count(instance, stage) - 1
    # micro-batches of another chain (dualpipe) may not have started: all their work is left
    free = sum(_count(instance, s) * (instance.t_f[s] + instance.t_b[s] + instance.t_w[s])
               for s in _device_stages(instance)[device] if shape.chain[s] != chain)
    work = _lp_max_work(options, capacity - held_z, others)
    return max(0.0, _chain_length(instance, device, stage) - own - work - free)


def _forwards_exceed_cap(instance: Instance, device: int, stage: int) -> bool:
    """Whether every F up to `stage` on the device cannot be held at once: then some F(stage, ·)
    starts after the device's first B, and the ramp and drain windows are disjoint."""
    return _forward_memory(instance, device, stage) > activation_capacity(instance, device) + 1e-9


def _forward_memory(instance: Instance, device: int, stage: int) -> float:
    """Memory of every F on the device's stages of `stage`'s chain up to `stage`, all
    micro-batches: a prefix sum over those stages in forward order (added in that order, as a
    sum over them would), made once per (chain, device) instead of once per stage."""
    shape = _shape(instance)
    key = (shape.chain[stage], device)
    prefix = shape.forward_memory.get(key)
    if prefix is None:
        prefix, total = [], 0
        for u in shape.mine_on_chain(device, stage):
            total = total + shape.count[u] * instance.m_b[u]
            prefix.append(total)
        shape.forward_memory[key] = prefix
    return prefix[shape.rank[stage]]


def device_bound(instance: Instance, device: int, with_drain: bool = True,
                 chain_drain: bool = True) -> float:
    """Least span of `device` in any schedule: its load plus forced idle at ramp and drain."""
    stages = _device_stages(instance)[device]
    load = sum(_count(instance, s) * (instance.t_f[s] + instance.t_b[s] + instance.t_w[s])
               for s in stages)
    ramp = ramp_idle(instance, device)
    if not with_drain:
        return load + ramp
    drain = drain_idle(instance, device)
    all_forwards = sum(instance.m_b[s] * _count(instance, s) for s in _device_stages(instance)[device])
    if all_forwards > activation_capacity(instance, device) + 1e-9:
        # some forward must start after the first B, so the two windows are disjoint
        best = load + ramp + drain
    else:
        best = load + max(ramp, drain)
    for s in _device_stages(instance)[device] if chain_drain else ():
        idle = chain_drain_idle(instance, device, s)
        disjoint = _forwards_exceed_cap(instance, device, s)
        best = max(best, load + (ramp + idle if disjoint else max(ramp, idle)))
    return best


def _deferral_options(instance: Instance, mine, done) -> set[tuple[float, float, float]]:
    """(memory held, work run before E, W work run after E) of a micro-batch in state `done`,
    for every set of its pending W passes that may run after E (see w_deferral_idle)."""
    rest = [q for q in mine if q not in done]
    work = sum(instance.cost(u, k) for u, k in rest)
    held = _held(instance, frozenset(done))
    pending = [instance.cost(u, k) for u, k in rest if k == "W"]
    out = set()
    for mask in range(1 << len(pending)):
        after = sum(c for i, c in enumerate(pending) if mask >> i & 1)
        out.add((held, work - after, after))
    return out


def _undominated(options) -> list[tuple[float, float, float]]:
    """Options no other beats on all of: less memory, more work before E, more after."""
    options = sorted(set(options), key=lambda o: (o[0], -o[1], -o[2]))
    return [o for i, o in enumerate(options)
            if not any(h <= o[0] and u >= o[1] and a >= o[2] for h, u, a in options[:i])]


def _polygon(options, room: float, count: int, num: type = Fraction) -> list[tuple]:
    """Convex hull of every (work before E, W work after E) that `count` micro-batches with
    states mixed fractionally (the LP relaxation of choosing one option each) can reach with
    held memory at most `room`: the images of the vertices of {x >= 0, sum x <= count,
    sum x_k held_k <= room}, which have at most two nonzero x_k. In the number type `num`:
    Fraction (the floats given, converted exactly) rounds nowhere in the divisions or the
    hull; float is 5-6 times faster, for data whose float sums round anyway."""
    options = [tuple(num(x) for x in o) for o in options]
    room = num(room)
    points = {(num(0), num(0))}
    if count > 0 and room >= 0:
        for h, u, a in options:
            x = count if h <= 0 else min(count, room / h)
            points.add((x * u, x * a))
        for i, (h1, u1, a1) in enumerate(options):
            for h2, u2, a2 in options[i + 1:]:
                if h1 != h2:  # both constraints tight: x1 + x2 = count, h1 x1 + h2 x2 = room
                    x2 = (room - h1 * count) / (h2 - h1)
                    x1 = count - x2
                    if x1 >= 0 and x2 >= 0:
                        points.add((x1 * u1 + x2 * u2, x1 * a1 + x2 * a2))
    pts = sorted(points)
    if len(pts) <= 2:
        return pts

    def turn(o, a, b):
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])
    lower: list = []
    upper: list = []
    for point in pts:
        while len(lower) >= 2 and turn(lower[-2], lower[-1], point) <= 0:
            lower.pop()
        lower.append(point)
    for point in reversed(pts):
        while len(upper) >= 2 and turn(upper[-2], upper[-1], point) <= 0:
            upper.pop()
        upper.append(point)
    return lower[:-1] + upper[:-1]


def _least_idle(polygon, shift: tuple[float, float], floor: float, path: float,
                trip: float, num: type = Fraction):
    """Least of max(floor, path - U) + max(0, trip - A) over (U, A) in the shifted polygon.

    The function is convex and linear between the lines U = path - floor and A = trip, so its
    least value lies at a vertex of the polygon or where an edge crosses one of those lines.
    In the polygon's number type `num` (_polygon): exact with Fraction."""
    du, da = num(shift[0]), num(shift[1])
    floor, path, trip = num(floor), num(path), num(trip)

    def value(u, a):
        return max(floor, path - u - du) + max(num(0), trip - a - da)
    best = min(value(u, a) for u, a in polygon)
    lines = ((0, path - floor - du), (1, trip - da))
    for i, (u1, a1) in enumerate(polygon):
        u2, a2 = polygon[(i + 1) % len(polygon)]
        for axis, at in lines:
            c1, c2 = (u1, u2) if axis == 0 else (a1, a2)
            if (c1 - at) * (c2 - at) < 0:
                s = (at - c1) / (c2 - c1)
                best = min(best, value(u1 + s * (u2 - u1), a1 + s * (a2 - a1)))
    return best


def w_deferral_idle(instance: Instance, device: int, stage: int) -> float:
    """Idle beyond its load that the span of device d or of the chain's first device must
    hold, from the last F on `stage` of d (single-chain placements, capped; else 0).

    Let f be d's first stage on the chain, E the end of the item holding the last B(f, .) to
    end, say B(f, z), and A the W work d runs after E. Every F and B of d precedes some
    B(f, .) of its micro-batch, so only W passes run on d after E: d's window is at least
    (E - a_d) + A. Device 0, holding the chain's first stage, started at least head =
    path F(0) -> F(f) before d's first pass, and its W(0, z) ends at least tail = path from
    the end of B(f, z) to the end of W(0, z) after E: its window is at least head + (E - a_d)
    + tail. So the span is at least (E - a_d) + max(A, head + tail): d must run W work of
    head + tail after E or the first device's window is longer.

    Let t be the start of the item X holding the last F(stage, .), say of micro-batch x.
    E - t is at least path = the path F(stage, x) -> B(f, x). Every other micro-batch is in
    a state closed under dependencies with F(stage) run, holding its memory at t, and x has
    run exactly the ancestors of F(stage, x); with x's memory all of it fits under the cap (a
    micro-batch whose F(stage) shares the block X counts as having run it: X's other passes
    delay x's path by as much as the work they add).
    From its state a micro-batch splits the work it has left into U, run in [t, E], and W
    passes run after E (part of A). The busy time before t plus U plus A is d's load, and the
    ramp idle (ramp_idle) lies before d's first B, before t when the forwards up to `stage`
    exceed the cap (then windows [a_d, first B] and [t, E] are disjoint). So the span is at
    least load + ramp + max(0, path - U) + max(0, head + tail - A), or, when the windows may
    overlap, load + max(ramp, path - U) + max(0, head + tail - A). The least of this over
    the fractional mix of states (an LP relaxation, solved exactly on the 2-d polygon of
    reachable (U, A)) and over x's own choice of W passes after E is returned, less the load.

    At 1p on V placements the turn device (stages p-1 and p) keeps head + tail of W work for
    the end only by leaving too little work in flight to fill its own drain: the terms trade off.
    """
    shape = _shape(instance)
    if shape.num_chains != 1:
        return 0.0
    capacity = activation_capacity(instance, device)
    if not math.isfinite(capacity):
        return 0.0
    stages, forward, backward = shape.sums[stage]
    n = len(stages)
    k = shape.position[shape.mine_on_chain(device, stage)[0]]
    trip = forward[k] + backward[0] - backward[k] + instance.t_w[stages[0]]
    path = forward[n - 1] - forward[shape.position[stage]] + instance.t_f[stages[n - 1]] \
        + backward[k]
    closed = _closed_states(instance, device, stage)
    if closed is None:  # too many passes a micro-batch on this device to enumerate: no claim
        return 0.0
    mine, ancestors, states = closed
    options = set()
    for done in states:
        options |= _deferral_options(instance, mine, done)
    x_held = _held(instance, ancestors | {(stage, "F")})
    # exact rationals where the data add up exactly in floats (a bound of 14.5 shows as 14.5);
    # elsewhere the inputs are rounded float sums (and so are evaluate()'s spans) and floats,
    # with room for their rounding, are as good and faster (the plan's guide asks this bound
    # of every split it weighs)
    exact = _sums_exact(instance)
    num = Fraction if exact else float
    polygon = _polygon(_undominated(options), capacity - x_held, _count(instance, stage) - 1,
                       num)
    ramp = ramp_idle(instance, device)
    disjoint = _forwards_exceed_cap(instance, device, stage)
    floor = 0.0 if disjoint else ramp
    least = min(_least_idle(polygon, (u, a), floor, path, trip, num)
                for _, u, a in _deferral_options(instance, mine, ancestors))
    if exact:
        least = _float_below(least)
    else:
        least -= 1e-9 * max(1.0, path + trip)
    return max(0.0, (ramp if disjoint else 0.0) + least)


# Data on a grid of 1/_GRID (integers, and their halves and quarters when a device's stage
# is split into chunks) add up exactly in floats while the totals stay below 2^53 / _GRID.
_GRID = 1024


def _sums_exact(instance: Instance) -> bool:
    """Whether every sum of the instance's times and memories is exact in floats (so are the
    paths, loads and held memory the bounds add up, and evaluate()'s spans); worked out once
    per instance (asked per device)."""
    shape = _shape(instance)
    if shape.sums_exact is None:
        shape.sums_exact = _work_out_sums_exact(instance)
    return shape.sums_exact


def _work_out_sums_exact(instance: Instance) -> bool:
    cap = instance.cap or ()
    values = (*instance.t_f, *instance.t_b, *instance.t_w, *instance.m_b, *instance.m_w,
              *instance.static_memory, *cap, instance.comm)
    if not all(float(x * _GRID).is_integer() for x in values):
        return False
    held = sum(_count(instance, s) * instance.m_b[s] for s in range(instance.num_stages))
    total = sum(device_loads(instance)) + instance.comm * instance.num_passes + held \
        + sum(instance.static_memory) + sum(cap)
    return total * _GRID < 2 ** 53


def _float_below(value: Fraction) -> float:
    """The largest float at or below an exact value: a bound never claims more than it shows
    (float() rounds to the nearest, which may be above)."""
    out = float(value)
    return math.nextafter(out, -math.inf) if Fraction(out) > value else out


def w_deferral(instance: Instance) -> float:
    """The span bound of w_deferral_idle: the largest, over devices and their stages, of the
    device's load plus that idle."""
    loads = device_loads(instance)
    best = max(loads)
    for d in range(instance.devices):
        for s in _device_stages(instance)[d]:
            best = max(best, loads[d] + w_deferral_idle(instance, d, s))
    return best


def bottlenecks(instance: Instance) -> tuple[float, ...]:
    """Per device, the bottleneck bound on its span (see the module doc). For device d with
    first stage f on a chain the bound is the largest over later stages k of (forward[k] +
    busy[k] + backward[k]) - (forward[f] + backward[f]) + t_w(f): the k of the largest first
    term over k >= f (a suffix maximum) gives it, in time linear in the stages."""
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
        on: dict[int, list[int]] = {}  # each device's positions on the chain, in order
        for i, s in enumerate(stages):
            on.setdefault(instance.device_of(s), []).append(i)
        busy = [0.0] * n  # F and B of stage i and of its device's later stages on the chain
        for mine in on.values():
            for j, i in enumerate(mine):
                busy[i] = sum(count * (instance.t_f[stages[x]] + instance.t_b[stages[x]])
                              for x in mine[j:])
        top = [0] * n  # top[f]: the k >= f of the largest forward[k] + busy[k] + backward[k]
        for k in range(n - 1, -1, -1):
            later = top[k + 1] if k + 1 < n else k
            top[k] = k if forward[k] + busy[k] + backward[k] >= \
                forward[later] + busy[later] + backward[later] else later
        for d, mine in on.items():
            f = mine[0]
            k = top[f]
            tail = instance.t_w[stages[f]]
            value = (forward[k] - forward[f]) + busy[k] + (backward[k] - backward[f]) + tail
            best[d] = max(best[d], value)
    return tuple(best)


def _wave_setting(instance: Instance, j: int, downstream: tuple[float, int] | None,
                  room: float, trip: float, limit: int) -> tuple[float, int] | None:
    """(u, n) of device j in the first-B wave: the fewest forwards n before its first B that
    keep its ramp idle within `room`, and the least ramp window u they allow; None if none.
    `trip` is round_trip(j, j), `limit` the forwards its cap holds."""
    f = instance.t_f[j]
    least = trip
    if downstream is not None:
        u_next, n_next = downstream
        c, b_next = instance.comm, instance.t_b[j + 1]
        least = max(least, f + c + u_next + b_next + c,
                    n_next * f + c + instance.t_f[j + 1] + b_next + c)
    if room < 0:
        return None
    if f <= 0:
        return (least, 1) if least <= room + 1e-9 else None
    if math.isinf(room):
        n = 1
    else:
        quotient = (least - room) / f  # inf when f is tiny against the gap: n past any limit
        if quotient > limit:
            return None
        n = max(1, math.ceil(quotient - 1e-9))
    if n > limit:
        return None
    return max(least, n * f), n


def _forward_limit(instance: Instance, device: int) -> int:
    """How many forwards of a one-stage device fit under its cap before any memory is freed."""
    capacity, m_b, m = activation_capacity(instance, device), instance.m_b[device], instance.microbatches
    return held_count(capacity, m_b, m)


def _wave_forwards(instance: Instance, value: float, loads, trips, limits) -> tuple[int, ...] | None:
    """Per device, the fewest forwards before its first B with which the first-B wave admits
    every device's load plus ramp idle within `value` (None: the wave refuses `value`)."""
    counts = [0] * instance.devices
    downstream = None
    for j in range(instance.devices - 1, -1, -1):
        downstream = _wave_setting(instance, j, downstream, value - loads[j], trips[j], limits[j])
        if downstream is None:
            return None
        counts[j] = downstream[1]
    return tuple(counts)


def _wave_fits(instance: Instance, value: float, loads, trips, limits) -> bool:
    """Whether the first-B wave admits every device's load plus ramp idle within `value`."""
    return _wave_forwards(instance, value, loads, trips, limits) is not None


def wave_forwards(instance: Instance, value: float) -> tuple[int, ...] | None:
    """Contiguous placements: the forwards each device runs before its first B in the first-B
    wave's relaxation at span `value` (see first_b_wave), or None where it refuses `value`.
    Heuristics try these counts as in-flight limits: a ramp shaped like the relaxation's."""
    if instance.placement != "contiguous":
        return None
    p = instance.devices
    trips = [round_trip(instance, j, j) for j in range(p)]
    limits = [_forward_limit(instance, j) for j in range(p)]
    return _wave_forwards(instance, value + 1e-9 * max(1.0, abs(value)), device_loads(instance),
                          trips, limits)


def first_b_wave(instance: Instance) -> float:
    """Contiguous placements: the ramps of all devices, coupled through the first backward wave.

    Let device j start at x_j, run n_j forwards, then its first B at y_j (its idle there is at
    least y_j - x_j - n_j t_f). Then y_j >= x_j + round_trip(j, j) and n_j fits under the cap;
    device j+1 starts at x_{j+1} >= x_j + t_f + comm; its n_{j+1} forwards wait for as many
    forwards of device j, so y_{j+1} >= x_j + n_{j+1} t_f[j] + comm + t_f[j+1]; and its first B
    precedes one of device j: y_j >= y_{j+1} + t_b[j+1] + comm. A span V needs, for every j,
    load_j + y_j - x_j - n_j t_f[j] <= V. Going up from the last device, taking the fewest
    forwards that keep device j within V leaves every upstream constraint weakest, so that
    greedy decides whether any schedule meets V; the bound is the least V it accepts
    (bisection; the largest V it refuses is returned, rounded up on integer data).
    """
    loads = device_loads(instance)
    low = float(max(loads))
    if instance.placement != "contiguous":
        return low
    p = instance.devices
    trips = [round_trip(instance, j, j) for j in range(p)]
    limits = [_forward_limit(instance, j) for j in range(p)]
    if _wave_fits(instance, low, loads, trips, limits):
        return low
    high, downstream = low, None
    for j in range(p - 1, -1, -1):  # one forward each: always possible
        downstream = _wave_setting(instance, j, downstream, math.inf, trips[j], limits[j])
        high = max(high, loads[j] + downstream[0] - downstream[1] * instance.t_f[j])
    for _ in range(200):
        if high - low <= 1e-9 * max(1.0, high):
            break
        middle = (low + high) / 2
        if _wave_fits(instance, middle, loads, trips, limits):
            high = middle
        else:
            low = middle
    integral = all(float(x).is_integer() for x in (*instance.t_f, *instance.t_b, *instance.t_w,
                                                   instance.comm))
    return float(math.ceil(low - 1e-9)) if integral else low


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
    k = held_count(instance.cap[0], m_b, m)
    return m * (t_f + t_b + t_w) + max(0, (p - k) * t_f + (p - 1) * (t_b + 2 * instance.comm))


def lower_bounds(instance: Instance, objective: str = "span") -> dict[str, float]:
    """Every lower bound on `objective` by name (see the module doc)."""
    require_instance(instance, "lower_bounds()")
    return _lower_bounds(instance, objective, extended=True)


def _lower_bounds(instance: Instance, objective: str, extended: bool,
                  deferral: Optional[bool] = None) -> dict[str, float]:
    """lower_bounds; without `extended`, as they were before the chain drain and the first-B
    wave; without `deferral` (default: as `extended`), before the W deferral bound
    (benchmarks compare them)."""
    deferral = extended if deferral is None else deferral
    check_objective(objective)
    p = instance.devices
    heads = [device_head(instance, d) if objective == "makespan" else 0.0 for d in range(p)]
    loads = device_loads(instance)
    out = {"ideal": max(h + load for h, load in zip(heads, loads))}
    if objective == "makespan":
        out["critical_path"] = critical_path_length(instance)
    out["memory_ramp"] = max(heads[d] + device_bound(instance, d, with_drain=False)
                             for d in range(p))
    out["ramp_and_drain"] = max(heads[d] + device_bound(instance, d, chain_drain=extended)
                                for d in range(p))
    out["bottleneck"] = max(h + b for h, b in zip(heads, bottlenecks(instance)))
    if extended:
        out["first_b_wave"] = first_b_wave(instance)  # every window lies in [0, makespan]
    if deferral:
        out["w_deferral"] = w_deferral(instance)  # a span bound; makespan >= span
    if extended and instance.cap is not None:
        out["memory_area"] = max(h + a for h, a in zip(heads, memory_areas(instance)))
        value = memory_pipeline(instance)  # a span bound too
        if value > 0:
            out["memory_pipeline"] = value
    return out


@lru_cache(maxsize=256)
def memory_pipeline(instance: Instance) -> float:
    """zbopt.plan.memory_bound.pipeline_bound (0 where it does not apply): cached, since every
    registered method's result asks for the bounds of the same instance."""
    from .plan.memory_bound import pipeline_bound  # it builds on this module's bounds
    return pipeline_bound(instance)


def best_lower_bound(instance: Instance, objective: str = "span") -> tuple[str, float]:
    """(name, value) of the largest bound."""
    require_instance(instance, "best_lower_bound()")
    bounds = lower_bounds(instance, objective)
    name = max(bounds, key=bounds.__getitem__)
    return name, bounds[name]
