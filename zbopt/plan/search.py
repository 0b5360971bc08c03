"""plan(): the partition of a layered model and the schedule, chosen together.

Contiguous placement (exact bound): every partition's lower bound comes from a dynamic
programme over segments (zbopt.plan.bound), so the least bound over all partitions is known
before anything is scheduled (where its table can be made within the placement's share of the
time: on large models it cannot, and contiguous is planned as the other placements are, below,
on bound.least_stage_load). The search then
1. schedules the baselines (even, torchtitan) and a least-bound partition with every registered
   method of the placement, and improves the best by moving one stage boundary at a time;
2. lists the partitions whose bound is below the best span found (the only ones that can beat
   it; the rest are pruned), up to `max_partitions` of the lowest bound, and schedules them in
   order of their bound (the coupled bound of zbopt.plan.memory_bound) while time allows;
3. tunes the greedy's policies per device (zbopt.heuristics.policy_search) on the shortest schedules
   and the splits of least bound, for a share of the rest;
4. polishes the shortest schedules with local search (zbopt.plan.polish) for a share of the rest;
5. raises the bounds of the listed splits below the best span with the one-device relaxations
   (zbopt.plan.device_bound), the window relaxations (zbopt.plan.window_bound) and the
   collision relaxation (zbopt.plan.collision_bound), least bound first, for a share of the rest;
6. gives the rest of the time to the exact solver, first on the best partition, then on the
   partition with the lowest proven bound, raising that partition's bound or lowering the span;
   each run is warm-started from the split's best schedule so far.
The bound over all partitions is the least of: the bound of every partition not listed (all at
or above the listing threshold), and the proven bound of every partition listed (its own bound,
or the solver's). Other placements: no table lists their splits, so step 1 starts from the
baselines, a load-balanced split and where a cheap guide leads from them (zbopt.plan.moves: the
memory a split lacks under the cap, then its best lower bound of zbopt.bounds), the local search
moves one layer between any two stages from every start, and the rest of the placement's share
schedules the splits in the guide's order (explore); steps 3, 4 and 6 follow, with a weaker
bound over all partitions (the least over partitions of the
largest device bound from its load and memory, zbopt.plan.paired_bound, on V, dualpipe and
two-chunk interleaved; the total load over p otherwise). With others=True the plan also
bounds the placements it was not asked to plan over (placement_floor), so that a plan over one
placement can say whether another could be shorter, and where that bound lies below the plan's
span, a short search of their own (step 1 and the climbs, OTHERS_SHARE of the time limit kept
for them) shows what schedule they reach (Plan.tried).

Every bound over all partitions is taken within the time: the table, the paired programmes and
CP-SAT's load floor each get what the time left allows and fall back to a weaker valid bound
past it (the load floor is not built where CP-SAT could not set it up in that time).

The time limit: scheduling a split runs every registered heuristic of its placement and cannot
be cut short (0.03-1.3 s a split at p = 16, m = 64 on 80 blocks, more on larger pipelines), so
no phase starts a new split unless the most a split of that placement has taken so far still
ends within the phase's time (_Search.affords; before the first on a placement, the most per
part on another); the bounds, the policy search, the local search and the solver take
deadlines. The limit is passed only by what an answer cannot do without: the baselines (even,
torchtitan) of the first placement planned over, scheduled whatever the time (a plan needs one
schedule, and its gain is measured against them; on the next placement too while none fits),
a split that takes longer than the one before it on its placement, and the final checks (the
bound over all partitions and the baselines from the splits already scheduled, milliseconds).
Given more time the search is the same: each phase still schedules while its share lasts.

A cap no split of the placements holds is refused with the split of least shortfall, the device
short by it and its cap (_infeasible_message).
"""

from __future__ import annotations

import heapq
import itertools
import math
import numbers
import time
from dataclasses import dataclass, replace
from typing import Callable, Optional, Sequence

from .. import signals
from ..bounds import min_feasible_cap
from ..compare import best_of
from ..errors import ZboptError
from ..heuristics.policy_search import search as policy_search
from ..instance import PLACEMENTS, Instance, within_cap
from ..layers import LayeredModel, require_model
from ..registry import get_method, methods, run
from ..result import GAP_TOLERANCE, Result
from ..sizes import readable
from ..solvers import AUTO
from ..solvers.api import (
    COLLISION,
    FB,
    RELAXED,
    WINDOW,
    check_flag,
    check_progress,
    check_threads,
    check_time_limit,
)
from . import fb_bound
from .baselines import BASELINES
from .bound import (
    SegmentBounds,
    argmin_partition,
    contiguous_fits,
    count_below,
    count_below_float,
    device_caps,
    least_bound,
    least_excess_of,
    least_largest_part,
    least_stage_load,
    partitions_below,
    segment_bounds,
    suffix_minmax,
)
from .collision_bound import collision_bound
from .device_bound import DEVICE_LIMIT, relaxation_bound
from .load_floor import load_floor
from .memory_bound import pipeline_bound
from .moves import Guide, adjacent, descend
from .paired_bound import BUDGET, dualpipe_floor, interleaved_floor, least_shortfall, v_floor
from .polish import polish
from .window_bound import window_bound

Progress = Callable[[dict], None]
TOLERANCE = GAP_TOLERANCE
POLICY_SHARE = 0.4  # of the time left after the heuristics: greedy policies tuned per device
POLISH_SHARE = 0.3  # of the time left after that, before the solver
COLLISION_SHARE = 0.5  # of the time left after that: relaxation bounds of the open splits
POLISHED = 3  # schedules polished by local search
SPLIT_FLOOR = 0.25  # seconds a device: the least share of a split's relaxation bounds (collide)
RELAX_SHARE = 0.25  # of a solver run's time: the one-device relaxations first
# of a placement's share of the time without a segment table: the walk to the guided starts
GUIDE_SHARE = 1 / 3
# splits before the one reached on each guided path that are scheduled too (guided_starts)
PASSED = 2
RESCUED = 3  # splits the solver tries when no heuristic fits any (rescue)
TUNED = 2  # splits given the policy search, by shortest span and again by least bound
# plan's default solver, "auto": cpsat-lns on a split of this many passes or more, cpsat below.
# Warm-started from the split's tuned and polished schedule, the neighbourhoods shorten it where
# the full model barely moves it, and the full model still proves its bound in the LNS's first
# share (results/plan.md, solvers: on the eight capped estimated rows, p=8 with 768 passes and
# p=16 with 3,072, two plans each, the median span was shorter on four rows, by up to 0.87% on
# the 128k tight one, equal on three and 0.50% longer on one, p=16 128k mid, whose two runs
# straddled cpsat's); below 768 passes it is not measured, and cpsat stays
LNS_FROM_PASSES = 750


# the name of the bound of zbopt.plan.bound's segment table (segment and coupled bounds)
SEGMENT = "segment bound"
OVERLAP_FLOOR = "overlap floor"  # _overlap_floor: every schedule, overlapped blocks or not
PLACEMENT_FLOOR = "placement floor"  # placement_floor: every partition of a placement


@dataclass(frozen=True)
class Split:
    """A partition on one placement and the best schedule found for it."""

    placement: str
    sizes: tuple[int, ...]
    result: Optional[Result]  # best schedule within the cap (None: nothing fits)
    bound: float  # proven lower bound on the span of any schedule of this partition
    bound_name: str = SEGMENT  # which bound proved `bound` (solve()'s names, zbopt.bounds', SEGMENT)

    @property
    def span(self) -> float:
        return self.result.span if self.result is not None else math.inf

    def raised(self, value: float, name: str) -> "Split":
        """This split with `value` as its bound, proven by `name`, where it is higher."""
        return replace(self, bound=value, bound_name=name) if value > self.bound else self


