"""Exact solvers behind one solve() returning a Result; backends in backends/, one module each."""


def solve(instance, solver: str = "cpsat", **kwargs):
    from .api import solve as _solve
    return _solve(instance, solver=solver, **kwargs)


__all__ = ["solve"]
