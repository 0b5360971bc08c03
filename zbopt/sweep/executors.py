"""Executors: run jobs in local worker processes or as Ray tasks, yielding (job, record).

Both isolate every job from the sweep process: a job that raises, kills its process
(segfault, os._exit) or runs past the timeout becomes an error record and the sweep goes on.
`stop()` is polled between events so Ctrl-C ends the sweep promptly without losing finished work.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import signal
import socket
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Iterator, Sequence

from ..errors import ZboptError, described
from .job import error_record, run_job
from .spec import Job

JobFn = Callable[[Job], dict[str, Any]]
Stop = Callable[[], bool]
_POLL = 0.2  # seconds between checks of stop() and timeouts


def _never() -> bool:
    return False


def _worker_main(conn: Connection, job_fn: JobFn) -> None:
    """A worker: run jobs sent by the parent until told to stop or the parent goes away."""
    # Ctrl-C reaches the whole process group; only the parent decides what stops
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return  # the parent died or closed the pipe
        if job is None:
            return
        try:
            # the job's clock starts now, not while the worker process was still importing
            conn.send(("started", None))
            try:
                record = job_fn(job)
            except BaseException as err:  # noqa: BLE001  report, then keep serving
                record = error_record(job, f"{type(err).__name__}: {err}")
            conn.send(("done", record))
        except (BrokenPipeError, OSError):
            return


def _death_message(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"worker process died ({name}) while running this job"
    return f"worker process exited (status {exitcode}) while running this job"


@dataclass
class _Worker:
    process: Any
    conn: Connection
    job: Job | None = None
    started: float | None = None  # when the worker began the job (None: not yet)
    sent: float = 0.0  # when the job was sent (the clock of a worker that died before "started")


@dataclass(frozen=True)
class LocalExecutor:
    """A pool of `workers` processes (spawned: no state shared with the sweep process)."""

    workers: int = 1
    job_fn: JobFn = run_job
    job_timeout: float | None = None

    def session(self) -> contextlib.AbstractContextManager:
        """Nothing to start: the workers are spawned as jobs come."""
        return contextlib.nullcontext()

    def window(self) -> int:
        """Jobs running at once."""
        return self.workers

    def run(self, jobs: Sequence[Job], stop: Stop = _never) -> Iterator[tuple[Job, dict]]:
        if self.workers < 1:
            raise ZboptError(f"--jobs must be >= 1, got {self.workers}")
        context = multiprocessing.get_context("spawn")
        pending = deque(jobs)
        pool: list[_Worker] = []
        try:
            while pending or any(w.job is not None for w in pool):
                if stop():
                    return
                self._fill(context, pool, pending)
                busy = [w for w in pool if w.job is not None]
                wait([w.conn for w in busy] + [w.process.sentinel for w in busy], timeout=_POLL)
                for worker in busy:
                    outcome = self._check(worker)
                    if outcome is None:
                        continue
                    job, record, alive = outcome
                    worker.job = None
                    if not alive:
                        pool.remove(worker)
                        _shutdown(worker, kill=True)
                    yield job, record
        finally:
            for worker in pool:
                _shutdown(worker, kill=worker.job is not None)

    def _fill(self, context, pool: list[_Worker], pending: deque) -> None:
        """Give every idle worker a job, starting workers up to the pool size."""
        for worker in pool:
            if worker.job is None and pending:
                self._assign(worker, pending.popleft())
        while pending and len(pool) < self.workers:
            parent, child = context.Pipe()
            process = context.Process(target=_worker_main, args=(child, self.job_fn), daemon=True)
            process.start()
            child.close()  # so the parent sees EOF when the worker dies
            worker = _Worker(process, parent)
            pool.append(worker)
            self._assign(worker, pending.popleft())

    @staticmethod
    def _assign(worker: _Worker, job: Job) -> None:
        worker.job, worker.started, worker.sent = job, None, time.monotonic()
        worker.conn.send(job)

    def _check(self, worker: _Worker) -> tuple[Job, dict, bool] | None:
        """(job, record, worker still usable) once the worker's job is over, else None."""
        job = worker.job
        assert job is not None
        while worker.conn.poll():
            try:
                kind, record = worker.conn.recv()
            except (EOFError, OSError):
                return job, self._died(worker), False
            if kind == "done":
                return job, record, True
            worker.started = time.monotonic()
        if not worker.process.is_alive():
            return job, self._died(worker), False
        elapsed = time.monotonic() - worker.started if worker.started is not None else 0.0
        if self.job_timeout is not None and elapsed > self.job_timeout:
            return job, error_record(job, f"timed out after {self.job_timeout:g} s "
                                          f"(job_timeout); the worker was killed", elapsed), False
        return None

    @staticmethod
    def _died(worker: _Worker) -> dict:
        """The error record of a job whose worker died, with the time it ran."""
        ran = time.monotonic() - (worker.started if worker.started is not None else worker.sent)
        worker.process.join(1)
        assert worker.job is not None
        return error_record(worker.job, _death_message(worker.process.exitcode), ran)


