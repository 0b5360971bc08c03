"""The memory-bubble frontier: at each memory cap, the solver's span (proven optimal, or with
its certified gap) beside the greedy heuristic and every family that fits; the Zero Bubble paper's Figure 7 with
proven optima.

A frontier is, per cap, Results (zbopt.result): the solver's, the greedy's and each family's.
Every span comes from evaluate() (through zbopt.registry.run); the only derived number is the
bubble rate a schedule meeting the lower bound would have, (bound - ideal) / bound, drawn as the
bottom of each solver point's error bar.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional

from .errors import ZboptError
from .instance import Instance, require_instance
from .report.numbers import gap_text
from .result import Result
from .sizes import byte_unit, bytes_with_unit, in_unit

GREEDY = "zb-greedy"
_CAP_TERM = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(p?)\s*$")


def parse_caps(text: str, memory_unit: str = "") -> list[Any]:
    """Caps from `START:STOP:STEP` (inclusive, e.g. "1p:3p:0.25p") or a list "1p,1.5p,4e6".

    Multiples of p come back as strings ("1.25p"), absolute caps as numbers; a term written in
    bytes ("60GB:80GB:5GB") is converted to `memory_unit` (zbopt.sizes.in_unit).
    """
    text = text.strip()
    if ":" in text:
        parts = text.split(":")
        if len(parts) != 3:
            raise ZboptError(f"--caps {text!r}: write START:STOP:STEP such as 1p:3p:0.25p, "
                             f"or a comma list such as 1p,2p,3p")
        terms = [_cap_term(x, text, memory_unit) for x in parts]
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
        value, unit = _cap_term(part, text, memory_unit)
        caps.append(_cap_value(value, unit))
    return caps


def _cap_term(part: str, text: str, memory_unit: str) -> tuple[float, str]:
    if bytes_with_unit(part) is not None and byte_unit(memory_unit) is None:
        # in_unit's own message offers 'none', which --caps does not take
        named = f"is {memory_unit!r}" if memory_unit.strip() else "is not named"
        raise ZboptError(f"--caps {text!r}: {part.strip()!r} is in bytes but the memory unit "
                         f"{named}: give caps as plain numbers in the file's unit or as "
                         f"multiples of p such as 1p:3p:0.25p")
    try:
        size = in_unit(part, memory_unit)
    except ZboptError as err:
        raise ZboptError(f"--caps {text!r}: {err}") from None
    if size is not None:
        return size, ""
    match = _CAP_TERM.match(part)
    if not match:
        raise ZboptError(f"--caps {text!r}: {part!r} is not a cap; use numbers or multiples "
                         f"of p such as 1.5p")
    value = float(match.group(1))
    if not math.isfinite(value):
        raise ZboptError(f"--caps: a cap of {len(match.group(1))} characters is too large: give "
                         f"a finite number")
    return value, match.group(2)


def _cap_value(value: float, unit: str) -> Any:
    if unit:
        return f"{value:g}p"
    return int(value) if value == int(value) else value


@dataclass(frozen=True)
class CapResults:
    """One memory cap of a frontier: the Results run under it, the solver's, the greedy's and
    each handwritten family's (fitting or not; a family may re-place a contiguous model)."""

    cap: Any  # as given: "1.5p" or a number
    cap_value: float  # the absolute cap, max over devices
    cap_p: Optional[float]  # the cap in multiples of p
    results: tuple[Result, ...]

    @property
    def solver(self) -> Optional[Result]:
        return next((r for r in self.results if r.kind == "solver"), None)

    @property
    def greedy(self) -> Optional[Result]:
        """The greedy heuristic's result if it fits the cap."""
        return next((r for r in self.results if r.method == GREEDY and r.fits()), None)

    @property
    def families(self) -> tuple[Result, ...]:
        """The handwritten families that fit the cap, best span first."""
        return tuple(sorted((r for r in self.results if r.kind == "handwritten" and r.fits()),
                            key=lambda r: r.span))

    @property
    def best_family(self) -> Optional[Result]:
        """The fitting family with the shortest span, on whichever placement it runs."""
        fitting = self.families
        return fitting[0] if fitting else None

    @property
    def bound_bubble_rate(self) -> Optional[float]:
        """The bubble rate of a schedule whose span met the solver's lower bound."""
        solver = self.solver
        if solver is None or solver.lower_bound is None or solver.ideal is None \
                or not solver.lower_bound:
            return None
        return max(0.0, (solver.lower_bound - solver.ideal) / solver.lower_bound)

    def documents(self) -> list[dict[str, Any]]:
        """Every result as Result.to_dict() with the cap it ran under and its role."""
        out = []
        for r in self.results:
            role = "solver" if r.kind == "solver" else ("greedy" if r.method == GREEDY
                                                        else "family")
            out.append({**r.to_dict(), "cap": self.cap, "cap_value": self.cap_value,
                        "cap_p": self.cap_p, "role": role})
        return out


