"""SCIP keeps its time limit: PuLP sets it to the whole limit before it builds SCIP's model in
Python (seconds on large models), so zbopt sets it again, just before SCIP starts, to what is
left (SCIP ran 6.5 s past a 20 s limit on p=16, m=64 with uneven per-stage costs)."""

from __future__ import annotations

import time

import pulp
import pytest

from zbopt.instance import Instance
from zbopt.solvers.milp import LEAST_SECONDS, build_model, default_horizon

pytest.importorskip("pyscipopt")

from zbopt.solvers.backends import scip  # noqa: E402 (after the skip)

INSTANCE = Instance(devices=2, microbatches=2, t_f=5, t_b=6, t_w=4, comm=1, m_b=2, m_w=1)


def test_scip_gets_what_is_left_after_the_model_is_built(monkeypatch):
    limits = []
    build = pulp.SCIP_PY.buildSolverModel
    call = pulp.SCIP_PY.callSolver

    def slow_build(self, lp):
        build(self, lp)
        time.sleep(1.0)  # as PuLP building a large model

    def spy_call(self, lp):
        limits.append(lp.solverModel.getParam("limits/time"))
        return call(self, lp)

    monkeypatch.setattr(pulp.SCIP_PY, "buildSolverModel", slow_build)
    monkeypatch.setattr(pulp.SCIP_PY, "callSolver", spy_call)
    model = build_model(INSTANCE, "span", default_horizon(INSTANCE))
    outcome = scip._run_scip(model, 30.0, 1, False, "")
    assert outcome.has_solution
    assert limits and 0 < limits[0] <= 29.0  # not the whole 30 s again


def test_scip_past_its_deadline_still_gets_a_least_limit(monkeypatch):
    limits = []
    call = pulp.SCIP_PY.callSolver

    def spy_call(self, lp):
        limits.append(lp.solverModel.getParam("limits/time"))
        return call(self, lp)

    monkeypatch.setattr(pulp.SCIP_PY, "callSolver", spy_call)
    model = build_model(INSTANCE, "span", default_horizon(INSTANCE))
    solver = scip._SCIP(msg=False, timeLimit=30.0)
    solver.deadline = time.perf_counter() - 5  # already passed
    model.problem.solve(solver)
    assert limits == [pytest.approx(LEAST_SECONDS)]
