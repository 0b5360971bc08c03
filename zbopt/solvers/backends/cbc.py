"""CBC backend: the MILP of zbopt.solvers.milp solved by CBC (bundled with PuLP)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Optional

import pulp

from ...errors import ZboptError
from ...registry import register_backend
from ..milp import Model, SolverOutcome, solve_milp
from ..protocol import BackendRequest, BackendResult


def _cbc_path() -> str:
    bundled = pulp.apis.coin_api.PULP_CBC_CMD.pulp_cbc_path
    if Path(bundled).is_file():
        return bundled
    found = shutil.which("cbc")
    if found is None:
        raise ZboptError("CBC is not available (PuLP's bundled binary is missing): "
                         "reinstall pulp or use solver 'highs'")
    return found


_CBC_RESULT = re.compile(r"^Result - (.+?)\s*$", re.M)
# CBC's final summary when it stops early ("Lower bound:") and its "Partial search - best
# objective X (best possible Y)" line; progress lines are not read (they go stale).
_CBC_BOUND = (re.compile(r"^Lower bound:\s*(\S+)", re.M),
              re.compile(r"^Partial search - .*best possible (\S+?)\)", re.M))


def parse_cbc_log(text: str) -> tuple[str, Optional[float]]:
    """(CBC's own 'Result - ...' line, its best bound if it printed one)."""
    results = _CBC_RESULT.findall(text)
    result = results[-1] if results else ""
    bound = None
    for pattern in _CBC_BOUND:
        found = pattern.findall(text)
        if found:
            try:
                bound = float(found[-1].rstrip(",)"))
                break
            except ValueError:
                continue
    return result, bound


def _run_cbc(model: Model, time_limit: float, threads: int, warm: bool,
             workdir: str) -> SolverOutcome:
    log_path = Path(workdir) / "cbc.log"
    # Proximity search (improve the incumbent within a Hamming ball) turned a 60 s stall on
    # the warm start into a proof in under a second on p=4, m=8 caps 1.25p/1.5p; it needs an
    # incumbent, so only with a warm start. Gap: objectives are integers, < 1 proves.
    solver = pulp.COIN_CMD(path=_cbc_path(), msg=False, timeLimit=time_limit,
                           threads=threads if threads > 1 else None, warmStart=warm,
                           gapRel=0, gapAbs=0.999, logPath=str(log_path),
                           options=["proximity on"] if warm else None)
    solver.tmpDir = workdir  # PuLP's .mps/.sol/.mst files go in our temp dir
    model.problem.solve(solver)
    log = log_path.read_text() if log_path.exists() else ""
    result, bound = parse_cbc_log(log)
    sol = model.problem.sol_status
    has_solution = sol in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible)
    lowered = result.lower()
    if lowered.startswith("optimal solution found") and sol == pulp.LpSolutionOptimal:
        status = "optimal"
    elif "infeasible" in lowered or (not result
                                     and model.problem.status == pulp.LpStatusInfeasible):
        status, has_solution = "infeasible", False
    elif has_solution:
        status = "feasible"  # PuLP calls this "Optimal"; CBC stopped on a limit
    else:
        status = "unknown"
    return SolverOutcome(status, has_solution, bound, f"CBC: {result or 'no result line'}")


def solve_cbc(request: BackendRequest) -> BackendResult:
    return solve_milp(request, _run_cbc, "cbc")


register_backend("cbc", "MILP (Zero Bubble ordering formulation) solved by CBC, bundled with "
                 "PuLP", solve_cbc)
