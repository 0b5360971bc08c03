"""A sweep on a real two-node Ray cluster on this machine (loopback only) survives losing the
worker node mid-sweep: finished jobs are kept, the others rerun, the results equal a local run's.

The nodes are `ray start --block` processes in their own process groups, so the test stops
exactly the processes it started (by process group id), never other Ray clusters on the host.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from zbopt.sweep.report import load_records
from zbopt.sweep.run import run_sweep
from zbopt.sweep.spec import load_spec

pytestmark = [pytest.mark.slow, pytest.mark.ray]

SPEC = """
name = "two-nodes"
methods = ["1f1b", "zb-h1", "zb-h2", "gpipe", "zb-greedy"]
[base]
name = "u"
devices = 2
microbatches = 4
m_b = 2
m_w = 1
[axes]
microbatches = [4, 6, 8]
memory_cap = ["1p", "none"]
"""
JOBS = 30
_VOLATILE = ("runtime", "finished_at")
# quick node-death detection on this test cluster (Ray's defaults take about 15 s); no token
# authentication on a loopback-only cluster the test owns (the driver gets the same setting)
_ENV = {"RAY_health_check_initial_delay_ms": "0", "RAY_health_check_period_ms": "500",
        "RAY_health_check_failure_threshold": "4", "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "disabled"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_bin() -> str:
    path = Path(sys.executable).with_name("ray")
    return str(path) if path.exists() else "ray"


class Node:
    """One `ray start --block` node in its own process group."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.log = log.open("wb")
        self.node_id = ""  # Ray's id of the node, once it has joined
        self.proc = subprocess.Popen([_ray_bin(), "start", "--block", *args],
                                     env={**os.environ, **_ENV}, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def gone(self, timeout: float) -> bool:
        """Whether every process of this node has exited."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                return True
            self.proc.poll()
            time.sleep(0.2)
        return False

    def stop(self) -> None:
        self.kill(signal.SIGTERM)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.kill(signal.SIGKILL)
            self.proc.wait(10)
        self.log.close()


def _wait_for_cpus(address: str, cpus: int, timeout: float = 90) -> str:
    """Wait until the cluster has `cpus` CPUs; the id of its node that is not the head."""
    import ray
    deadline = time.monotonic() + timeout
    ray.init(address=address, include_dashboard=False, log_to_driver=False,
             _node_ip_address="127.0.0.1")
    try:
        while time.monotonic() < deadline:
            if ray.cluster_resources().get("CPU", 0) >= cpus:
                return next(n["NodeID"] for n in ray.nodes() if n.get("Alive")
                            and "node:__internal_head__" not in n.get("Resources", {}))
            time.sleep(0.5)
        raise AssertionError(f"the cluster never reached {cpus} CPUs")
    finally:
        ray.shutdown()


@pytest.fixture
def two_nodes(tmp_path, monkeypatch):
    pytest.importorskip("ray")
    for key, value in _ENV.items():
        monkeypatch.setenv(key, value)
    port = _free_port()
    temp = Path("/tmp") / f"zbray{os.getpid()}"  # short: Ray's socket paths have a length limit
    head = Node(["--head", "--node-ip-address", "127.0.0.1", "--port", str(port),
                 "--num-cpus", "1", "--include-dashboard", "false",
                 "--dashboard-agent-listen-port", str(_free_port()),
                 "--temp-dir", str(temp), "--disable-usage-stats"], tmp_path / "head.log")
    nodes = [head]
    try:
        address = f"127.0.0.1:{port}"
        _wait_until_listening(port, head)
        worker = Node(["--address", address, "--node-ip-address", "127.0.0.1", "--num-cpus", "1",
                       "--dashboard-agent-listen-port", str(_free_port())],
                      tmp_path / "worker.log")
        nodes.append(worker)
        worker.node_id = _wait_for_cpus(address, 2)
        yield address, worker
    finally:
        for node in reversed(nodes):
            node.stop()


def _wait_until_listening(port: int, head: Node, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if head.proc.poll() is not None:
            raise AssertionError(f"ray start --head exited: {head.log.name}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.3)
    raise AssertionError("the Ray head never listened")


def _strip(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in _VOLATILE}


def test_a_sweep_survives_losing_the_worker_node(tmp_path, two_nodes):
    address, worker = two_nodes
    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(SPEC)
    spec = load_spec(spec_path)
    assert len(spec.jobs()) == JOBS

    marks = tmp_path / "marks"
    marks.mkdir()
    doomed = worker.node_id

    def slow_job(job):  # shipped by value to the Ray workers; marks where each job ran
        import os
        import time

        import ray

        from zbopt.sweep.job import run_job
        node = ray.get_runtime_context().get_node_id()
        (marks / f"start-{job.key}-{node}-{os.getpid()}").touch()
        # a job on the node about to be lost is still running when it goes
        time.sleep(120 if node == doomed else 0.3)
        record = run_job(job)
        (marks / f"done-{job.key}-{node}").touch()
        return record

    def on_worker() -> list[Path]:
        return [m for m in marks.iterdir() if m.name.startswith("start-")
                and m.name.split("-")[2] == doomed]

    out = tmp_path / "ray"
    outcome: dict = {}

    def sweep() -> None:
        try:
            outcome["summary"] = run_sweep(spec, out, jobs=2, executor="ray", address=address,
                                           progress=False, report=False, job_fn=slow_job)
        except BaseException as err:  # noqa: BLE001  reported by the assertion below
            outcome["error"] = err

    thread = threading.Thread(target=sweep, daemon=True)
    thread.start()
    results = out / "results.jsonl"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not (
            results.exists() and results.read_bytes().count(b"\n") >= 4 and on_worker()):
        assert thread.is_alive(), outcome
        time.sleep(0.1)
    assert on_worker(), "no job reached the worker node"
    before_kill = results.read_bytes()
    # the whole worker node, SIGKILL, mid-sweep: its raylet and the rest of its process group,
    # and its task processes (Ray runs those in sessions of their own)
    worker.kill()
    assert worker.gone(timeout=30)
    for mark in on_worker():
        try:
            os.kill(int(mark.name.split("-")[3]), signal.SIGKILL)
        except ProcessLookupError:
            pass
    thread.join(600)
    assert not thread.is_alive(), "the sweep hung after the node was lost"
    assert "error" not in outcome, outcome.get("error")
    summary = outcome["summary"]
    assert 4 <= before_kill.count(b"\n") < JOBS, "the kill should land mid-sweep"

    final = results.read_bytes()
    assert final.startswith(before_kill)  # finished jobs kept as they were
    records = load_records(out)
    keys = [r["key"] for r in records]
    assert len(final.splitlines()) == len(keys) == len(set(keys)) == JOBS  # once each
    assert summary.errors == 0 and all(r["status"] != "error" for r in records)

    # the kill interrupted at least one job on the worker node, and that job ran again
    started = {tuple(m.name.split("-")[1:3]) for m in marks.iterdir()
               if m.name.startswith("start-")}
    finished = {tuple(m.name.split("-")[1:3]) for m in marks.iterdir()
                if m.name.startswith("done-")}
    interrupted = started - finished
    assert interrupted, "no job was running on the worker when it was killed"
    assert {node for _, node in interrupted} == {worker.node_id}
    for key, _node in interrupted:
        assert any(k == key for k, _ in finished)  # rerun elsewhere, recorded once above

    local_out = tmp_path / "local"
    run_sweep(spec, local_out, jobs=1, progress=False, report=False)
    local = {r["key"]: _strip(r) for r in load_records(local_out)}
    assert {r["key"]: _strip(r) for r in records} == local
