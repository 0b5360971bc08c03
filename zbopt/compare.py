"""Run every applicable method on an instance, each judged by evaluate(), as Results."""

from __future__ import annotations

from typing import Iterable, Optional

from .errors import ZboptError
from .instance import Instance
from .registry import methods, run
from .result import Result


def run_method(name: str, instance: Instance, **params) -> Result:
    """One registered method (see zbopt.registry.run)."""
    return run(name, instance, **params)


def compare(instance: Instance, methods_: Iterable[str] | None = None, chunks: int = 0,
            objective: str = "span") -> list[Result]:
    """Every schedule generator (or the ones named) on `instance`, as Results.

    `chunks` re-places a contiguous instance with that many chunks for the interleaved
    methods (default: each method's own). Solvers run only when named.
    """
    registry = methods("schedule")
    names = list(methods_) if methods_ is not None else list(registry)
    if any(n not in registry for n in names):  # a solver named: only then import the solvers
        registry = methods()
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise ZboptError(f"unknown method(s) {', '.join(unknown)}: choose from "
                         f"{', '.join(sorted(registry))}")
    rows = []
    for name in names:
        target = instance
        if chunks and instance.placement == "contiguous" \
                and registry[name].placement == "interleaved" and registry[name].kind != "solver":
            target = instance.with_placement("interleaved", chunks)
        rows.append(run(name, target, objective=objective))
    return rows


def best_of(results: Iterable[Result], objective: str = "span",
            placement: Optional[str] = None) -> Optional[Result]:
    """The result with the best objective among those that fit the cap (on `placement`)."""
    best: Optional[Result] = None
    for r in results:
        if not r.fits() or (placement is not None and r.placement != placement):
            continue
        if best is None or r.timeline.objective(objective) < best.timeline.objective(objective):
            best = r
    return best


def best_schedule(instance: Instance, objective: str = "span",
                  placement_only: bool = True) -> Optional[Result]:
    """The best generator result that fits the cap, among methods on the instance's own
    placement (with placement_only: a solver warm start needs the same passes)."""
    return best_of(compare(instance, objective=objective), objective,
                   instance.placement if placement_only else None)
