"""Asked to finish now (SIGUSR1, zbopt.signals.request_finish), every solver stops its search
and solve() returns the best schedule it has, as at its time limit, saying it was stopped: the
explorer's "Stop, keep best" and `kill -USR1` on `zbopt solve`; `zbopt plan` ends its split
search too, with the best plan found so far."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from zbopt import signals
from zbopt.instance import Instance
from zbopt.schedule import validate
from zbopt.solvers.api import solve

# under its memory cap, no solver proves this one within the time limit the tests give
HARD = Instance(devices=8, microbatches=16, t_f=[9, 12, 10, 14, 11, 8, 13, 10],
                t_b=[10, 14, 12, 15, 9, 11, 16, 12], t_w=[7, 9, 6, 11, 8, 10, 7, 9],
                m_b=1, m_w=0.4, comm=1, memory_cap=3.2)
LIMIT = 300  # seconds: a solve that ignored the request would run this long


@pytest.fixture
def handled():
    """zbopt.signals' handlers, as a command has them (the request is forgotten after)."""
    with signals.handled():
        yield
    assert not signals.finish_requested()


def _stopped(result) -> None:
    assert result.message.startswith("stopped on request after ")
    assert result.timeline is not None and validate(result.instance, result.schedule) == []
    assert result.lower_bound is not None and result.lower_bound <= result.span


@pytest.mark.skipif(os.name != "posix", reason="signals")
def test_sigusr1_asks_to_finish_and_ends_nothing(handled):
    assert not signals.finish_requested()
    os.kill(os.getpid(), signal.SIGUSR1)  # its default action would end the test run
    assert signals.finish_requested()


def test_outside_a_command_sigusr1_keeps_its_own_action():
    before = signal.getsignal(signal.SIGUSR1)
    with signals.handled():
        assert signal.getsignal(signal.SIGUSR1) is not before
    assert signal.getsignal(signal.SIGUSR1) is before


@pytest.mark.parametrize("solver", ["cpsat", "cpsat-lns"])
def test_cp_sat_searches_stop_where_they_are(handled, solver):
    def progress(info):
        if info.get("phase") == "search":  # the search has begun: finish now
            signals.request_finish()

    result = solve(HARD, solver=solver, time_limit=LIMIT, prove_with_bounds=False,
                   progress=progress)
    _stopped(result)


def test_cbc_gets_sigint_and_its_solution_is_read(handled, monkeypatch):
    from zbopt.solvers.backends import cbc
    popen = subprocess.Popen

    def started(*args, **kwargs):  # CBC is running: finish now
        process = popen(*args, **kwargs)
        signals.request_finish()
        return process

    monkeypatch.setattr(cbc.subprocess, "Popen", started)
    result = solve(HARD, solver="cbc", time_limit=LIMIT, prove_with_bounds=False)
    _stopped(result)
    assert "CBC: stopped" in result.message


def test_highs_is_interrupted_by_its_callback(handled, monkeypatch):
    highspy = pytest.importorskip("highspy")
    run = highspy.Highs.run

    def started(self, *args):  # HiGHS is about to search: finish now
        signals.request_finish()
        return run(self, *args)

    monkeypatch.setattr(highspy.Highs, "run", started)
    result = solve(HARD, solver="highs", time_limit=LIMIT, prove_with_bounds=False)
    _stopped(result)
    assert "HiGHS: Interrupted by user" in result.message


def test_scip_is_interrupted_by_its_event_handler(handled, monkeypatch):
    pytest.importorskip("pyscipopt")
    from zbopt.solvers.backends import scip
    finisher = scip._finisher

    def armed():  # SCIP's model is built and about to be solved: finish now
        handler = finisher()
        signals.request_finish()
        return handler

    monkeypatch.setattr(scip, "_finisher", armed)
    result = solve(HARD, solver="scip", time_limit=LIMIT, prove_with_bounds=False)
    _stopped(result)
    assert "SCIP: userinterrupt" in result.message


def test_a_milp_being_built_stops_building(handled):
    def progress(info):
        if info.get("phase") == "search":  # the backend is about to build its model
            signals.request_finish()

    result = solve(HARD, solver="cbc", time_limit=LIMIT, prove_with_bounds=False,
                   progress=progress)
    _stopped(result)
    assert "building the MILP" in result.message and "was stopped on request" in result.message


def test_asked_before_the_search_no_backend_runs(handled):
    signals.request_finish()
    result = solve(HARD, solver="cpsat", time_limit=LIMIT, prove_with_bounds=False)
    _stopped(result)
    assert "cpsat did not search; returning the warm start" in result.message


@pytest.mark.skipif(os.name != "posix", reason="signals")
def test_zbopt_solve_given_sigusr1_writes_its_best_schedule(tmp_path):
    path = tmp_path / "hard.json"
    path.write_text(json.dumps(HARD.to_dict()))
    out = tmp_path / "s.json"
    child = subprocess.Popen([sys.executable, "-m", "zbopt", "solve", str(path), "--time-limit",
                              str(LIMIT), "--out", str(out), "--progress", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=Path(__file__).resolve().parents[1])
    for line in child.stderr:  # the search has begun once its progress line says so
        if ": search" in line:
            break
    child.send_signal(signal.SIGUSR1)
    printed, rest = child.communicate(timeout=120)
    assert child.returncode == 0, rest
    result = json.loads(printed)
    assert result["message"].startswith("stopped on request after ")
    assert json.loads(out.read_text())["metrics"]["span"] == result["span"]


def _tight_llama(tmp_path) -> Path:
    """Llama 3.1 8B estimated at p = 8, m = 32 under a cap at which plan uses all its time."""
    from zbopt.cli import main
    path = tmp_path / "llama.toml"
    assert main(["estimate", str(Path(__file__).resolve().parents[1] / "instances" / "configs"
                                 / "llama-3.1-8b.json"), "--devices", "8", "--microbatches",
                 "32", "--seq-len", "2048", "--mem", "29.9GB", "--out", str(path)]) == 0
    return path


def test_plan_asked_to_finish_returns_its_best_plan_so_far(handled, tmp_path):
    from zbopt.layers import load_model
    from zbopt.plan import plan
    model = load_model(_tight_llama(tmp_path))
    result = plan(model, ("contiguous",), time_limit=LIMIT,
                  progress=lambda info: signals.request_finish())
    assert result.stopped_early and result.partitions_scheduled >= 1
    assert result.result.status == "feasible"
    assert result.result.lower_bound <= result.result.span
    assert result.to_dict()["stopped_early"] is True
    assert validate(result.result.instance, result.result.schedule) == []


@pytest.mark.skipif(os.name != "posix", reason="signals")
def test_zbopt_plan_given_sigusr1_writes_its_best_plan(tmp_path):
    model = _tight_llama(tmp_path)
    out = tmp_path / "plan.json"
    child = subprocess.Popen([sys.executable, "-m", "zbopt", "plan", str(model), "--time-limit",
                              str(LIMIT), "--out", str(out), "--placements", "contiguous",
                              "--progress"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=Path(__file__).resolve().parents[1])
    for line in child.stderr:  # a progress line: the command handles the signal now
        if line.startswith("plan: "):
            break
    child.send_signal(signal.SIGUSR1)
    printed, rest = child.communicate(timeout=120)
    assert child.returncode == 0, rest
    assert "stopped on request (SIGUSR1): the best plan found so far" in printed
    assert json.loads(out.read_text())["plan"]["stopped_early"] is True