@dataclass(frozen=True)
class Plan:
    """What `plan` chose and how sure it is."""

    model: LayeredModel
    result: Result  # the chosen schedule; lower_bound is the bound over all partitions
    split: Split
    # per baseline rule (BASELINES), its split on the placement where it is shortest, among the
    # placements where it was scheduled (on each unless the time limit ran short; on the first
    # always); None where the rule gives no split
    baselines: dict[str, Optional[Split]]
    scope: str
    partitions_scheduled: int
    partitions_pruned: int
    solver_runs: int
    # the split whose proven bound is the bound over all partitions (None: the splits left
    # unlisted, or the plan's own span)
    bound_split: Optional[tuple[int, ...]] = None
    # with several placements, the one whose bound is the bound over all partitions (None: one
    # placement, an optimal plan, or the overlap floor)
    bound_placement: Optional[str] = None
    # plan(others=True): each placement not planned over that can hold the layers, and its
    # bound over all partitions (inf: no split fits the cap), to tell whether it could be shorter
    others: Optional[dict[str, float]] = None
    # which bound proved bound_split's (Split.bound_name; None without bound_split)
    bound_split_proof: Optional[str] = None
    # an optimal plan: the bound that proves the chosen split cannot be shorter (its
    # Split.bound_name; PLACEMENT_FLOOR, the bound over all of its placement's partitions; or
    # OVERLAP_FLOOR where overlapped blocks make the single-pass bounds not apply); every other
    # split's bound is at least the span too. None: not optimal
    optimal_proof: Optional[str] = None
    # plan(others=True): for each of `others` whose bound lies below the plan's span, the best
    # split a short search found there (None: none of those it scheduled fits; left out when
    # it had no time to schedule one); not part of the plan
    tried: Optional[dict[str, Optional[Split]]] = None
    # asked to finish now (SIGUSR1) after a split was scheduled: the search ended there, as at
    # its time limit
    stopped_early: bool = False

    @property
    def stages(self) -> list[list[str]]:
        placed = self.model.with_settings(placement=self.split.placement)
        return [[layer.name for layer in group] for group in placed.stage_layers(self.split.sizes)]

    def gain(self) -> dict[str, Optional[float]]:
        """(baseline span - plan span) / baseline span, per baseline (None: it has no schedule)."""
        out = {}
        for name, split in self.baselines.items():
            out[name] = None if split is None or split.result is None \
                else (split.span - self.result.span) / split.span
        return out

    def partition_dict(self) -> dict:
        return {"placement": self.split.placement, "sizes": list(self.split.sizes),
                "stages": self.stages}

    def to_dict(self) -> dict:
        """Result.to_dict() plus the partition, the baselines and the gain."""
        baselines = {}
        for name, split in self.baselines.items():
            if split is None:
                baselines[name] = None
                continue
            placed = self.model.with_settings(placement=split.placement)
            baselines[name] = {
                "placement": split.placement, "sizes": list(split.sizes),
                "stages": [[x.name for x in g] for g in placed.stage_layers(split.sizes)],
                "method": split.result.method if split.result else None,
                "span": split.result.span if split.result else None,
                "lower_bound": split.bound if math.isfinite(split.bound) else None,
            }
        return {**self.result.to_dict(), "partition": self.partition_dict(),
                "baselines": baselines, "gain": self.gain(), "scope": self.scope,
                "partitions_scheduled": self.partitions_scheduled,
                "partitions_pruned": self.partitions_pruned, "solver_runs": self.solver_runs,
                "bound_split": list(self.bound_split) if self.bound_split else None,
                "bound_split_proof": self.bound_split_proof,
                "optimal_proof": self.optimal_proof,
                "bound_placement": self.bound_placement,
                "other_placements": self.other_placements(),
                "stopped_early": self.stopped_early}

    def other_placements(self) -> Optional[dict]:
        """Per placement not planned over (others=True): its bound over all partitions (None: no
        split fits the cap), whether any split fits, whether that bound is below the span, and
        where it is, the best schedule the short search found there (`found`: span, sizes,
        method; None when it found none) and whether it is shorter than the plan."""
        if self.others is None:
            return None
        out = {}
        for name, floor in self.others.items():
            entry = {"lower_bound": floor if math.isfinite(floor) else None,
                     "fits": math.isfinite(floor),
                     "may_be_shorter": floor < self.result.span * (1 - TOLERANCE)}
            if self.tried is not None and name in self.tried:
                split = self.tried[name]
                entry["found"] = None if split is None else {
                    "span": split.span, "sizes": list(split.sizes), "method": split.result.method}
                entry["shorter"] = split is not None and \
                    split.span < self.result.span * (1 - TOLERANCE)
            out[name] = entry
        return out


def schedule_methods(placement: str) -> list[str]:
    """The registered schedule generators that run on `placement` as written."""
    return [name for name, m in methods("schedule").items() if m.placement == placement]


