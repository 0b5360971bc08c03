"""HiGHS backend: the MILP of zbopt.solvers.milp solved by HiGHS (highspy)."""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from typing import Optional

import pulp

from ... import signals
from ...registry import register_backend
from ..milp import Model, SolverOutcome, seconds_left, solve_milp
from ..protocol import BackendRequest, BackendResult


@contextlib.contextmanager
def _stdout_silenced():
    """Point file descriptor 1 at /dev/null for the block (C-level prints included)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _highs_class():
    class _HiGHS(pulp.HiGHS):
        """PuLP's HiGHS API, plus a warm start: PuLP builds the highspy model; before running
        it we hand HiGHS the variables' initial values as a starting solution. HiGHS's time
        limit is set then too, to what is left until `deadline` (time.perf_counter()): PuLP
        set it to the whole limit before building the model, which took 2 s of a 9 s limit
        on a model of 4e5 rows."""

        warm = False
        deadline: Optional[float] = None

        def createAndConfigureSolver(self, lp):  # noqa: N802 (PuLP's name)
            # HiGHS prints its banner from C++ on the first Highs() of a process, before any
            # option can silence it; keep it off stdout (it would corrupt `--json` output).
            with _stdout_silenced():
                super().createAndConfigureSolver(lp)

        def callSolver(self, lp):  # noqa: N802 (PuLP's name)
            import highspy
            # HiGHS keeps one thread pool per process and refuses to run (status "Not Set")
            # when `threads` differs from the pool's size: rebuild the pool for this run.
            highspy.Highs.resetGlobalScheduler(True)
            if self.warm:
                sol = highspy.HighsSolution()
                sol.col_value = [float(v.varValue or 0.0)
                                 for v in sorted(lp.variables(), key=lambda v: v.index)]
                sol.value_valid = True
                lp.solverModel.setSolution(sol)
            if self.deadline is not None:
                left = seconds_left(self.deadline)
                lp.solverModel.setOptionValue("time_limit", float(left))
            highs = lp.solverModel

            def finish(event) -> None:  # asked to finish now (SIGUSR1): stop, keep the best
                if signals.finish_requested():
                    event.interrupt()

            for hook in (highs.cbSimplexInterrupt, highs.cbIpmInterrupt, highs.cbMipInterrupt):
                hook.subscribe(finish)
            highs.run()

    return _HiGHS


def _run_highs(model: Model, time_limit: float, threads: int, warm: bool,
               workdir: str) -> SolverOutcome:
    import highspy
    deadline = time.perf_counter() + time_limit
    solver = _highs_class()(msg=False, timeLimit=time_limit, threads=threads,
                            gapRel=0.0, gapAbs=0.999)
    solver.warm = warm
    solver.deadline = deadline
    model.problem.solve(solver)
    highs = model.problem.solverModel
    status_code = highs.getModelStatus()
    info = highs.getInfo()
    has_solution = info.primal_solution_status == 2  # kSolutionStatusFeasible
    bound = info.mip_dual_bound
    bound = None if bound is None or not math.isfinite(bound) else float(bound)
    name = highs.modelStatusToString(status_code)
    if status_code == highspy.HighsModelStatus.kNotset:
        raise pulp.PulpSolverError(f"HiGHS did not run (model status {name})")
    ms = highspy.HighsModelStatus
    if status_code == ms.kOptimal and has_solution:
        status = "optimal"
    elif status_code in (ms.kInfeasible, ms.kUnboundedOrInfeasible):
        status, has_solution = "infeasible", False
    elif has_solution:
        status = "feasible"
    else:
        status = "unknown"
    # HiGHS's own gap (on its scaled model) is not zbopt's Result.gap: only its status is said
    return SolverOutcome(status, has_solution, bound, f"HiGHS: {name}")


def solve_highs(request: BackendRequest) -> BackendResult:
    return solve_milp(request, _run_highs, "highs")


register_backend("highs", "MILP (Zero Bubble ordering formulation) solved by HiGHS (highspy)",
                 solve_highs)
