"""Long computations out of the server's process, so they cannot hold its interpreter lock while
the page waits for a re-evaluation: comparisons in one worker process, each solve in its own.

Both use the "spawn" start method: forking a server that runs threads is unsafe.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue as queues
import signal
import threading
import time
from typing import Any, Callable, Optional

from ..errors import ZboptError
from ..instance import Instance
from ..result import Result
from .jobs import Cancelled

_CONTEXT = multiprocessing.get_context("spawn")


def _serve_compares(conn) -> None:
    """The comparison worker: (settings, base, method name) in, that method's rows out, until
    the server closes its end. It runs at a lower priority than the server, so the table
    filling in never slows the redraw of the schedule shown."""
    from .api import compare_settings
    with contextlib.suppress(OSError, AttributeError):  # no niceness on some systems
        os.nice(10)
    while True:
        try:
            settings, base, name = conn.recv()
        except (EOFError, OSError):
            return
        try:
            conn.send(("rows", compare_settings(settings, base, [name])))
        except ZboptError as err:
            conn.send(("refused", err))
        except Exception as err:  # noqa: BLE001 (reported to the page, the worker goes on)
            conn.send(("failed", f"{type(err).__name__}: {err}"))


class ComparePool:
    """One worker process for the comparison table's methods (started on first use, one method
    at a time; close() kills it, so stopping the server never waits for a comparison)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: Optional[Any] = None
        self._conn: Optional[Any] = None
        self._closed = False

    def compare_one(self, settings, base: Instance, name: str) -> list[Result]:
        """The rows of method `name` (blocking; call it from a worker thread)."""
        with self._lock:
            if self._closed:
                raise ZboptError("the server is stopping")
            if self._process is None or not self._process.is_alive():
                self._conn, child = _CONTEXT.Pipe()
                self._process = _CONTEXT.Process(target=_serve_compares, args=(child,),
                                                 daemon=True, name="zbopt-compare")
                self._process.start()
                child.close()
            try:
                self._conn.send((settings, base, name))
                kind, payload = self._conn.recv()
            except (EOFError, OSError):
                raise RuntimeError("the comparison worker stopped") from None
        if kind == "rows":
            return payload
        if kind == "refused":
            raise payload
        raise RuntimeError(payload)

    def close(self) -> None:
        self._closed = True
        process = self._process
        if process is not None and process.is_alive():
            process.kill()  # our own child, by its handle
            process.join(timeout=5)


def _solve_child(channel, solver: str, instance: Instance, params: dict) -> None:
    from .. import signals
    from ..registry import run
    try:
        # SIGTERM (a cancel) and Ctrl-C stop the solve as they stop `zbopt solve`: a solver's
        # own child is killed; the process then ends without a word (the server knows why)
        with signals.handled():
            channel.put(("ready", None))  # SIGUSR1 now asks the solve to finish
            result = run(solver, instance,
                         progress=lambda info: channel.put(("progress", info)), **params)
        channel.put(("result", result))
    except KeyboardInterrupt:
        return
    except ZboptError as err:
        channel.put(("refused", str(err)))
    except Exception as err:  # noqa: BLE001 (reported to the page, the server stays up)
        channel.put(("failed", f"{type(err).__name__}: {err}"))


def _drain_until_ended(child, channel, wait: float) -> None:
    """Wait up to `wait` s for `child` to end, reading what it still sends (a child blocked
    writing to a full channel would not end)."""
    deadline = time.monotonic() + wait
    while child.is_alive() and time.monotonic() < deadline:
        with contextlib.suppress(queues.Empty):
            channel.get(timeout=0.1)


def solve_in_process(solver: str, instance: Instance, progress: Callable[[dict], None],
                     stop: Optional[threading.Event] = None,
                     finish: Optional[threading.Event] = None, **params) -> Result:
    """registry.run(solver, ...) in a child process, relaying its progress reports here; when
    `stop` is set, the child is sent SIGTERM (it cleans up as on Ctrl-C; killed if it has not
    ended 5 s later) and Cancelled is raised; when `finish` is set, the child is sent SIGUSR1
    (zbopt.signals: its solver stops searching) and its result, the best schedule it has, is
    returned as at its time limit."""
    channel = _CONTEXT.Queue()
    child = _CONTEXT.Process(target=_solve_child, args=(channel, solver, instance, params),
                             daemon=True, name=f"zbopt-solve-{solver}")
    child.start()
    ready = finishing = False  # the child handles SIGUSR1 (before, it would end the child)
    try:
        while True:
            if stop is not None and stop.is_set():
                child.terminate()  # our own child, by its handle: SIGTERM
                _drain_until_ended(child, channel, 5.0)
                raise Cancelled(f"the {solver} solve was cancelled")
            if ready and not finishing and finish is not None and finish.is_set() \
                    and child.exitcode is None:
                finishing = True
                os.kill(child.pid, signal.SIGUSR1)  # our own child, running, by its handle
            try:
                kind, payload = channel.get(timeout=0.2)
            except queues.Empty:
                if not child.is_alive():
                    raise RuntimeError(f"the solver process stopped (exit code "
                                       f"{child.exitcode})") from None
                continue
            if kind == "ready":
                ready = True
            elif kind == "progress":
                progress(payload)
            elif kind == "result":
                return payload
            elif kind == "refused":
                raise ZboptError(payload)
            else:
                raise RuntimeError(payload)
    finally:
        child.join(timeout=5)
        if child.is_alive():
            child.kill()  # our own child, by its handle
            child.join()