class _Search:
    """The state of one plan() call: the clock, the cache of scheduled partitions, progress."""

    def __init__(self, model: LayeredModel, time_limit: float, progress: Optional[Progress],
                 solver: str, threads: int):
        self.model = model
        self.began = time.perf_counter()
        self.deadline = self.began + time_limit
        self.progress = progress
        self.solver = solver
        self.threads = threads
        self.cache: dict[tuple[str, tuple[int, ...]], Split] = {}
        self.best: Optional[Split] = None
        self.bound = 0.0
        self.solver_runs = 0
        self.tables: dict[str, SegmentBounds] = {}  # per placement with a segment bound
        self.other_tables: dict[str, SegmentBounds] = {}  # _other_floors' (not planned over)
        # splits whose device relaxations ran with all their time (collide): not run again
        self.relaxed: set[tuple[str, tuple[int, ...]]] = set()
        # per split, what its one-device relaxations finished (device_bound.relaxation_bound)
        self.device_memo: dict[tuple[str, tuple[int, ...]], dict] = {}
        self.guides: dict[str, Guide] = {}  # per placement without a segment table
        self.on: dict[str, LayeredModel] = {}  # the model on each placement (placed)
        # per placement, the most seconds one split took to schedule (schedule(); affords())
        self.split_seconds: dict[str, float] = {}
        # per placement, why no registered method applied to a split of it (the first such
        # split's first reason; a placement where some method applied is absent)
        self.unapplied: dict[str, str] = {}
        self.applied: set[str] = set()
        # the F/B relaxation of one split, run beside the other steps (start_fb, collect_fb)
        self.fb: Optional[tuple[tuple[str, tuple[int, ...]], fb_bound.Background]] = None

    def elapsed(self) -> float:
        return time.perf_counter() - self.began

    def left(self) -> float:
        return 0.0 if self.finishing() else self.deadline - time.perf_counter()

    def finishing(self) -> bool:
        """Asked to finish now (SIGUSR1, zbopt.signals) with a split scheduled: every phase
        then ends as if its time were up (a plan has at least one split first)."""
        return self.best is not None and signals.finish_requested()

    def past(self, end: float) -> bool:
        """Whether a phase whose time ends at `end` (perf_counter) should stop."""
        return time.perf_counter() >= end or self.finishing()

    def tell(self, phase: str, **fields) -> None:
        if self.progress is None:
            return
        incumbent = self.best.span if self.best is not None else None
        gap = None
        if incumbent is not None and math.isfinite(incumbent) and incumbent > 0:
            gap = max(0.0, (incumbent - self.bound) / incumbent)
        bound = self.bound if math.isfinite(self.bound) else None
        self.progress({"phase": phase, "elapsed": self.elapsed(), "incumbent": incumbent,
                       "bound": bound, "gap": gap, "scheduled": len(self.cache), **fields})

    def expected(self, placement: str) -> float:
        """The seconds a new split of `placement` is expected to take to schedule (its
        registered heuristics and bounds): the most one took on it so far, else the most a
        part took on another placement times its parts (its passes are 3 m a part; 0 before
        any split is scheduled)."""
        if placement in self.split_seconds:
            return self.split_seconds[placement]
        per_part = max((seconds / self.placed(other).num_parts
                        for other, seconds in self.split_seconds.items()), default=0.0)
        return per_part * self.placed(placement).num_parts

    def affords(self, placement: str, end: float, sizes: Optional[Sequence[int]] = None) -> bool:
        """Whether a split of `placement` can be scheduled by `end`: `sizes` is in the cache
        (at any time), or a new split's expected time (expected) ends before `end`. A split
        is not cut short once started (the registered heuristics take no deadline), so every
        phase that schedules splits asks this first (the module doc's time limit)."""
        if sizes is not None and (placement, tuple(sizes)) in self.cache:
            return True
        return time.perf_counter() + self.expected(placement) < end and not self.finishing()

    def placed(self, placement: str) -> LayeredModel:
        if placement not in self.on:  # made once: a model of thousands of layers takes ms
            self.on[placement] = placed(self.model, placement)
        return self.on[placement]

    def segment_table(self, placement: str, deadline: float) -> Optional[SegmentBounds]:
        """zbopt.plan.bound's table of `placement` (contiguous) if it can be made by `deadline`
        (kept in self.tables), told as phase bounds while it is made; None where it cannot
        (too large, or too slow for the time: the placement is then planned without it)."""
        def told(done: int, cells: int) -> None:
            self.tell("bounds", placement=placement, table=done / max(cells, 1))

        self.tell("bounds", placement=placement)
        table = segment_bounds(self.placed(placement), deadline=deadline, progress=told)
        if table is not None:
            self.tables[placement] = table
        return table

    def instance(self, placement: str, sizes: Sequence[int]) -> Optional[Instance]:
        """The split's instance; None where no schedule of it fits the cap: a device's static
        memory and one micro-batch's activations on its chain exceed it (min_feasible_cap)."""
        try:
            instance = self.placed(placement).instance(sizes)
        except ZboptError:  # the cap cannot hold this split's static memory and one activation
            return None
        if instance.cap is not None and not all(
                within_cap(need, cap) for need, cap in zip(min_feasible_cap(instance), instance.cap)):
            return None
        return instance

    def schedule(self, placement: str, sizes: Sequence[int], bound: Optional[float] = None,
                 phase: str = "scheduling") -> Split:
        """The best registered schedule of one partition (cached), told under `phase` when it
        is new."""
        key = (placement, tuple(sizes))
        if key in self.cache:
            return self.cache[key]
        began = time.perf_counter()
        instance = self.instance(placement, sizes)
        if instance is None:
            split = Split(placement, tuple(sizes), None, math.inf, "cap")
        else:
            results = [run(name, instance) for name in schedule_methods(placement)]
            if any(r.applies for r in results):
                self.applied.add(placement)
            elif results:
                self.unapplied.setdefault(placement, results[0].message)
            best = best_of(results)
            from ..registry import schedule_bound
            own = schedule_bound(instance)
            candidates = [(0.0, "none"), (pipeline_bound(instance), "memory_pipeline")]
            if bound is not None:  # the caller's, from the segment table
                candidates.append((bound, SEGMENT))
            if own:
                candidates.append((own[1], own[0]))
            if placement in self.tables:
                candidates.append((self.tables[placement].full_bound(tuple(sizes)), SEGMENT))
            value, name = max(candidates, key=lambda c: c[0])
            split = Split(placement, tuple(sizes), best, value, name)
            took = time.perf_counter() - began
            self.split_seconds[placement] = max(took, self.split_seconds.get(placement, 0.0))
        self.cache[key] = split
        self.offer(split)
        # a split takes a second or more on large pipelines: every one is told (the command
        # line shows at most one line a second per phase)
        self.tell(phase, placement=placement)
        return split

    def offer(self, split: Split) -> None:
        if split.result is not None and (self.best is None or split.span < self.best.span):
            self.best = split

    def guide(self, placement: str) -> Guide:
        if placement not in self.guides:
            self.guides[placement] = Guide(self.placed(placement))
        return self.guides[placement]

    def guided_starts(self, placement: str, starts: Sequence[Optional[tuple[int, ...]]],
                      budget_end: float) -> list[tuple[int, ...]]:
        """Where zbopt.plan.moves.descend leads from each start (placements without a segment
        table), the starts that do not fit first, until `budget_end`; then, on each path, the
        PASSED splits that fit before the one reached (the last first): the guide is a bound,
        and its last steps can lower it by a hair where the schedule gets longer (V, Llama-3-8B
        with a 32k vocabulary at the tight cap of p = 8, m = 32: 2,898,768 -> 2,897,217 for
        the bound, 3,412,804 -> 3,782,504 for the span). New splits only."""
        guide = self.guide(placement)
        reached_splits: list[tuple[int, ...]] = []
        passed: list[tuple[int, ...]] = []
        for sizes in sorted({s for s in starts if s is not None}, key=guide):
            if self.past(budget_end):
                break
            self.tell("guided starts", placement=placement)
            path: list[tuple[int, ...]] = []
            reached = descend(guide, sizes, budget_end, path)
            if reached is None:
                continue
            reached_splits.append(reached)
            passed.extend([s for s in path[-1 - PASSED:-1][::-1] if guide(s)[0] == 0])
        out: list[tuple[int, ...]] = []
        for sizes in reached_splits + passed:
            if sizes not in out and sizes not in starts:
                out.append(sizes)
        return out

    def explore(self, placement: str, budget_end: float) -> None:
        """Placements without a segment table: the splits in the order of the guide
        (zbopt.plan.moves), best first from those scheduled so far and on along transfers, each
        scheduled when it fits and its bound lies below the best span, until `budget_end`.
        Every split is a few transfers from every other, so given the time this schedules every
        split whose bound is below the best span, as the listing does on contiguous; past
        zbopt.plan.moves.MANY moves a split it follows only the guide's shortlist, so there
        it does not reach every split."""
        guide = self.guide(placement)
        seen = {sizes for (pl, sizes) in self.cache if pl == placement}
        heap = [(guide(sizes), sizes) for sizes in seen]
        heapq.heapify(heap)
        while heap and not self.past(budget_end):
            (lacking, bound), sizes = heapq.heappop(heap)
            if lacking == 0 and (placement, sizes) not in self.cache and \
                    (self.best is None or bound < self.best.span * (1 - TOLERANCE)):
                if not self.affords(placement, budget_end):
                    return
                self.schedule(placement, sizes, phase="exploring")
            for moved in guide.moves(sizes):
                if moved not in seen:
                    if self.past(budget_end):
                        return
                    seen.add(moved)
                    heapq.heappush(heap, (guide(moved), moved))

    def starts(self, placement: str, table_best: Optional[list] = None) -> list:
        """Step 1's starting splits on `placement`: the baselines, and the split of least bound
        of its segment table (`table_best`, suffix_minmax of it, computed when not given) or,
        without a table, a load-balanced split (None where a rule has no split)."""
        placed = self.placed(placement)
        starts = [rule(placed) for rule in BASELINES.values()]
        table = self.tables.get(placement)
        if table is not None:
            starts.append(argmin_partition(table, table_best or suffix_minmax(table)))
        else:
            starts.append(_balanced(placed))
        return starts

    def schedule_starts(self, placement: str, starts: list[Optional[tuple[int, ...]]],
                        budget_end: float, every: bool = True) -> None:
        """Step 1's starts scheduled: `starts` and, on a placement without a segment table,
        where the guide leads from them (a third of the time to `budget_end` at most; tried
        first), each while its expected time lasts (affords): the first and the last of
        `starts` (the even split, and the split of least bound or the load-balanced one) to the
        search's deadline, so that a plan over several placements looks at each one's most
        promising splits while its time allows, the rest to `budget_end`. (With the first
        alone, 5 s plans over every placement ran up to 12% longer than over contiguous alone,
        now up to 2.6%: results/plan.md, part short.)
        every=True: the baselines (the first len(BASELINES) of `starts`) whatever the time,
        as the plan needs one schedule and its gain is measured against them (plan() asks this
        while no split fits yet)."""
        required = set(starts[:len(BASELINES)]) if every else set()
        promising = {starts[0], starts[-1]} if starts else set()
        if placement not in self.tables:
            now = time.perf_counter()
            starts = self.guided_starts(placement, starts, now + GUIDE_SHARE * (budget_end - now)) \
                + starts
        for sizes in starts:
            if sizes is None:
                continue
            end = max(budget_end, self.deadline) if sizes in promising else budget_end
            if sizes in required or self.affords(placement, end, sizes):
                self.schedule(placement, sizes, phase="baselines")
        self.tell("baselines", placement=placement)

    def climb(self, placement: str, budget_end: float) -> None:
        """The shortest start climbs (improve_locally); without a segment table to list the
        splits, so do the others after it, each to where no move shortens it, and then the
        rest of the time explores, until `budget_end`."""
        table = self.tables.get(placement)
        local = [s for (pl, _), s in self.cache.items() if pl == placement and s.result]
        for start in sorted(local, key=lambda s: s.span)[:1 if table is not None else None]:
            if not self.affords(placement, budget_end):
                break
            self.improve_locally(placement, start, budget_end)
        if table is None:
            self.explore(placement, budget_end)

    def improve_locally(self, placement: str, start: Split, budget_end: float) -> None:
        """Move layers while the best schedule gets shorter, taking the first move that
        shortens it. On contiguous a move shifts one stage boundary by one layer, and a
        neighbour whose segment bound is already at the current span is not scheduled;
        elsewhere a move takes a layer from any stage to any other (zbopt.plan.moves; past its
        MANY moves only the guide's shortlist), tried in the order of the guide, and neighbours
        that do not fit or whose bound is at the current span are not scheduled."""
        current = start
        table = self.tables.get(placement)
        guide = None if table is not None else self.guide(placement)
        while not self.past(budget_end):
            moved = False
            if guide is None:
                neighbours = adjacent(current.sizes)
            else:
                neighbours = []
                for sizes in guide.moves(current.sizes):
                    if self.past(budget_end):
                        return
                    lacking, bound = guide(sizes)
                    if lacking == 0 and bound < current.span * (1 - TOLERANCE):
                        neighbours.append(sizes)
                neighbours.sort(key=guide)
            for neighbour in neighbours:
                if not self.affords(placement, budget_end, neighbour):
                    return
                if table is not None and (placement, neighbour) not in self.cache and \
                        table.full_bound(neighbour) >= current.span * (1 - TOLERANCE):
                    continue
                candidate = self.schedule(placement, neighbour, phase="local search")
                if candidate.span < current.span * (1 - TOLERANCE):
                    current, moved = candidate, True
                    self.tell("local search", placement=placement)
                    break
            if not moved:
                return

    def polish_best(self, budget_end: float, count: int = POLISHED) -> None:
        """Local search on the `count` shortest schedules whose split's bound is below them."""
        splits = sorted((s for s in self.cache.values()
                         if s.result is not None and s.bound < s.span * (1 - TOLERANCE)),
                        key=lambda s: s.span)[:count]
        for index, split in enumerate(splits):
            now = time.perf_counter()
            if now >= budget_end:
                return
            self.tell("local search", placement=split.placement, sizes=list(split.sizes))
            better = polish(split.result, now + (budget_end - now) / (len(splits) - index))
            if better is not None:
                updated = replace(split, result=better)
                self.cache[(split.placement, split.sizes)] = updated
                self.offer(updated)
                self.tell("local search", placement=split.placement, sizes=list(split.sizes))

    def tune_policies(self, budget_end: float, bounds_of: dict) -> None:
        """The per-device policy search (zbopt.heuristics.policy_search) on the TUNED shortest
        schedules and the TUNED splits of least proven bound (`bounds_of`: per key) whose bound
        lies below the best span: the first may become the plan, the second are where a shorter
        schedule would lower the gap most."""
        best = self.best.span if self.best is not None else math.inf
        open_ = [s for s in self.cache.values() if s.result is not None
                 and bounds_of.get((s.placement, s.sizes), s.bound) < best * (1 - TOLERANCE)]
        chosen = sorted(open_, key=lambda s: s.span)[:TUNED]
        for split in sorted(open_, key=lambda s: bounds_of.get((s.placement, s.sizes), s.bound)):
            if len(chosen) >= 2 * TUNED:
                break
            if split not in chosen:
                chosen.append(split)
        for index, split in enumerate(chosen):
            now = time.perf_counter()
            if now >= budget_end:
                return
            split = self.cache[(split.placement, split.sizes)]
            self.tell("policy search", placement=split.placement, sizes=list(split.sizes))
            better = policy_search(split.result, now + (budget_end - now) / (len(chosen) - index))
            if better is not None and better.span < split.span * (1 - TOLERANCE):
                updated = replace(split, result=better)
                self.cache[(split.placement, split.sizes)] = updated
                self.offer(updated)
                self.tell("policy search", placement=split.placement, sizes=list(split.sizes))

    def start_fb(self, pending: list[Split]) -> None:
        """The F/B relaxation (zbopt.plan.fb_bound) of the contiguous split of least bound, in a
        thread with one CP-SAT worker until the deadline, where fb_bound.runs_beside says it
        pays: the relaxation step that follows runs in Python on one core, and the solver step
        shares the cores with it (on the 128k tight split of results/plan.md it takes 40-45 s
        alone)."""
        open_ = [s for s in pending if s.placement == "contiguous"]
        if self.fb is not None or not open_:
            return
        split = min(open_, key=lambda s: s.bound)
        instance = self.instance(split.placement, split.sizes)
        if instance is None or not fb_bound.runs_beside(instance, self.left(), self.threads,
                                                        self.best.span, split.bound):
            return
        self.fb = ((split.placement, split.sizes), fb_bound.Background(instance, self.deadline))

    def collect_fb(self, pending: list[Split]) -> list[Split]:
        """`pending` with the F/B relaxation's bound (start_fb) where it raises its split's;
        its search is stopped first if it still runs."""
        if self.fb is None:
            return pending
        key, background = self.fb
        self.fb = None
        value = background.value()
        cached = self.cache.get(key)
        out = []
        for split in pending:
            if (split.placement, split.sizes) == key and value > split.bound:
                split = split.raised(value, FB)
                if cached is not None:
                    self.cache[key] = cached.raised(value, FB)
                self.tell("relaxation bounds", sizes=list(split.sizes), relaxation_bound=value)
            out.append(split)
        return out

    def poll_fb(self, pending: list[Split]) -> list[Split]:
        """`pending` with the F/B relaxation's bound once its search has ended; a search whose
        split's bound lies within fb_bound.GAP of the best span (the other relaxations or the solver
        closed most of its gap) is stopped, its core given back to the solver."""
        if self.fb is None:
            return pending
        key, background = self.fb
        split = next((s for s in pending if (s.placement, s.sizes) == key), None)
        if split is None or split.bound >= self.best.span * (1 - fb_bound.GAP):
            self.stop_fb()
            return pending
        return self.collect_fb(pending) if background.done() else pending

    def stop_fb(self) -> None:
        """Stop the F/B relaxation's search, if one runs (an exception leaves plan())."""
        if self.fb is not None:
            self.fb[1].stop()
            self.fb = None

    def collide(self, pending: list[Split], budget_end: float) -> list[Split]:
        """The one-device relaxations (zbopt.plan.device_bound), then where the bound is still
        below the split's best span the window relaxations (zbopt.plan.window_bound), the
        collision relaxation (zbopt.plan.collision_bound) and the F/B relaxation
        (zbopt.plan.fb_bound, what the share has left), on the listed splits whose bound lies
        below the best span, least bound first (of a split's share, half to the one-device and
        a quarter to the window relaxations); the listed splits with their bounds raised.

        The bound over all splits is the least of theirs, so the time goes where it can raise
        that least: the split of least bound first, with half of the time when others follow
        (at p = 16 one split's bound often lies 5% below every other's, and an even share over
        a hundred splits raised none); then only the splits still below the least bound raised
        so far (a split above it cannot raise the bound over all splits), an even share each
        but at least SPLIT_FLOOR seconds a device, so that the first splits get bounds that
        count rather than all of them too little; the time not needed goes to the solver."""
        open_ = sorted((s for s in pending if s.bound < self.best.span * (1 - TOLERANCE)),
                       key=lambda s: s.bound)
        raised = {}
        level = self.best.span  # the least bound raised so far (the best span before any)
        for index, split in enumerate(open_):
            now = time.perf_counter()
            if now >= budget_end or split.bound >= level * (1 - TOLERANCE):
                break  # sorted by bound: every later split lies at or above `level` too
            instance = self.instance(split.placement, split.sizes)
            if instance is None:
                continue
            key = (split.placement, split.sizes)
            cached = self.cache.get(key)
            upper = cached.span if cached is not None else math.inf
            below = sum(1 for s in open_[index:] if s.bound < level * (1 - TOLERANCE))
            left = budget_end - now
            share = left / 2 if index == 0 and below > 1 else left / below
            share = max(share, min(left, SPLIT_FLOOR * instance.devices))
            self.tell("relaxation bounds", sizes=list(split.sizes))
            value = relaxation_bound(instance, now + share / 2, self.device_memo.setdefault(key, {}))
            name = RELAXED
            if share / 2 >= DEVICE_LIMIT * instance.devices:  # each device had all its time
                self.relaxed.add(key)
            beside = self.fb is not None and self.fb[0] == key
            if value < upper * (1 - TOLERANCE) and not beside:
                window = window_bound(instance, now + 3 * share / 4)
                value, name = max((value, name), (window, WINDOW), key=lambda c: c[0])
            if value < upper * (1 - TOLERANCE):
                collision = collision_bound(instance, now + share, upper)
                value, name = max((value, name), (collision, COLLISION), key=lambda c: c[0])
            if value < upper * (1 - TOLERANCE) and not beside:
                # what the share has left: small splits are proven in milliseconds (the split
                # start_fb runs it on beside the steps is left to that)
                relaxed_fb = fb_bound.fb_bound(instance, now + share, threads=1)
                value, name = max((value, name), (relaxed_fb, FB), key=lambda c: c[0])
            level = min(level, max(value, split.bound))
            if value > split.bound:
                raised[key] = (value, name)
                if cached is not None:
                    self.cache[key] = cached.raised(value, name)
                self.tell("relaxation bounds", sizes=list(split.sizes), relaxation_bound=value)
        return [s.raised(*raised[(s.placement, s.sizes)])
                if (s.placement, s.sizes) in raised else s for s in pending]

    def rescue(self, pending: list[Split]) -> None:
        """When no registered schedule fits any split tried: the exact solver on the fitting
        splits of `pending`, least bound first, half of what is left each, until one has a
        schedule (three at most)."""
        candidates = sorted((s for s in pending if math.isfinite(s.bound)), key=lambda s: s.bound)
        for split in candidates[:RESCUED]:
            if self.best is not None or self.left() <= 1.0:
                return
            self.tell("solver", sizes=list(split.sizes))
            self.solve(split, self.left() / 2)

    def solve(self, split: Split, time_limit: float) -> Split:
        """The exact solver on one partition: a better schedule or a higher proven bound."""
        from ..solvers.api import PASSES_PER_SECOND, solve
        instance = self.instance(split.placement, split.sizes)
        # solve() refuses a limit that cannot cover building and checking the model
        if instance is None or time_limit <= max(0.5, instance.num_passes / PASSES_PER_SECOND):
            return split

        def forward(info: dict) -> None:
            if info.get("phase") == "search" and info.get("incumbent") is not None:
                self.tell("solver", solver_incumbent=info["incumbent"],
                          solver_bound=info.get("bound"), sizes=list(split.sizes))

        # the split's best schedule (polished, tuned) is the solver's hint and incumbent
        start = split.result.schedule if split.result is not None and \
            split.result.instance == instance else True
        # first the one-device relaxations (zbopt.plan.device_bound) unless collide() ran them:
        # cheap, and on tight caps often higher than what the solver proves in the same time
        began = time.perf_counter()
        key = (split.placement, split.sizes)
        relaxed = 0.0 if key in self.relaxed else \
            relaxation_bound(instance, began + RELAX_SHARE * time_limit,
                             self.device_memo.setdefault(key, {}))
        if relaxed > split.bound:
            split = split.raised(relaxed, RELAXED)
            self.cache[(split.placement, split.sizes)] = split
            self.tell("solver", relaxation_bound=relaxed, sizes=list(split.sizes))
        time_limit -= time.perf_counter() - began
        if split.span <= split.bound * (1 + TOLERANCE) or \
                time_limit <= max(0.5, instance.num_passes / PASSES_PER_SECOND):
            return split
        # the split's bound (segment, pipeline and relaxation bounds) is the solver's floor, and
        # solve() need not run the relaxations again
        result = solve(instance, solver=plan_solver(self.solver, instance), time_limit=time_limit,
                       threads=self.threads, warm_start=start, progress=forward,
                       known_bound=("split", split.bound))
        self.solver_runs += 1
        best = split.result
        if result.fits() and (best is None or result.span < best.span):
            best = result
        # the solver's floor was the split's bound (named "split" in its result, where it may
        # come back rounded up to the solver's time grid): a higher one is the solver's own
        name = split.bound_name if result.bound_name == "split" else result.bound_name or "solver"
        updated = replace(split.raised(result.lower_bound or 0.0, name), result=best)
        self.cache[(split.placement, split.sizes)] = updated
        self.offer(updated)
        return updated


