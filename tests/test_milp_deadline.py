"""The MILP backends keep their time limit: CBC (a child process) is killed a grace period past
it, with no solution, and never left running (it once ran 270 s past a 20 s limit); HiGHS gets
what is left of the limit after PuLP has built its model, not the whole limit again."""

from __future__ import annotations

import os
import signal
import stat
import threading
import time

import pulp
import pytest

from zbopt.instance import Instance
from zbopt.solvers.api import run_backend
from zbopt.solvers.backends import cbc, highs
from zbopt.solvers.milp import build_model, default_horizon

INSTANCE = Instance(devices=2, microbatches=2, t_f=5, t_b=6, t_w=4, comm=1, m_b=2, m_w=1)


def _model():
    return build_model(INSTANCE, "span", default_horizon(INSTANCE))


@pytest.fixture
def stuck_cbc(tmp_path, monkeypatch):
    """A "cbc" that writes its pid and then sleeps far past any limit; returns the pid file."""
    pid_file = tmp_path / "cbc.pid"
    script = tmp_path / "cbc"
    script.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 30\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(cbc, "_cbc_path", lambda: str(script))
    monkeypatch.setattr(cbc, "grace", lambda limit: 0.0, raising=False)
    return pid_file


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.skipif(os.name != "posix", reason="a shell script stands in for cbc")
def test_cbc_past_its_deadline_is_killed_and_gives_no_solution(stuck_cbc, tmp_path):
    outcome = cbc._run_cbc(_model(), 0.5, 1, False, str(tmp_path))
    assert outcome.status == "unknown" and not outcome.has_solution
    assert "CBC did not stop at its time limit" in outcome.message
    assert "killed after" in outcome.message
    assert _gone(int(stuck_cbc.read_text()))


@pytest.mark.skipif(os.name != "posix", reason="a shell script stands in for cbc")
def test_cbc_overrun_reaches_the_backend_result(stuck_cbc):
    result = run_backend("cbc", INSTANCE, objective="span", time_limit=0.5, threads=1)
    assert result.status == "unknown" and result.starts is None
    assert result.message.startswith("CBC did not stop at its time limit")
    assert _gone(int(stuck_cbc.read_text()))


@pytest.fixture
def python_sigint():
    """Python's own SIGINT handler for the test (the suite may run with SIGINT ignored)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.skipif(os.name != "posix", reason="signals")
def test_ctrl_c_while_cbc_runs_kills_it(stuck_cbc, tmp_path, python_sigint):
    def interrupt():  # SIGINT to this process only, as when it misses cbc's process group
        for _ in range(600):
            if stuck_cbc.exists() and stuck_cbc.read_text().strip():
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.05)

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        cbc._run_cbc(_model(), 60, 1, False, str(tmp_path))
    assert _gone(int(stuck_cbc.read_text()))


def test_cbc_grace_is_at_least_two_seconds_or_a_tenth():
    assert cbc.grace(1) == 2.0
    assert cbc.grace(100) == pytest.approx(10.0)


def test_highs_gets_what_is_left_after_the_model_is_built(monkeypatch):
    import highspy
    limits = []
    build = pulp.HiGHS.buildSolverModel
    run = highspy.Highs.run

    def slow_build(self, lp):
        build(self, lp)
        time.sleep(1.0)  # as PuLP building a large model

    def spy_run(self):
        limits.append(self.getOptionValue("time_limit"))
        return run(self)

    monkeypatch.setattr(pulp.HiGHS, "buildSolverModel", slow_build)
    monkeypatch.setattr(highspy.Highs, "run", spy_run)
    outcome = highs._run_highs(_model(), 30.0, 1, False, "")
    assert outcome.has_solution
    limit = limits[0][1] if isinstance(limits[0], tuple) else limits[0]
    assert 0 < limit <= 29.0  # not the whole 30 s again


def test_cbc_log_bound_of_a_killed_run_is_kept(tmp_path, monkeypatch):
    script = tmp_path / "cbc"
    script.write_text("#!/bin/sh\necho 'Partial search - best objective 12 (best possible 9), "
                      "took 5 iterations and 0 nodes (1.00 seconds)'\nexec sleep 30\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(cbc, "_cbc_path", lambda: str(script))
    monkeypatch.setattr(cbc, "grace", lambda limit: 0.0, raising=False)
    outcome = cbc._run_cbc(_model(), 0.5, 1, False, str(tmp_path))
    assert outcome.status == "unknown" and outcome.bound == 9.0


# ----- building the model keeps the deadline too -------------------------------------------

def test_building_the_model_stops_at_its_deadline():
    # a large model took 97 s to build in Python, whatever the time limit
    from zbopt.solvers import milp
    with pytest.raises(milp._OutOfTime):
        build_model(INSTANCE, "span", default_horizon(INSTANCE), deadline=time.perf_counter() - 1)
    assert build_model(INSTANCE, "span", default_horizon(INSTANCE),
                       deadline=time.perf_counter() + 60).order


@pytest.mark.parametrize("backend", ["cbc", "highs"])
def test_a_model_that_cannot_be_built_in_time_never_reaches_the_solver(backend, monkeypatch):
    called = []
    module = cbc if backend == "cbc" else highs
    runner = "_run_cbc" if backend == "cbc" else "_run_highs"
    monkeypatch.setattr(module, runner, lambda *a: called.append(a))
    instance = Instance(devices=4, microbatches=8, t_f=5, t_b=6, t_w=4, comm=1, m_b=2, m_w=1,
                        memory_cap="2p")
    result = run_backend(backend, instance, objective="span", time_limit=1e-6, threads=1)
    assert result.status == "unknown" and result.starts is None and not called
    assert "building the MILP (96 passes) used all" in result.message



@pytest.mark.skipif(os.name != "posix", reason="signals")
def test_sigterm_to_the_command_kills_its_cbc_and_exits_143(stuck_cbc, tmp_path):
    # SIGTERM's default action ends the process at once and left CBC running for minutes. The
    # command runs in a child process (SIGTERM with its default action, as in a shell), with
    # the stuck "cbc" of the fixture; SIGTERM goes to that process only.
    import subprocess
    import sys
    path = tmp_path / "inst.toml"
    # costs where no bound proves the best heuristic's schedule, so the backend runs
    path.write_text('devices = 4\nmicrobatches = 8\nt_f = [4, 7, 9, 9]\nt_b = [9, 3, 5, 3]\n'
                    't_w = 5\ncomm = 1\nm_b = 2\nm_w = 1\nmemory_cap = "1p"\n')
    out = tmp_path / "s.json"
    code = (f"import sys\nfrom zbopt.solvers.backends import cbc\n"
            f"cbc._cbc_path = lambda: {cbc._cbc_path()!r}\n"
            f"from zbopt.cli import main\n"
            f"sys.exit(main(['solve', {str(path)!r}, '--solver', 'cbc', '--time-limit', '60', "
            f"'--quiet', '--out', {str(out)!r}]))\n")
    child = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))
    try:
        for _ in range(1200):
            if stuck_cbc.exists() and stuck_cbc.read_text().strip():
                break
            time.sleep(0.05)
        assert stuck_cbc.exists(), "the solve never reached cbc"
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 143 and "zbopt: terminated" in err, err
    assert _gone(int(stuck_cbc.read_text())) and not out.exists()
