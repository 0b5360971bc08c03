"""Schedule (per-device ordered passes) and the one evaluator that judges every schedule.

A device's order is a sequence of *items*; an item is a tuple of passes run as one atomic block:
- one pass: the usual case;
- (B, W) of the same stage and micro-batch: a fused full backward (1F1B, GPipe); its gradient
  leaves when the whole block ends;
- an F with the backward of another micro-batch (DualPipe's overlapped F&B): starts when the
  inputs of every pass in it have arrived, lasts the sum of the passes less
  `overlap * min(forward, backward)`, and all its outputs leave at its end.
Timing is ASAP: an item starts at max(end of the previous item on its device, end of each
dependency's item + comm where devices differ).
"""

from __future__ import annotations

import functools
import itertools
import numbers
import operator
import re
import reprlib
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from .errors import ZboptError
from .instance import KINDS, Instance, finite, plain, require_instance, too_long_integer
from .passes import (
    Item,
    Pass,
    block_problems,
    dependencies,
    fits,
    format_pass,
    item_duration,
    item_memory,
    lag,
    neighbours,
)
from .sizes import readable

_PASS_RE = re.compile(r"^\s*(\d+)\s*([FBW])\s*(\d+)\s*$")


def parse_pass(text: str) -> Pass:
    match = _PASS_RE.match(text)
    if not match:
        raise ZboptError(f"{text!r} is not a pass: write {{stage}}{{kind}}{{microbatch}}, e.g. 0F1")
    try:
        return (int(match.group(1)), int(match.group(3)), match.group(2))
    except ValueError as err:  # Python reads no integer of more than 4,300 digits
        raise too_long_integer(None, err) from None


def format_item(item: Item) -> str:
    if len(item) == 1:
        return format_pass(item[0])
    return "(" + ";".join(format_pass(p) for p in item) + ")"


def parse_item(text: str) -> Item:
    text = text.strip()
    if text.startswith("(") and text.endswith(")"):
        return tuple(parse_pass(t) for t in text[1:-1].split(";"))
    return (parse_pass(text),)


_ITEM_FORMS = ("a pass (stage, microbatch, kind) such as (0, 1, 'F'), its text '0F1', or a "
               "tuple of passes run as one block")


