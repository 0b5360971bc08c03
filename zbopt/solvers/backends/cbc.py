"""CBC backend: the MILP of zbopt.solvers.milp solved by CBC (bundled with PuLP)."""

from __future__ import annotations

import math
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Optional

import pulp

from ... import signals
from ...errors import ZboptError
from ...registry import register_backend
from ..milp import Model, SolverOutcome, seconds_left, solve_milp
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


# How long past its time limit CBC may run before it is killed. After its limit CBC still
# finishes the node or LP it is in and writes its solution file; on a model of 4e5 rows and
# 7e4 columns it was seen to run minutes past "Exiting on maximum time" instead, and then the
# warm start (which solve() returns when the backend has no solution) is all it would give.
_GRACE_SECONDS, _GRACE_SHARE = 2.0, 0.1


def grace(time_limit: float) -> float:
    """Seconds CBC may overrun `time_limit` before it is stopped."""
    return max(_GRACE_SECONDS, _GRACE_SHARE * time_limit)


def _stop(cbc: subprocess.Popen) -> None:
    """Kill CBC and reap it (its files are in the caller's temporary directory)."""
    if cbc.poll() is None:
        cbc.kill()
    cbc.wait()


def _wait(cbc: subprocess.Popen, deadline: float) -> int:
    """CBC's exit code once it ends (subprocess.TimeoutExpired past `deadline`); asked to
    finish now (SIGUSR1, zbopt.signals), CBC gets SIGINT, on which it stops its search and
    writes the best solution it has."""
    sent = -math.inf  # when SIGINT was last sent
    while True:
        try:
            return cbc.wait(timeout=min(0.2, max(0.0, deadline - time.perf_counter())))
        except subprocess.TimeoutExpired:
            if time.perf_counter() >= deadline:
                raise
        # again each second: CBC only looks for it once its search has begun
        if signals.finish_requested() and time.perf_counter() - sent >= 1.0:
            sent = time.perf_counter()
            cbc.send_signal(signal.SIGINT)  # our own child, by its handle


def _run_cbc(model: Model, time_limit: float, threads: int, warm: bool,
             workdir: str) -> SolverOutcome:
    """CBC as a child process that is killed `grace()` seconds after its time limit.

    PuLP writes the model (MPS, names renamed) and the warm start (MST) and reads the solution
    back; zbopt starts CBC itself, so that it can stop it: CBC's own limit (`-sec`) is what is
    left of `time_limit` after writing the files.
    """
    started = time.perf_counter()
    deadline = started + time_limit + grace(time_limit)
    files = {ext: str(Path(workdir) / f"zbopt.{ext}") for ext in ("mps", "mst", "sol", "log")}
    # Proximity search (improve the incumbent within a Hamming ball) turned a 60 s stall on
    # the warm start into a proof in under a second on p=4, m=8 caps 1.25p/1.5p; it needs an
    # incumbent, so only with a warm start. Gap: objectives are integers, < 1 proves.
    solver = pulp.COIN_CMD(path=_cbc_path(), msg=False,
                           threads=threads if threads > 1 else None, warmStart=warm,
                           gapRel=0, gapAbs=0.999, timeMode="elapsed",
                           options=["proximity on"] if warm else None)
    lp = model.problem
    columns, column_names, row_names, _ = lp.writeMPS(files["mps"], rename=1)
    args = [solver.path, files["mps"]]
    if warm:
        solver.writesol(files["mst"], lp, columns, column_names, row_names)
        args += ["-mips", files["mst"]]
    limit = seconds_left(started + time_limit)
    args += ["-sec", f"{limit:.3f}"]
    for option in solver.options + solver.getOptions():
        name, *value = option.split()
        args += ["-" + name, *value]
    args += ["-solve", "-printingOptions", "normal", "-solution", files["sol"]]
    with open(files["log"], "w") as log_file:
        cbc = subprocess.Popen(args, stdout=log_file, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL)
    try:
        code = _wait(cbc, deadline)
    except subprocess.TimeoutExpired:
        _stop(cbc)
        _, bound = parse_cbc_log(Path(files["log"]).read_text())
        return SolverOutcome("unknown", False, bound,
                             f"CBC did not stop at its time limit ({limit:.3g} s) and was "
                             f"killed after {time.perf_counter() - started:.1f} s, without a "
                             f"solution")
    except BaseException:  # Ctrl-C (or anything else) while waiting: no CBC left running
        _stop(cbc)
        raise
    log = Path(files["log"]).read_text()
    if code == -signal.SIGINT and signals.finish_requested():  # before CBC handles SIGINT
        return SolverOutcome("unknown", False, None, "CBC: stopped on request before its search")
    if code != 0 or not Path(files["sol"]).exists():
        raise pulp.PulpSolverError(f"CBC exited with status {code}" if code != 0
                                   else "CBC wrote no solution file")
    status, values, _, _, _, sol_status = solver.readsol_MPS(files["sol"], lp, columns,
                                                             column_names, row_names)
    lp.assignVarsVals(values)
    lp.assignStatus(status, sol_status)
    result, bound = parse_cbc_log(log)
    sol = lp.sol_status
    has_solution = sol in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible)
    lowered = result.lower()
    if lowered.startswith("optimal solution found") and sol == pulp.LpSolutionOptimal:
        status = "optimal"
    elif "infeasible" in lowered or (not result and lp.status == pulp.LpStatusInfeasible):
        status, has_solution = "infeasible", False
    elif has_solution:
        status = "feasible"  # PuLP calls this "Optimal"; CBC stopped on a limit
    else:
        status = "unknown"
    if "ctrl-c" in lowered:  # CBC's line reads "User ctrl-cuser ctrl-c"
        result = "stopped on SIGINT"
    return SolverOutcome(status, has_solution, bound, f"CBC: {result or 'no result line'}")


def solve_cbc(request: BackendRequest) -> BackendResult:
    return solve_milp(request, _run_cbc, "cbc")


register_backend("cbc", "MILP (Zero Bubble ordering formulation) solved by CBC, bundled with "
                 "PuLP", solve_cbc)
