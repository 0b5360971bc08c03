"""CP-SAT's solve, ended by Ctrl-C as every other phase of a command is.

CP-SAT catches SIGINT itself by default and only stops its search: the command would then go
on as if its time were up, report the schedule found so far and write its files. Here, in the
main thread, the search runs in a worker thread with that catch off; the main thread waits, so
Python's KeyboardInterrupt reaches it, stops the search and is raised again (the command line
prints "zbopt: interrupted" and exits 130, having written nothing). A request to finish now
(SIGUSR1, zbopt.signals) stops the search too, but the solve returns what it found.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

from .. import signals

# A search that starts while a background search runs beside it (zbopt.plan.fb_bound.Background,
# one thread proving a bound) lowers its own threads' priority by this much (their nice value),
# so that the background search keeps its core: with the scheduler's even shares, two CP-SAT
# workers beside it left it a third of the two cores, and the 128k tight split of
# results/plan.md got its bound in none of three 60 s plans run by hand; yielding, in all nine.
YIELD_NICENESS = 5
_background = 0
_lock = threading.Lock()


def background_started() -> None:
    """A background search begins (each call is matched by one background_ended())."""
    global _background
    with _lock:
        _background += 1


def background_ended() -> None:
    global _background
    with _lock:
        _background -= 1


def _yield_if_needed() -> None:
    """In the calling thread (whose CP-SAT workers inherit its priority): a lower priority while
    a background search runs; nothing where the system does not allow it."""
    if _background <= 0 or not hasattr(os, "setpriority"):
        return
    try:
        native = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, native,
                       os.getpriority(os.PRIO_PROCESS, native) + YIELD_NICENESS)
    except OSError:
        pass


def solve(solver: Any, model: Any, callback: Any = None) -> int:
    """`solver.solve(model, callback)` (a cp_model.CpSolver), interruptible by Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        return solver.solve(model, callback)  # no signal reaches another thread
    solver.parameters.catch_sigint_signal = False
    done = threading.Event()
    outcome: dict[str, Any] = {}

    def search() -> None:
        try:
            # SIGINT for the main thread only: CP-SAT's threads (started from this one, whose
            # mask they inherit) must not be the one the kernel interrupts
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            _yield_if_needed()  # this thread ends with the search: its priority goes with it
            outcome["status"] = solver.solve(model, callback)
        except BaseException as err:  # noqa: BLE001  raised again in the caller's thread
            outcome["error"] = err
        finally:
            done.set()

    worker = threading.Thread(target=search, name="cp-sat", daemon=True)
    finishing = False
    try:
        worker.start()
        while not done.wait(0.2):  # an Event's wait lets KeyboardInterrupt in; join may not
            if not finishing and signals.finish_requested():  # SIGUSR1: the best found so far
                finishing = True
                solver.stop_search()
    except KeyboardInterrupt:
        if worker.ident is not None:  # started: stop it (again, should the search only now
            while not done.wait(0.05):  # be starting) and let it end before the interpreter
                solver.stop_search()  # may shut down under it
            worker.join()
        raise
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["status"]
