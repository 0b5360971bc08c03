"""ZB-V: the Zero Bubble authors' V-shape scheduler (placement "v"); V-Min and V-Half blocks.

Device d holds the "down" stage d and the "up" stage 2p-1-d, so a micro-batch starts and ends
its pass through the model on device 0. `zb-v` is the authors' ZB-V scheduler: a simulation
that places passes device by device in rounds, timing each as soon as its device and inputs
allow, with every device's activations kept within 1F1B's peak (2p stage activations, cap
"1p"):

  warm-up    one down F on every device; then, from the last device back to the first,
             down F passes on devices 0..d while device d has room for its 2d+2 later
             forwards and the next F would end before its up F's input arrives; then its up F;
             then down/up F in alternation (devices p-1..d) until device d has started as many
             forwards as device d-1 and at least one more up F
  rounds     2m rounds; in each, every device first runs one B (the down stage's when the up
             stage is ahead and the down B's input has arrived or the up stage has no B left,
             else the up stage's), then one F (the up stage's when it is behind and its input
             has arrived, else the down stage's once its input has arrived); a pending W
             (oldest first) goes before the pass when the pass would wait for at least a W's
             time, or memory needs it, or, optionally (fill_b, fill_f), when the device's wait
             would exceed what the worst device has waited so far
  drain      every pending W

The rounds are run with the four combinations of fill_b and fill_f and, for each, repeated with
the previous run's per-device waits as an allowance while the worst wait keeps shrinking; the
order with the smallest worst wait wins (the first on a tie). With t_F = t_B = t_W and comm = 0
it has no bubble: `span == ideal` in evaluate(). The rounds plan with one cost per pass kind
(`uniform_twin`: medians over devices, as the authors' runtime feeds its scheduler) and each
device's own activations; evaluate() then times the order with the instance's own costs.

V-Min and V-Half (Qi et al., "Pipeline Parallelism with Controllable Memory", 2024) come from
that paper's building-block view: lay out one micro-batch's passes on a grid of unit slots
(every pass one slot, 6 slots per device per micro-batch: F, B, W of its two stages), then
repeat that block every 6 slots for each further micro-batch; each device's order is its
passes sorted by slot. In the block, a pass takes the earliest slot after its dependency (plus
a gap) whose slot modulo 6 is still free on its device, so repeated blocks never collide. The
chain runs F down the V (devices 0..p-1), F back up (p-1..0), B of the up stages (0..p-1),
B of the down stages (p-1..0); every W takes the first free slot after its B.

  v-min-block   every hop of the chain one slot after the previous pass
  v-half-block  the same, but two slots between up-stage forwards on consecutive devices,
                which lengthens the blocks' lifespans and shortens the bubble

(Registered with a -block suffix: `v-min` and `v-half` are the memory-capped greedy versions
in zbopt/heuristics.) The peak activation follows from the order alone, whatever the costs:
with m_w = m_b (W holds the whole activation until it runs, as the paper counts) it is
(p+4)//3 (v-min-block) and (p+2)//2 (v-half-block) activations of the device's layers, the
paper's figures, reached once m >= 2p and never exceeded; about 1/3 and 1/2 of 1F1B's p.
With unit costs their bubble (span - ideal) lies between ZB-V's zero and 1F1B's, v-half-block
below v-min-block for p >= 3 (p=16, m=49: 26 and 29.5 against 1F1B's 45). The slots assume
equal costs: other costs keep the memory but may stretch the timing.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from ..errors import ZboptError
from ..instance import Instance
from ..passes import Pass, format_pass, stage_deltas, stage_lag
from ..registry import register
from ..schedule import Schedule


@dataclass(frozen=True)
class _Outcome:
    orders: tuple[tuple[Pass, ...], ...]
    worst_wait: float
    waits: tuple[float, ...]


class _VRounds:
    """One run of the authors' ZB-V rounds (see the module doc) on `instance`.

    Stage s sits on device s (down) or 2p-1-s (up); per-stage lists of counts and end times
    (None: not run yet) keep the hot loop free of dict and tuple look-ups. A device's waits
    only grow, so the worst wait so far is a running maximum, and a run stops (returns None)
    as soon as it reaches `bound`: its final worst wait could not be below it.
    """

    def __init__(self, instance: Instance, plan: Instance, fill_f: bool, fill_b: bool,
                 allowance: tuple[float, ...] | None, bound: float = math.inf) -> None:
        p, m = instance.devices, instance.microbatches
        # `plan` times the passes (one cost per kind); `instance` holds the memory
        self.instance, self.p, self.m = instance, p, m
        self.fill_f, self.fill_b = fill_f, fill_b
        self.comm = instance.comm
        stages = 2 * p
        self.dev = [instance.device_of(s) for s in range(stages)]
        # lag into stage s from its predecessor (F) and from its successor (B)
        self.lag_f = [0] + [stage_lag(instance, s - 1, s) for s in range(1, stages)]
        self.lag_b = [stage_lag(instance, s + 1, s) for s in range(stages - 1)] + [0]
        self.t_f, self.t_b, self.t_w = list(plan.t_f), list(plan.t_b), list(plan.t_w)
        deltas = stage_deltas(instance)
        self.d_f, self.d_b, self.d_w = list(deltas["F"]), list(deltas["B"]), list(deltas["W"])
        unit = [(instance.m_b[d] + instance.m_b[2 * p - 1 - d]) / 2 for d in range(p)]
        self.unit = unit
        self.max_mem = [2 * p * u for u in unit]  # 1F1B's peak: p times both chunks' activation
        self.room = [x + 1e-9 * max(1.0, x) for x in self.max_mem]
        self.worst_b = [max(self.d_b[d], self.d_b[2 * p - 1 - d]) for d in range(p)]
        # one spare slot per stage: a source one past the last micro-batch reads "not run"
        self.end_f: list[list[float | None]] = [[None] * (m + 1) for _ in range(stages)]
        self.end_b: list[list[float | None]] = [[None] * (m + 1) for _ in range(stages)]
        self.end_w: list[list[float | None]] = [[None] * (m + 1) for _ in range(stages)]
        self.nf, self.nb, self.nw = [0] * stages, [0] * stages, [0] * stages
        self.clock = [0.0] * p
        self.mem = [0.0] * p
        self.wait = [0.0] * p
        self.top_wait = 0.0  # max(0, *wait): waits only grow
        self.bound = bound
        # worst(d) adds, with an allowance, the allowance's spread above device d's own
        self.spread = [max(allowance) - a for a in allowance] if allowance else None
        self.pending_w: list[deque[int]] = [deque() for _ in range(p)]  # stages of pending W
        self.orders: list[list[Pass]] = [[] for _ in range(p)]
        self.sensitive: set[str] = set()

    # ----- bookkeeping ---------------------------------------------------------------------

    def ended(self, end: list[float | None], j: int) -> float:
        # where the reference reads a missing input's arrival it gets -1; kept for fidelity
        t = end[j]
        return -1.0 if t is None else t

    def worst(self, d: int) -> float:
        top = self.top_wait
        if self.spread is not None and self.spread[d] > top:
            top = self.spread[d]
        return top

    def start(self, d: int, s: int, j: int, kind: str, ready: float) -> float:
        """Book the device's wait for a pass ready at `ready`; the time it starts."""
        clock = self.clock[d]
        if ready < clock:
            ready = clock
        if self.nf[d] > 0:
            w = self.wait[d] = self.wait[d] + (ready - clock)
            if w > self.top_wait:
                self.top_wait = w
                if w >= self.bound:
                    raise _Beaten
        self.orders[d].append((s, j, kind))
        return ready

    def missing(self, q: Pass, s: int, j: int, kind: str) -> ZboptError:
        return ZboptError(f"zb-v: the authors' rounds would run {format_pass((s, j, kind))} "
                          f"before {format_pass(q)} here (p={self.p}, m={self.m}): raise "
                          f"microbatches or use v-greedy")

    def out_of_microbatches(self, d: int) -> ZboptError:
        return ZboptError(f"zb-v: the authors' rounds run out of micro-batches on device {d} "
                          f"(m={self.m}, p={self.p}): raise microbatches")

    def put_f(self, s: int) -> None:
        j = self.nf[s]
        d = self.dev[s]
        if j >= self.m:
            raise self.out_of_microbatches(d)
        ready = 0.0
        if s > 0:
            e = self.end_f[s - 1][j]
            if e is None:
                raise self.missing((s - 1, j, "F"), s, j, "F")
            ready = e + self.lag_f[s]
        t = self.start(d, s, j, "F", ready)
        self.end_f[s][j] = self.clock[d] = t + self.t_f[s]
        self.mem[d] += self.d_f[s]
        self.nf[s] = j + 1

    def put_b(self, s: int) -> None:
        j = self.nb[s]
        d = self.dev[s]
        if j >= self.m:
            raise self.out_of_microbatches(d)
        if s < 2 * self.p - 1:
            e = self.end_b[s + 1][j]
            if e is None:
                raise self.missing((s + 1, j, "B"), s, j, "B")
            ready = e + self.lag_b[s]
        else:
            e = self.end_f[s][j]
            if e is None:
                raise self.missing((s, j, "F"), s, j, "B")
            ready = e + 0
        t = self.start(d, s, j, "B", ready)
        self.end_b[s][j] = self.clock[d] = t + self.t_b[s]
        self.mem[d] += self.d_b[s]
        self.pending_w[d].append(s)
        self.nb[s] = j + 1

    def put_w(self, d: int) -> None:
        s = self.pending_w[d].popleft()
        j = self.nw[s]
        ready = self.end_b[s][j] + 0
        t = self.start(d, s, j, "W", ready)
        self.end_w[s][j] = self.clock[d] = t + self.t_w[s]
        self.mem[d] += self.d_w[s]
        self.nw[s] = j + 1

    def fill(self, d: int, source: float | None, optional: bool, switch: str = "") -> None:
        """Pending W passes before a pass whose input ends at `source` (-1: not run yet; None:
        the pass has no input on another device), see the module doc. `switch` names the flag
        ("f": fill_f, "b": fill_b) that made the optional W optional: `sensitive` records
        whether that flag ever mattered in this run."""
        pending, comm = self.pending_w[d], self.comm
        if source is not None:
            limit = source + comm
            while pending and limit >= self.clock[d] + self.t_w[pending[0]]:
                self.put_w(d)
            arrival = source
        else:
            arrival = self.ended(self.end_w[self.p - 1], self.m - 1)
        if pending and arrival + comm - self.clock[d] > self.worst(d) - self.wait[d]:
            if switch:
                self.sensitive.add(switch)
            if optional:
                self.put_w(d)

    def make_room(self, d: int, delta: float) -> None:
        pending, room = self.pending_w[d], self.room[d]
        while pending and self.mem[d] + delta > room:
            self.put_w(d)

    # ----- phases ----------------------------------------------------------------------------

    def run(self) -> _Outcome | None:
        """The outcome; None if the worst wait reached `bound` on the way."""
        try:
            self.warm_up()
            for _ in range(2 * self.m):
                self.backward_round()
                self.forward_round()
            for d in range(self.p):
                while self.pending_w[d]:
                    self.put_w(d)
        except _Beaten:
            return None
        return _Outcome(tuple(tuple(o) for o in self.orders), self.top_wait, tuple(self.wait))

    def warm_up(self) -> None:
        p, m, comm, nf = self.p, self.m, self.comm, self.nf
        for d in range(p):
            self.put_f(d)
        for d in reversed(range(p)):
            if d < p - 1:
                arrival = self.ended(self.end_f[2 * p - 2 - d], 0) + comm
                f_cost = self.t_f[d]
                while self.mem[d] + self.unit[d] * (2 + 2 * d) <= self.max_mem[d] \
                        and self.clock[d] + f_cost <= arrival and nf[d] < m:
                    for j in range(d + 1):
                        self.put_f(j)
            self.put_f(2 * p - 1 - d)
        leg = 0
        for d in range(1, p):
            def started(x: int) -> int:
                return nf[x] + nf[2 * p - 1 - x]
            while started(d) < started(d - 1) or nf[2 * p - 1 - d] <= nf[2 * p - d] < m:
                for j in range(p - 1, d - 1, -1):
                    s = j if leg == 0 else 2 * p - 1 - j
                    if nf[s] < m:
                        self.put_f(s)
                leg = 1 - leg

    def backward_round(self) -> None:
        p, m, nb, end_b = self.p, self.m, self.nb, self.end_b
        for d in range(p):
            self.make_room(d, self.worst_b[d])
        up_first, down_first = [], []
        for d in range(p):
            downs, ups = nb[d], nb[2 * p - 1 - d]
            if downs >= ups:
                up_first.append(d)
            elif d == p - 1:
                down_first.append(d)
            elif end_b[d + 1][downs] is not None or ups >= m:
                down_first.append(d)
            else:
                up_first.append(d)
        for d in reversed(down_first):
            source = self.ended(end_b[d + 1], nb[d]) if d < p - 1 else None
            self.fill(d, source, optional=True)
            self.put_b(d)
        for d in up_first:
            up = 2 * p - 1 - d
            source = self.ended(end_b[up + 1], nb[up]) if d > 0 else None
            self.fill(d, source, optional=self.fill_b, switch="b")
            self.put_b(up)

    def forward_round(self) -> None:
        p, m, nf, end_f = self.p, self.m, self.nf, self.end_f
        for d in range(p):
            up = 2 * p - 1 - d
            ups, downs = nf[up], nf[d]
            if ups >= m:
                continue
            if ups >= downs:
                s = d
            elif d == p - 1 or end_f[up - 1][ups] is not None:
                s = up
            elif downs < m and (d == 0 or end_f[d - 1][downs] is not None):
                s = d
            else:
                continue
            self.make_room(d, self.d_f[s])
            source = None
            if s == d and d > 0:
                source = self.ended(end_f[d - 1], downs)
            if s == up and d < p - 1:
                source = self.ended(end_f[up - 1], ups)
            self.fill(d, source, optional=self.fill_f, switch="f")
            self.put_f(s)