def _is_index(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _as_pass(p, d: int) -> Pass:
    """A pass given as text or as (stage, microbatch, kind), as a plain tuple; ZboptError naming
    device `d` and the value for anything else."""
    if isinstance(p, str):
        return parse_pass(p)
    if isinstance(p, (tuple, list)) and len(p) == 3 and _is_index(p[0]) and _is_index(p[1]) \
            and isinstance(p[2], str):
        return (int(p[0]), int(p[1]), p[2])
    raise ZboptError(f"device {d}'s order holds {reprlib.repr(p)}, which is not a pass: give "
                     f"{_ITEM_FORMS}")


def _as_item(x, d: int = 0) -> Item:
    """An item of device `d`'s order as Schedule.build takes it (a pass, its text, or a block
    of passes) as a tuple of passes; ZboptError naming the device and the value otherwise."""
    if type(x) is tuple and len(x) == 3 and type(x[0]) is int and type(x[1]) is int \
            and type(x[2]) is str:
        return (x,)  # the usual case: one pass, already plain
    if isinstance(x, str):
        return parse_item(x)
    if isinstance(x, (tuple, list)):
        if len(x) == 3 and isinstance(x[2], str) and not isinstance(x[0], (tuple, list, str)):
            return (_as_pass(x, d),)  # a single pass
        if all(isinstance(p, (tuple, list, str)) for p in x):
            return tuple(_as_pass(p, d) for p in x)  # a block (an empty one: evaluate says so)
    raise ZboptError(f"device {d}'s order holds {reprlib.repr(x)}, which is not an item: give "
                     f"{_ITEM_FORMS}")


def _as_order(order, d: int) -> tuple[Item, ...]:
    if isinstance(order, (str, bytes)) or not isinstance(order, Iterable):
        raise ZboptError(f"device {d}'s order is {reprlib.repr(order)}: give a list of items "
                         f"per device, each {_ITEM_FORMS}")
    return tuple(_as_item(x, d) for x in order)


def require_schedule(x, where: str) -> "Schedule":
    """`x` if it is a Schedule, else ZboptError saying how to get one (`where`: the function
    that was given it, e.g. "evaluate()")."""
    if isinstance(x, Schedule):
        return x
    if isinstance(x, str):
        hint = "a method's schedule comes from zbopt.registry.generate(name, instance); " \
               "a schedule file's from zbopt.export.schedule_file.read_schedule_file(path).schedule"
    else:
        hint = "build one with Schedule.build(orders), one list of passes per device, or get " \
               "a method's with zbopt.registry.generate(name, instance)"
    raise ZboptError(f"{where}: expected a zbopt Schedule, got {type(x).__name__}: {hint}")


@dataclass(frozen=True)
class Schedule:
    """For every device, the order of its items (see module doc). `method` names the producer."""

    orders: tuple[tuple[Item, ...], ...]
    method: str = ""
    # Optional earliest start of each device's first item. The span objective lets a device
    # start late (iterations overlap in steady state), which ASAP timing alone cannot express;
    # solvers set it to their own start times so evaluate() reproduces (or beats) them.
    release: tuple[float, ...] | None = None

    @classmethod
    def build(cls, orders: Iterable[Iterable], method: str = "",
              release: Sequence[float] | None = None) -> "Schedule":
        """From per-device lists of passes `(stage, mb, kind)`, items (tuples of passes) or text.
        Anything else (None, a number, a device's order given as one string) is a ZboptError
        naming the device and the value."""
        if isinstance(orders, (str, bytes)) or not isinstance(orders, Iterable):
            raise ZboptError(f"Schedule.build takes one order (a list of items) per device, "
                             f"got {reprlib.repr(orders)}")
        if release is not None:
            if isinstance(release, (str, bytes)) or not isinstance(release, Iterable):
                raise ZboptError(f"release must be a list of start times, one per device, got "
                                 f"{reprlib.repr(release)}")
            release = tuple(map(plain, release))
            if not all(isinstance(r, (int, float)) and not isinstance(r, bool) for r in release):
                raise ZboptError(f"release must hold numbers only (a start time per device), "
                                 f"got {reprlib.repr(list(release))}")
        return cls(tuple(_as_order(order, d) for d, order in enumerate(orders)), method,
                   release)

    @property
    def devices(self) -> int:
        return len(self.orders)

    def passes(self) -> Iterable[Pass]:
        for order in self.orders:
            for item in order:
                yield from item

    def text(self) -> list[list[str]]:
        return [[format_item(item) for item in order] for order in self.orders]

    @classmethod
    def from_text(cls, rows: Sequence[Sequence[str]], method: str = "") -> "Schedule":
        return cls.build(rows, method)


def fused(stage: int, mb: int) -> Item:
    """A full backward (B then W of one pass) as one atomic block."""
    return ((stage, mb, "B"), (stage, mb, "W"))


@dataclass(frozen=True)
class Timeline:
    """The result of evaluate(): every pass's start and end, the metrics and the memory levels."""

    instance: Instance
    schedule: Schedule
    item_times: tuple[tuple[tuple[float, float], ...], ...]  # per device, per item: (start, end)
    makespan: float
    span: float
    ideal: float
    bubble_rate: float
    busy: tuple[float, ...]
    idle: tuple[float, ...]  # per device: span - busy (its idle time within the span)
    device_span: tuple[tuple[float, float], ...]
    peak_memory: tuple[float, ...]
    memory_curve: tuple[tuple[tuple[float, float], ...], ...]  # per device: (time, level) steps
    fits_cap: bool
    cap_violations: tuple[str, ...] = field(default=())

    @functools.cached_property
    def start(self) -> dict[Pass, float]:
        """Every pass's start (a pass in a block gets its share of the block's interval)."""
        return self._pass_times[0]

    @functools.cached_property
    def end(self) -> dict[Pass, float]:
        return self._pass_times[1]

    @functools.cached_property
    def _pass_times(self) -> tuple[dict[Pass, float], dict[Pass, float]]:
        # built on first use: most callers (compare, sweeps) read only the metrics
        return _pass_times(self.instance, self.schedule, self.item_times)

    def metrics(self) -> dict:
        return {
            "method": self.schedule.method,
            "makespan": self.makespan,
            "span": self.span,
            "ideal": self.ideal,
            "bubble_rate": self.bubble_rate,
            "peak_memory": list(self.peak_memory),
            "memory_cap": list(self.instance.cap) if self.instance.cap else None,
            "fits_cap": self.fits_cap,
        }

    def objective(self, name: str = "span") -> float:
        if name not in ("span", "makespan"):
            raise ZboptError(f"unknown objective {name!r}: use 'span' or 'makespan'")
        return self.span if name == "span" else self.makespan


# ----- the pass table: the rules of passes.py as flat arrays, built once per instance ---------

@dataclass(frozen=True)
class _Table:
    """Every pass of an instance by a dense id, with what evaluating a schedule asks of it."""

    index: dict[Pass, int]
    passes: tuple[Pass, ...]
    device: tuple[int, ...]  # the device of the pass's stage
    dep: tuple[int, ...]  # the id of the one pass it waits for, -1 for none
    gap: tuple[float, ...]  # time from that pass's end to this one's start (comm across devices)
    cost: tuple[float, ...]
    add: tuple[float, ...]  # item_memory of the pass alone: taken at its start ...
    release: tuple[float, ...]  # ... and freed at its end
    shape: tuple[int, ...]  # stage and kind as one number: what a block's cost depends on
    blocks: dict = field(default_factory=dict)  # shape of a block -> its duration and memory
    instance: Instance | None = None

    @functools.cached_property
    def fused(self) -> dict[Item, tuple]:
        """Every fused backward (B then W of one pass) of the instance, as _block() describes
        it; built when a schedule first holds blocks."""
        links = neighbours(self.instance)
        out = {}
        for p in self.passes:
            if p[2] == "B":
                item = (p, (p[0], p[1], "W"))
                if not block_problems(self.instance, item, links):
                    out[item] = _block(self.instance, self, item, (self.index[p], self.index[item[1]]))
        return out


@functools.lru_cache(maxsize=8)
def _table(instance: Instance) -> _Table:
    links = neighbours(instance)
    passes: list[Pass] = []
    device: list[int] = []
    dep: list[int] = []
    gap: list[float] = []
    cost: list[float] = []
    add: list[float] = []
    release: list[float] = []
    shape: list[int] = []
    for stages, mbs in instance.chains:
        # Instance.passes() order: stage, micro-batch, kind; a pass's id is its place in it
        base = len(passes)
        where = {(s, k): base + 3 * len(mbs) * n + KINDS.index(k)
                 for n, s in enumerate(stages) for k in KINDS}
        passes += itertools.product(stages, mbs, KINDS)
        n = 3 * len(mbs)
        for s in stages:
            # the rules of passes.py asked once per stage and kind: the same for every
            # micro-batch, and a dependency stays within its micro-batch (checked on the ends)
            row = []
            for k in KINDS:
                ends = [dependencies(instance, (s, j, k), links) for j in (mbs[0], mbs[-1])]
                if any(len(b) > 1 or (b and b[0][1] != j) for b, j in zip(ends, (mbs[0], mbs[-1]))) \
                        or [(q[0], q[2]) for q in ends[0]] != [(q[0], q[2]) for q in ends[1]]:
                    raise AssertionError(f"the evaluator's pass table cannot hold the rule of {s}{k}")
                before = ends[0]
                p = (s, mbs[0], k)
                row.append((where[before[0][0], before[0][2]] - where[s, KINDS[0]] if before else None,
                            lag(instance, before[0], p) if before else 0, instance.cost(s, k),
                            *item_memory(instance, (p,)), 3 * s + KINDS.index(k)))
            first = where[s, KINDS[0]]
            dep += [-1 if r[0] is None else i + r[0]
                    for i in range(first, first + n, 3) for r in row]
            device += [instance.device_of(s)] * n
            # as floats: a float plus an int is the float plus float(int), and a float plus a
            # float is quicker
            gap += [float(r[1]) for r in row] * len(mbs)
            cost += [float(r[2]) for r in row] * len(mbs)
            add += [r[3] for r in row] * len(mbs)
            release += [r[4] for r in row] * len(mbs)
            shape += [r[5] for r in row] * len(mbs)
    return _Table(instance=instance, index=dict(zip(passes, range(len(passes)))), passes=tuple(passes),
                  device=tuple(device), dep=tuple(dep), gap=tuple(gap), cost=tuple(cost),
                  add=tuple(add), release=tuple(release), shape=tuple(shape))


def _block(instance: Instance, table: _Table, item: Item, ids: tuple[int, ...]):
    """(ids, duration, memory added, memory released, summed cost) of a block of passes."""
    key = tuple(map(table.shape.__getitem__, ids))
    known = table.blocks.get(key)
    if known is None:
        raw = sum(instance.cost(s, k) for s, _, k in item) or 1.0
        known = table.blocks[key] = (item_duration(instance, item), *item_memory(instance, item), raw)
    return (ids, *known)


# ----- structure, timing and metrics ----------------------------------------------------------

def structure_problems(instance: Instance, schedule: Schedule) -> list[str]:
    """Missing, duplicated, unknown and misplaced passes, and malformed blocks."""
    return _read(instance, schedule, "structure_problems()")[0]


def _read(instance: Instance, schedule: Schedule, where: str):
    """(problems, rows): every structural problem and, when there is none, each device's items:
    a pass by its id, a block as _block() describes it. `where` (the public function called)
    names it when an argument is not an Instance or a Schedule."""
    require_instance(instance, where)
    require_schedule(schedule, where)
    problems: list[str] = []
    if schedule.release is not None and (len(schedule.release) != schedule.devices
                                         or any(not finite(r) or r < 0 for r in schedule.release)):
        problems.append("release must give one finite non-negative start time per device")
    if schedule.devices != instance.devices:
        return [f"the schedule has {schedule.devices} device orders, the instance "
                f"{instance.devices} devices"], None
    table = _table(instance)
    get, device = table.index.get, table.device
    seen: list[int] = []  # the id of every pass of the schedule that is in the instance
    unknown: list[Pass] = []
    placed: list[str] = []  # per item, in order: empty and malformed blocks, misplaced passes
    rows = []
    links = None
    for d, order in enumerate(schedule.orders):
        if all(len(item) == 1 for item in order):
            row = list(map(get, map(_first, order)))
            if None not in row and set(map(device.__getitem__, row)) <= {d}:
                seen += row  # single passes, all known and on their device: nothing to say
                rows.append(row)
                continue
        if links is None:  # once for every device that needs it (O(stages) each time)
            links = neighbours(instance)
        rows.append(_read_items(instance, table, d, order, links, seen, unknown, placed))
    if unknown or len(seen) != len(table.passes) or len(set(seen)) != len(seen):
        counts = [0] * len(table.passes)
        for x in seen:
            counts[x] += 1
        strangers = sorted(set(unknown))
        if len(strangers) <= 3:
            problems += [f"pass {format_pass(p)} is not in the instance" for p in strangers]
        else:
            problems.append(f"{len(strangers)} passes are not in the instance: "
                            f"{_first_few(strangers)}")
        repeated = sorted((table.passes[i], n) for i, n in enumerate(counts) if n > 1)
        problems += [f"pass {format_pass(p)} appears {n} times" for p, n in repeated[:10]]
        if len(repeated) > 10:
            problems.append(f"{len(repeated) - 10} more pass(es) appear more than once")
        missing = sorted(table.passes[i] for i, n in enumerate(counts) if n == 0)
        if missing:
            problems.append(f"{len(missing)} pass(es) missing: {_first_few(missing)}")
    return problems + placed, rows


def _first_few(passes: list[Pass], shown: int = 10) -> str:
    """The first `shown` passes of a list for a one-line message, and how many more."""
    text = ", ".join(format_pass(p) for p in passes[:shown])
    return text + (f" and {len(passes) - shown} more" if len(passes) > shown else "")


_first = operator.itemgetter(0)


def _read_items(instance: Instance, table: _Table, d: int, order: tuple[Item, ...], links,
                seen: list[int], unknown: list[Pass], placed: list[str]) -> list:
    """Device `d`'s items one by one: their ids (into `seen`), unknown passes and problems
    (`links`: neighbours(instance))."""
    get, device, fused = table.index.get, table.device, table.fused
    row = []
    for item in order:
        if len(item) == 1:
            x = get(item[0])
            if x is None:
                unknown.append(item[0])
            else:
                seen.append(x)
                if device[x] != d:
                    placed.append(_misplaced(instance, item[0], d))
            row.append(x)
            continue
        known = fused.get(item)
        if known is not None and device[known[0][0]] == d:
            seen += known[0]  # a fused backward of the instance (a valid block)
            row.append(known)
            continue
        if not item:
            placed.append(f"device {d} has an empty block")
        placed.extend(block_problems(instance, item, links))
        ids = []
        for p in item:
            x = get(p)
            if x is None:
                unknown.append(p)
            else:
                seen.append(x)
                if device[x] != d:
                    placed.append(_misplaced(instance, p, d))
            ids.append(x)
        row.append(_block(instance, table, item, tuple(ids)) if item and None not in ids else None)
    return row


def _misplaced(instance: Instance, p: Pass, d: int) -> str:
    return (f"pass {format_pass(p)} is on device {d} but stage {p[0]} "
            f"lives on device {instance.device_of(p[0])}")


class _Device:
    """One device's progress through its order: where it is, its clock, memory and history."""

    __slots__ = ("position", "clock", "level", "peak", "busy", "curve", "starts", "ends",
                 "violations")

    def __init__(self, clock: float, static: float):
        self.position = 0
        self.clock = clock
        self.level = self.peak = static
        self.busy = 0.0
        self.curve = [(0.0, static)]  # (time, memory level) after each change
        self.starts: list[float] = []  # per item that ran
        self.ends: list[float] = []
        self.violations: list[str] = []  # the first new peaks over the cap


def _simulate(instance: Instance, schedule: Schedule, rows):
    """ASAP times and memory per item, for a schedule whose structure is valid.

    Each device runs its items in order until one waits for a pass not yet done; it resumes
    when that pass ends. Returns (devices, stuck): each device's _Device and, per device that
    could not finish, its first item that never ran with what it waits for.
    """
    table = _table(instance)
    dep, gap, cost, adds, releases = table.dep, table.gap, table.cost, table.add, table.release
    end: list[float | None] = [None] * len(table.passes)  # end of the item that ran each pass
    waiting: list[list[int] | None] = [None] * len(table.passes)  # devices waiting for a pass
    release = schedule.release if schedule.release is not None else [0.0] * len(rows)
    states = [_Device(float(r), m) for r, m in zip(release, instance.static_memory)]
    caps = instance.cap
    todo = list(range(len(rows) - 1, -1, -1))
    while todo:
        d = todo.pop()
        state = states[d]
        row, i, now = rows[d], state.position, state.clock
        level, peak, busy = state.level, state.peak, state.busy
        begun, done, step = state.starts.append, state.ends.append, state.curve.append
        n = len(row)
        while i < n:
            x = row[i]
            if x.__class__ is int:  # one pass: at most one dependency
                q = dep[x]
                if q >= 0:
                    ready = end[q]
                    if ready is None:
                        _wait(waiting, q, d)
                        break
                    ready += gap[x]
                    if ready > now:
                        now = ready
                finish = end[x] = now + cost[x]
                add, freed = adds[x], releases[x]
                if waiting[x] is not None:
                    todo.extend(waiting[x])
                    waiting[x] = None
            else:  # a block starts once the inputs of all its passes have arrived
                blocked = -1
                ids = x[0]
                for y in ids:
                    q = dep[y]
                    if q >= 0 and q not in ids:
                        ready = end[q]
                        if ready is None:
                            blocked = q
                            break
                        ready += gap[y]
                        if ready > now:
                            now = ready
                if blocked >= 0:
                    _wait(waiting, blocked, d)
                    break
                finish = now + x[1]
                add, freed = x[2], x[3]
                for y in ids:
                    end[y] = finish
                    if waiting[y] is not None:
                        todo.extend(waiting[y])
                        waiting[y] = None
            begun(now)
            done(finish)
            busy += finish - now
            # memory an item takes is held from its start, memory it frees leaves at its end
            if add:
                level += add
                step((now, level))
            if level > peak:
                peak = level
                if caps is not None and not fits(level, caps[d]) and len(state.violations) < 20:
                    unit = instance.memory_unit
                    state.violations.append(f"device {d} holds {readable(level, unit)} > cap "
                                            f"{readable(caps[d], unit)} after "
                                            f"{format_item(schedule.orders[d][i])}")
            if freed:
                level -= freed
                step((finish, level))
            now = finish
            i += 1
        state.position, state.clock, state.level, state.peak, state.busy = i, now, level, peak, busy
    stuck = []
    if any(state.position < len(row) for state, row in zip(states, rows)):
        links = neighbours(instance)
        where = {p: (d, i) for d, order in enumerate(schedule.orders)
                 for i, item in enumerate(order) for p in item}
        for d, order in enumerate(schedule.orders):
            i = states[d].position
            if i < len(order):
                item = order[i]
                blockers = [q for p in item for q in dependencies(instance, p, links)
                            if q in where and where[q] != (d, i)
                            and where[q][1] >= states[where[q][0]].position]
                stuck.append((d, item, blockers))
    return states, stuck


def _wait(waiting: list, q: int, d: int) -> None:
    if waiting[q] is None:
        waiting[q] = [d]
    else:
        waiting[q].append(d)


def _deadlock_message(stuck) -> str:
    parts = []
    for d, item, blockers in stuck:
        waits = ", ".join(format_pass(q) for q in blockers) or "an earlier pass on its device"
        parts.append(f"device {d} is stuck on {format_item(item)} (waits for {waits})")
    return "the order deadlocks: " + "; ".join(parts)


def validate(instance: Instance, schedule: Schedule) -> list[str]:
    """Every problem with a schedule, one message each; an empty list means it is valid."""
    problems, rows = _read(instance, schedule, "validate()")
    if problems:
        return problems
    states, stuck = _simulate(instance, schedule, rows)
    if stuck:
        return [_deadlock_message(stuck)]
    return list(_timeline(instance, schedule, states).cap_violations)


def check(instance: Instance, schedule: Schedule) -> Timeline:
    """evaluate() that also rejects a schedule over the memory cap."""
    timeline = evaluate(instance, schedule)
    if not timeline.fits_cap:
        raise ZboptError("; ".join(timeline.cap_violations))
    return timeline


def evaluate(instance: Instance, schedule: Schedule) -> Timeline:
    """Exact ASAP timing and metrics. Raises ZboptError on a malformed or deadlocking order.

    A schedule over the memory cap is evaluated; `fits_cap` and `cap_violations` say so.
    """
    problems, rows = _read(instance, schedule, "evaluate()")
    if problems:
        raise ZboptError("invalid schedule: " + "; ".join(problems))
    states, stuck = _simulate(instance, schedule, rows)
    if stuck:
        raise ZboptError(_deadlock_message(stuck))
    return _timeline(instance, schedule, states)


def _timeline(instance: Instance, schedule: Schedule, states: list[_Device]) -> Timeline:
    device_span = tuple((state.starts[0], state.ends[-1]) if state.starts else (0.0, 0.0)
                        for state in states)
    busy = tuple(state.busy for state in states)
    peaks = tuple(state.peak for state in states)
    makespan = max(e for _, e in device_span)
    span = max(e - s for s, e in device_span)
    ideal = max(busy)
    caps = instance.cap
    return Timeline(
        instance=instance, schedule=schedule,
        item_times=tuple(tuple(zip(state.starts, state.ends)) for state in states),
        makespan=makespan, span=span, ideal=ideal,
        bubble_rate=(span - ideal) / span if span else 0.0,
        busy=busy, idle=tuple(span - b for b in busy),
        device_span=device_span, peak_memory=peaks,
        memory_curve=tuple(tuple(state.curve) for state in states),
        fits_cap=caps is None or all(fits(pk, c) for pk, c in zip(peaks, caps)),
        # the first 20 in device order, as a reader scans them
        cap_violations=tuple(v for state in states for v in state.violations)[:20],
    )


def _pass_times(instance: Instance, schedule: Schedule, item_times):
    """(start, end) of every pass: a pass alone takes its item's interval, the passes of a block
    share it in proportion to their costs (for display)."""
    table = _table(instance)
    cost, index = table.cost, table.index
    start: dict[Pass, float] = {}
    end: dict[Pass, float] = {}
    for order, times in zip(schedule.orders, item_times):
        for item, (t0, t1) in zip(order, times):
            duration = t1 - t0
            if len(item) == 1:
                start[item[0]], end[item[0]] = t0, t0 + duration
                continue
            raw = _block(instance, table, item, tuple(index[p] for p in item))[4]
            cursor = t0
            for p in item:
                length = cost[index[p]] * duration / raw
                start[p], end[p] = cursor, cursor + length
                cursor += length
    return start, end