def plan_solver(name: str, instance: Instance) -> str:
    """The solver a plan runs on one split: `name`, with "auto" resolved (LNS_FROM_PASSES)."""
    if name != AUTO:
        return name
    return "cpsat-lns" if instance.num_passes >= LNS_FROM_PASSES else "cpsat"


# parts x layers^2 of _balanced's programme (a second or two in Python) past which it bisects
BALANCED_STEPS = 2_000_000


def _balanced(model: LayeredModel) -> tuple[int, ...]:
    """Contiguous parts with the least largest part load (each part one stage's t_f+t_b+t_w):
    a dynamic programme, or past BALANCED_STEPS a bisection on that load (the same least, one of
    the splits that reach it)."""
    parts, n = model.num_parts, model.num_layers
    prefix = [f + b + w for f, b, w in zip(*(model.prefix_sums(k) for k in ("t_f", "t_b", "t_w")))]
    if parts * n * n > BALANCED_STEPS:
        return least_largest_part(prefix, parts)[1]
    best = [[math.inf] * (n + 1) for _ in range(parts + 1)]
    cut = [[0] * (n + 1) for _ in range(parts + 1)]
    best[0][0] = 0.0
    for k in range(1, parts + 1):
        for j in range(k, n - (parts - k) + 1):
            for i in range(k - 1, j):
                value = max(best[k - 1][i], prefix[j] - prefix[i])
                if value < best[k][j]:
                    best[k][j], cut[k][j] = value, i
    sizes, j = [], n
    for k in range(parts, 0, -1):
        i = cut[k][j]
        sizes.append(j - i)
        j = i
    return tuple(reversed(sizes))


