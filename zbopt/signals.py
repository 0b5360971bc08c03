"""Ctrl-C and SIGTERM while a command runs: raised where they land, and remembered.

Python raises Ctrl-C's KeyboardInterrupt wherever the main thread is; when that is a garbage
collector callback or a `__del__`, Python prints "Exception ignored in ..." and carries on, and
the command would then write its files and exit 0 as if never interrupted. So the handlers here
also record the signal, and `check()`, called before files are put in place and before the
command returns, raises it again. SIGTERM (a job scheduler, `timeout`, Ray, the explorer's
Cancel) raises Terminated, a KeyboardInterrupt, so every phase cleans up as it does for Ctrl-C
(a solver's child process is killed, a search stopped, nothing half written).

SIGUSR1 asks the solvers to finish now instead: each stops its search where it next looks
(`finish_requested()`) and returns the best schedule it has, as at its time limit, and the
command goes on. The explorer's "Stop, keep best" sends it to its solve process.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time

_received: list[int] = []  # the signals handled since `handled()` was entered
_finish = threading.Event()  # SIGUSR1 (or request_finish) since `handled()` was entered


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be."""


def _raise(signum: int) -> None:
    raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt


def _on_signal(signum, frame) -> None:
    _received.append(signum)
    _raise(signum)


def _on_finish(signum, frame) -> None:
    _finish.set()


def request_finish() -> None:
    """Ask the running solvers to finish now with the best they have (what SIGUSR1 does)."""
    _finish.set()


def finish_requested() -> bool:
    """Whether the solvers were asked to finish now (SIGUSR1 or request_finish)."""
    return _finish.is_set()


def past(deadline: float) -> bool:
    """Whether a search whose time ends at `deadline` (time.perf_counter()) should stop:
    its time is up, or the solvers were asked to finish now."""
    return time.perf_counter() >= deadline or _finish.is_set()


@contextlib.contextmanager
def handled():
    """In the main thread: SIGINT (while Python's own handler has it) and SIGTERM (while it has
    its default action, which ends the process at once, leaving e.g. a CBC child running) raise
    KeyboardInterrupt and Terminated and are recorded for `check()`; SIGUSR1 (while it has its
    default action, which ends the process) asks the solvers to finish now. Elsewhere nothing
    changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL,
                signal.SIGUSR1: signal.SIG_DFL}
    mine = [s for s, default in defaults.items() if signal.getsignal(s) is default]
    _received.clear()
    _finish.clear()
    for s in mine:
        signal.signal(s, _on_finish if s == signal.SIGUSR1 else _on_signal)
    try:
        yield
    finally:
        _received.clear()  # a record outlives the command in no later call
        _finish.clear()
        for s in mine:
            signal.signal(s, defaults[s])


def check() -> None:
    """Raise again a signal handled earlier whose exception Python swallowed (see the module
    doc); nothing if none was."""
    if _received:
        _raise(_received[-1])


def consumed() -> None:
    """For a command whose normal end is a signal (`zbopt serve` stops on Ctrl-C): forget the
    signals handled so far, so that `check()` does not raise them again."""
    _received.clear()
