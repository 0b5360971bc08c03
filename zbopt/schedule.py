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

import re
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from .errors import ZboptError
from .instance import Instance
from .passes import (
    Item,
    Pass,
    block_problems,
    dependencies,
    fits,
    format_pass,
    item_duration,
    item_memory,
    neighbours,
)

_PASS_RE = re.compile(r"^\s*(\d+)\s*([FBW])\s*(\d+)\s*$")


def parse_pass(text: str) -> Pass:
    match = _PASS_RE.match(text)
    if not match:
        raise ZboptError(f"{text!r} is not a pass: write {{stage}}{{kind}}{{microbatch}}, e.g. 0F1")
    return (int(match.group(1)), int(match.group(3)), match.group(2))


def format_item(item: Item) -> str:
    if len(item) == 1:
        return format_pass(item[0])
    return "(" + ";".join(format_pass(p) for p in item) + ")"


def parse_item(text: str) -> Item:
    text = text.strip()
    if text.startswith("(") and text.endswith(")"):
        return tuple(parse_pass(t) for t in text[1:-1].split(";"))
    return (parse_pass(text),)


def _as_item(x) -> Item:
    if isinstance(x, str):
        return parse_item(x)
    if len(x) == 3 and isinstance(x[2], str):
        return (tuple(x),)  # a single pass
    return tuple(tuple(p) for p in x)


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
        """From per-device lists of passes `(stage, mb, kind)`, items (tuples of passes) or text."""
        return cls(tuple(tuple(_as_item(x) for x in order) for order in orders), method,
                   tuple(release) if release is not None else None)

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
    start: dict[Pass, float]
    end: dict[Pass, float]
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


def structure_problems(instance: Instance, schedule: Schedule) -> list[str]:
    """Missing, duplicated, unknown and misplaced passes, and malformed blocks."""
    problems: list[str] = []
    if schedule.release is not None and (len(schedule.release) != schedule.devices
                                         or any(r < 0 for r in schedule.release)):
        problems.append("release must give one non-negative start time per device")
    if schedule.devices != instance.devices:
        return [f"the schedule has {schedule.devices} device orders, the instance "
                f"{instance.devices} devices"]
    expected = set(instance.passes())
    counts = Counter(schedule.passes())
    for p, n in sorted(counts.items()):
        if p not in expected:
            problems.append(f"pass {format_pass(p)} is not in the instance")
        elif n > 1:
            problems.append(f"pass {format_pass(p)} appears {n} times")
    missing = sorted(expected - set(counts))
    if missing:
        shown = ", ".join(format_pass(p) for p in missing[:10])
        more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
        problems.append(f"{len(missing)} pass(es) missing: {shown}{more}")
    links = neighbours(instance)
    for d, order in enumerate(schedule.orders):
        for item in order:
            if not item:
                problems.append(f"device {d} has an empty block")
            problems.extend(block_problems(instance, item, links))
            for p in item:
                if p in expected and instance.device_of(p[0]) != d:
                    problems.append(f"pass {format_pass(p)} is on device {d} but stage {p[0]} "
                                    f"lives on device {instance.device_of(p[0])}")
    return problems


def _simulate(instance: Instance, schedule: Schedule):
    """ASAP times per item (Kahn's algorithm over device order + dependency edges).

    Returns (item_times, stuck) where stuck lists, per device, the first item that never ran.
    """
    comm = instance.comm
    device_of = instance.device_of
    links = neighbours(instance)
    costs = {"F": instance.t_f, "B": instance.t_b, "W": instance.t_w}
    where: dict[Pass, tuple[int, int]] = {}
    for d, order in enumerate(schedule.orders):
        for i, item in enumerate(order):
            for p in item:
                where[p] = (d, i)
    # For every item: its external dependencies, as (device, index, lag)
    waiting = [[0] * len(order) for order in schedule.orders]
    dependants: dict[tuple[int, int], list[tuple[int, int, float]]] = {}
    for d, order in enumerate(schedule.orders):
        for i, item in enumerate(order):
            seen = set()
            for p in item:
                for q in dependencies(instance, p, links):
                    src = where[q]
                    if src == (d, i) or src in seen:
                        continue
                    seen.add(src)
                    gap = comm if device_of(q[0]) != d else 0
                    dependants.setdefault(src, []).append((d, i, gap))
                    waiting[d][i] += 1
            if i > 0:
                waiting[d][i] += 1
    ready_at = [[0.0] * len(order) for order in schedule.orders]
    if schedule.release is not None:
        for d, order in enumerate(schedule.orders):
            if order:
                ready_at[d][0] = float(schedule.release[d])
    times: list[list[tuple[float, float] | None]] = [[None] * len(o) for o in schedule.orders]
    queue = deque((d, 0) for d, order in enumerate(schedule.orders)
                  if order and waiting[d][0] == 0)
    done = 0
    while queue:
        d, i = queue.popleft()
        start = ready_at[d][i]
        item = schedule.orders[d][i]
        end = start + (costs[item[0][2]][item[0][0]] if len(item) == 1
                       else item_duration(instance, item))
        times[d][i] = (start, end)
        done += 1
        if i + 1 < len(schedule.orders[d]):
            if end > ready_at[d][i + 1]:
                ready_at[d][i + 1] = end
            waiting[d][i + 1] -= 1
            if waiting[d][i + 1] == 0:
                queue.append((d, i + 1))
        for d2, i2, gap in dependants.get((d, i), ()):
            if end + gap > ready_at[d2][i2]:
                ready_at[d2][i2] = end + gap
            waiting[d2][i2] -= 1
            if waiting[d2][i2] == 0:
                queue.append((d2, i2))
    stuck = []
    if done < sum(len(o) for o in schedule.orders):
        for d, order in enumerate(schedule.orders):
            for i, item in enumerate(order):
                if times[d][i] is None:
                    blockers = [q for p in item for q in dependencies(instance, p, links)
                                if q in where and where[q] != (d, i)
                                and times[where[q][0]][where[q][1]] is None]
                    stuck.append((d, item, blockers))
                    break
    return times, stuck


