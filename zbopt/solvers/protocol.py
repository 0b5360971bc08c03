"""The protocol between solve() (api.py) and the solver backends (backends/, one module each).

solve() hands a backend a BackendRequest: an Instance whose costs and memory are integers
(scaled, the scale reported by solve()), the objective, the time limit and threads, an optional
hint (start time of every pass from the best known schedule under the cap) and a horizon, an
upper bound on the objective (the warm start's value), so the backend searches only schedules
at least as good ("infeasible" from a backend means none within it). The backend returns a
BackendResult: start times of every pass and, where it knows them, each device's order (which
settles ties between zero-length passes). solve() turns them into a Schedule, judges it with
the one evaluator and reports a Result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional, Protocol

from ..instance import Instance
from ..passes import Pass

BACKEND_STATUSES = ("optimal", "feasible", "infeasible", "unknown")


@dataclass(frozen=True)
class BackendRequest:
    instance: Instance  # integer costs, comm, memory and caps
    objective: str = "span"  # "span" or "makespan"
    time_limit: float = 60.0  # seconds
    threads: int = 1
    hint: Optional[dict[Pass, int]] = None  # start of every pass of a schedule within the cap
    horizon: Optional[int] = None  # objective <= horizon (None: the backend picks a safe one)
    symmetry: bool = True  # passes of one kind on one stage run in micro-batch order
    # a proven lower bound on the objective (scaled) from beyond zbopt.bounds (solve()'s device
    # relaxation): the backend may bound its objective by it and stop once a schedule meets it
    lower: Optional[int] = None
    options: Mapping[str, object] = field(default_factory=dict)  # backend-specific switches
    # called as the search improves: (incumbent objective or None, proven bound or None), in
    # the request's scaled time; a backend that cannot report progress never calls it
    on_progress: Optional[Callable[[Optional[float], Optional[float]], None]] = None


@dataclass(frozen=True)
class BackendResult:
    status: str  # one of BACKEND_STATUSES, as the backend proved it
    starts: Optional[dict[Pass, int]]  # start time of every pass (scaled integer time)
    objective: Optional[float]  # the backend's objective value (scaled)
    bound: Optional[float]  # the backend's proven lower bound (scaled)
    message: str = ""
    orders: Optional[tuple[tuple[Pass, ...], ...]] = None  # per device, ties settled
    stats: Mapping[str, object] = field(default_factory=dict)  # diagnostics for benchmarks


class Backend(Protocol):
    """A solver backend: a callable from a request to a result."""

    def __call__(self, request: BackendRequest) -> BackendResult: ...
