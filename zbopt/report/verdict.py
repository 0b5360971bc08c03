"""The verdict of a comparison: which schedule to use, in plain sentences (compare, report)."""

from __future__ import annotations

from typing import Optional, Sequence

from ..instance import Instance
from ..result import Result
from .numbers import figure, gap_text


def placement_text(result: Result) -> str:
    inst = result.instance
    return inst.placement + (f"/{inst.chunks}" if inst.placement == "interleaved" else "")


def over_cap(timeline) -> str:
    """Where a schedule does not fit: the first device over its cap, "device 3: peak 8.5 > cap
    8" ("" where it fits); with caps per device the largest peak and cap do not say it."""
    from ..instance import within_cap
    cap = timeline.instance.cap
    if cap is None:
        return ""
    for d, (peak, limit) in enumerate(zip(timeline.peak_memory, cap)):
        if not within_cap(peak, limit):
            return f"device {d}: peak {figure(peak)} > cap {figure(limit)}"
    return ""


def cap_text(instance: Instance) -> str:
    """An instance's cap as written, readable: "2p", "24,000", or per device "12/11/10/...";
    "unlimited" without one."""
    spec = instance.memory_cap
    if instance.cap is None:
        return "unlimited"
    if isinstance(spec, (list, tuple)):
        return "per device " + "/".join(x if isinstance(x, str) else figure(x) for x in spec)
    return spec if isinstance(spec, str) else figure(spec)


def objective_of(rows: Sequence[Result]) -> str:
    """The objective the rows were judged by (span unless every method was asked for another):
    the one their lower bounds, gaps and proofs are about."""
    names = {r.objective_name for r in rows if r.applies}
    return names.pop() if len(names) == 1 else "span"


def measure(result: Result, objective: str, unit: str = "") -> str:
    """"span 24 ms", or under makespan "makespan 27 ms (span 24 ms)": the objective first."""
    tl = result.timeline
    text = f"{objective} {figure(tl.objective(objective))}{unit}"
    if objective != "span":
        text += f" (span {figure(tl.span)}{unit})"
    return text


def order_key(objective: str):
    """Rows by the objective, then by span (under makespan, equal makespans: the shorter span)."""
    return lambda r: (r.timeline.objective(objective), r.timeline.span)


def _best(rows: Sequence[Result], objective: str, placement: Optional[str] = None):
    from ..compare import best_of
    best = best_of(rows, objective, placement)
    if best is None:
        return None
    ties = [r for r in rows if r.fits() and (placement is None or r.placement == placement)
            and r.timeline.objective(objective) == best.timeline.objective(objective)]
    return min(ties, key=order_key(objective))


def verdict(instance: Instance, rows: Sequence[Result],
            objective: Optional[str] = None) -> list[str]:
    """The best schedule that fits the cap (any placement), the best on the instance's own
    placement when it differs, and what each solver proved, with the scope of the proof.

    Best and proofs are by `objective` (default: the one the rows were judged by); a proof
    about the makespan is never stated as one about the span."""
    objective = objective or objective_of(rows)
    unit = f" {instance.time_unit}" if instance.time_unit else ""
    best = _best(rows, objective)
    if best is None:
        peaks = [max(r.timeline.peak_memory) for r in rows if r.applies]
        if not peaks:  # not the cap: no method made a schedule (each row says why)
            return [f"verdict: no method gives a schedule for this instance (each says why): "
                    f"`zbopt solve` searches its {instance.placement} placement directly"]
        return [f"verdict: no schedule fits the memory cap (the lowest peak of any method is "
                f"{figure(min(peaks))}): raise the cap (--mem)"]
    lines = [f"verdict: use {best.method} ({placement_text(best)} placement): "
             f"{measure(best, objective, unit)}, bubble rate {best.bubble_rate:.2%}, fits the cap"]
    own = _best(rows, objective, instance.placement)
    if own is None:
        made = any(r.applies and r.placement == instance.placement for r in rows)
        lines.append(f"on the instance's own placement ({instance.placement}): "
                     + ("no schedule fits the cap" if made else "no method applies"))
    elif own is not best:
        lines.append(f"on the instance's own placement ({instance.placement}): {own.method}, "
                     f"{measure(own, objective, unit)}, bubble rate {own.bubble_rate:.2%}")
    for r in rows:
        if r.kind != "solver" or not r.applies:
            continue
        scope = f"among {r.instance.placement} schedules of single passes"
        proved = r.objective_name  # what the solver optimised and its bound is about
        value = f"{proved} {figure(r.objective)}{unit}"
        if r.status == "optimal":
            lines.append(f"{r.method}: {value} is optimal {scope} (it meets the "
                         f"{r.bound_name} lower bound on the {proved})")
        else:
            gap = gap_text(r.gap)
            lines.append(f"{r.method}: {value} is within {gap} of the optimal {proved} {scope} "
                         f"({r.status}; lower bound {figure(r.lower_bound)}{unit})")
    return lines