def _deadlock_message(stuck) -> str:
    parts = []
    for d, item, blockers in stuck:
        waits = ", ".join(format_pass(q) for q in blockers) or "an earlier pass on its device"
        parts.append(f"device {d} is stuck on {format_item(item)} (waits for {waits})")
    return "the order deadlocks: " + "; ".join(parts)


def validate(instance: Instance, schedule: Schedule) -> list[str]:
    """Every problem with a schedule, one message each; an empty list means it is valid."""
    problems = structure_problems(instance, schedule)
    if problems:
        return problems
    times, stuck = _simulate(instance, schedule)
    if stuck:
        return [_deadlock_message(stuck)]
    timeline = _timeline(instance, schedule, times)
    return list(timeline.cap_violations)


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
    problems = structure_problems(instance, schedule)
    if problems:
        raise ZboptError("invalid schedule: " + "; ".join(problems))
    times, stuck = _simulate(instance, schedule)
    if stuck:
        raise ZboptError(_deadlock_message(stuck))
    return _timeline(instance, schedule, times)


def _timeline(instance: Instance, schedule: Schedule, times) -> Timeline:
    start: dict[Pass, float] = {}
    end: dict[Pass, float] = {}
    busy, device_span, peaks, curves, violations = [], [], [], [], []
    caps = instance.cap
    for d, order in enumerate(schedule.orders):
        level = instance.static_memory[d]
        peak = level
        curve = [(0.0, level)]
        total = 0.0
        for item, (t0, t1) in zip(order, times[d]):
            duration = t1 - t0
            raw = sum(instance.cost(s, k) for s, _, k in item) or 1.0
            cursor = t0
            for p in item:  # sub-intervals for display, scaled to the block's length
                length = instance.cost(p[0], p[2]) * duration / raw if len(item) > 1 \
                    else duration
                start[p], end[p] = cursor, cursor + length
                cursor += length
            total += duration
            add, release = item_memory(instance, item)
            if add:
                level += add
                curve.append((t0, level))
            if level > peak:
                peak = level
                if caps is not None and not fits(level, caps[d]) and len(violations) < 20:
                    violations.append(f"device {d} holds {level:g} > cap {caps[d]:g} "
                                      f"after {format_item(item)}")
            if release:
                level -= release
                curve.append((t1, level))
        busy.append(total)
        device_span.append((times[d][0][0], times[d][-1][1]) if order else (0.0, 0.0))
        peaks.append(peak)
        curves.append(tuple(curve))
    makespan = max(e for _, e in device_span)
    span = max(e - s for s, e in device_span)
    ideal = max(busy)
    return Timeline(
        instance=instance, schedule=schedule, start=start, end=end,
        item_times=tuple(tuple(t) for t in times),
        makespan=makespan, span=span, ideal=ideal,
        bubble_rate=(span - ideal) / span if span else 0.0,
        busy=tuple(busy), idle=tuple(span - b for b in busy),
        device_span=tuple(device_span), peak_memory=tuple(peaks),
        memory_curve=tuple(curves),
        fits_cap=caps is None or all(fits(pk, c) for pk, c in zip(peaks, caps)),
        cap_violations=tuple(violations),
    )
