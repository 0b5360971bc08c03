"""The memory-bubble frontier: at each memory cap, the optimal span (with its certified gap)
beside the greedy heuristic and every family that fits; the Zero Bubble paper's Figure 7 with
proven optima.

Every span comes from evaluate() (through zbopt.solvers.solve and zbopt.compare); the only
derived number is the bubble rate a schedule meeting the lower bound would have,
(bound - ideal) / bound, drawn as the bottom of each optimum's error bar.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any, Optional

from .errors import ZboptError
from .instance import Instance

GREEDY = "zb-greedy"
_CAP_TERM = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(p?)\s*$")


def parse_caps(text: str) -> list[Any]:
    """Caps from `START:STOP:STEP` (inclusive, e.g. "1p:3p:0.25p") or a list "1p,1.5p,4e6".

    Multiples of p come back as strings ("1.25p"), absolute caps as numbers.
    """
    text = text.strip()
    if ":" in text:
        parts = text.split(":")
        if len(parts) != 3:
            raise ZboptError(f"--caps {text!r}: write START:STOP:STEP such as 1p:3p:0.25p, "
                             f"or a comma list such as 1p,2p,3p")
        terms = [_cap_term(x, text) for x in parts]
        if len({unit for _, unit in terms}) != 1:
            raise ZboptError(f"--caps {text!r}: START, STOP and STEP must all be multiples of "
                             f"p (1p:3p:0.25p) or all absolute numbers")
        (start, unit), (stop, _), (step, _) = terms
        if step <= 0 or stop < start:
            raise ZboptError(f"--caps {text!r}: need STEP > 0 and STOP >= START")
        count = int(math.floor((stop - start) / step + 1e-9)) + 1
        if count > 200:
            raise ZboptError(f"--caps {text!r} gives {count} caps: use a larger step (<= 200)")
        values = [round(start + i * step, 10) for i in range(count)]
        return [_cap_value(v, unit) for v in values]
    caps = []
    for part in text.split(","):
        value, unit = _cap_term(part, text)
        caps.append(_cap_value(value, unit))
    return caps


def _cap_term(part: str, text: str) -> tuple[float, str]:
    match = _CAP_TERM.match(part)
    if not match:
        raise ZboptError(f"--caps {text!r}: {part!r} is not a cap; use numbers or multiples "
                         f"of p such as 1.5p")
    return float(match.group(1)), match.group(2)


def _cap_value(value: float, unit: str) -> Any:
    if unit:
        return f"{value:g}p"
    return int(value) if value == int(value) else value


@dataclass(frozen=True)
class MethodPoint:
    method: str
    placement: str  # the placement it ran on (a family may re-place a contiguous model)
    span: float
    bubble_rate: float
    peak_memory: float


@dataclass(frozen=True)
class FrontierPoint:
    """One memory cap: the solver's best schedule and bound, the greedy, the families that fit."""

    cap: Any  # as given: "1.5p" or a number
    placement: str  # the instance's placement: the problem the optimum is proven for
    cap_value: Optional[float]  # absolute cap (max over devices), None when it is impossible
    cap_p: Optional[float]  # the cap in multiples of p
    ideal: Optional[float]
    solver_status: str
    span: Optional[float]
    bubble_rate: Optional[float]
    lower_bound: Optional[float]
    gap: Optional[float]
    solver_runtime: Optional[float]
    greedy: Optional[MethodPoint]
    families: tuple[MethodPoint, ...]  # fitting families, best first
    note: str = ""

    @property
    def bound_bubble_rate(self) -> Optional[float]:
        """The bubble rate of a schedule whose span met the lower bound."""
        if self.lower_bound is None or self.ideal is None or not self.lower_bound:
            return None
        return max(0.0, (self.lower_bound - self.ideal) / self.lower_bound)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["bound_bubble_rate"] = self.bound_bubble_rate
        return out


def frontier(instance: Instance, caps: list[Any], solver: str = "cpsat",
             time_limit: float = 30.0, threads: int = 1, progress=None) -> list[FrontierPoint]:
    """Solve `instance` at every cap; `progress(point)` is called after each cap if given."""
    if not caps:
        raise ZboptError("no caps given: use e.g. --caps 1p:3p:0.25p")
    points = []
    for cap in caps:
        point = frontier_point(instance, cap, solver, time_limit, threads)
        points.append(point)
        if progress is not None:
            progress(point)
    return points


def frontier_point(instance: Instance, cap: Any, solver: str, time_limit: float,
                   threads: int) -> FrontierPoint:
    from .solvers import solve
    unit = instance.devices * instance.activation_unit
    try:
        capped = instance.with_cap(cap)
    except ZboptError as err:
        # a cap below one activation admits no schedule at all: a point, not a failure
        return FrontierPoint(cap, instance.placement, None, None, None, "infeasible", None, None, None, None, None,
                             None, (), note=str(err))
    cap_value = max(capped.cap)
    result = solve(capped, solver=solver, objective="span", time_limit=time_limit,
                   threads=threads)
    timeline = result.timeline
    greedy, families = _heuristics(capped)
    return FrontierPoint(
        cap=cap, placement=instance.placement, cap_value=cap_value, cap_p=round(cap_value / unit, 6) if unit else None,
        ideal=timeline.ideal if timeline is not None else None,
        solver_status=result.status,
        span=timeline.span if timeline is not None else None,
        bubble_rate=timeline.bubble_rate if timeline is not None else None,
        lower_bound=result.lower_bound, gap=result.gap, solver_runtime=result.runtime,
        greedy=greedy, families=families, note=result.message if timeline is None else "")