def _shutdown(worker: _Worker, kill: bool) -> None:
    if not kill and worker.process.is_alive():
        try:
            worker.conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        worker.process.join(2)
    if worker.process.is_alive():
        worker.process.kill()
        worker.process.join(2)
    worker.conn.close()


@dataclass(frozen=True)
class RayExecutor:
    """The same jobs as Ray tasks: `ray.init(address)`, or a local Ray with `workers` CPUs.

    A task that fails because its node left the cluster (killed, lost) did not fail on its own
    account: it is submitted again (at most NODE_LOSS_RETRIES times), so a lost node loses no
    job and a job is recorded once. A task that fails while every node it could have run on is
    still alive NODE_LOSS_GRACE seconds later (its own worker crashed) is an error record, as
    with the local executor.
    """

    workers: int | None = None
    address: str | None = None
    job_fn: JobFn = run_job
    job_timeout: float | None = None

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """Ray started or reached (a ZboptError when it cannot) for the block, and shut down
        after it if this started it: a sweep connects before it writes anything."""
        ray = _import_ray()
        if ray.is_initialized():
            yield
            return
        if self.address:
            check_reachable(self.address)
        try:
            # Ray's own INFO/WARNING lines (its start-up, its token set-up) are not the sweep's
            # output: errors only, and nothing from the workers' logs
            ray.init(address=self.address, num_cpus=self.workers if self.address is None else None,
                     include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
        except BaseException as err:
            _shut_down(ray)  # what a failed start left running (its agents) goes too
            if isinstance(err, (ConnectionError, ValueError, RuntimeError)):
                raise ZboptError(f"cannot start or reach Ray at {self.address or 'local'}: "
                                 f"{err}") from None
            raise
        try:
            yield
        finally:
            _shut_down(ray)

    def run(self, jobs: Sequence[Job], stop: Stop = _never) -> Iterator[tuple[Job, dict]]:
        with self.session():
            yield from self._run(jobs, stop)

    def window(self) -> int:
        """Tasks in flight at once (--jobs, else the cluster's CPUs); within session()."""
        ray = _import_ray()
        return max(1, self.workers or int(ray.cluster_resources().get("CPU", 1)))

    def _run(self, jobs: Sequence[Job], stop: Stop) -> Iterator[tuple[Job, dict]]:
        ray = _import_ray()
        # no Ray retries: a task that crashes its worker is a result (an error); node loss is
        # told apart below and resubmitted by us
        remote = ray.remote(max_retries=0)(_run_clocked)
        clock = _StartClock(ray) if self.job_timeout is not None else None
        window = self.window()
        # a task asks for its solver's threads, but never more CPUs than one node has: Ray
        # would never schedule it (the solver still runs its threads)
        largest = _largest_node_cpus(ray)
        nodes = _AliveNodes(ray)
        pending = deque(jobs)
        running: dict[Any, tuple[Job, float, frozenset]] = {}
        lost: dict[str, int] = {}
        # failed tasks whose nodes all still look alive: Ray may not know yet that one died
        suspects: list[tuple[Job, float, frozenset, str, float]] = []
        try:
            while pending or running or suspects:
                if stop():
                    return
                for suspect in list(suspects):
                    job, t0, alive_then, error, failed_at = suspect
                    if alive_then - nodes.alive() and lost.get(job.key, 0) < NODE_LOSS_RETRIES:
                        suspects.remove(suspect)
                        lost[job.key] = lost.get(job.key, 0) + 1
                        pending.appendleft(job)
                    elif time.monotonic() - failed_at > NODE_LOSS_GRACE:
                        suspects.remove(suspect)
                        yield job, error_record(job, error, failed_at - t0)
                while pending and len(running) < window:
                    job = pending.popleft()
                    cpus = dict(job.method.params).get("threads", 1) \
                        if job.method.kind == "solver" else 1
                    ref = remote.options(num_cpus=min(cpus, largest)).remote(
                        self.job_fn, clock.actor if clock else None, job)
                    running[ref] = (job, time.monotonic(), nodes.alive())
                    if clock:
                        clock.started.pop(job.key, None)
                if not running:
                    time.sleep(_POLL)
                    continue
                done, _ = ray.wait(list(running), num_returns=1, timeout=_POLL)
                for ref in done:
                    job, t0, alive_then = running.pop(ref)
                    try:
                        record = ray.get(ref)
                    except ray.exceptions.RayError as err:
                        error = f"Ray task failed: {described(err)}"
                        if lost.get(job.key, 0) >= NODE_LOSS_RETRIES:
                            yield job, error_record(job, error, time.monotonic() - t0)
                        else:
                            suspects.append((job, t0, alive_then, error, time.monotonic()))
                        continue
                    yield job, record
                # a job's clock starts when its task says it began (not while Ray was still
                # starting a worker for it or the task waited for CPUs)
                if clock:
                    clock.poll()
                for ref, (job, t0, _alive) in list(running.items()):
                    if self.job_timeout is None:
                        break
                    began = clock.began(job.key, t0) if clock else t0
                    if began is not None and time.monotonic() - began > self.job_timeout:
                        ray.cancel(ref, force=True)
                        running.pop(ref)
                        yield job, error_record(job, f"timed out after {self.job_timeout:g} s "
                                                     f"(job_timeout); the task was cancelled",
                                                time.monotonic() - began)
        finally:
            for ref in running:
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001  best effort while stopping
                    pass


def _run_clocked(job_fn: JobFn, clock: Any, job: Job) -> dict[str, Any]:
    """A Ray task: tell the start clock (if any) the job began, then run it."""
    if clock is not None:
        clock.start.remote(job.key)
    return job_fn(job)


class _Starts:
    """A Ray actor: the keys of the jobs whose tasks began, in order."""

    def __init__(self) -> None:
        self.keys: list[str] = []

    def start(self, key: str) -> None:
        self.keys.append(key)

    def since(self, seen: int) -> list[str]:
        return self.keys[seen:]


class _StartClock:
    """When each task began, as the driver learns it from a _Starts actor (to within a poll)."""

    def __init__(self, ray) -> None:
        self.ray = ray
        self.actor = ray.remote(num_cpus=0)(_Starts).remote()
        self.started: dict[str, float] = {}
        self.seen = 0
        self.asked = None
        self.broken = False  # the actor failed: jobs are timed from submission again

    def poll(self) -> None:
        if self.asked is None:
            self.asked = self.actor.since.remote(self.seen)
        ready, _ = self.ray.wait([self.asked], timeout=0)
        if not ready:
            return
        try:
            keys = self.ray.get(self.asked)
        except self.ray.exceptions.RayError:
            keys, self.broken = [], True
        self.asked = None
        self.seen += len(keys)
        now = time.monotonic()
        for key in keys:
            self.started[key] = now

    def began(self, key: str, submitted: float) -> float | None:
        """When the job's task began (None: it waits for a worker or for free CPUs)."""
        if self.broken:
            return self.started.get(key, submitted)
        return self.started.get(key)


NODE_LOSS_RETRIES = 3
# seconds a failed task waits for Ray to report a dead node before it counts as the job's own
# failure (Ray's health checks take about 15 s by default to declare a node dead)
NODE_LOSS_GRACE = 30.0


def _shut_down(ray) -> None:
    """ray.shutdown(), with SIGINT ignored meanwhile: a second Ctrl-C does not leave Ray's
    processes behind."""
    import threading
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        ray.shutdown()
    except Exception:  # noqa: BLE001  best effort on the way out
        pass
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)