class _Beaten(Exception):
    """A run's worst wait reached the bound it had to stay below."""


def _refined(instance: Instance, plan: Instance, fill_f: bool, fill_b: bool
             ) -> tuple[_Outcome, set[str]]:
    """Rerun with the last run's waits as the allowance while the worst wait keeps shrinking
    (a rerun stops once its worst wait reaches the last one's: it cannot win any more). Also
    the flags ("f", "b") that mattered in some run: flipping any other one repeats every run."""
    first = _VRounds(instance, plan, fill_f, fill_b, None)
    best = first.run()
    assert best is not None  # no bound: runs to the end or raises
    sensitive = set(first.sensitive)
    while True:
        rerun = _VRounds(instance, plan, fill_f, fill_b, best.waits, best.worst_wait)
        nxt = rerun.run()
        sensitive |= rerun.sensitive
        if nxt is None or not nxt.worst_wait < best.worst_wait:
            return best, sensitive
        best = nxt


def _upper_median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def uniform_twin(instance: Instance) -> Instance:
    """The costs the rounds plan with: one per pass kind, each the (upper) median over devices
    of the device's mean over its two stages, as the authors feed their scheduler measured
    costs; the real costs then time the order in evaluate()."""
    p = instance.devices

    def mid(values: tuple) -> float:
        return _upper_median([(values[d] + values[2 * p - 1 - d]) / 2 for d in range(p)])

    costs = {k: mid(getattr(instance, k)) for k in ("t_f", "t_b", "t_w")}
    if not sum(costs.values()):  # every median zero: the means still rank the kinds
        costs = {k: sum(getattr(instance, k)) / (2 * p) for k in costs}
    return Instance(devices=p, microbatches=instance.microbatches, placement="v",
                    comm=instance.comm, **costs)


