"""One result type for every solver backend (CP-SAT, CBC, HiGHS)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..schedule import Schedule, Timeline

STATUSES = ("optimal", "feasible", "infeasible", "unknown")


@dataclass(frozen=True)
class SolveResult:
    """What a solver found, judged by the one evaluator.

    `objective` is the evaluated objective of `schedule` (None when no schedule), `lower_bound`
    the best proven bound (in the instance's time unit, after undoing any integer scaling),
    `gap = (objective - lower_bound) / objective`. `status == "optimal"` only when
    objective == lower_bound.
    """

    status: str
    solver: str
    objective_name: str  # "span" or "makespan"
    schedule: Optional[Schedule]
    timeline: Optional[Timeline]
    objective: Optional[float]
    lower_bound: Optional[float]
    runtime: float
    scale: float = 1.0  # costs were multiplied by this to make them integers
    message: str = ""
    best_heuristic: Optional[str] = None
    best_heuristic_objective: Optional[float] = None
    extra: dict = field(default_factory=dict)

    @property
    def gap(self) -> Optional[float]:
        if self.objective is None or self.lower_bound is None or self.objective == 0:
            return None
        return max(0.0, (self.objective - self.lower_bound) / self.objective)
