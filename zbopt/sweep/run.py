"""Run a sweep: skip finished jobs, run the rest on an executor, append each result, report.

Ctrl-C (SIGINT) sets a flag the executor polls: running jobs are abandoned (their workers
killed), every finished job is already on disk, and a rerun continues where this one stopped.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..errors import ZboptError
from .executors import JobFn, make_executor
from .job import run_job
from .progress import progress_bar
from .spec import SweepSpec, load_spec
from .store import RESULTS_FILE, ResultStore


@dataclass(frozen=True)
class SweepSummary:
    total: int  # jobs in the spec
    skipped: int  # already in the store
    ran: int  # finished in this run
    errors: int  # of those, records with status "error"
    interrupted: bool
    out: Path


class _StopFlag:
    """Set by SIGINT (or by a caller); polled by the executors."""

    def __init__(self) -> None:
        self.stopped = False

    def __call__(self) -> bool:
        return self.stopped

    def set(self, *_args) -> None:
        self.stopped = True


@contextlib.contextmanager
def _sigint_sets(flag: _StopFlag) -> Iterator[None]:
    # signal handlers can only be installed from the main thread; elsewhere Ctrl-C is the
    # caller's business
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, flag.set)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def run_sweep(spec: SweepSpec, out: str | Path, jobs: int | None = 1, executor: str = "local",
              address: str | None = None, retry_errors: bool = False, progress: bool = True,
              report: bool = True, spec_path: str | Path | None = None,
              job_fn: JobFn = run_job, force: bool = False) -> SweepSummary:
    """Run every job of `spec` not yet in `out`/results.jsonl; regenerate the report at the end.

    `job_fn` runs one job in the worker (default: run_job); tests pass one that crashes.
    """
    out = Path(out)
    check_out_dir(out, force)
    store = ResultStore(out)
    all_jobs = spec.jobs()
    flag = _StopFlag()
    ran = errors = 0
    # the folder is this sweep's until its report is out (Ctrl-C while Ray starts stops the
    # sweep once it has started, and Ray is shut down on the way out)
    with contextlib.ExitStack() as held:
        locked = out.is_dir() and held.enter_context(only_sweep(out))
        check_same_spec(store, spec, all_jobs, force)
        runner = make_executor(executor, jobs, address, job_fn, spec.job_timeout)
        if report and out.is_dir():  # a report that cannot be written is refused before any job
            from .report import check_report_targets
            check_report_targets(out, hint=", choose another --out, or pass --no-report")
        todo = _todo(store, all_jobs, retry_errors)
        with _sigint_sets(flag), contextlib.ExitStack() as session:
            try:
                session.enter_context(runner.session())
            except ZboptError:
                if not flag.stopped:
                    raise  # a start-up that fails after Ctrl-C (Ray got it too) is the interruption
                return SweepSummary(len(all_jobs), len(all_jobs) - len(todo), 0, 0, True, out)
            workers = runner.window()  # the ETA's parallelism: on Ray, the cluster's CPUs
            out.mkdir(parents=True, exist_ok=True)
            if not locked:  # a folder made now: another sweep may have made it too
                held.enter_context(only_sweep(out))
                todo = _todo(store, all_jobs, retry_errors)
            if spec_path is not None:
                _keep_spec_copy(Path(spec_path), out)
            with progress_bar(progress, todo, workers, spec.name, spec.job_timeout) as advance:
                for job, record in runner.run(todo, flag):
                    store.append(record)
                    ran += 1
                    errors += record.get("status") == "error"
                    advance(job, record)
        if report and store.path.exists():  # stopped before a first result: nothing to report
            from .report import write_report
            write_report(out)
    return SweepSummary(len(all_jobs), len(all_jobs) - len(todo), ran, errors, flag.stopped, out)


def _todo(store: ResultStore, jobs: list, retry_errors: bool) -> list:
    """The jobs not finished in the store (errors too, with retry_errors)."""
    done = store.finished(include_errors=not retry_errors)
    return [job for job in jobs if job.key not in done]


@contextlib.contextmanager
def only_sweep(out: Path) -> Iterator[bool]:
    """Hold the folder `out` (an advisory lock on it, gone with this process however it ends):
    a second sweep into it meanwhile is refused, as it would run the jobs this one has not
    finished yet and append them twice. Where there is no flock (Windows), nothing is held."""
    try:
        import fcntl
    except ImportError:
        yield True
        return
    fd = os.open(out, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise ZboptError(f"--out {out} is in use by another zbopt sweep: wait for it to "
                             f"finish or choose another --out") from None
        yield True
    finally:
        os.close(fd)


def check_out_dir(out: Path, force: bool) -> None:
    """Refuse a folder that holds files but no sweep: the report would overwrite them."""
    if force or not out.exists():
        return
    if not out.is_dir():
        raise ZboptError(f"--out {out} is a file: give a folder")
    if (out / RESULTS_FILE).exists() or all(_our_spec_copy(p) for p in out.iterdir()):
        return  # a sweep's folder, or one that a sweep stopped before its first result left
    raise ZboptError(f"--out {out} holds files but no {RESULTS_FILE}: choose another folder "
                     f"or pass --force (results.csv, results.md and plots there get replaced)")


def check_same_spec(store: ResultStore, spec: SweepSpec, jobs: list, force: bool) -> None:
    """Refuse a folder holding results of jobs this spec does not have: another spec's sweep,
    or this spec before an edit (a spec that only gained jobs is fine, its finished jobs are
    kept)."""
    if force or not store.path.exists():
        return
    keys = {job.key for job in jobs}
    foreign = [r for key, r in store.records().items() if key not in keys]
    if not foreign:
        return
    stored = _stored_spec_name(store.directory)
    where, what = f"--out {store.directory}", _what_differs(foreign, jobs)
    keep = "pass --force to keep them beside this spec's results, or choose another --out"
    if stored is not None and stored != spec.name:
        raise ZboptError(f"{where} holds {len(foreign)} result(s) of spec {stored!r} that spec "
                         f"{spec.name!r} does not have ({what}): {keep}")
    if stored is not None:
        raise ZboptError(f"{where} holds {len(foreign)} result(s) of jobs spec {spec.name!r} no "
                         f"longer has: it was edited since they ran ({what}); {keep}")
    raise ZboptError(f"{where} holds {len(foreign)} result(s) of jobs that spec {spec.name!r} "
                     f"does not have ({what}): {keep}")


def _stored_spec_name(directory: Path) -> str | None:
    """The name of the spec whose copy the folder keeps (None: no readable copy)."""
    copy = Path(directory) / "sweep-spec.toml"
    if not copy.exists():
        return None
    try:
        return load_spec(copy).name
    except ZboptError:
        return None


def _what_differs(foreign: list[dict], jobs: list) -> str:
    """Which methods and instances the stored results have that the spec's jobs do not."""
    labels = {job.method.label for job in jobs}
    names = {str(job.instance.get("name", "")) for job in jobs}
    methods = sorted({str(r.get("label")) for r in foreign} - labels)
    gone = sorted({str(r.get("instance_name")) for r in foreign} - names)
    changed = sorted({str(r.get("instance_name")) for r in foreign
                      if str(r.get("label")) in labels and str(r.get("instance_name")) in names})
    parts = [f"{said}: {_some(items)}" for said, items in (
        ("methods not in the spec", methods), ("instances not in the spec", gone),
        ("instances with other settings", changed)) if items]
    return "; ".join(parts) or "jobs with other settings"


def _some(items: list[str], shown: int = 3) -> str:
    more = len(items) - shown
    return ", ".join(items[:shown]) + (f" and {more} more" if more > 0 else "")


# The first line of the spec's copy: its relative paths still point from the original's folder.
COPY_NOTE = ("# A copy of the sweep spec {name}: its relative paths are relative to that "
             "file's folder, not this one.\n")
_COPY_START = COPY_NOTE.split("{")[0]


def _our_spec_copy(path: Path) -> bool:
    """Whether `path` is the spec's copy a sweep keeps (see _keep_spec_copy)."""
    if path.name != "sweep-spec.toml" or not path.is_file():
        return False
    start = _COPY_START.encode()
    try:
        with open(path, "rb") as f:
            return f.read(len(start)) == start
    except OSError:
        return False


def _keep_spec_copy(spec_path: Path, out: Path) -> None:
    """A copy of the spec beside the results: what produced them (our own file, refreshed)."""
    target = out / "sweep-spec.toml"
    if spec_path.resolve() == target.resolve():
        return
    text = spec_path.read_text()
    if not text.startswith(_COPY_START):
        text = COPY_NOTE.format(name=spec_path.name) + text
    target.write_text(text)
