"""Long computations out of the server's process, so they cannot hold its interpreter lock while
the page waits for a re-evaluation: comparisons in one worker process, each solve in its own.

Both use the "spawn" start method: forking a server that runs threads is unsafe.
"""

from __future__ import annotations

import multiprocessing
import queue as queues
from typing import Any, Callable, Optional

from ..errors import ZboptError
from ..instance import Instance
from ..result import Result

_CONTEXT = multiprocessing.get_context("spawn")


def _compare_one(settings, base: Instance, name: str) -> list[Result]:
    from .api import compare_settings
    return compare_settings(settings, base, [name])


class ComparePool:
    """One worker process for the comparison table's methods (started on first use)."""

    def __init__(self) -> None:
        self._pool: Optional[Any] = None

    def compare_one(self, settings, base: Instance, name: str) -> list[Result]:
        """The rows of method `name` (blocking; call it from a worker thread)."""
        if self._pool is None:
            self._pool = _CONTEXT.Pool(1)
        return self._pool.apply(_compare_one, (settings, base, name))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None


def _solve_child(channel, solver: str, instance: Instance, params: dict) -> None:
    from ..registry import run
    try:
        result = run(solver, instance, progress=lambda info: channel.put(("progress", info)),
                     **params)
        channel.put(("result", result))
    except ZboptError as err:
        channel.put(("refused", str(err)))
    except Exception as err:  # noqa: BLE001 (reported to the page, the server stays up)
        channel.put(("failed", f"{type(err).__name__}: {err}"))


def solve_in_process(solver: str, instance: Instance, progress: Callable[[dict], None],
                     **params) -> Result:
    """registry.run(solver, ...) in a child process, relaying its progress reports here."""
    channel = _CONTEXT.Queue()
    child = _CONTEXT.Process(target=_solve_child, args=(channel, solver, instance, params),
                             daemon=True, name=f"zbopt-solve-{solver}")
    child.start()
    try:
        while True:
            try:
                kind, payload = channel.get(timeout=0.5)
            except queues.Empty:
                if not child.is_alive():
                    raise RuntimeError(f"the solver process stopped (exit code "
                                       f"{child.exitcode})") from None
                continue
            if kind == "progress":
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
            child.terminate()  # our own child, by its handle
            child.join()