def capped_instances(instance: Instance, caps: list[Any], python: bool = False) -> list[Instance]:
    """The instance under every cap, each checked now (a cap below one activation, or one that
    is not a cap, is refused before any solving, as compare and solve refuse it). Messages
    name the command line's --caps, or with `python` frontier()'s `caps`."""
    require_instance(instance, "frontier()")
    if isinstance(caps, str) or not isinstance(caps, (list, tuple)):
        got = f"the str {caps!r}" if isinstance(caps, str) else type(caps).__name__
        raise ZboptError(f"frontier(): caps must be a list of caps such as ['1p', '1.5p', 4e6], "
                         f"got {got}: write [{caps!r}] for one cap, or "
                         f"parse_caps('1p:3p:0.25p') for a range")
    if not caps:
        raise ZboptError("frontier(): no caps given: pass e.g. caps=['1p', '2p']" if python
                         else "no caps given: use e.g. --caps 1p:3p:0.25p")
    out = []
    for cap in caps:
        try:
            out.append(instance.with_cap(cap))
        except ZboptError as err:
            where = "frontier(): caps" if python else "--caps"
            raise ZboptError(f"{where}: cap {cap}: {err}") from None
    return out


def frontier(instance: Instance, caps: list[Any], solver: str = "cpsat",
             time_limit: float = 30.0, threads: int = 1,
             progress: Optional[Callable[[Any, dict], None]] = None) -> list[CapResults]:
    """Solve `instance` at every cap beside the greedy and the families. `progress(cap, info)`
    gets the solver's reports (see zbopt.solvers.solve) and {"phase": "families"}."""
    from .registry import get_method
    from .solvers.api import check_progress, check_threads, check_time_limit
    get_method(solver, "solver")
    check_time_limit(time_limit)
    check_threads(threads)
    check_progress(progress, "a cap and a dict")
    capped = capped_instances(instance, caps, python=True)
    out = []
    for cap, inst in zip(caps, capped):
        out.append(cap_results(inst, cap, solver, time_limit, threads,
                               (lambda info, c=cap: progress(c, info)) if progress else None))
    return out


def cap_results(capped: Instance, cap: Any, solver: str, time_limit: float,
                threads: int, progress=None) -> CapResults:
    from .compare import compare
    from .registry import methods
    from .registry import run as run_method
    results = [run_method(solver, capped, objective="span", time_limit=time_limit,
                          threads=threads, progress=progress)]
    if progress is not None:
        progress({"phase": "families"})
    names = [n for n, m in methods("schedule").items() if m.kind == "handwritten" or n == GREEDY]
    results += compare(capped, names)
    cap_p = capped.cap_in_p()
    return CapResults(cap, max(capped.cap), round(cap_p, 6) if cap_p is not None else None,
                      tuple(results))


# ----- presentation -------------------------------------------------------------------------------