# least_excess_of's additions (p n^2) past which the shortfall comes from CP-SAT
EXCESS_SLOTS = 2_000_000


def _least_shortfall(model: LayeredModel) -> Optional[tuple[float, int, tuple[int, ...], bool]]:
    """paired_bound.least_shortfall on the model's placement; on contiguous up to EXCESS_SLOTS
    the segment table's exact programme (bound.least_excess_of)."""
    if model.placement == "contiguous" and \
            model.devices * model.num_layers ** 2 <= EXCESS_SLOTS:
        short, device, sizes = least_excess_of(model)
        return short, device, sizes, True
    return least_shortfall(model)


def _shortfalls(model: LayeredModel, placements: Sequence[str]) -> dict:
    """_least_shortfall of each of `placements` ({} without a cap: every split fits)."""
    if device_caps(model) is None:
        return {}
    return {placement: _least_shortfall(placed(model, placement)) for placement in placements}


def _fits(model: LayeredModel, short: tuple) -> bool:
    """Whether a least shortfall (_least_shortfall) is one within_cap lets fit."""
    cap = device_caps(model)[short[1]]
    return within_cap(cap + short[0], cap)


class NoSplitFits(ZboptError):
    """No split of the placements asked fits the memory cap (the message says by how much)."""


def _infeasible_message(model: LayeredModel, placements: Sequence[str] = ("contiguous",),
                        shortfalls: Optional[dict] = None) -> str:
    """The error for a cap under which no split of any of `placements` fits: the split whose
    largest memory shortfall over the devices is least (on the placement where that is least;
    `shortfalls`: _shortfalls, computed when not given), the device short by it, by how much,
    and the cap that device needs."""
    placements = tuple(placements)
    shortfalls = shortfalls if shortfalls is not None else _shortfalls(model, placements)
    caps, unit = device_caps(model), model.memory_unit
    where = "" if placements == ("contiguous",) else f" on {' or '.join(placements)}"
    rest = "or use more devices" if set(placements) >= set(PLACEMENTS) or \
        placements == ("contiguous",) else ", use more devices or allow other placements"
    found = [(short, placement) for placement, short in shortfalls.items()
             if short is not None and not _fits(model, short)]
    if not found:  # CP-SAT found no split in its time
        cap = readable(caps[0], unit) if len(set(caps)) == 1 else \
            "(per device " + ", ".join(readable(c, unit) for c in caps) + ")"
        return (f"memory cap {cap} cannot hold any split{where}: on every one some device's "
                f"static memory and one micro-batch's activations exceed it; raise memory_cap"
                f"{rest if rest.startswith(',') else ' ' + rest}")
    (short, device, sizes, proven), placement = min(found, key=lambda f: f[0][0])
    cap = caps[device]
    which = "" if len(set(caps)) == 1 else f" on device {device}"
    split = "+".join(map(str, sizes)) + ("" if len(placements) == 1 else f" (on {placement})")
    need = readable(cap + short, unit, at_least=True)
    if proven:
        best, then = "even the best split", f"raise memory_cap on device {device} to at least {need}"
    else:  # CP-SAT's time ran out before it proved this split the least short
        best, then = "the best split found", f"raise memory_cap on device {device} (that split " \
            f"fits from {need})"
    return (f"memory cap {readable(cap, unit)}{which} cannot hold any split{where}: {best} "
            f"{split} needs {readable(short, unit, at_least=True)} more on device {device} for its "
            f"static memory and one micro-batch's activations; {then}"
            f"{rest if rest.startswith(',') else ' ' + rest}")