def _heuristics(capped: Instance) -> tuple[Optional[MethodPoint], tuple[MethodPoint, ...]]:
    """The greedy heuristic's point (None if absent or over the cap) and every fitting family."""
    from .compare import compare
    from .families import families
    greedy = None
    fitting = []
    # the absolute cap, so that a family that re-places the model gets the same memory, not
    # its own placement's "kp" (which counts activations differently)
    absolute = capped.with_cap(list(capped.cap))
    for row in compare(absolute, list(families())):
        if not row.applies or not row.timeline.fits_cap:
            continue
        tl = row.timeline
        point = MethodPoint(row.method, row.instance.placement, tl.span, tl.bubble_rate,
                            max(tl.peak_memory))
        if row.method == GREEDY:
            greedy = point
        elif row.kind == "handwritten":
            fitting.append(point)
    # same placement first: only those solve the problem the optimum is proven for
    return greedy, tuple(sorted(fitting, key=lambda p: (p.placement != capped.placement,
                                                        p.span)))


# ----- presentation -------------------------------------------------------------------------------

def plot_frontier(points: list[FrontierPoint], title: str = "", ax=None):
    """Bubble rate against the cap: proven optimum (bar down to the bound), greedy, families."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 5))
    solved = [p for p in points if p.bubble_rate is not None and p.cap_p is not None]
    if solved:
        xs = [p.cap_p for p in solved]
        ys = [100 * p.bubble_rate for p in solved]
        low = [100 * (p.bubble_rate - (p.bound_bubble_rate if p.bound_bubble_rate is not None
                                        else p.bubble_rate)) for p in solved]
        ax.errorbar(xs, ys, yerr=[low, [0] * len(low)], marker="o", color="black", capsize=3,
                    linewidth=1.5, label="optimal (bar: down to the proven bound)")
    greedy = [(p.cap_p, 100 * p.greedy.bubble_rate) for p in points
              if p.greedy is not None and p.cap_p is not None]
    if greedy:
        ax.plot(*zip(*greedy), marker="s", linestyle="--", color="tab:orange", label=GREEDY)
    names = sorted({(f.method, f.placement) for p in points for f in p.families})
    home = points[0].placement if points else ""
    palette = plt.get_cmap("tab20")
    for index, (name, placement) in enumerate(names):
        pts = [(p.cap_p, 100 * f.bubble_rate) for p in points if p.cap_p is not None
               for f in p.families if f.method == name]
        same = placement == home
        # dotted: the same problem as the optimum; dash-dot: a re-placed model
        ax.plot(*zip(*pts), marker="." if same else "x", linestyle=":" if same else "-.",
                linewidth=1, color=palette(index % 20),
                label=name if same else f"{name} ({placement} placement)")
    ax.set_xlabel("memory cap (multiples of p: 1p = 1F1B's peak)")
    ax.set_ylabel("bubble rate (%)")
    ax.set_title(title or "memory-bubble frontier")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return ax


def frontier_rows(points: list[FrontierPoint]) -> list[list[str]]:
    """Table rows (strings): cap, optimal span, gap, bubble, greedy, families that fit."""
    rows = []
    for p in points:
        same = [f for f in p.families if f.placement == p.placement]
        best_family = same[0] if same else None
        rows.append([
            str(p.cap), _num(p.cap_value), p.solver_status, _num(p.span), _num(p.lower_bound),
            _pct(p.gap), _pct(p.bubble_rate),
            _num(p.greedy.span) if p.greedy else "-",
            _pct(p.greedy.bubble_rate) if p.greedy else "-",
            f"{best_family.method} {_num(best_family.span)}" if best_family else "-",
            ", ".join(f.method if f.placement == p.placement else f"{f.method} ({f.placement})"
                      for f in p.families) or "-",
        ])
    return rows


FRONTIER_HEADER = ["cap", "cap (abs)", "status", "optimal span", "lower bound", "gap", "bubble",
                   "greedy span", "greedy bubble", "best family", "families that fit"]
# "best family" is over families on the instance's own placement; others solve a re-placed
# model (more, smaller stages) and are listed with their placement in brackets


def frontier_markdown(points: list[FrontierPoint], instance: Instance, solver: str,
                      time_limit: float, plot_name: str | None = None) -> str:
    lines = [f"# Memory-bubble frontier: {instance.name or 'instance'}\n\n",
             f"p={instance.devices}, m={instance.microbatches}, placement={instance.placement}; "
             f"{solver}, {time_limit:g} s per cap, span objective. gap = (span - lower bound) / "
             f"span; 0.00% is a proven optimum.\n\n",
             "| " + " | ".join(FRONTIER_HEADER) + " |\n",
             "|" + "|".join("---" for _ in FRONTIER_HEADER) + "|\n"]
    lines += ["| " + " | ".join(row) + " |\n" for row in frontier_rows(points)]
    notes = [f"- {p.cap}: {p.note}\n" for p in points if p.note]
    if notes:
        lines += ["\n"] + notes
    if plot_name:
        lines.append(f"\n![frontier]({plot_name})\n")
    return "".join(lines)


def _num(x: Optional[float]) -> str:
    if x is None:
        return "-"
    if float(x).is_integer():
        return f"{int(x):,}"
    return f"{x:,.1f}"


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2%}"
