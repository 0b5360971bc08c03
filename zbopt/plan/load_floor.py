"""The least largest device load over every partition of a layered model on the interleaved or V
placement, by CP-SAT: a lower bound on the span of every schedule of every partition where the
dynamic programmes of zbopt.plan.paired_bound do not apply (interleaved with three or more
chunks) or exceed their budget.

Every schedule's span is at least each device's busy window, which holds m times the t_f + t_b +
t_w of each of its stages (docs/model.md). A partition is a list of cuts 0 = c_0 < c_1 < ... <
c_S = n along the layers; stage k runs layers c_k .. c_(k+1) - 1 on its device
(LayeredModel.stage_devices). A partition no schedule runs is left out: on each device,
static memory and the activations of one micro-batch through all its stages (held together from
the F of its last stage to the B of its first) within the cap, as paired_bound's fit rule.

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
from typing import Optional

from ..errors import ZboptError
from ..layers import LayeredModel
from ..solvers.api import power_of_ten_scale
from .bound import device_caps

# the scaled total where values are not integers at a small power of ten: the rounding costs at
# most n / SCALE of it
SCALE = 10 ** 9
MAX_INTEGER = 10 ** 15


def _integers(values: list[float], top: float = 0.0) -> tuple[float, list[int]]:
    """(scale, prefix sums of the values times scale, each rounded down): the power of ten that
    makes every value an integer where the sums stay small, else one that makes the larger of
    the total and `top` SCALE."""
    total = max(sum(values), top)
    try:
        scale = power_of_ten_scale(values, "value")
        exact = total * scale <= MAX_INTEGER
    except ZboptError:
        exact = False
    if not exact:
        scale = SCALE / total if total > 0 else 1.0
    prefix = [0]
    for x in values:
        prefix.append(prefix[-1] + (round(x * scale) if exact else math.floor(x * scale)))
    return scale, prefix


def load_floor(model: LayeredModel, time_limit: float) -> Optional[float]:
    """The least over fitting partitions of the largest device load on interleaved or V, or a
    lower bound of it proven within `time_limit` seconds; inf when CP-SAT proves no partition
    fits the cap; None on other placements or when it proves nothing above zero.

    Its argmin is not offered to the plan's search as a start: a split that balances the loads
    alone can run far longer than its load (a V split with one layer per device on one side),
    and as the split of least bound it would draw the search's later phases."""
    if model.placement not in ("interleaved", "v") or time_limit <= 0:
        return None
    from ortools.sat.python import cp_model

    layers, p, stages = model.expanded, model.devices, model.num_stages
    n, m = len(layers), model.microbatches
    loads = [m * (x.t_f + x.t_b + x.t_w) for x in layers]
    scale, prefix = _integers(loads)
    cp = cp_model.CpModel()
    cuts = [cp.NewConstant(0)] + [cp.NewIntVar(k, n - stages + k, f"c{k}")
                                  for k in range(1, stages)] + [cp.NewConstant(n)]
    for k in range(stages):
        cp.Add(cuts[k + 1] >= cuts[k] + 1)
    at = [cp.NewIntVar(0, prefix[-1], f"p{k}") for k in range(stages + 1)]
    for k in range(stages + 1):
        cp.AddElement(cuts[k], prefix, at[k])
    span = cp.NewIntVar(0, prefix[-1], "span")
    device_of = model.stage_devices()
    devices = [[k for k in range(stages) if device_of[k] == d] for d in range(p)]
    for own in devices:
        cp.Add(sum(at[k + 1] - at[k] for k in own) <= span)
    caps = device_caps(model)
    if caps is not None:
        unit, table = _integers([x.static + x.m_b for x in layers], max(caps))
        mem = [cp.NewIntVar(0, table[-1], f"q{k}") for k in range(stages + 1)]
        for k in range(stages + 1):
            cp.AddElement(cuts[k], table, mem[k])
        for d, own in enumerate(devices):
            # within_cap's tolerance, so no partition the evaluator would let fit is left out
            room = caps[d] + 1e-9 * max(1.0, abs(caps[d]))
            cp.Add(sum(mem[k + 1] - mem[k] for k in own) <= math.floor(room * unit))
    cp.Minimize(span)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = 1
    status = solver.Solve(cp)
    if status == cp_model.INFEASIBLE:
        return math.inf
    bound = solver.BestObjectiveBound()
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE) or bound <= 0:
        return None
    return bound / scale
