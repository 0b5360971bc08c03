"""Exact solvers behind one solve() returning a Result; backends in backends/, one module each."""


# `--solver auto` (the commands' default) runs cpsat-lns from this many passes on an interleaved or V
# placement, where the full CP-SAT model barely moves the warm start within a minute
# (results/solver.md, reach: interleaved p=8, m=32 at 1p, 1,536 passes, 60 s: cpsat 1.345%,
# cpsat-lns 0.893%), and cpsat otherwise (there cpsat-lns is not measured better)
AUTO = "auto"
LNS_FROM_PASSES = 1000


def default_solver(instance) -> str:
    """The solver `--solver auto` runs on `instance`."""
    large = instance.num_passes >= LNS_FROM_PASSES
    return "cpsat-lns" if large and instance.placement in ("interleaved", "v") else "cpsat"


def solve(instance, solver: str = "cpsat", **kwargs):
    from .api import solve as _solve
    return _solve(instance, solver=solver, **kwargs)


__all__ = ["AUTO", "default_solver", "solve"]
