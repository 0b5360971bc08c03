"""Chrome trace / Perfetto JSON of an evaluated schedule.

One process per device (pid = device), one thread for its compute, every pass a complete ("X")
event with the evaluator's start and duration, blocks (fused backward, overlapped F&B) as an
enclosing event with their passes nested inside, and a counter ("C") track with the device's
activation memory. Perfetto UI and chrome://tracing open it (`zbopt export` prints where).

Trace timestamps are microseconds; the instance's time unit is converted when it is a known
one (ns, us, ms, s), otherwise one instance unit is drawn as one microsecond (and said so in the
trace's metadata).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..dag import format_pass
from ..schedule import Timeline, format_item

_TO_MICROSECONDS = {"ns": 1e-3, "us": 1.0, "µs": 1.0, "ms": 1e3, "s": 1e6}
_KIND_NAME = {"F": "forward", "B": "backward input", "W": "backward weight"}
# Perfetto/Chrome reserved colour names, so F, B, W look the same on every device
_KIND_COLOUR = {"F": "thread_state_running", "B": "thread_state_iowait",
                "W": "thread_state_unknown"}


def time_scale(time_unit: str) -> tuple[float, bool]:
    """(microseconds per instance unit, whether the unit is known)."""
    unit = time_unit.strip().lower()
    if unit in _TO_MICROSECONDS:
        return _TO_MICROSECONDS[unit], True
    return 1.0, False


def _pass_event(p, t0: float, t1: float, device: int, scale: float, block: str = "") -> dict:
    stage, mb, kind = p
    args: dict[str, Any] = {"stage": stage, "microbatch": mb, "kind": _KIND_NAME[kind]}
    if block:
        args["block"] = block
    return {"name": format_pass(p), "cat": kind, "ph": "X", "pid": device, "tid": 0,
            "ts": t0 * scale, "dur": (t1 - t0) * scale, "cname": _KIND_COLOUR[kind],
            "args": args}


def trace_events(timeline: Timeline) -> list[dict]:
    """The trace's event list (see the module doc)."""
    instance, schedule = timeline.instance, timeline.schedule
    scale, _ = time_scale(instance.time_unit)
    events: list[dict] = []
    for d, order in enumerate(schedule.orders):
        stages = ",".join(str(s) for s in instance.stages_of(d))
        events.append({"name": "process_name", "ph": "M", "pid": d,
                       "args": {"name": f"device {d} (stages {stages})"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": d,
                       "args": {"sort_index": d}})
        events.append({"name": "thread_name", "ph": "M", "pid": d, "tid": 0,
                       "args": {"name": "compute"}})
        for item, (t0, t1) in zip(order, timeline.item_times[d]):
            if len(item) == 1:
                events.append(_pass_event(item[0], t0, t1, d, scale))
                continue
            name = format_item(item)
            kinds = {k for _, _, k in item}
            label = "overlapped F&B" if "F" in kinds else "fused backward"
            events.append({"name": name, "cat": "block", "ph": "X", "pid": d, "tid": 0,
                           "ts": t0 * scale, "dur": (t1 - t0) * scale,
                           "args": {"block": label, "passes": [format_pass(p) for p in item]}})
            for p in item:
                events.append(_pass_event(p, timeline.start[p], timeline.end[p], d, scale, name))
        cap = instance.cap[d] if instance.cap else None
        for t, level in timeline.memory_curve[d]:
            args = {"activation memory": level}
            if cap is not None:
                args["cap"] = cap
            events.append({"name": f"memory ({instance.memory_unit or 'units'})", "ph": "C",
                           "pid": d, "ts": t * scale, "args": args})
    return events


def chrome_trace(timeline: Timeline) -> dict:
    """The whole trace document: events plus metadata (method, metrics, time unit)."""
    instance = timeline.instance
    scale, known = time_scale(instance.time_unit)
    metrics = timeline.metrics()
    return {
        "traceEvents": trace_events(timeline),
        "displayTimeUnit": "ms",
        "otherData": {
            "producer": "zbopt",
            "method": timeline.schedule.method,
            "instance": instance.name,
            "time_unit": instance.time_unit or "(none)",
            "microseconds_per_unit": scale,
            "time_unit_known": known,
            "makespan": metrics["makespan"],
            "span": metrics["span"],
            "bubble_rate": metrics["bubble_rate"],
            "peak_memory": list(timeline.peak_memory),
        },
    }


def write_chrome_trace(path: str | Path, timeline: Timeline, force: bool = False) -> Path:
    """Write the trace, whole or not at all; never over an existing file without `force`."""
    from .outputs import write_file
    return write_file(path, json.dumps(chrome_trace(timeline)) + "\n", force)