def _placement_list(placements) -> tuple[str, ...]:
    """plan()'s placements as a tuple without repeats: a single str is one placement; an empty
    list, or anything but strings, is a ZboptError."""
    if isinstance(placements, str):
        placements = (placements,)
    elif not isinstance(placements, (list, tuple)):  # a set's order would vary between runs
        raise ZboptError(f"placements must be a list of placements ({', '.join(PLACEMENTS)}), "
                         f"got {type(placements).__name__}")
    odd = [x for x in placements if not isinstance(x, str)]
    if odd:
        raise ZboptError(f"unknown placement {odd[0]!r}: use one of {', '.join(PLACEMENTS)}")
    if not placements:
        raise ZboptError(f"placements is empty: give at least one of {', '.join(PLACEMENTS)}")
    return tuple(dict.fromkeys(placements))


def plan(model: LayeredModel, placements: Sequence[str] = ("contiguous",), time_limit: float = 60,
         solver: str = "auto", threads: int = 2, max_partitions: int = 2000,
         exact: bool = True, progress: Optional[Progress] = None, others: bool = False) -> Plan:
    """The partition and schedule with the least span under the cap (see the module doc).

    solver: a registered solver, or "auto" (LNS_FROM_PASSES) for each split the solver phase
    takes up. exact=False skips the solver phase: registered heuristics only, the bound stays
    valid. others: also bound every placement not in `placements` (Plan.others), taken out of
    the time limit, so a plan over one placement can say whether another could be shorter.
    placements: a list of placements, or one placement's name as a str."""
    require_model(model, "plan()")
    placements = _placement_list(placements)
    # every argument is checked now, whether or not the phase that uses it runs
    exact, others = check_flag("exact", exact), check_flag("others", others)
    if solver != AUTO:
        get_method(solver, "solver")  # ZboptError now, not after the heuristics' time
    for placement in placements:
        if placement not in PLACEMENTS:
            raise ZboptError(f"unknown placement {placement!r}: use one of {', '.join(PLACEMENTS)}")
    time_limit, threads = check_time_limit(time_limit), check_threads(threads)
    if isinstance(max_partitions, bool) or not isinstance(max_partitions, numbers.Integral) \
            or max_partitions < 1:
        raise ZboptError(f"max_partitions must be a whole number of at least 1, got "
                         f"{max_partitions!r}")
    max_partitions = int(max_partitions)
    check_progress(progress)
    # with others, OTHERS_SHARE of the time is kept for a short search on each of them
    main_limit = float(time_limit) * (1 - OTHERS_SHARE if others else 1)
    search = _Search(model, main_limit, progress, solver, threads)
    for placement in placements:
        search.placed(placement)  # ZboptError now if the placement cannot hold the layers
    if placements == ("contiguous",) and not contiguous_fits(search.placed("contiguous")):
        raise NoSplitFits(_infeasible_message(model))  # said before any other work
    floors = _other_floors(search, placements) if others else None
    bounds: dict[str, float] = {}  # per placement, a bound of its splits not in pending
    covered: set[str] = set()  # placements whose every split is in pending
    pending: list[Split] = []
    pruned = 0
    share = (0.5 if exact else 1.0) / len(placements)
    for index, placement in enumerate(placements):
        placed = search.placed(placement)
        budget_end = search.began + main_limit * share * (index + 1)
        table, best = None, None
        if placement == "contiguous":
            # no split fits (O(p n)): nothing to tabulate; else the table where it can be
            # made within the placement's share of the time, the least stage load where not
            fits = contiguous_fits(placed)
            table = search.segment_table(placement, budget_end) if fits else None
            best = suffix_minmax(table) if table is not None else None
            floor = best[0][0] if best is not None else \
                least_stage_load(placed) if fits else math.inf
        else:
            if placement in PAIRED:  # up to seconds on large models: say what runs
                search.tell("bounds")
            floor = placement_floor(placed, deadline=budget_end, planned=True)
        if math.isinf(floor):  # proven: no split fits, so no schedule on it to look for
            bounds[placement] = floor
            continue
        search.bound = min([*bounds.values(), floor])
        search.schedule_starts(placement, search.starts(placement, best), budget_end,
                               every=search.best is None)
        if search.best is not None and search.best.span <= floor * (1 + TOLERANCE):
            bounds[placement] = floor  # a split already meets the least bound of any split
            continue
        search.climb(placement, budget_end)
        if table is None:
            scheduled = [s for (pl, _), s in search.cache.items() if pl == placement]
            bounds[placement] = floor
            if len(scheduled) == _split_count(placed):
                covered.add(placement)  # every split is in pending with its own bound
            pending.extend(scheduled)
            continue
        threshold = search.best.span if search.best is not None else math.inf
        total = count_below(table, threshold)
        listed_below = threshold
        if total > max_partitions:
            listed_below = _threshold_for(table, best[0][0], threshold, max_partitions,
                                          search.deadline)
        listed = list(partitions_below(table, listed_below, best))
        if not listed and total:
            # too many splits tie at the least bound: take some of them; the rest keep that bound
            listed = list(itertools.islice(partitions_below(table, threshold, best), max_partitions))
            listed_below = best[0][0]
        # the coupled bound of each listed split (cheap from the table) orders and prunes them
        lbs = {sizes: table.full_bound(sizes) for sizes in listed}
        listed.sort(key=lbs.__getitem__)
        pruned += _count_all(table) - len(listed)
        search.tell("pruned", placement=placement, listed=len(listed), candidates=total)
        splits = []
        for sizes in listed:
            lb = lbs[sizes]
            cached = search.cache.get((placement, sizes))
            if cached is not None:
                splits.append(cached.raised(lb, SEGMENT))
            elif search.best is not None and lb >= search.best.span * (1 - TOLERANCE):
                splits.append(Split(placement, sizes, None, lb))
            elif search.affords(placement, budget_end):
                split = search.schedule(placement, sizes, lb)
                splits.append(split.raised(lb, SEGMENT))
            else:
                splits.append(Split(placement, sizes, None, lb))
        # partitions not listed all have a bound >= listed_below
        bounds[placement] = listed_below
        pending.extend(splits)
    if search.best is None and bounds and all(math.isinf(x) for x in bounds.values()):
        raise NoSplitFits(_infeasible_message(model, placements, _shortfalls(model, placements)))
    if search.best is None and exact:
        # no heuristic fits any split tried (dualpipe at a tight cap can be so): the solver on
        # the splits that hold their static memory and one micro-batch, least bound first
        search.rescue(pending)
    shortfalls = _shortfalls(model, placements) if search.best is None else {}
    if shortfalls and all(s is not None and s[3] and not _fits(model, s)
                          for s in shortfalls.values()):  # CP-SAT proved that none fits
        raise NoSplitFits(_infeasible_message(model, placements, shortfalls))
    if search.best is None:
        solver = " (nor did the solver find one)" if exact and search.solver_runs else ""
        reasons = {p: why for p, why in search.unapplied.items() if p not in search.applied}
        if reasons and set(reasons) >= set(placements):  # not the cap: the methods' own terms
            raise ZboptError(f"no registered schedule applies to any split tried{solver}: "
                             + "; ".join(f"on {p}, {why}" for p, why in reasons.items())
                             + ", or allow other placements")
        raise ZboptError(f"no registered schedule fits the memory cap on any split tried{solver}"
                         ": raise memory_cap or allow other placements")

    def overall() -> float:
        return min([*unlisted().values(), *(s.bound for s in pending), search.best.span])

    def unlisted() -> dict[str, float]:
        """Per placement, the bound of its splits not in pending (none once all are)."""
        return {pl: bound for pl, bound in bounds.items() if pl not in covered}

    search.bound = overall()
    if overall() < search.best.span * (1 - TOLERANCE):
        # a share of what is left tunes the greedy's policies per device on the best splits
        search.tune_policies(time.perf_counter() + POLICY_SHARE * search.left(),
                             {(s.placement, s.sizes): s.bound for s in pending})
        pending = [_refreshed(s, search.cache) for s in pending]
        search.bound = overall()
    if overall() < search.best.span * (1 - TOLERANCE):
        # a share of what is left (all of it without the solver) polishes the best schedules
        search.polish_best(time.perf_counter() + POLISH_SHARE * search.left() if exact
                           else search.deadline)
        search.bound = overall()
    try:  # the F/B relaxation runs beside these steps; an exception stops it
        if exact and overall() < search.best.span * (1 - TOLERANCE):
            search.start_fb(pending)
            pending = search.collide(pending, time.perf_counter() + COLLISION_SHARE * search.left())
            pending = search.poll_fb(pending)
            search.bound = overall()
        solved: set[tuple[str, tuple[int, ...]]] = set()
        # the exact solver: the best partition first, then the weakest proven bound below the span
        while exact and search.left() > 1.0 and overall() < search.best.span * (1 - TOLERANCE):
            weak = [s for s in pending if s.bound < search.best.span * (1 - TOLERANCE)
                    and (s.placement, s.sizes) not in solved]
            best_key = (search.best.placement, search.best.sizes)
            if best_key not in solved:
                target = next((s for s in pending if (s.placement, s.sizes) == best_key), search.best)
                target = replace(target, result=search.best.result)
            elif weak:
                target = min(weak, key=lambda s: s.bound)
            else:
                break
            others = [s for s in weak if (s.placement, s.sizes) != (target.placement, target.sizes)]
            slice_ = search.left() / 2 if others else search.left()
            search.tell("solver", sizes=list(target.sizes))
            updated = search.solve(target, slice_)
            key = (updated.placement, updated.sizes)
            solved.add(key)
            pending = search.poll_fb([updated if (s.placement, s.sizes) == key else s
                                      for s in pending])
            search.bound = overall()
    except BaseException:
        search.stop_fb()
        raise
    pending = search.collect_fb(pending)
    search.bound = overall()
    lower = overall()
    chosen = search.best
    # what proves the chosen split cannot be shorter: its own bound as the steps left it (in
    # pending) or as it was scheduled with; else (a split not listed, or a placement whose
    # splits a schedule meeting its floor left unlisted) the bound over all of its placement's
    # partitions, the segment table's on contiguous
    proving = [s for s in pending if (s.placement, s.sizes) == (chosen.placement, chosen.sizes)
               and s.bound >= chosen.span * (1 - TOLERANCE)]
    if chosen.bound >= chosen.span * (1 - TOLERANCE):
        proving.append(chosen)
    proof = max(proving, key=lambda s: s.bound).bound_name if proving else \
        SEGMENT if chosen.placement in search.tables else PLACEMENT_FLOOR
    kinds = ", ".join(placements)
    scope = f"among schedules of single passes on the {kinds} placement(s), over all partitions"
    if model.overlap and _has_blocks(chosen.result):
        # the bounds above hold for single passes only; overlapped F&B blocks can beat them
        lower = min(lower, _overlap_floor(model))
        proof = OVERLAP_FLOOR
        scope = (f"among schedules of single passes or overlapped F&B blocks on the {kinds} "
                 f"placement(s), over all partitions")
    status = "optimal" if lower >= chosen.span * (1 - TOLERANCE) else "feasible"
    result = replace(chosen.result, status=status, lower_bound=min(lower, chosen.span),
                     bound_name="partition bound", runtime=search.elapsed(),
                     message=f"{status} {scope}" + ("" if status == "optimal" else
                                                    " (gap from the bound over all partitions)"))
    baselines = {}
    for name, rule in BASELINES.items():
        options = []
        for placement in placements:
            if math.isinf(bounds.get(placement, 0.0)):
                continue  # no split fits this placement (proven above)
            sizes = rule(search.placed(placement))
            # scheduled in step 1 unless the time ran short: then only while it allows
            if sizes is not None and search.affords(placement, search.deadline, sizes):
                options.append(search.schedule(placement, sizes))
        fitting = [s for s in options if s.result is not None]
        baselines[name] = min(fitting, key=lambda s: s.span) if fitting else (options[0] if options else None)
    tried = _try_others(search, floors, min(search.began + time_limit, time.perf_counter()
                                            + OTHERS_SHARE * time_limit)) if floors is not None else None
    search.tell("done")
    weakest = min(pending, key=lambda s: s.bound, default=None)
    bound_split = weakest.sizes if weakest is not None and weakest.bound <= lower and \
        lower < chosen.span * (1 - TOLERANCE) else None
    bound_placement = None
    if len(placements) > 1 and lower < chosen.span * (1 - TOLERANCE):
        bound_placement = _least_placement(placements, unlisted(), pending, lower)
    return Plan(model, result, chosen, baselines, scope, len(search.cache), pruned, search.solver_runs,
                bound_split, bound_placement, floors,
                weakest.bound_name if bound_split is not None else None,
                proof if status == "optimal" else None, tried, search.finishing())