@register("zb-v", "v", "ZB-V: the Zero Bubble authors' V-shape scheduler at 1F1B's peak memory")
def zb_v(instance: Instance) -> Schedule:
    if instance.placement != "v":
        raise ZboptError(f"zb-v runs on placement 'v', the instance is {instance.placement!r}")
    twin = uniform_twin(instance)
    best: _Outcome | None = None
    mattered: dict[tuple[bool, bool], set[str]] = {}
    for fill_b in (True, False):
        for fill_f in (True, False):
            # the same runs as an earlier combination whose flag never mattered: its outcome,
            # already weighed (and a tie never wins), so nothing to run
            if not fill_f and "f" not in mattered[(fill_b, True)]:
                mattered[(fill_b, fill_f)] = mattered[(fill_b, True)]
                continue
            if not fill_b and "b" not in mattered[(True, fill_f)]:
                mattered[(fill_b, fill_f)] = mattered[(True, fill_f)]
                continue
            outcome, mattered[(fill_b, fill_f)] = _refined(instance, twin, fill_f, fill_b)
            if best is None or outcome.worst_wait < best.worst_wait:
                best = outcome
    return Schedule(tuple(tuple((q,) for q in order) for order in best.orders))


# Slots per device and micro-batch in the building-block grid: F, B and W of its two stages.
PERIOD = 6


