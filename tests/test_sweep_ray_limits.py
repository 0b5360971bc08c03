"""Ray sweeps on a small machine: a solver asking for more threads than any node has CPUs
still runs, Ray's own log lines stay off stderr, and the ETA counts the cluster's workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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


def test_the_ray_window_is_the_clusters_cpus_without_jobs():
    ray = pytest.importorskip("ray")
    from zbopt.sweep.executors import RayExecutor
    executor = RayExecutor(None)
    with executor.session():
        assert executor.window() == int(ray.cluster_resources()["CPU"])
    assert RayExecutor(3).window() == 3
