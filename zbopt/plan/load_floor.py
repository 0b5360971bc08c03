"""The least largest device load over every partition of a layered model on the interleaved, V
or dualpipe placement, by CP-SAT: a lower bound on the span of every schedule of every partition
where the dynamic programmes of zbopt.plan.paired_bound do not apply (interleaved with three or
more chunks) or exceed their budget.

Every schedule's span is at least each device's busy window, which holds r times the t_f + t_b +
t_w of each of its stages, r the micro-batches through the stage: m, or m/2 on dualpipe, whose
two directions each take half (docs/model.md). A partition is a list of cuts 0 = c_0 < c_1 <
... < c_P = n along the layers (P = LayeredModel.num_parts); part k runs layers c_k .. c_(k+1) -
1 as pipeline stage k and, on dualpipe, again as stage p + k (LayeredModel.stage_devices gives
each stage's device). A partition no schedule runs is left out, as paired_bound's fit rule:
on each device, static memory (every stage's) and the activations of one micro-batch through
all its stages (held together from the F of its last stage to the B of its first) within the
cap; on dualpipe, where no micro-batch runs through both of a device's stages, static memory and
the activations of either stage.

The model: each cut an integer variable, each prefix sum at a cut an element of the prefix table
(loads, and static memory plus m_b), a device's load the sum of its stages' differences, and
the objective the largest device load. Values are scaled to integers (exactly where a small
power of ten does it) and rounded down, so a fitting partition's memory sums stay within the
scaled cap (rounded down, as they are integers) and its load is no higher than its own:
CP-SAT's proven objective bound, scaled back, is a lower bound whether or not it finishes
within its time limit.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Optional

from ..errors import ZboptError
from ..instance import cap_limit
from ..layers import LayeredModel
from ..solvers import interruptible
from ..solvers.api import power_of_ten_scale
from .bound import device_caps

# the scaled total where values are not integers at a small power of ten: the rounding costs at
# most n / SCALE of it
SCALE = 10 ** 9
MAX_INTEGER = 10 ** 15
# CP-SAT's presolve turns each prefix-sum table read at a cut (cut_variables' sums) into one
# Boolean an entry, and does not stop at its time limit while it does: 4-7 us and about 2.3 KB an
# entry on this project's 2-core machine (0.6 s for V at p = 16 on 3,000 layers uncapped, 99,099
# entries; 1-3 s and 900 MB for interleaved with 3 chunks at p = 16 on 4,094 layers capped,
# 401,506). A model is built only where ENTRY_SECONDS an entry fits in its time limit
ENTRY_SECONDS = 1e-5
# and never past MAX_ENTRIES (about 600 MB), whatever the time
MAX_ENTRIES = 250_000


def table_entries(model: LayeredModel, tables: int) -> int:
    """The entries of `tables` prefix-sum tables read at every cut of a partition of `model`."""
    return tables * (model.num_parts + 1) * (model.num_layers + 1)


def affordable(entries: int, time_limit: float) -> bool:
    """Whether a CP-SAT model of `entries` table entries can be set up within `time_limit`
    seconds (ENTRY_SECONDS an entry, MAX_ENTRIES at most)."""
    return entries <= MAX_ENTRIES and entries * ENTRY_SECONDS < time_limit


def _integers(*lists: list[float], top: float = 0.0) -> tuple[float, list[list[int]]]:
    """(scale, the prefix sums of each list times scale, each rounded down): the power of ten
    that makes every value an integer where the sums stay small, else one that makes the larger
    of the total and `top` SCALE (one scale for all the lists, so their sums compare)."""
    every = [x for listed in lists for x in listed]
    total = max(sum(every), top)
    try:
        scale = power_of_ten_scale(every, "value")
        exact = total * scale <= MAX_INTEGER
    except ZboptError:
        exact = False
    if not exact:
        scale = SCALE / total if total > 0 else 1.0
    tables = []
    for listed in lists:
        prefix = [0]
        for x in listed:
            prefix.append(prefix[-1] + (round(x * scale) if exact else math.floor(x * scale)))
        tables.append(prefix)
    return scale, tables


def cut_variables(cp, n: int, parts: int) -> tuple[list, Callable[[list[int], str], list]]:
    """A partition of `n` layers into `parts` contiguous parts in the CP-SAT model `cp`: the
    cuts (0 and n fixed, each part at least one layer) and `sums(table, name)`, the variables
    holding a prefix-sum table's value at each cut."""
    cuts = [cp.NewConstant(0)] + [cp.NewIntVar(k, n - parts + k, f"c{k}")
                                  for k in range(1, parts)] + [cp.NewConstant(n)]
    for k in range(parts):
        cp.Add(cuts[k + 1] >= cuts[k] + 1)

    def sums(table: list[int], name: str) -> list:
        at = [cp.NewIntVar(0, table[-1], f"{name}{k}") for k in range(parts + 1)]
        for k in range(parts + 1):
            cp.AddElement(cuts[k], table, at[k])
        return at

    return cuts, sums