def v_block(p: int, up_gap: int) -> dict[tuple[str, str, int], int]:
    """Slot of every pass of one micro-batch, keyed (kind, "down" | "up", device).

    Chain order: F down devices 0..p-1, F up p-1..0, B up 0..p-1, B down p-1..0; each pass at
    the earliest slot >= previous + gap whose residue mod PERIOD is free on its device (so the
    block repeated every PERIOD slots never puts two passes in one slot). Gaps are one slot,
    except `up_gap` between up-leg forwards on consecutive devices.
    """
    used: list[set[int]] = [set() for _ in range(p)]
    slots: dict[tuple[str, str, int], int] = {}

    def place(key: tuple[str, str, int], earliest: int) -> int:
        device = key[2]
        slot = earliest
        while slot % PERIOD in used[device]:
            slot += 1
        used[device].add(slot % PERIOD)
        slots[key] = slot
        return slot

    slot = -1
    for d in range(p):
        slot = place(("F", "down", d), slot + 1)
    for d in reversed(range(p)):
        slot = place(("F", "up", d), slot + (1 if d == p - 1 else up_gap))
    for d in range(p):
        slot = place(("B", "up", d), slot + 1)
    for d in reversed(range(p)):
        slot = place(("B", "down", d), slot + 1)
    for d in range(p):
        for leg in ("up", "down"):
            place(("W", leg, d), slots[("B", leg, d)] + 1)
    return slots


