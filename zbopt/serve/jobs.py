"""Background solves: one thread per job running zbopt's solve() (through registry.run) with a
progress callback, at most one running job per page and a few on the whole server.

A second solve for a page whose first is still running is refused, with a message saying so;
cancel() stops a job (its runner gets the job's `stop` event: the server's runner ends the
solve's process as Ctrl-C would, and the job ends "cancelled", with no schedule); finish()
stops its search instead (the `finish` event: the solve process gets SIGUSR1) and the job ends
with the best schedule found, as at its time limit.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..errors import ZboptError
from ..instance import Instance
from ..registry import run
from ..result import Result

MAX_RUNNING = 2  # the solver threads share the server's cores with the page's requests
KEEP_FINISHED = 32


class Refused(ZboptError):
    """A solve that cannot start now; the message says why and what to do."""


class Cancelled(ZboptError):
    """A solve stopped on request before it finished."""


def run_here(solver: str, instance: Instance, stop: Optional[threading.Event] = None,
             finish: Optional[threading.Event] = None, **params) -> Result:
    """registry.run in the job's thread: a solve there cannot be stopped (`stop` and `finish`
    are ignored)."""
    return run(solver, instance, **params)


@dataclass
class Job:
    id: str
    page: str
    solver: str
    time_limit: float
    instance: Instance
    shown: str  # the method whose instance (placement) the solve runs on
    started: float = field(default_factory=time.monotonic)
    version: int = 0
    progress: dict = field(default_factory=dict)
    result: Optional[Result] = None
    error: str = ""
    cancelled: bool = False
    stop: threading.Event = field(default_factory=threading.Event)
    finish: threading.Event = field(default_factory=threading.Event)  # stop, keep the best
    done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def update(self, info: dict) -> None:
        with self.lock:
            self.progress = {k: v for k, v in info.items()
                             if isinstance(v, (int, float, str, type(None)))}
            self.version += 1

    def snapshot(self) -> dict:
        """The job's state as a JSON document (the result itself is sent separately)."""
        with self.lock:
            state = "done" if self.done.is_set() else \
                "cancelling" if self.stop.is_set() else \
                "finishing" if self.finish.is_set() else "running"
            out = {"job": self.id, "page": self.page, "solver": self.solver,
                   "time_limit": self.time_limit, "state": state, "version": self.version,
                   "elapsed": round(time.monotonic() - self.started, 3),
                   "placement": self.instance.placement, "shown": self.shown,
                   "progress": dict(self.progress)}
            if self.result is not None:
                out["status"] = self.result.status
                out["stopped_early"] = self.finish.is_set()
            if self.cancelled:
                out["status"] = "cancelled"
            elif self.error:
                out["status"] = "error"
                out["error"] = self.error
            return out


class Jobs:
    """The server's solve jobs, by id."""

    def __init__(self, max_running: int = MAX_RUNNING, runner: Callable[..., Result] = run_here):
        self.max_running = max_running
        self.runner = runner
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()

    def get(self, ident: str) -> Optional[Job]:
        with self._lock:
            return self._jobs.get(ident)

    def start(self, page: str, instance: Instance, solver: str, time_limit: float,
              shown: str) -> Job:
        with self._lock:
            running = [j for j in self._jobs.values() if not j.done.is_set()]
            mine = [j for j in running if j.page == page]
            if mine:
                left = max(0.0, mine[0].time_limit - (time.monotonic() - mine[0].started))
                raise Refused(f"a solve is already running for this page ({mine[0].solver}, "
                              f"about {left:.0f} s left of its {mine[0].time_limit:g} s): "
                              f"the new one was refused; wait for it to finish")
            if len(running) >= self.max_running:
                raise Refused(f"{len(running)} solves are already running on this server: "
                              f"the new one was refused; try again when one finishes")
            job = Job(secrets.token_hex(8), page, solver, time_limit, instance, shown)
            self._jobs[job.id] = job
            finished = [j for j in self._jobs.values() if j.done.is_set()]
            for old in finished[:max(0, len(finished) - KEEP_FINISHED)]:
                del self._jobs[old.id]
        threading.Thread(target=self._run, args=(job, self.runner), daemon=True,
                         name=f"zbopt-solve-{job.id}").start()
        return job

    def cancel(self, ident: str) -> Optional[Job]:
        """Ask job `ident` to stop (nothing when it is done); the job, or None if unknown."""
        job = self.get(ident)
        if job is not None and not job.done.is_set():
            job.stop.set()
        return job

    def finish(self, ident: str) -> Optional[Job]:
        """Ask job `ident` to stop searching and keep the best schedule it has (nothing when
        it is done); the job, or None if unknown."""
        job = self.get(ident)
        if job is not None and not job.done.is_set():
            job.finish.set()
        return job

    def cancel_all(self, wait: float = 5.0) -> None:
        """Stop every running job and wait up to `wait` s for them (the server is stopping)."""
        with self._lock:
            running = [j for j in self._jobs.values() if not j.done.is_set()]
        for job in running:
            job.stop.set()
        deadline = time.monotonic() + wait
        for job in running:
            job.done.wait(max(0.0, deadline - time.monotonic()))

    @staticmethod
    def _run(job: Job, runner: Callable[..., Result]) -> None:
        try:
            result = runner(job.solver, job.instance, time_limit=job.time_limit, threads=1,
                            progress=job.update, stop=job.stop, finish=job.finish)
            with job.lock:
                if job.stop.is_set():  # asked to stop as it finished: as asked
                    job.cancelled = True
                else:
                    job.result = result
        except Cancelled:
            with job.lock:
                job.cancelled = True
        except ZboptError as err:
            with job.lock:
                job.error = str(err)
        except Exception as err:  # noqa: BLE001 (a failed solve must not take the server down)
            with job.lock:
                job.error = f"the solver failed: {type(err).__name__}: {err}"
        finally:
            with job.lock:
                job.version += 1
            job.done.set()
