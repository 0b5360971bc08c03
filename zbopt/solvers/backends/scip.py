"""SCIP backend: the MILP of zbopt.solvers.milp solved by SCIP (pyscipopt, through PuLP)."""

from __future__ import annotations

import math
import time
from typing import Optional

import pulp

from ... import signals
from ...errors import ZboptError
from ...registry import register_backend
from ..milp import Model, SolverOutcome, seconds_left, solve_milp
from ..protocol import BackendRequest, BackendResult

# SCIP statuses that stop on a limit (a schedule may have been found)
_LIMITS = ("timelimit", "userinterrupt", "nodelimit", "totalnodelimit", "stallnodelimit",
           "gaplimit", "memlimit", "sollimit", "bestsollimit", "restartlimit")


class _SCIP(pulp.SCIP_PY):
    """PuLP's SCIP API, with SCIP's time limit set just before optimize() to what is left until
    `deadline` (time.perf_counter()): PuLP sets it to the whole limit before it builds SCIP's
    model, constraint by constraint in Python, which takes a while on large models."""

    deadline: Optional[float] = None

    def callSolver(self, lp):  # noqa: N802 (PuLP's name)
        if self.deadline is not None:
            left = seconds_left(self.deadline)
            lp.solverModel.setParam("limits/time", float(left))
        lp.solverModel.includeEventhdlr(_finisher(), "zbopt-finish",
                                        "stops the search when asked to finish now")
        super().callSolver(lp)


def _finisher():
    """A SCIP event handler that interrupts the solve, which keeps its best solution, at the
    next node or LP solved after the solvers were asked to finish now (SIGUSR1,
    zbopt.signals)."""
    from pyscipopt import SCIP_EVENTTYPE, Eventhdlr

    events = SCIP_EVENTTYPE.NODESOLVED | SCIP_EVENTTYPE.LPSOLVED

    class Finisher(Eventhdlr):
        def eventinit(self):
            self.model.catchEvent(events, self)

        def eventexit(self):
            self.model.dropEvent(events, self)

        def eventexec(self, event):
            if signals.finish_requested():
                self.model.interruptSolve()

    return Finisher()


def _run_scip(model: Model, time_limit: float, threads: int, warm: bool,
              workdir: str) -> SolverOutcome:
    if not pulp.SCIP_PY().available():
        raise ZboptError("SCIP is not available: pip install pyscipopt, or use solver 'cbc'")
    # Gap: objectives are integers, < 1 proves. SCIP's own search runs on one thread (its
    # concurrent mode is a separate build), so `threads` is not passed on.
    deadline = time.perf_counter() + time_limit
    solver = _SCIP(msg=False, timeLimit=time_limit, gapRel=0, gapAbs=0.999, warmStart=warm)
    solver.deadline = deadline
    model.problem.solve(solver)
    scip = model.problem.solverModel
    status = scip.getStatus()
    has_solution = scip.getNSols() > 0
    bound = scip.getDualbound()
    bound = float(bound) if bound is not None and math.isfinite(bound) else None
    if status == "optimal" and has_solution:
        outcome = "optimal"
    elif status == "infeasible":
        outcome, has_solution = "infeasible", False
    elif has_solution:
        outcome = "feasible"
    else:
        outcome = "unknown"
    if status not in _LIMITS + ("optimal", "infeasible"):
        outcome = "feasible" if has_solution else "unknown"
    # SCIP's own gap (on its scaled model, 1e+20 without a bound) is not zbopt's Result.gap:
    # only its status is said
    return SolverOutcome(outcome, has_solution, bound, f"SCIP: {status}")


def solve_scip(request: BackendRequest) -> BackendResult:
    return solve_milp(request, _run_scip, "scip")


register_backend("scip", "MILP (Zero Bubble ordering formulation) solved by SCIP (pyscipopt)",
                 solve_scip)
