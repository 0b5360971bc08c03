"""The verdict of a comparison: which schedule to use, in plain sentences (compare, report)."""

from __future__ import annotations

from typing import Sequence

from ..instance import Instance
from ..result import Result
from .numbers import figure


def placement_text(result: Result) -> str:
    inst = result.instance
    return inst.placement + (f"/{inst.chunks}" if inst.placement == "interleaved" else "")


def verdict(instance: Instance, rows: Sequence[Result]) -> list[str]:
    """The best schedule that fits the cap (any placement), the best on the instance's own
    placement when it differs, and what each solver proved, with the scope of the proof."""
    from ..compare import best_of
    unit = f" {instance.time_unit}" if instance.time_unit else ""
    best = best_of(rows)
    if best is None:
        peaks = [max(r.timeline.peak_memory) for r in rows if r.applies]
        lowest = f" (the lowest peak of any method is {figure(min(peaks))})" if peaks else ""
        return [f"verdict: no schedule fits the memory cap{lowest}: raise the cap (--mem)"]
    lines = [f"verdict: use {best.method} ({placement_text(best)} placement): span "
             f"{figure(best.span)}{unit}, bubble rate {best.bubble_rate:.2%}, fits the cap"]
    own = best_of(rows, placement=instance.placement)
    if own is None:
        lines.append(f"on the instance's own placement ({instance.placement}): no schedule fits "
                     f"the cap")
    elif own is not best:
        lines.append(f"on the instance's own placement ({instance.placement}): {own.method}, "
                     f"span {figure(own.span)}{unit}, bubble rate {own.bubble_rate:.2%}")
    for r in rows:
        if r.kind != "solver" or not r.applies:
            continue
        scope = f"among {r.instance.placement} schedules of single passes"
        if r.status == "optimal":
            lines.append(f"{r.method}: span {figure(r.span)}{unit} is optimal {scope} (it meets "
                         f"the {r.bound_name} lower bound)")
        else:
            gap = "-" if r.gap is None else f"{r.gap:.2%}"
            lines.append(f"{r.method}: span {figure(r.span)}{unit} is within {gap} of the "
                         f"optimum {scope} ({r.status}; lower bound "
                         f"{figure(r.lower_bound)}{unit})")
    return lines