def _least_placement(placements: Sequence[str], unlisted: dict[str, float],
                     listed: list[Split], lower: float) -> Optional[str]:
    """The placement whose bound (its unlisted splits' or a listed split's) is `lower`, the
    bound over all partitions; None when it is none of theirs (the overlap floor)."""
    least = {placement: unlisted.get(placement, math.inf) for placement in placements}
    for split in listed:
        least[split.placement] = min(least[split.placement], split.bound)
    placement = min(placements, key=least.__getitem__)
    return placement if least[placement] <= lower * (1 + 1e-12) else None


def _refreshed(split: Split, cache: dict) -> Split:
    """A listed split with the schedule the cache now holds for it (its bound kept)."""
    cached = cache.get((split.placement, split.sizes))
    if cached is None or cached.result is None or cached.span >= split.span:
        return split
    return replace(split, result=cached.result)


PAIRED = {"v": v_floor, "interleaved": interleaved_floor, "dualpipe": dualpipe_floor}
# CP-SAT's time for the least largest device load where no paired programme runs
LOAD_FLOOR_SECONDS = 2.0
# the slowest of the paired programmes at BUDGET (dualpipe on 102 layers at p = 16: 7 s): with a
# deadline, their budget is BUDGET times the seconds left over this
BUDGET_SECONDS = 7.0
# V's programme at BUDGET (82 layers at p = 16: 1.8e8 operations in 0.7 s; 128 layers at p = 32:
# 2.1e9 in 6 s): on the placement planned over it may take PLANNED_FLOOR_SHARE of the placement's
# time at that pace, past BUDGET (results/plan.md, part p32v: at p = 32 on a Llama 3.1 405B
# shape, 60 s plans, V's bound over all partitions 25% higher at the tight cap, certified gap
# 46.91% -> 33.63%, the same at the mid cap, where the cap does not bind it; the same spans)
V_SECONDS = 1.6
PLANNED_FLOOR_SHARE = 0.3
# below this CP-SAT is not started (load_floor itself declines a model too large to set up in
# the time it is given: zbopt.plan.load_floor.affordable)
MIN_LOAD_FLOOR_SECONDS = 0.01
# the paired programmes' budget for placements not planned over (plan(others=True)): a tenth of
# theirs, half a second at most each on this project's 2-core machine (V and dualpipe to about 56
# layers at p = 16, interleaved to about 43 at p = 8), so the hint takes little of the search's
# time; past it zbopt.plan.load_floor stands in (weaker, still a bound)
OTHERS_BUDGET = BUDGET / 10
# of the time left: the most each placement not planned over takes for its bound (the segment
# table of contiguous, the paired programmes within OTHERS_BUDGET and CP-SAT); past it the
# least stage load, the total load over p stand in
OTHERS_TIME_SHARE = 0.1
# of plan(others=True)'s time limit: a short search on each placement not planned over whose
# bound lies below the plan's span (Plan.tried), so that the plan can show a shorter schedule
# there rather than only say that one may exist
OTHERS_SHARE = 0.15


