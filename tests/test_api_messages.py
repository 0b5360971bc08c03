"""What a solve says is true: a warm start over the cap is said to go over the cap (not to be of
another instance), a backend's own gap (a different definition on its scaled model) is not
printed beside zbopt's, a known bound above a schedule found is not reported as the bound, and a
solve that returns the warm start says the solver found nothing better than it (or, when it
returned no schedule at all, says that)."""

import dataclasses

import pytest

from zbopt import registry
from zbopt.errors import ZboptError
from zbopt.instance import Instance
from zbopt.registry import run
from zbopt.schedule import evaluate
from zbopt.solvers.api import solve
from zbopt.solvers.protocol import BackendResult

INSTANCE = Instance(devices=2, microbatches=4, m_b=2, m_w=1)


def test_a_warm_start_over_the_cap_is_said_to_go_over_it():
    capped = INSTANCE.with_cap("1p")
    gpipe = run("gpipe", INSTANCE).schedule
    with pytest.raises(ZboptError) as err:
        solve(capped, warm_start=gpipe, time_limit=5)
    message = str(err.value)
    assert message.startswith("the warm start schedule (gpipe) goes over the memory cap: "
                              "device 0 holds ")
    assert message.endswith("; pass one that fits the cap (or warm_start=True)")
    assert "same instance" not in message


def test_a_warm_start_of_another_instance_still_says_so():
    other = run("1f1b", Instance(devices=2, microbatches=6)).schedule
    with pytest.raises(ZboptError, match=r"^the warm start schedule is not a valid schedule of "
                                         r"this instance: .*; pass a schedule of the same "
                                         r"instance \(or warm_start=True\)$"):
        solve(INSTANCE, warm_start=other, time_limit=5)


@pytest.mark.parametrize("solver, status", [("scip", "SCIP: optimal"), ("highs", "HiGHS: Optimal")])
def test_a_milp_backend_says_its_status_without_its_own_gap(solver, status):
    result = run(solver, INSTANCE.with_cap("1p"), time_limit=10, prove_with_bounds=False)
    assert result.message == status
    assert "gap" not in result.message


def test_a_known_bound_above_a_schedule_found_is_ignored_with_a_note():
    result = run("cpsat", INSTANCE, time_limit=5, known_bound=("x", 1000.0))
    assert result.lower_bound <= result.span
    assert result.bound_name != "x"
    assert f"known_bound 'x' = 1000 is above the span {result.span:g} of " in result.message
    assert result.message.endswith("(not a lower bound of this instance): ignored")


def test_a_known_bound_below_the_span_is_still_used():
    capped = INSTANCE.with_cap("1p")
    own = run("cpsat", capped, time_limit=5)
    result = run("cpsat", capped, time_limit=5, known_bound=("mine", own.lower_bound))
    assert "known_bound" not in result.message
    assert result.lower_bound == own.lower_bound


def _backend(monkeypatch, backend):
    registry.methods("solver")
    cpsat = registry._REGISTRY["cpsat"]
    monkeypatch.setitem(registry._REGISTRY, "cpsat", dataclasses.replace(cpsat, backend=backend))


def test_a_backend_without_a_schedule_is_said_to_have_returned_none(monkeypatch):
    def nothing(request):  # a backend that ran out of time without a schedule
        return BackendResult("unknown", None, None, None, "CP-SAT was stopped")

    _backend(monkeypatch, nothing)
    result = run("cpsat", INSTANCE.with_cap("1p"), time_limit=5, prove_with_bounds=False)
    assert result.status in ("feasible", "optimal") and result.schedule is not None
    assert result.message == (f"cpsat returned no schedule within the 5 s limit; returning "
                              f"the warm start ({result.warm_start}); CP-SAT was stopped")
    assert "nothing better" not in result.message


def test_a_solve_that_returns_the_warm_start_says_nothing_better_was_found(monkeypatch):
    def worse(request):  # a schedule, but 1F1B's: longer than the warm start (zb-1p)
        timeline = evaluate(request.instance, run("1f1b", request.instance).schedule)
        starts = {q: int(round(t)) for q, t in timeline.start.items()}
        return BackendResult("feasible", starts, None, None, "")

    _backend(monkeypatch, worse)
    result = run("cpsat", INSTANCE.with_cap("1p"), time_limit=5, prove_with_bounds=False)
    assert result.status in ("feasible", "optimal") and result.schedule is not None
    assert result.message == (f"cpsat found nothing better than the warm start "
                              f"({result.warm_start}) within the 5 s limit; returning it")
    assert "no schedule" not in result.message
