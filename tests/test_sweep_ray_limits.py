"""Ray sweeps on a small machine: a solver asking for more threads than any node has CPUs
still runs, Ray's own log lines stay off stderr, and the ETA counts the cluster's workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.ray]

SPEC = """
name = "threads"
methods = ["1f1b"]
[base]
name = "t"
devices = 2
microbatches = 4
m_b = 2
m_w = 1
[[solvers]]
name = "cpsat"
time_limit = 1
threads = {threads}
"""


def test_a_solver_with_more_threads_than_cpus_runs_and_ray_stays_quiet(tmp_path):
    pytest.importorskip("ray")
    threads = 4 * (os.cpu_count() or 1) + 4  # more than this machine's local Ray has
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC.format(threads=threads))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "zbopt", "sweep", str(spec), "--out", str(out),
                           "--executor", "ray", "--quiet", "--no-report"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no "Started a local Ray instance", no token warning
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(records) == 2
    solver = next(r for r in records if r["kind"] == "solver")
    assert solver["status"] != "error" and solver["params"]["threads"] == threads


@pytest.fixture
def same_auth(monkeypatch):
    """In-process Ray: the local cluster a test starts takes the driver's authentication mode.
    Ray reads its settings once per process, and test_sweep_ray.py's driver ran with token
    authentication off; a cluster started now would otherwise turn it on and refuse us."""
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")


def test_the_ray_window_is_the_clusters_cpus_without_jobs(same_auth):
    ray = pytest.importorskip("ray")
    from zbopt.sweep.executors import RayExecutor
    executor = RayExecutor(None)
    with executor.session():
        assert executor.window() == int(ray.cluster_resources()["CPU"])
    assert RayExecutor(3).window() == 3


def test_ray_job_timeout_runs_from_when_the_task_began_not_from_worker_start_up(tmp_path,
                                                                              same_auth):
    """On a fresh Ray every task waits for a worker process to start (seconds on a loaded
    machine): that wait is not the job's time, so quick jobs never time out."""
    pytest.importorskip("ray")
    from zbopt.sweep.report import load_records
    from zbopt.sweep.run import run_sweep
    from zbopt.sweep.spec import load_spec

    def hang_one(job):  # a local function: Ray ships it by value to its workers
        import time

        from zbopt.sweep.job import run_job
        if job.method.name == "zb-h1" and job.instance["microbatches"] == 6:
            time.sleep(600)
        return run_job(job)

    spec = tmp_path / "spec.toml"
    spec.write_text('name = "to"\njob_timeout = 2\nmethods = ["1f1b", "zb-h1"]\n[base]\n'
                    'devices = 2\nmicrobatches = 4\nm_b = 2\nm_w = 1\n'
                    '[axes]\nmicrobatches = [4, 6, 8]\n')
    summary = run_sweep(load_spec(spec), tmp_path / "out", jobs=2, executor="ray",
                        progress=False, report=False, job_fn=hang_one)
    assert summary.ran == 6 and summary.errors == 1
    errors = [r for r in load_records(tmp_path / "out") if r["status"] == "error"]
    assert (errors[0]["method"], errors[0]["microbatches"]) == ("zb-h1", 6)
    assert "timed out after 2 s (job_timeout)" in errors[0]["message"]


def _in_session(sid: int) -> list[str]:
    """The command lines of the processes still in session `sid` (Linux /proc)."""
    left = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid:  # state, ppid, pgrp, session
                left.append((stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, IndexError, ValueError):
            continue
    return left


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("after", [1.0, 2.5])
def test_ctrl_c_while_ray_starts_is_the_interrupted_summary_and_leaves_no_ray(tmp_path, after):
    """Ctrl-C reaches the whole process group (Ray's processes too), at some point of Ray's
    start-up: whenever it lands, one line, exit 130, and nothing of Ray left running."""
    import signal
    import time
    pytest.importorskip("ray")
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC.format(threads=1))
    proc = subprocess.Popen([sys.executable, "-m", "zbopt", "sweep", str(spec), "--out",
                             str(tmp_path / "out"), "--executor", "ray", "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    time.sleep(after)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert len(err.splitlines()) == 1 and err.startswith("zbopt: interrupted"), err
    for _ in range(100):  # Ray's processes go with the sweep, not a minute later
        if not _in_session(proc.pid):
            break
        time.sleep(0.1)
    assert _in_session(proc.pid) == []