def placed(model: LayeredModel, placement: str) -> LayeredModel:
    """The model on `placement` (ZboptError when it cannot hold the layers)."""
    if placement == model.placement:
        return model
    chunks = model.chunks if placement == "interleaved" else 0
    return model.with_settings(placement=placement, chunks=chunks)


def placement_floor(model: LayeredModel, budget: float = BUDGET,
                    deadline: Optional[float] = None, planned: bool = False) -> float:
    """A lower bound on the span of every schedule of single passes of every partition on the
    model's placement (inf: no partition fits the cap): the segment programme's least bound on
    contiguous (with a `deadline`, where its table can be made by then; else the least largest
    stage load, bound.least_stage_load); elsewhere the total load over p, raised by
    zbopt.plan.paired_bound's programme where it applies and runs within `budget` (its element
    operations; with a `deadline`, no more than BUDGET_SECONDS for BUDGET allows in the time
    left), else by zbopt.plan.load_floor's least largest device load (LOAD_FLOOR_SECONDS at the
    full budget, in proportion below it, not past the deadline, and not started where its
    model cannot be set up in that time, zbopt.plan.load_floor.affordable).
    planned (the placement plan() plans over, `deadline` the end of its share): V's programme
    may also take up to PLANNED_FLOOR_SHARE of the time left, at its own pace (V_SECONDS for
    BUDGET), past `budget`, and is stopped there if it runs slower."""
    if model.placement == "contiguous":
        return _contiguous_floor(model, deadline)[0]
    programme_budget, programme_deadline = budget, None
    if deadline is not None:  # the programme's budget and CP-SAT's time, in the time left
        left = max(0.0, deadline - time.perf_counter())
        budget = programme_budget = min(budget, BUDGET * left / BUDGET_SECONDS)
        share = PLANNED_FLOOR_SHARE * left
        if planned and model.placement == "v" and BUDGET * share / V_SECONDS > budget:
            programme_budget = BUDGET * share / V_SECONDS
            programme_deadline = time.perf_counter() + share
    floor = _total_load(model) / model.devices
    paired = PAIRED.get(model.placement)
    value = paired(model, programme_budget, programme_deadline) if paired is not None else None
    seconds = LOAD_FLOOR_SECONDS * budget / BUDGET
    if deadline is not None:
        seconds = min(seconds, deadline - time.perf_counter())
    if value is None and seconds >= MIN_LOAD_FLOOR_SECONDS:  # 3+ chunks, or past the budget
        value = load_floor(model, seconds)
    return max(floor, value or 0.0)


def _contiguous_floor(model: LayeredModel, deadline: Optional[float] = None) \
        -> tuple[float, Optional[SegmentBounds]]:
    """placement_floor on contiguous, and the table it came from (None: no split fits, or the
    table could not be made by `deadline`)."""
    if not contiguous_fits(model):
        return math.inf, None
    table = segment_bounds(model, deadline=deadline)
    if table is None:
        return least_stage_load(model), None
    return least_bound(table), table


def _try_others(search: "_Search", floors: dict[str, float], deadline: float) \
        -> dict[str, Optional[Split]]:
    """Plan.tried: on each placement not planned over whose bound lies below the plan's span,
    least bound first, the shortest schedule a short search finds (step 1 of the module doc: its
    starts, the guided ones first, and the climbs, in a search of its own so the plan stays on
    its placements), an even share each of the time until `deadline`; None where none of the
    splits it scheduled fits, left out where it had no time to schedule one."""
    span = search.best.span
    open_ = sorted((name for name, floor in floors.items() if floor < span * (1 - TOLERANCE)),
                   key=floors.__getitem__)
    tried: dict[str, Optional[Split]] = {}
    for index, name in enumerate(open_):
        now = time.perf_counter()
        end = now + max(0.0, deadline - now) / (len(open_) - index)

        def told(info: dict, name: str = name) -> None:
            search.tell("other placements", placement=name, scheduled_there=info["scheduled"])

        other = _Search(search.model, end - now, told, search.solver, search.threads)
        other.split_seconds = search.split_seconds  # what a split takes, for affords()
        if name in search.other_tables:  # contiguous: _other_floors made its table in time
            other.tables[name] = search.other_tables[name]
        search.tell("other placements", placement=name)
        other.schedule_starts(name, other.starts(name), end, every=False)
        other.climb(name, end)
        if other.cache:  # left out when its time ran out before a split was scheduled
            tried[name] = other.best
    return tried


def _other_floors(search: "_Search", placements: Sequence[str]) -> dict[str, float]:
    """Plan.others: the bound over all partitions of each placement not planned over that can
    hold the layers; with an overlap, no higher than what overlapped blocks allow."""
    floors = {}
    for placement in PLACEMENTS:
        if placement in placements:
            continue
        try:
            model = search.placed(placement)
        except ZboptError:  # too few layers, or devices, for this placement
            continue
        search.tell("bounds", placement=placement)
        deadline = time.perf_counter() + OTHERS_TIME_SHARE * max(0.0, search.left())
        if placement == "contiguous":
            floor, table = _contiguous_floor(model, deadline)
            if table is not None:
                search.other_tables[placement] = table
        else:
            floor = placement_floor(model, OTHERS_BUDGET, deadline)
        if model.overlap:
            floor = min(floor, _overlap_floor(model))
        floors[placement] = floor
    return floors


def _total_load(model: LayeredModel) -> float:
    """Pass time of one micro-batch through every layer, times the micro-batches (dualpipe's two
    directions each take half of them through their own copy)."""
    return sum(x.t_f + x.t_b + x.t_w for x in model.expanded) * model.microbatches


def _has_blocks(result: Result) -> bool:
    """Whether the schedule runs some passes as one overlapped block."""
    return any(len(item) > 1 for order in result.schedule.orders for item in order)


def _overlap_floor(model: LayeredModel) -> float:
    """The total load over p less the most an overlap can save: a block lasts its passes' sum
    less overlap * min(its forwards, its B and W), so a device saves at most overlap * min(its
    F time, its B and W time), and the devices together at most overlap * min(F, B + W) of the
    whole model per micro-batch. Holds for every schedule, blocks or not, on any placement."""
    layers = model.expanded
    forward = sum(x.t_f for x in layers)
    backward = sum(x.t_b + x.t_w for x in layers)
    saved = model.overlap * min(forward, backward) * model.microbatches
    return (_total_load(model) - saved) / model.devices


def _split_count(model: LayeredModel) -> int:
    """How many partitions `model` has: its layers cut into num_parts runs of at least one."""
    return math.comb(model.num_layers - 1, model.num_parts - 1) if model.num_layers else 0


def _count_all(table) -> int:
    return count_below(table, math.inf)


def _threshold_for(table, low: float, high: float, limit: int,
                   deadline: float = math.inf) -> float:
    """A threshold in [low, high] below which at most `limit` partitions lie, given that at
    most `limit` lie below `low`: bisection, until `deadline` at the latest (then the highest
    such threshold found so far)."""
    for _ in range(40):
        if time.perf_counter() >= deadline:
            break
        mid = (low + high) / 2
        if count_below_float(table, mid) > limit:
            high = mid
        else:
            low = mid
    return low
