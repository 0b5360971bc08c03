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

from collections import deque
from dataclasses import dataclass

from ..errors import ZboptError
from ..instance import Instance
from ..passes import Pass, dependencies, duration, format_pass, lag, memory_delta, neighbours
from ..registry import register
from ..schedule import Schedule

# The simulation's pass slots: F of the down and up stage, B and W of the up and down stage
# (the backward leaves the V the way the forward entered it).
_LEGS = {"F": ("down", "up"), "B": ("up", "down"), "W": ("up", "down")}


@dataclass(frozen=True)
class _Outcome:
    orders: tuple[tuple[Pass, ...], ...]
    worst_wait: float
    waits: tuple[float, ...]


class _VRounds:
    """One run of the authors' ZB-V rounds (see the module doc) on `instance`."""

    def __init__(self, instance: Instance, plan: Instance, fill_f: bool, fill_b: bool,
                 allowance: tuple[float, ...] | None) -> None:
        p, m = instance.devices, instance.microbatches
        # `plan` times the passes (one cost per kind); `instance` holds the memory
        self.instance, self.plan, self.p, self.m = instance, plan, p, m
        self.fill_f, self.fill_b = fill_f, fill_b
        self.allowance = allowance
        self.top_allowance = max(allowance) if allowance else -1.0
        self.links = neighbours(instance)
        self.stage = [{"down": d, "up": 2 * p - 1 - d} for d in range(p)]
        unit = [(instance.m_b[d] + instance.m_b[2 * p - 1 - d]) / 2 for d in range(p)]
        self.unit = unit
        self.max_mem = [2 * p * u for u in unit]  # 1F1B's peak: p times both chunks' activation
        self.count: list[dict[tuple[str, str], int]] = [{} for _ in range(p)]
        self.end: dict[Pass, float] = {}
        self.clock = [0.0] * p
        self.mem = [0.0] * p
        self.wait = [0.0] * p
        self.pending_w: list[deque[Pass]] = [deque() for _ in range(p)]
        self.orders: list[list[Pass]] = [[] for _ in range(p)]
        # where the reference reads a missing input's arrival, it reads the end of the down
        # stage's last W on the last device instead (-1 until that pass ran); kept for fidelity
        self.sentinel: Pass = (p - 1, m - 1, "W")

    # ----- bookkeeping ---------------------------------------------------------------------

    def n(self, d: int, kind: str, leg: str) -> int:
        return self.count[d].get((kind, leg), 0)

    def pass_of(self, d: int, kind: str, leg: str) -> Pass:
        return (self.stage[d][leg], self.n(d, kind, leg), kind)

    def ended(self, p: Pass) -> float:
        return self.end.get(p, -1.0)

    def worst(self, d: int = -1) -> float:
        top = max([0.0, *self.wait])
        if d >= 0 and self.allowance is not None:
            top = max(top, self.top_allowance - self.allowance[d])
        return top

    def put(self, d: int, kind: str, leg: str) -> None:
        instance = self.instance
        p = self.pass_of(d, kind, leg)
        if p[1] >= self.m:
            raise ZboptError(f"zb-v: the authors' rounds run out of micro-batches on device {d} "
                             f"(m={self.m}, p={self.p}): raise microbatches")
        ready = self.clock[d]
        for q in dependencies(instance, p, self.links):
            if q not in self.end:
                raise ZboptError(f"zb-v: the authors' rounds would run {format_pass(p)} before "
                                 f"{format_pass(q)} here (p={self.p}, m={self.m}): raise "
                                 f"microbatches or use v-greedy")
            ready = max(ready, self.end[q] + lag(instance, q, p))
        if self.n(d, "F", "down") > 0:
            self.wait[d] += ready - self.clock[d]
        self.end[p] = self.clock[d] = ready + duration(self.plan, p)
        self.mem[d] += memory_delta(instance, p)
        self.orders[d].append(p)
        if kind == "B":
            self.pending_w[d].append((p[0], p[1], "W"))
        self.count[d][(kind, leg)] = self.n(d, kind, leg) + 1

    def put_w(self, d: int) -> None:
        stage, _, _ = self.pending_w[d].popleft()
        self.put(d, "W", "down" if stage == d else "up")

    def w_cost(self, d: int) -> float:
        return duration(self.plan, self.pending_w[d][0])

    def fill(self, d: int, source: Pass | None, optional: bool) -> None:
        """Pending W passes before a pass whose input `source` arrives late (see module doc)."""
        comm = self.instance.comm
        while self.pending_w[d] and source is not None \
                and self.ended(source) + comm >= self.clock[d] + self.w_cost(d):
            self.put_w(d)
        arrival = self.ended(source if source is not None else self.sentinel)
        if self.pending_w[d] and arrival + comm - self.clock[d] > self.worst(d) - self.wait[d] \
                and optional:
            self.put_w(d)

    def make_room(self, d: int, delta: float) -> None:
        while self.mem[d] + delta > self.max_mem[d] + 1e-9 * max(1.0, self.max_mem[d]) \
                and self.pending_w[d]:
            self.put_w(d)

    # ----- phases ----------------------------------------------------------------------------

    def run(self) -> _Outcome:
        self.warm_up()
        for _ in range(2 * self.m):
            self.backward_round()
            self.forward_round()
        for d in range(self.p):
            while self.pending_w[d]:
                self.put_w(d)
        return _Outcome(tuple(tuple(o) for o in self.orders), self.worst(), tuple(self.wait))

    def warm_up(self) -> None:
        p, m, comm = self.p, self.m, self.instance.comm
        for d in range(p):
            self.put(d, "F", "down")
        for d in reversed(range(p)):
            if d < p - 1:
                arrival = self.ended((self.stage[d + 1]["up"], 0, "F")) + comm
                f_cost = duration(self.plan, self.pass_of(d, "F", "down"))
                while self.mem[d] + self.unit[d] * (2 + 2 * d) <= self.max_mem[d] \
                        and self.clock[d] + f_cost <= arrival and self.n(d, "F", "down") < m:
                    for j in range(d + 1):
                        self.put(j, "F", "down")
            self.put(d, "F", "up")
        leg = 0
        for d in range(1, p):
            def started(x: int) -> int:
                return self.n(x, "F", "down") + self.n(x, "F", "up")
            while started(d) < started(d - 1) \
                    or self.n(d, "F", "up") <= self.n(d - 1, "F", "up") < m:
                for j in range(p - 1, d - 1, -1):
                    if self.n(j, "F", _LEGS["F"][leg]) < m:
                        self.put(j, "F", _LEGS["F"][leg])
                leg = 1 - leg

    def backward_round(self) -> None:
        p, m = self.p, self.m
        for d in range(p):
            worst_b = max(memory_delta(self.instance, (s, 0, "B")) for s in self.stage[d].values())
            self.make_room(d, worst_b)
        up_first, down_first = [], []
        for d in range(p):
            if self.n(d, "B", "down") >= self.n(d, "B", "up"):
                up_first.append(d)
            elif d == p - 1:
                down_first.append(d)
            else:
                source = (self.stage[d + 1]["down"], self.n(d, "B", "down"), "B")
                if source in self.end or self.n(d, "B", "up") >= m:
                    down_first.append(d)
                else:
                    up_first.append(d)
        for d, leg in [(d, "down") for d in reversed(down_first)] + [(d, "up") for d in up_first]:
            source = None
            if leg == "down" and d < p - 1:
                source = (self.stage[d + 1]["down"], self.n(d, "B", "down"), "B")
            if leg == "up" and d > 0:
                source = (self.stage[d - 1]["up"], self.n(d, "B", "up"), "B")
            self.fill(d, source, optional=leg == "down" or self.fill_b)
            self.put(d, "B", leg)

    def forward_round(self) -> None:
        p, m = self.p, self.m
        for d in range(p):
            ups, downs = self.n(d, "F", "up"), self.n(d, "F", "down")
            if ups >= m:
                continue
            if ups >= downs:
                leg = "down"
            elif d == p - 1 or (self.stage[d + 1]["up"], ups, "F") in self.end:
                leg = "up"
            elif downs < m and (d == 0 or (self.stage[d - 1]["down"], downs, "F") in self.end):
                leg = "down"
            else:
                continue
            self.make_room(d, memory_delta(self.instance, self.pass_of(d, "F", leg)))
            source = None
            if leg == "down" and d > 0:
                source = (self.stage[d - 1]["down"], downs, "F")
            if leg == "up" and d < p - 1:
                source = (self.stage[d + 1]["up"], ups, "F")
            self.fill(d, source, optional=self.fill_f)
            self.put(d, "F", leg)


def _refined(instance: Instance, plan: Instance, fill_f: bool, fill_b: bool) -> _Outcome:
    """Rerun with the last run's waits as the allowance while the worst wait keeps shrinking."""
    best = _VRounds(instance, plan, fill_f, fill_b, None).run()
    while True:
        nxt = _VRounds(instance, plan, fill_f, fill_b, best.waits).run()
        if not nxt.worst_wait < best.worst_wait:
            return best
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
    for fill_b in (True, False):
        for fill_f in (True, False):
            outcome = _refined(instance, twin, fill_f, fill_b)
            if best is None or outcome.worst_wait < best.worst_wait:
                best = outcome
    return Schedule.build(best.orders)


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
    orders = []
    for d in range(p):
        stage = {"down": d, "up": 2 * p - 1 - d}
        timed = sorted((slot + PERIOD * j, (stage[leg], j, kind))
                       for (kind, leg, device), slot in slots.items() if device == d
                       for j in range(m))
        orders.append([x for _, x in timed])
    return Schedule.build(orders)


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
