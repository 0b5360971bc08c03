"""Ctrl-C and SIGTERM while a command runs: raised where they land, and remembered.

Python raises Ctrl-C's KeyboardInterrupt wherever the main thread is; when that is a garbage
collector callback or a `__del__`, Python prints "Exception ignored in ..." and carries on, and
the command would then write its files and exit 0 as if never interrupted. So the handlers here
also record the signal, and `check()`, called before files are put in place and before the
command returns, raises it again. SIGTERM (a job scheduler, `timeout`, Ray, the explorer's
Cancel) raises Terminated, a KeyboardInterrupt, so every phase cleans up as it does for Ctrl-C
(a solver's child process is killed, a search stopped, nothing half written).
"""

from __future__ import annotations

import contextlib
import signal
import threading

_received: list[int] = []  # the signals handled since `handled()` was entered


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be."""


def _raise(signum: int) -> None:
    raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt


def _on_signal(signum, frame) -> None:
    _received.append(signum)
    _raise(signum)


@contextlib.contextmanager
def handled():
    """In the main thread: SIGINT (while Python's own handler has it) and SIGTERM (while it has
    its default action, which ends the process at once, leaving e.g. a CBC child running) raise
    KeyboardInterrupt and Terminated and are recorded for `check()`. Elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    mine = [s for s, default in ((signal.SIGINT, signal.default_int_handler),
                                 (signal.SIGTERM, signal.SIG_DFL))
            if signal.getsignal(s) is default]
    _received.clear()
    for s in mine:
        signal.signal(s, _on_signal)
    try:
        yield
    finally:
        _received.clear()  # a record outlives the command in no later call
        for s in mine:
            signal.signal(s, signal.default_int_handler if s == signal.SIGINT else signal.SIG_DFL)


def check() -> None:
    """Raise again a signal handled earlier whose exception Python swallowed (see the module
    doc); nothing if none was."""
    if _received:
        _raise(_received[-1])


def consumed() -> None:
    """For a command whose normal end is a signal (`zbopt serve` stops on Ctrl-C): forget the
    signals handled so far, so that `check()` does not raise them again."""
    _received.clear()