def repeat_block(p: int, m: int, slots: dict[tuple[str, str, int], int]) -> Schedule:
    """Micro-batch j's passes at their block slot + PERIOD * j; each device in slot order."""
    by_device: list[list[tuple[int, int, str]]] = [[] for _ in range(p)]
    for (kind, leg, device), slot in slots.items():
        by_device[device].append((slot, d_stage(p, device, leg), kind))
    orders = []
    for d in range(p):
        timed = sorted((slot + PERIOD * j, (stage, j, kind))
                       for slot, stage, kind in by_device[d] for j in range(m))
        orders.append(tuple(((x,) for _, x in timed)))
    return Schedule(tuple(orders))


def d_stage(p: int, device: int, leg: str) -> int:
    """The stage of `device` on the V's "down" or "up" leg."""
    return device if leg == "down" else 2 * p - 1 - device


@register("v-min-block", "v",
          "V-Min building block (handcrafted): (p+4)//3 activations, about 1/3 of 1F1B's")
def v_min_block(instance: Instance) -> Schedule:
    p = instance.devices
    return repeat_block(p, instance.microbatches, v_block(p, up_gap=1))


@register("v-half-block", "v",
          "V-Half building block (handcrafted): (p+2)//2 activations, about 1/2 of 1F1B's")
def v_half_block(instance: Instance) -> Schedule:
    p = instance.devices
    return repeat_block(p, instance.microbatches, v_block(p, up_gap=2))