def load_floor(model: LayeredModel, time_limit: float) -> Optional[float]:
    """The least over fitting partitions of the largest device load on interleaved, V or
    dualpipe, or a lower bound of it proven within `time_limit` seconds; inf when CP-SAT proves
    no partition fits the cap; None on other placements, when it proves nothing above zero, or
    when its model is too large to set up in the time (affordable: thousands of layers; the
    caller keeps its weaker bound).

    Its argmin is not offered to the plan's search as a start: a split that balances the loads
    alone can run far longer than its load (a V split with one layer per device on one side),
    and as the split of least bound it would draw the search's later phases."""
    if model.placement not in ("interleaved", "v", "dualpipe") or time_limit <= 0:
        return None
    began = time.perf_counter()
    caps = device_caps(model)
    dual = model.placement == "dualpipe"
    tables = 1 if caps is None else 3 if dual else 2
    if not affordable(table_entries(model, tables), time_limit):
        return None
    from ortools.sat.python import cp_model

    layers, p, parts = model.expanded, model.devices, model.num_parts
    n = len(layers)
    runs = model.microbatches // 2 if dual else model.microbatches
    loads = [runs * (x.t_f + x.t_b + x.t_w) for x in layers]
    scale, (prefix,) = _integers(loads)
    cp = cp_model.CpModel()
    cuts, sums = cut_variables(cp, n, parts)
    at = sums(prefix, "p")
    span = cp.NewIntVar(0, 2 * prefix[-1], "span")
    device_of = model.stage_devices()
    # each device's parts, once per stage it runs them as (dualpipe's middle part twice)
    devices = [[s % parts for s in range(len(device_of)) if device_of[s] == d] for d in range(p)]
    for own in devices:
        cp.Add(sum(at[k + 1] - at[k] for k in own) <= span)
    if caps is not None:
        if dual:  # static memory of both stages, the activations of one
            unit, (static, activation) = _integers([x.static for x in layers],
                                                   [x.m_b for x in layers], top=max(caps))
            pinned_at, held_at = sums(static, "s"), sums(activation, "a")
        else:  # static memory and one micro-batch's activations through every stage
            unit, (table,) = _integers([x.static + x.m_b for x in layers], top=max(caps))
            pinned_at = sums(table, "q")
        for d, own in enumerate(devices):
            # within_cap's tolerance, so no partition the evaluator would let fit is left out
            room = math.floor(cap_limit(caps[d]) * unit)
            pinned = sum(pinned_at[k + 1] - pinned_at[k] for k in own)
            if dual:  # either stage's activations on top of both stages' static memory
                for k in own:
                    cp.Add(pinned + held_at[k + 1] - held_at[k] <= room)
            else:
                cp.Add(pinned <= room)
    cp.Minimize(span)
    left = time_limit - (time.perf_counter() - began)  # the building's time included
    if left <= 0:
        return None
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = left
    solver.parameters.num_workers = 1
    status = interruptible.solve(solver, cp)
    if status == cp_model.INFEASIBLE:
        return math.inf
    bound = solver.BestObjectiveBound()
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE) or bound <= 0:
        return None
    return bound / scale
