"""Independent tasks shared between this process and forked workers: compare's methods of a
large instance and the report's charts.

Forked workers share this process's imports, data and hash seed, so they compute exactly what
it would; only their results travel back (pickled). Ctrl-C is this process's to handle: the
workers ignore it and are ended (SIGTERM) when this process stops on an error or an interrupt.
"""

from __future__ import annotations

import multiprocessing
import pickle
import signal
import sys
from queue import Empty
from typing import Any, Callable, Optional, Sequence


def can_fork() -> bool:
    return sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()


def run_forked(order: Sequence[int], task: Callable[[int], Any], jobs: int,
               done: Callable[[int, Any], None],
               started: Optional[Callable[[int], None]] = None) -> None:
    """task(i) for every i of `order`, in this process and jobs - 1 forked workers: this process
    takes from the front of the order, the first worker from the back, others from the front too,
    and this process never waits idle while tasks are left. done(i, result) is called in this
    process as each task's result is in (in the order they finish); started(processes) once
    the workers are running."""
    sys.stdout.flush()  # a forked worker must not write this process's buffered output again
    sys.stderr.flush()
    context = multiprocessing.get_context("fork")
    lock = context.Lock()
    ends = context.Array("i", [0, len(order)], lock=False)  # next at the front, past the back
    queue = context.Queue()
    workers = [context.Process(target=_worker, daemon=True,
                               args=(order, task, ends, lock, queue, w == 0))
               for w in range(min(jobs, len(order)) - 1)]
    running = len(workers)

    def collect(wait: bool) -> None:
        nonlocal running
        while running:
            try:
                message = queue.get(timeout=0.2) if wait else queue.get_nowait()
            except Empty:
                if not wait:
                    return
                if not any(w.is_alive() for w in workers) and queue.empty():
                    raise RuntimeError("a worker process stopped without its results") from None
                continue
            if message is None:
                running -= 1
            elif message[2] is not None:
                raise message[2]
            else:
                done(message[0], message[1])

    try:
        for worker in workers:
            worker.start()
        if started is not None:
            started(len(workers) + 1)
        while (k := _take(ends, lock, back=False)) is not None:
            i = order[k]
            done(i, task(i))
            collect(wait=False)
        collect(wait=True)
        for worker in workers:
            worker.join()
    finally:
        for worker in workers:  # after an error or an interrupt, stops the workers at once
            if worker.is_alive():
                worker.terminate()
                worker.join()


def _take(ends, lock, back: bool) -> Optional[int]:
    """The position in the order of the next task to run (None: none left)."""
    with lock:
        if ends[0] >= ends[1]:
            return None
        if back:
            ends[1] -= 1
            return ends[1]
        ends[0] += 1
        return ends[0] - 1


def _ignore_interrupt() -> None:
    # Ctrl-C is the parent's to handle: it stops the workers, with SIGTERM, whose default
    # action ends a worker at once (a forked worker inherits the command's own SIGTERM handler)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _worker(order, task, ends, lock, queue, back: bool) -> None:
    _ignore_interrupt()
    try:
        while (k := _take(ends, lock, back)) is not None:
            i = order[k]
            try:
                queue.put((i, task(i), None))
            except Exception as err:  # this process's failure, told to the parent as it is
                queue.put((i, None, _picklable(err)))
                return
    finally:
        queue.put(None)


def _picklable(err: Exception) -> Exception:
    try:
        pickle.loads(pickle.dumps(err))
        return err
    except Exception:
        return RuntimeError(f"{type(err).__name__}: {err}")