def _largest_node_cpus(ray) -> float:
    """The CPUs of the cluster's largest live node (at least 1)."""
    cpus = [float(n.get("Resources", {}).get("CPU", 0)) for n in ray.nodes() if n.get("Alive")]
    return max([1.0] + cpus)


class _AliveNodes:
    """The ids of the cluster's live nodes, asked of Ray at most once a second unless told."""

    def __init__(self, ray) -> None:
        self.ray = ray
        self.when = -1.0
        self.ids: frozenset = frozenset()

    def alive(self, refresh: bool = False) -> frozenset:
        if refresh or time.monotonic() - self.when > 1.0:
            self.ids = frozenset(n["NodeID"] for n in self.ray.nodes() if n.get("Alive"))
            self.when = time.monotonic()
        return self.ids


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fail fast on a cluster address nobody answers (ray.init would retry for minutes)."""
    target = address.split("://", 1)[-1]
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto" and other forms Ray resolves itself
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout).close()
    except OSError as err:
        raise ZboptError(f"cannot reach a Ray cluster at {address} ({err.strerror or err}): "
                         f"start it (ray start --head) or drop --address for a local Ray") from None


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ZboptError("the Ray executor needs ray: pip install 'zbopt[ray]' "
                         "(or use --executor local)") from None
    return ray


def make_executor(kind: str, workers: int | None, address: str | None = None,
                  job_fn: JobFn = run_job, job_timeout: float | None = None):
    if kind == "local":
        if address:
            raise ZboptError("--address is for --executor ray")
        return LocalExecutor(workers or 1, job_fn, job_timeout)
    if kind == "ray":
        return RayExecutor(workers, address, job_fn, job_timeout)
    raise ZboptError(f"unknown executor {kind!r}: use local or ray")
