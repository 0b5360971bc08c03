"""Property tests: every family, heuristic and solver on random instances of every placement
either says why it does not apply or gives a schedule that validates and is judged honestly.

The checks are benchmarks/fuzz_schedules.py's `problems()` (the benchmark runs 10,000 such
instances); here hypothesis draws the instances and shrinks any failure.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zbopt.bounds import min_feasible_cap
from zbopt.instance import Instance
from zbopt.registry import methods, run
from zbopt.result import Result
from zbopt.schedule import Schedule

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from fuzz_schedules import check_instance, problems  # noqa: E402

COST = st.sampled_from([0, 0, 1, 2, 3, 5, 0.5])


@st.composite
def instances(draw, max_p: int = 4, max_m: int = 7) -> Instance:
    placement = draw(st.sampled_from(["contiguous", "interleaved", "v", "dualpipe"]))
    p = draw(st.integers(1, max_p))
    chunks = draw(st.integers(2, 3)) if placement == "interleaved" else 0
    m = draw(st.integers(1, max_m))
    if placement == "dualpipe":
        m = 2 * max(1, m // 2)
    parts = p if placement == "dualpipe" else p * (chunks or (1 if placement == "contiguous" else 2))

    def per_stage(values):
        return draw(st.one_of(values, st.lists(values, min_size=parts, max_size=parts)))

    t_f, t_b, t_w = per_stage(COST), per_stage(COST), per_stage(COST)
    if not any(sum(x) if isinstance(x, list) else x for x in (t_f, t_b, t_w)):
        t_b = 1
    m_b = draw(st.lists(st.sampled_from([1, 2, 3, 0.5]), min_size=parts, max_size=parts))
    m_w = [draw(st.sampled_from([0, x / 2, x])) for x in m_b]
    static = draw(st.one_of(st.just(0), st.integers(0, 2),
                            st.lists(st.integers(0, 2), min_size=p, max_size=p)))
    overlap = draw(st.sampled_from([0.0, 0.5, 1.0])) if placement == "dualpipe" else 0.0
    base = Instance(devices=p, microbatches=m, placement=placement, chunks=chunks, t_f=t_f,
                    t_b=t_b, t_w=t_w, comm=draw(st.sampled_from([0, 1, 0.5])), m_b=m_b, m_w=m_w,
                    static_memory=static, overlap=overlap)
    need = min_feasible_cap(base)
    cap = draw(st.one_of(
        st.none(), st.sampled_from(["1p", "1.5p", "2p"]),
        st.lists(st.sampled_from([0, 0, 1, 2.5, 4]), min_size=p, max_size=p).map(
            lambda extra: [n + e * max(m_b) for n, e in zip(need, extra)])))
    try:
        return base.with_cap(cap)
    except Exception:  # a "kp" cap below one activation on some device
        return base.with_cap(list(need))


def _every_method_is_honest(instance: Instance) -> None:
    results, found = check_instance(instance)
    assert found == []
    assert {r.method for r in results} == set(methods("schedule"))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(max_p=3, max_m=5))
def test_every_schedule_method_applies_honestly_or_says_why(instance):
    _every_method_is_honest(instance)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_every_schedule_method_on_many_instances(instance):
    _every_method_is_honest(instance)


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(max_p=2, max_m=3), st.sampled_from(sorted(methods("solver"))))
def test_every_solver_result_validates_and_its_status_agrees_with_its_bound(instance, solver):
    # a tiny, time-limited run: optimal or feasible both pass as long as they agree with the bound
    result = run(solver, instance, time_limit=2, threads=1)
    assert problems(instance, result) == []
    assert result.status in ("optimal", "feasible", "infeasible")


# ----- the checker catches what it should (so a clean fuzz run means something) ----------------

def _honest() -> Result:
    instance = Instance(devices=2, microbatches=3, m_b=2, m_w=1, memory_cap="1p")
    return run("zb-h1", instance)


def test_the_checker_flags_a_wrong_fits_cap_claim_and_a_foreign_cap():
    honest = _honest()
    assert problems(honest.instance, honest) == []
    from dataclasses import replace
    over = replace(honest, instance=honest.instance.with_cap(list(honest.instance.cap)))
    roomier = honest.instance.with_cap([c * 2 for c in honest.instance.cap])
    assert any("judged against cap" in p for p in problems(roomier, over))
    tight = honest.instance.with_cap([honest.peak_memory[0] - 1, honest.instance.cap[1]])
    lying = replace(honest, instance=tight)  # its timeline still says fits_cap=True
    assert any("claims fits_cap" in p for p in problems(tight, lying))


def test_the_checker_flags_an_invalid_order_and_a_status_that_disagrees_with_the_bound():
    from dataclasses import replace

    from zbopt.schedule import evaluate
    honest = _honest()
    instance = honest.instance
    backwards = Schedule.build([["0B0", "0F0", "0W0", "0F1", "0B1", "0W1", "0F2", "0B2", "0W2"],
                                ["1F0", "1B0", "1W0", "1F1", "1B1", "1W1", "1F2", "1B2", "1W2"]])
    bad_timeline = replace(honest.timeline, schedule=backwards)
    assert any("deadlock" in p for p in problems(instance, replace(honest, timeline=bad_timeline)))
    solved = Result("cpsat", "solver", "optimal", instance, honest.timeline,
                    lower_bound=honest.span - 1)
    assert any("status optimal" in p for p in problems(instance, solved))
    assert problems(instance, replace(solved, status="feasible")) == []
    assert evaluate(instance, honest.schedule).span == honest.span
