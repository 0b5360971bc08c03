"""The scip backend: one module behind the backend protocol, the shared MILP model."""

import pytest

from zbopt.instance import Instance
from zbopt.registry import get_method
from zbopt.schedule import validate
from zbopt.solvers import solve
from zbopt.solvers.api import _schedule_from_starts, backend_inputs, run_backend

pytest.importorskip("pyscipopt")


def test_scip_is_a_registered_solver_backend():
    method = get_method("scip", "solver")
    assert method.kind == "solver" and callable(method.backend)


@pytest.mark.parametrize("instance", [
    Instance(devices=3, microbatches=4, t_f=5, t_b=6, t_w=4, comm=1, m_b=2, m_w=1,
             memory_cap="1p"),
    Instance(devices=2, microbatches=3, t_f=3, t_b=3, t_w=2, comm=1, m_b=2, m_w=1,
             placement="v", memory_cap="1p"),
], ids=["contiguous-p3", "v-p2"])
def test_scip_proves_the_same_optimum_as_cbc_and_returns_a_valid_order(instance):
    scaled, scale, hint, horizon = backend_inputs(instance)
    values = {}
    for name in ("scip", "cbc"):
        raw = run_backend(name, scaled, objective="span", time_limit=600, threads=2, hint=hint,
                          horizon=horizon)
        assert raw.status == "optimal", (name, raw.message)
        schedule = _schedule_from_starts(instance, scaled, raw.starts, "span", scale, name,
                                         raw.orders)
        assert validate(instance, schedule) == []
        values[name] = raw.objective
    assert values["scip"] == values["cbc"]


def test_scip_through_solve_proves_the_tied_zero_length_case():
    instance = Instance(placement="v", devices=2, microbatches=2, t_f=2, t_b=0, t_w=4, comm=0,
                        m_b=2, m_w=1, memory_cap=[4, 6])
    result = solve(instance, solver="scip", time_limit=600, prove_with_bounds=False)
    assert result.status == "optimal" and result.objective == 28


def test_a_cap_no_schedule_fits_is_infeasible_for_scip_too():
    instance = Instance(devices=2, microbatches=4, placement="interleaved", m_b=2, m_w=1,
                        memory_cap=3)
    assert solve(instance, solver="scip", time_limit=5).status == "infeasible"
