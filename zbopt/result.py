"""Result: what one method (family, heuristic or solver) did on one instance.

Every command reports Results and every JSON document, sweep record and report row is a
`Result.to_dict()`. The numbers come from the one evaluator (`timeline`); a method never grades
itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from .instance import Instance, plain
from .schedule import Schedule, Timeline

# optimal: a schedule whose objective equals a proven lower bound; feasible: a solver's schedule
# with a gap; heuristic: a generated schedule, not searched; infeasible: no schedule fits the
# cap; not-applicable: the method's preconditions fail here; error: the method failed.
STATUSES = ("optimal", "feasible", "heuristic", "infeasible", "not-applicable", "error")
KINDS = ("handwritten", "heuristic", "solver")


# a gap this small (relative) is the rounding of sums of float costs, not a distance from the
# bound: zbopt.plan.search calls such a span optimal with the same tolerance
GAP_TOLERANCE = 1e-9


def relative_gap(value: float, bound: float) -> float:
    """(value - bound) / value: how far above a lower bound a span is, as a share of the span;
    the one definition of a gap (Result.gap, sweep reports, the benchmarks' tables). Within
    GAP_TOLERANCE of zero it is 0 (a span that meets its bound up to float rounding)."""
    gap = (value - bound) / value
    return 0.0 if abs(gap) <= GAP_TOLERANCE else gap


def _plain_value(value: Any) -> Any:
    """A parameter's value with numpy's scalars and arrays as plain Python values."""
    tolist = getattr(value, "tolist", None)
    if callable(tolist) and isinstance(getattr(value, "ndim", None), int):
        value = tolist()  # a numpy scalar or array: its Python number(s), bool or list
    if isinstance(value, (list, tuple)):
        return type(value)(_plain_value(x) for x in value)
    return plain(value)


@dataclass(frozen=True)
class Result:
    """One method on one instance. `instance` is the instance as placed for the method (its cap
    is the absolute per-device cap of the instance as written)."""

    method: str
    kind: str  # handwritten, heuristic, solver
    status: str
    instance: Instance
    timeline: Optional[Timeline] = None
    lower_bound: Optional[float] = None  # proven bound on the objective, same time unit
    bound_name: Optional[str] = None  # which argument proves it
    runtime: float = 0.0  # wall seconds the method took (generation + evaluation, or solving)
    message: str = ""
    objective_name: str = "span"
    params: dict = field(default_factory=dict)
    # solvers: the best registered method on the same problem (the warm start) and its value
    best_heuristic: Optional[str] = None
    best_heuristic_objective: Optional[float] = None
    scale: Optional[float] = None  # solvers: costs were multiplied by this for integer models
    backend_status: Optional[str] = None  # solvers: what the backend itself proved
    warm_start: Optional[str] = None  # solvers: the schedule the search started from
    min_feasible_cap: Optional[tuple] = None  # infeasible: the smallest cap per device

    def __post_init__(self) -> None:
        # params as plain values (numpy's scalars and arrays as Python's), as Instance keeps
        # its numbers: to_dict() is then always a JSON document
        object.__setattr__(self, "params", {key: _plain_value(value)
                                            for key, value in dict(self.params).items()})

    # ----- derived ---------------------------------------------------------------------------

    @property
    def applies(self) -> bool:
        return self.timeline is not None

    @property
    def schedule(self) -> Optional[Schedule]:
        return self.timeline.schedule if self.timeline is not None else None

    @property
    def solver(self) -> Optional[str]:
        return self.method if self.kind == "solver" else None

    @property
    def placement(self) -> str:
        return self.instance.placement

    @property
    def span(self) -> Optional[float]:
        return self.timeline.span if self.timeline is not None else None

    @property
    def makespan(self) -> Optional[float]:
        return self.timeline.makespan if self.timeline is not None else None

    @property
    def ideal(self) -> Optional[float]:
        return self.timeline.ideal if self.timeline is not None else None

    @property
    def bubble_rate(self) -> Optional[float]:
        return self.timeline.bubble_rate if self.timeline is not None else None

    @property
    def peak_memory(self) -> Optional[tuple]:
        return self.timeline.peak_memory if self.timeline is not None else None

    @property
    def memory_cap(self) -> Optional[tuple]:
        return self.instance.cap

    @property
    def fits_cap(self) -> Optional[bool]:
        return self.timeline.fits_cap if self.timeline is not None else None

    @property
    def objective(self) -> Optional[float]:
        """The value of the objective the method was judged by (span unless asked otherwise)."""
        return self.timeline.objective(self.objective_name) if self.timeline is not None else None

    @property
    def gap(self) -> Optional[float]:
        """(objective - lower bound) / objective: how far from optimal at most."""
        value = self.objective
        if value is None or self.lower_bound is None or not value:
            return None
        return max(0.0, relative_gap(value, self.lower_bound))

    def fits(self) -> bool:
        """A schedule that fits the cap."""
        return self.timeline is not None and self.timeline.fits_cap

    # ----- documents -------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The one JSON shape of a result (every `--json`, sweep record and API document)."""
        inst = self.instance
        out: dict[str, Any] = {
            "method": self.method,
            "kind": self.kind,
            "status": self.status,
            "applies": self.applies,
            "placement": inst.placement,
            "chunks": inst.chunks,
            "objective_name": self.objective_name,
            "objective": self.objective,
            "span": self.span,
            "makespan": self.makespan,
            "ideal": self.ideal,
            "bubble_rate": self.bubble_rate,
            "peak_memory": list(self.peak_memory) if self.peak_memory is not None else None,
            "memory_cap": list(inst.cap) if inst.cap is not None else None,
            "fits_cap": self.fits_cap,
            "lower_bound": self.lower_bound,
            "bound_name": self.bound_name,
            "gap": self.gap,
            "runtime": self.runtime,
            "message": self.message,
            "time_unit": inst.time_unit,
            "memory_unit": inst.memory_unit,
        }
        if self.params:
            out["params"] = dict(self.params)
        if self.kind == "solver":
            out.update(solver=self.method, best_heuristic=self.best_heuristic,
                       best_heuristic_objective=self.best_heuristic_objective, scale=self.scale,
                       backend_status=self.backend_status, warm_start=self.warm_start)
        if self.min_feasible_cap is not None:
            out["min_feasible_cap"] = list(self.min_feasible_cap)
        return out
