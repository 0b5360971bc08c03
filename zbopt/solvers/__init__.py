"""Exact solvers (CP-SAT, MILP via PuLP with CBC or HiGHS) behind one solve() and SolveResult."""

from .result import SolveResult


def solve(instance, solver: str = "cpsat", **kwargs) -> SolveResult:
    from .api import solve as _solve
    return _solve(instance, solver=solver, **kwargs)


__all__ = ["SolveResult", "solve"]
