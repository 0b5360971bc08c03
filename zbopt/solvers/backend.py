"""The interface between solve() (api.py) and the backends (cpsat.py, milp.py).

solve() hands a backend an Instance whose costs are integers (scaled, `scale` reported), an
optional hint (start time of every pass from the best known schedule under the cap) and a
horizon: an upper bound on the objective (the warm start's value), so the backend searches
only schedules at least as good ("infeasible" from a backend means none within it). The backend
returns start times of every pass. solve() turns them into per-device
orders, evaluates them with the one evaluator and reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..dag import Pass


@dataclass(frozen=True)
class BackendResult:
    status: str  # "optimal", "feasible", "infeasible", "unknown", as the backend proved it
    starts: Optional[dict[Pass, int]]  # start time of every pass (scaled integer time)
    objective: Optional[float]  # the backend's objective value (scaled)
    bound: Optional[float]  # the backend's proven lower bound (scaled)
    message: str = ""
    extra: dict = field(default_factory=dict)
