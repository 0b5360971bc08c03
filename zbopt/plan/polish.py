"""Polishing a split's best schedule with zbopt.heuristics.local_search before the exact solver.

Under caps that hold few micro-batches the greedy's orders leave idle time that moving a few
passes removes; one local-search run is capped at a fixed number of re-timings, so it is run
again from its own output while that still shortens the span and time is left.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Optional

from ..heuristics import local_search
from ..result import Result
from ..schedule import evaluate

SUFFIX = "+local-search"
ROUNDS = 6


def polish(result: Result, deadline: float, rounds: int = ROUNDS) -> Optional[Result]:
    """A shorter schedule than `result`'s within its cap (None: no improvement found)."""
    if result.timeline is None or result.instance.overlap or result.instance.placement != "contiguous":
        return None
    instance, began = result.instance, time.perf_counter()
    schedule, span = result.schedule, result.span
    improved = None
    for _ in range(rounds):
        if time.perf_counter() >= deadline:
            break
        candidate = local_search.improve(instance, schedule)
        timeline = evaluate(instance, candidate)
        if not timeline.fits_cap or timeline.span >= span * (1 - 1e-9):
            break
        schedule, span, improved = candidate, timeline.span, timeline
    if improved is None:
        return None
    method = result.method if result.method.endswith(SUFFIX) else result.method + SUFFIX
    schedule = replace(schedule, method=method)
    return replace(result, method=method, kind="heuristic", status="heuristic",
                   timeline=evaluate(instance, schedule),
                   runtime=result.runtime + time.perf_counter() - began)
