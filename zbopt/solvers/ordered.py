"""The ordered model: CP-SAT over the orders of a capped contiguous pipeline, one literal per
pair of passes whose order is open.

The interval model (backends/cpsat.py) states "one pass at a time" with a no-overlap constraint
per device and the memory with a cumulative or reservoir; CP-SAT then searches start times and
finds the orders through them. On a contiguous pipeline (one stage per device, one chain,
passes never overlapping) whose stages run F, B and W in micro-batch order (the symmetry every
exact solver here assumes, docs/model.md), most pairs of passes on a device are ordered
already:
- F(j) before B(j') and W(j') for j' >= j (B(j') follows F(j'), W(j') follows B(j'));
- B(j) before W(j') for j' >= j;
- with k the activations the device holds at most (memory is added at an F's start and
  m_b - m_w of it released at its B's end, m_w at its W's end), F(j + k) after B(j);
- with c + 1 the most micro-batches F can have started while W(j) has not ended (c = max over a
  of a + Q_a, less one, Q_a the W that may be pending beside a activations), F(j + c + 1) and
  B(j + c + 1) after W(j).
The open pairs are F(j + i) against B(j) for 0 < i < k, and F(j + i) and B(j + i) against W(j)
for 0 < i <= c. One literal says which runs first; the literals of neighbouring pairs imply each
other (F(j + i) before B(j) implies F(j + i - 1) before B(j), and F(j + i) before B(j + 1), and
F(j + i) before W(j)). The memory is checked where it rises, at each F's start: the B and W ended
by then are the literals' count, so the level there is a linear expression of them, within the
cap. Every schedule of these orders is a valid schedule, and every in-order valid schedule has
such orders: the model's optimum is the optimum among in-order schedules, as the interval
model's is.

CP-SAT searches this model much faster from a hint. On the 128k-vocabulary tight split of
results/plan.md (p=8, m=32, 4,503 literals) two workers went from the policy search's 4,262,643
to 4,126,287-4,133,707 in 30 s (three seeds), and with the settings zbopt.solvers.lns gives it
(ORDERED_SHARE there) to 4,119,320-4,124,943 in 20 s; the large-neighbourhood search on the
interval model reached 4,169,481 and 4,185,267 in 58 s. Its linear bound stays weak (about 89%
of the span), so it is a search for schedules: the bounds come from elsewhere. These timings
are scratch runs on a quiet machine; results/plan.md has the plans that use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ortools.sat.python import cp_model

from ..bounds import activation_capacity, held_count
from ..instance import Instance
from ..passes import Pass
from ..plan.memory_bound import applies as contiguous


def applies(instance: Instance) -> bool:
    """Whether the model states the instance: integer costs and memory (solve()'s scaled
    instance), a cap, one stage per device on one chain, passes that never overlap, and every
    device able to hold one activation."""
    if instance.cap is None or not contiguous(instance) or len(instance.chains) != 1:
        return False
    return all(activation_capacity(instance, d) >= instance.m_b[d]
               for d in range(instance.devices))


def _held(instance: Instance, d: int) -> tuple[int, int]:
    """(k, c) of the module doc for device d, each at most m."""
    m, room = instance.microbatches, activation_capacity(instance, d)
    m_b, m_w = instance.m_b[d], instance.m_w[d]
    k = held_count(room, m_b, m)
    c = max(a + held_count(room - a * m_b, m_w, m) for a in range(1, k + 1)) - 1
    return k, min(m, c)


@dataclass
class OrderedModel:
    """The model and its variables: every pass's start, the objective, and each literal with
    the two passes it orders (true: the first runs before the second)."""

    model: cp_model.CpModel
    start: dict[Pass, cp_model.IntVar]
    objective: cp_model.IntVar
    literals: list[tuple[cp_model.IntVar, Pass, Pass]]


def build(instance: Instance, objective: str, horizon: int,
          lower: Optional[int] = None) -> OrderedModel:
    """The model of the module doc for the integer `instance`, objective ("span" or
    "makespan") at most `horizon` and at least `lower`."""
    p, m, comm = instance.devices, instance.microbatches, int(instance.comm)
    (stages, mbs), = instance.chains
    model = cp_model.CpModel()
    window = int(horizon) * (p if objective == "span" else 1)
    cost = {q: int(instance.cost(q[0], q[2])) for q in instance.passes()}
    start: dict[Pass, cp_model.IntVar] = {}
    for q in cost:
        start[q] = model.new_int_var(0, max(0, window - cost[q]), f"{q[2]}{q[0]}_{q[1]}")
    # stage s of the chain runs on device s (contiguous); mbs are its micro-batches in order
    at = {(d, j, kind): start[(stages[d], mbs[j], kind)]
          for d in range(p) for j in range(m) for kind in "FBW"}
    literals: list[tuple[cp_model.IntVar, Pass, Pass]] = []
    for d in range(p):
        s = stages[d]
        t_f, t_b, t_w = (int(instance.cost(s, kind)) for kind in "FBW")
        f = [at[d, j, "F"] for j in range(m)]
        b = [at[d, j, "B"] for j in range(m)]
        w = [at[d, j, "W"] for j in range(m)]
        for j in range(m):
            if d + 1 < p:
                model.add(at[d + 1, j, "F"] >= f[j] + t_f + comm)
                model.add(b[j] >= at[d + 1, j, "B"] + int(instance.cost(stages[d + 1], "B"))
                          + comm)
            else:
                model.add(b[j] >= f[j] + t_f)
            model.add(w[j] >= b[j] + t_b)
            if j + 1 < m:
                model.add(f[j + 1] >= f[j] + t_f)
                model.add(b[j + 1] >= b[j] + t_b)
                model.add(w[j + 1] >= w[j] + t_w)
        k, c = _held(instance, d)
        for j in range(m - k):
            model.add(f[j + k] >= b[j] + t_b)
        for j in range(m - c - 1):
            model.add(f[j + c + 1] >= w[j] + t_w)
        starts = {"F": (f, t_f), "B": (b, t_b), "W": (w, t_w)}

        def pair(kinds: str, j: int, i: int, s=s, starts=starts):
            """The literal "kinds[0] of micro-batch j + i runs before kinds[1] of j"."""
            (first, t_first), (second, t_second) = starts[kinds[0]], starts[kinds[1]]
            return _pair(model, literals, first[j + i], t_first, second[j], t_second,
                         ((s, mbs[j + i], kinds[0]), (s, mbs[j], kinds[1])))

        x = {(j, i): pair("FB", j, i) for j in range(m) for i in range(1, min(k, m - j))}
        y = {(j, i): pair("FW", j, i) for j in range(m) for i in range(1, min(c + 1, m - j))}
        z = {(j, i): pair("BW", j, i) for j in range(m) for i in range(1, min(c + 1, m - j))}
        for table in (x, y, z):
            for (j, i), lit in table.items():
                if i > 1:
                    model.add_implication(lit, table[j, i - 1])
                if (j + 1, i - 1) in table:
                    model.add_implication(lit, table[j + 1, i - 1])
        for key, lit in x.items():
            model.add_implication(lit, y[key])
        for key, lit in z.items():
            model.add_implication(lit, y[key])
        _memory(model, instance, d, k, c, x, y)
    value = model.new_int_var(max(0, int(lower or 0)), max(0, int(horizon), int(lower or 0)),
                              objective)
    for d in range(p):
        last = at[d, m - 1, "W"] + int(instance.cost(stages[d], "W"))
        model.add(value >= (last - at[d, 0, "F"] if objective == "span" else last))
    if objective == "span":
        model.add(at[0, 0, "F"] == 0)  # every pass depends on it: time starts there
    model.minimize(value)
    return OrderedModel(model, start, value, literals)


def _pair(model, literals, first, t_first, second, t_second, passes):
    """A literal: true, `first` ends before `second` starts; false, the other way round."""
    lit = model.new_bool_var("")
    model.add(second >= first + t_first).only_enforce_if(lit)
    model.add(first >= second + t_second).only_enforce_if(~lit)
    literals.append((lit, *passes))
    return lit


def _memory(model, instance: Instance, d: int, k: int, c: int, x: dict, y: dict) -> None:
    """The level at each F's start within the cap: a in flight (F started, B not ended) hold
    m_b, the B ended with W pending m_w."""
    m = instance.microbatches
    m_b, m_w = int(instance.m_b[d]), int(instance.m_w[d])
    room = int(activation_capacity(instance, d))
    for j in range(m):
        # B(j') and W(j') ended before F(j) starts: forced for j' <= j - k and j' <= j - c - 1,
        # open (the literal false) up to j - 1
        ended_b = [~x[j - i, i] for i in range(1, min(k, j + 1)) if (j - i, i) in x]
        ended_w = [~y[j - i, i] for i in range(1, min(c + 1, j + 1)) if (j - i, i) in y]
        forced_b, forced_w = max(0, j - k + 1), max(0, j - c)
        level = (m_b * (j + 1) - (m_b - m_w) * (forced_b + sum(ended_b))
                 - m_w * (forced_w + sum(ended_w)))
        model.add(level <= room)


def add_hint(parts: OrderedModel, starts: dict[Pass, int], objective: str,
             instance: Instance) -> None:
    """The schedule `starts` (every pass's start, integer time) as the model's hint."""
    parts.model.clear_hints()
    shift = min(starts.values()) if objective == "span" else 0
    for q, var in parts.start.items():
        parts.model.add_hint(var, int(starts[q]) - shift)
    for lit, a, b in parts.literals:
        parts.model.add_hint(lit, starts[a] < starts[b])
    (stages, mbs), = instance.chains
    ends = []
    for s in stages:
        last = starts[(s, mbs[-1], "W")] + int(instance.cost(s, "W")) - shift
        ends.append(last - (starts[(s, mbs[0], "F")] - shift if objective == "span" else 0))
    parts.model.add_hint(parts.objective, max(ends))
