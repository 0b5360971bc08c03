"""Run every applicable schedule family and heuristic on an instance, judged by evaluate()."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Optional

from .bounds import best_lower_bound
from .errors import ZboptError
from .families import families, prepare
from .instance import Instance
from .schedule import Timeline, evaluate


@dataclass(frozen=True)
class Row:
    """One method on one instance: a timeline, or the reason the method does not apply."""

    method: str
    kind: str  # handwritten, heuristic, solver
    instance: Instance  # the instance as placed for this method
    timeline: Optional[Timeline] = None
    reason: str = ""

    @property
    def applies(self) -> bool:
        return self.timeline is not None

    def as_dict(self) -> dict:
        out: dict = {"method": self.method, "kind": self.kind, "placement": self.instance.placement,
                     "chunks": self.instance.chunks}
        if self.timeline is None:
            out.update(applies=False, reason=self.reason)
            return out
        tl = self.timeline
        out.update(applies=True, makespan=tl.makespan, span=tl.span, ideal=tl.ideal,
                   bubble_rate=tl.bubble_rate, peak_memory=list(tl.peak_memory),
                   memory_cap=list(tl.instance.cap) if tl.instance.cap else None,
                   fits_cap=tl.fits_cap, lower_bound=self.lower_bound,
                   gap_to_bound=self.gap_to_bound)
        return out

    @property
    def lower_bound(self) -> Optional[float]:
        """The best lower bound on the span for this row's (placed) instance and cap.

        None where it does not apply: a schedule over the cap, or overlapped F&B blocks
        (an overlap discount can take a schedule below the bounds of single passes).
        """
        if self.timeline is None or not self.timeline.fits_cap or self.instance.overlap:
            return None
        return best_lower_bound(self.instance, "span")[1]

    @property
    def gap_to_bound(self) -> Optional[float]:
        bound = self.lower_bound
        if bound is None or not self.timeline.span:
            return None
        return max(0.0, (self.timeline.span - bound) / self.timeline.span)


def run_method(name: str, instance: Instance, **params) -> Row:
    """Generate and evaluate one registered method; a failed precondition becomes the reason."""
    family = families()[name]
    try:
        placed = prepare(family, instance)
        schedule = family.generate(placed, **{**family.defaults, **params})
        timeline = evaluate(placed, replace(schedule, method=name))
    except ZboptError as err:
        return Row(name, family.kind, instance, reason=str(err))
    return Row(name, family.kind, placed, timeline)


def compare(instance: Instance, methods: Iterable[str] | None = None) -> list[Row]:
    registry = families()
    names = list(methods) if methods is not None else list(registry)
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise ZboptError(f"unknown method(s) {', '.join(unknown)}: choose from "
                         f"{', '.join(sorted(registry))}")
    return [run_method(name, instance) for name in names]


def best_schedule(instance: Instance, objective: str = "span",
                  placement_only: bool = True) -> Optional[Row]:
    """The best row that fits the cap, among methods on the instance's own placement.

    With placement_only, methods that would re-place the instance are skipped, since their
    schedule is for a different problem (a solver warm start needs the same passes).
    """
    best: Optional[Row] = None
    for row in compare(instance):
        if not row.applies or not row.timeline.fits_cap:
            continue
        if placement_only and row.instance.placement != instance.placement:
            continue
        if best is None or row.timeline.objective(objective) < best.timeline.objective(objective):
            best = row
    return best
