"""Ctrl-C during a CP-SAT search ends the command like any other phase: CP-SAT's own SIGINT
handler used to stop only its search, and the run went on to report and write its files."""

from __future__ import annotations

import _thread
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from zbopt.solvers import interruptible


class _Blocking:
    """A stand-in CpSolver whose search runs until stop_search() is called."""

    class parameters:  # noqa: N801  as CpSolver.parameters
        catch_sigint_signal = True

    def __init__(self) -> None:
        self.started = threading.Event()
        self.stopped = threading.Event()
        self.thread_name = None

    def solve(self, model, callback=None):
        self.thread_name = threading.current_thread().name
        self.started.set()
        self.stopped.wait(30)
        return 2

    def stop_search(self) -> None:
        self.stopped.set()


@pytest.fixture
def python_sigint():
    """Python's own SIGINT handler for the test (interrupt_main calls it; another test, or a
    shell that started the suite in the background, may have left another one or none)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_ctrl_c_stops_the_search_and_is_raised_again(python_sigint):
    solver = _Blocking()
    threading.Thread(target=lambda: solver.started.wait(30) and _thread.interrupt_main(),
                     daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        interruptible.solve(solver, model=None)
    assert solver.stopped.is_set()  # the search was told to stop, not left running
    assert solver.parameters.catch_sigint_signal is False
    assert solver.thread_name == "cp-sat"


def test_without_ctrl_c_the_status_comes_back():
    solver = _Blocking()
    solver.stopped.set()
    assert interruptible.solve(solver, model=None) == 2


INSTANCE = """devices = 16
microbatches = 64
t_f = [5,6,5,6,5,6,5,6,5,6,5,6,5,6,5,7]
t_b = 6
t_w = 4
comm = 1
m_b = 2
m_w = 1
memory_cap = "1p"
"""


def _zbopt(args: list[str], signum: int) -> subprocess.Popen:
    """`python -m zbopt ARGS` with stderr piped; the child handles `signum` as a terminal's
    command does, even where the suite runs with it ignored (started in the background)."""
    return subprocess.Popen([sys.executable, "-m", "zbopt", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[1],
                            preexec_fn=lambda: signal.signal(signum, signal.SIG_DFL))


def _until(child: subprocess.Popen, text: str) -> list[str]:
    """The child's stderr lines up to the first holding `text`."""
    seen = []
    for line in child.stderr:
        seen.append(line)
        if text in line:
            break
    return seen


@pytest.mark.skipif(os.name != "posix", reason="signals")
def test_zbopt_solve_interrupted_in_its_search_exits_130_and_writes_nothing(tmp_path):
    path = tmp_path / "p16.toml"
    path.write_text(INSTANCE)
    out = tmp_path / "s.json"
    child = _zbopt(["solve", str(path), "--time-limit", "120", "--out", str(out), "--progress"],
                   signal.SIGINT)
    seen = _until(child, ": search")  # the search has begun once its progress line says so
    time.sleep(2)  # past building the model: CP-SAT itself is searching (120 s are allowed)
    child.send_signal(signal.SIGINT)
    rest = child.stderr.read()
    code = child.wait(timeout=60)
    assert code == 130, "".join(seen) + rest
    assert rest.strip().splitlines()[-1] == "zbopt: interrupted"
    assert "terminate called" not in rest
    assert not out.exists()


@pytest.mark.skipif(os.name != "posix", reason="signals")
def test_sigterm_stops_compare_and_its_forked_workers(tmp_path):
    # compare forks its workers (10,000 passes and more); they inherited the command's SIGTERM
    # handler, so stopping them with SIGTERM raised in them instead of ending them: the command
    # hung. Now the command exits 143 and leaves no worker behind.
    path = tmp_path / "big.toml"
    path.write_text("devices = 16\nmicrobatches = 256\nt_f = 18546\nt_b = 18097\nt_w = 9321\n"
                    "comm = 762\nm_b = 201216\nm_w = 73728\nmemory_cap = \"1p\"\n")
    child = _zbopt(["compare", str(path), "--chunks", "4", "--jobs", "2", "--progress"],
                   signal.SIGTERM)
    seen = _until(child, "processes")  # the workers have started once the progress line says so
    workers = subprocess.run(["pgrep", "-P", str(child.pid)], capture_output=True,
                             text=True).stdout.split()
    time.sleep(1)
    child.send_signal(signal.SIGTERM)
    try:
        rest = child.stderr.read()
        code = child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert code == 143, "".join(seen) + rest
    assert rest.strip().splitlines()[-1] == "zbopt: terminated" and "Traceback" not in rest
    time.sleep(0.5)
    assert workers and not [w for w in workers if _running(w)]


def _running(pid: str) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:  # gone (and reaped)
        return False


def _swallowed_ctrl_c():
    """A Ctrl-C whose KeyboardInterrupt Python swallows, as it does in a garbage collector
    callback ('Exception ignored in ...'): the handler zbopt installs runs, its raise is lost."""
    from zbopt import signals
    try:
        signals._on_signal(signal.SIGINT, None)
    except KeyboardInterrupt:
        pass


def test_a_swallowed_ctrl_c_still_writes_nothing_and_exits_130(tmp_path, monkeypatch, capsys):
    from zbopt.cli import main
    from zbopt.export import outputs
    original = outputs.check_targets

    def checked_then_interrupted(*args, **kwargs):
        paths = original(*args, **kwargs)
        _swallowed_ctrl_c()
        return paths

    monkeypatch.setattr(outputs, "check_targets", checked_then_interrupted)
    out = tmp_path / "s.json"
    assert main(["simulate", "zb-1.5b-p8-m24", "-s", "1f1b", "--out", str(out)]) == 130
    assert "zbopt: interrupted" in capsys.readouterr().err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_a_swallowed_ctrl_c_is_not_an_exit_0(monkeypatch, capsys):
    from zbopt.cli import main
    from zbopt.commands import simulate
    original = simulate.run_method

    def run_then_interrupted(*args, **kwargs):
        _swallowed_ctrl_c()
        return original(*args, **kwargs)

    monkeypatch.setattr(simulate, "run_method", run_then_interrupted)
    assert main(["simulate", "zb-1.5b-p8-m24", "-s", "1f1b", "--quiet"]) == 130
    assert capsys.readouterr().err.strip().endswith("zbopt: interrupted")
    # and the record does not outlive the command
    monkeypatch.setattr(simulate, "run_method", original)
    assert main(["simulate", "zb-1.5b-p8-m24", "-s", "1f1b", "--quiet"]) == 0