def plot_frontier(points: list[CapResults], title: str = "", ax=None):
    """Bubble rate against the cap: the solver's span (filled where proven optimal, hollow with
    its gap where not; bar down to the bound), greedy, families."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 5))
    solved = [p for p in points if p.solver is not None and p.solver.applies
              and p.cap_p is not None]
    if solved:
        name = solved[0].solver.method
        xs = [p.cap_p for p in solved]
        ys = [100 * p.solver.bubble_rate for p in solved]
        low = [100 * (p.solver.bubble_rate - (p.bound_bubble_rate if p.bound_bubble_rate
                                               is not None else p.solver.bubble_rate))
               for p in solved]
        ax.errorbar(xs, ys, yerr=[low, [0] * len(low)], color="black", capsize=3,
                    linewidth=1.5, label=f"{name}'s span (bar: down to the proven lower bound)")
        proven = [(x, y) for p, x, y in zip(solved, xs, ys) if p.solver.status == "optimal"]
        open_ = [(p, x, y) for p, x, y in zip(solved, xs, ys) if p.solver.status != "optimal"]
        if proven:
            ax.plot(*zip(*proven), linestyle="none", marker="o", color="black",
                    label="proven optimal")
        if open_:
            ax.plot([x for _, x, _ in open_], [y for _, _, y in open_], linestyle="none",
                    marker="o", markerfacecolor="white", markeredgecolor="black",
                    label="not proven optimal (gap beside it)")
            for p, x, y in open_:
                gap = "-" if p.solver.gap is None else f"{p.solver.gap:.1%}"
                ax.annotate(f"gap {gap}", (x, y), textcoords="offset points", xytext=(5, 4),
                            fontsize=7)
    greedy = [(p.cap_p, 100 * p.greedy.bubble_rate) for p in points
              if p.greedy is not None and p.cap_p is not None]
    if greedy:
        ax.plot(*zip(*greedy), marker="s", linestyle="--", color="tab:orange", label=GREEDY)
    names = sorted({(f.method, f.placement) for p in points for f in p.families})
    home = points[0].solver.placement if points and points[0].solver is not None else ""
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


def _family_text(result: Result, home: str) -> str:
    return result.method if result.placement == home else f"{result.method} ({result.placement})"


def frontier_rows(points: list[CapResults]) -> list[list[str]]:
    """Table rows (strings): cap as given and its value, the solver's status, span, bound, gap
    and bubble, greedy, best family, families."""
    rows = []
    for p in points:
        solver = p.solver
        home = solver.placement if solver is not None else ""
        best = p.best_family
        rows.append([
            str(p.cap), _num(p.cap_value), solver.status if solver else "-",
            _num(solver.span if solver else None), _num(solver.lower_bound if solver else None),
            gap_text(solver.gap if solver else None), _pct(solver.bubble_rate if solver else None),
            _num(p.greedy.span) if p.greedy else "-",
            _pct(p.greedy.bubble_rate) if p.greedy else "-",
            f"{_family_text(best, home)} {_num(best.span)}" if best else "-",
            ", ".join(_family_text(f, home) for f in p.families) or "-",
        ])
    return rows


def frontier_header(instance: Instance) -> list[str]:
    t = f" ({instance.time_unit})" if instance.time_unit else ""
    m = f" ({instance.memory_unit})" if instance.memory_unit else ""
    return ["cap", f"cap value{m}", "status", f"solver span{t}", f"lower bound{t}", "gap", "bubble",
            f"greedy span{t}", "greedy bubble", f"best family, span{t}", "families that fit"]
# "best family" is the fitting family with the shortest span on any placement; one on another
# placement solves a re-placed model (more, smaller stages) and names its placement in brackets


def frontier_markdown(points: list[CapResults], instance: Instance, solver: str,
                      time_limit: float, plot_name: str | None = None) -> str:
    header = frontier_header(instance)
    lines = [f"# Memory-bubble frontier: {instance.name or 'instance'}\n\n",
             f"p={instance.devices}, m={instance.microbatches}, placement={instance.placement}; "
             f"{solver}, {time_limit:g} s per cap, span objective. gap = (span - lower bound) / "
             f"span; \"optimal\" (0.00%) is proven optimal among {instance.placement} schedules "
             f"of single passes. The best family is the fitting one with the shortest span on any "
             f"placement (its placement in brackets when it is not {instance.placement}).\n\n",
             "| " + " | ".join(header) + " |\n",
             "|" + "|".join("---" for _ in header) + "|\n"]
    lines += ["| " + " | ".join(row) + " |\n" for row in frontier_rows(points)]
    notes = [f"- {p.cap}: {p.solver.message}\n" for p in points
             if p.solver is not None and p.solver.message and not p.solver.applies]
    if notes:
        lines += ["\n"] + notes
    if plot_name:
        lines.append(f"\n![frontier]({plot_name})\n")
    return "".join(lines)


def _num(x: Optional[float]) -> str:
    from .report.numbers import figure
    return figure(x)


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2%}"
