"""Lower bounds over every partition of a layered model (contiguous placement).

On a contiguous placement the per-device bound of zbopt.bounds (`device_bound`: load plus
forced ramp and drain idle) is taken on every device; where the cap cannot hold
every micro-batch at once a memory throughput bound (`_throughput`) can raise it. Device d's bound
depends only on the layers of its own stage and on sums over the stages after it: the forward
round trip needs the t_f of every layer from the stage's first layer on, the backward the t_b of
every layer after the stage's last. So the bound of a partition is a max over its segments of a
function of (stage, first layer, last layer), and the least bound over all partitions, the number
of partitions below a threshold, and those partitions themselves come from a dynamic programme
over (stage, first layer). Bounds of zbopt.bounds that couple several stages are not in the
segment bound; the search adds them per partition (`registry.schedule_bound`). tests/test_plan.py
checks the segment bound against zbopt.bounds.device_bound on every partition of small models and
against CP-SAT optima where it is higher.

The segment bound also holds the memory-aware window bound of zbopt.plan.memory_bound for the
pair (first device, device d): device 0's span is at least the forward path to d, d's window
(first F start to last B end), the backward path back and t_w of stage 0, which is at least the
t_w of the first layer whatever stage 0 holds; the paths depend only on d's first layer. The
coupling of several devices (memory_bound.start_chain) needs the whole partition:
`SegmentBounds.pipeline_bound` adds it from the same table in O(p m) per partition.

The table has p n^2 / 2 cells of a few microseconds each (15 s at 1,500 layers on 2 devices on
this project's 2-core machine) and about 70 bytes a slot of its p n^2: plan() builds it with a
`deadline` (segment_bounds gives None past TABLE_SLOTS slots, at the deadline, or as soon as its
rate says it cannot finish by then) and plans without it where it is cut short, on bounds that
need no table: whether any partition fits (`contiguous_fits`, O(p n)) and the least largest stage
load over all partitions (`least_stage_load`, a bisection), weaker but valid.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional, Sequence

import numpy as np

from ..bounds import held_area, knapsack_max
from ..instance import cap_limit, within_cap
from ..layers import LayeredModel
from .memory_bound import held_count, release_gap, start_chain, window_tail, window_work

INF = math.inf
# slots of the table (p n^2, each in five tables, about 70 bytes a slot): past this many a plan
# does not build it (350 MB; about 15 s to fill on this project's 2-core machine)
TABLE_SLOTS = 5_000_000


@dataclass(frozen=True)
class SegmentBounds:
    """bound[d][i][j]: least span of device d holding layers i..j (inf: does not fit the cap);
    excess[d][i][j]: memory beyond the cap that stage needs (static plus one micro-batch's
    activations), 0 where it fits."""

    model: LayeredModel
    bound: tuple[tuple[tuple[float, ...], ...], ...]
    excess: tuple[tuple[tuple[float, ...], ...], ...]
    # per (stage, first layer, last layer), for the coupled bound of a whole partition: how many
    # micro-batches the stage can hold, its F start to B end round trip R, its window bound
    window: tuple[tuple[tuple[float, ...], ...], ...] = ()
    held: tuple[tuple[tuple[int, ...], ...], ...] = ()
    # the release gap delta of zbopt.plan.memory_bound (a slot frees that long after a B ends)
    gap: tuple[tuple[tuple[float, ...], ...], ...] = ()
    prefix: Optional[dict] = None  # cumulative t_f, t_b, t_w over the layers
    # bound[d] as a numpy matrix, made when first asked (`matrix`)
    arrays: dict = field(default_factory=dict, compare=False, repr=False)

    def matrix(self, d: int) -> np.ndarray:
        """bound[d] as an (n, n) array (rows: first layer, columns: last layer)."""
        if d not in self.arrays:
            self.arrays[d] = np.array(self.bound[d], dtype=float).reshape(self.layers, self.layers)
        return self.arrays[d]

    def pipeline_bound(self, sizes) -> float:
        """memory_bound.pipeline_bound of the partition from the table (chain on the last device
        only): max over d <= e of R_d - R_e + window_e + t_w(d), and the start chain of every
        device's (held, R) plus max_d R_d + t_w(d)."""
        if not self.window:
            return 0.0
        tf, tb, tw = self.prefix["t_f"], self.prefix["t_b"], self.prefix["t_w"]
        n, p, m, comm = self.layers, self.stages, self.model.microbatches, self.model.comm
        best, top, rules, i = 0.0, -INF, [], 0
        for d, size in enumerate(sizes):
            j = i + size - 1
            window = self.window[d][i][j]
            if not math.isfinite(window):
                return INF
            trip = (tf[n] - tf[i]) + (tb[n] - tb[i]) + 2 * (p - 1 - d) * comm
            top = max(top, trip + tw[j + 1] - tw[i])
            best = max(best, top - trip + window)
            rules.append((self.held[d][i][j], trip + self.gap[d][i][j]))
            last_tf = tf[j + 1] - tf[i]
            i = j + 1
        return max(best, start_chain(m, last_tf, rules) + top)

    def full_bound(self, sizes) -> float:
        """The per-device segment bound and the coupled bound of one partition."""
        return max(self.partition_bound(sizes), self.pipeline_bound(sizes))

    @property
    def stages(self) -> int:
        return len(self.bound)

    @property
    def layers(self) -> int:
        return self.model.num_layers

    def partition_bound(self, sizes) -> float:
        out, i = 0.0, 0
        for d, n in enumerate(sizes):
            out = max(out, self.bound[d][i][i + n - 1])
            i += n
        return out


def table_cells(model: LayeredModel) -> int:
    """The (stage, first layer, last layer) cells segment_bounds computes: stage d starts at
    layer d or later and leaves a layer for each stage after it, K = n - p + 1 places each."""
    k = model.num_layers - model.devices + 1
    return model.devices * k * (k + 1) // 2


def segment_bounds(model: LayeredModel, deadline: Optional[float] = None,
                   progress: Optional[Callable[[int, int], None]] = None,
                   clock: Callable[[], float] = time.perf_counter) -> Optional[SegmentBounds]:
    """The bound of every (stage, segment) of a contiguous placement (see the module doc).

    With a `deadline` (on `clock`): None, and no table, when the table has more than
    TABLE_SLOTS slots, when the deadline passes, or when, a twentieth of the time to it gone,
    the rate so far says the rest cannot be done by then. `progress(cells done, cells)` is
    called after each (stage, first layer)."""
    if model.placement != "contiguous":
        raise ValueError("segment bounds describe the contiguous placement")
    n, p, m, comm = model.num_layers, model.devices, model.microbatches, model.comm
    if deadline is not None and p * n * n > TABLE_SLOTS:
        return None
    began, done, cells = clock(), 0, table_cells(model)
    tf, tb, tw, mb, mw, st = (model.prefix_sums(k)
                              for k in ("t_f", "t_b", "t_w", "m_b", "m_w", "static"))
    caps = device_caps(model)
    # device 0's span covers the path to stage d and back, d's window, and t_w of stage 0
    tw_first = tw[1] - tw[0]
    bound, excess, windows, helds, gaps = [], [], [], [], []
    for d in range(p):
        rows_b, rows_e, rows_w, rows_h, rows_g = [], [], [], [], []
        for i in range(n):
            row_b, row_e = [INF] * n, [0.0] * n
            row_w, row_h, row_g = [INF] * n, [0] * n, [0.0] * n
            # stage d needs layers i..j with room for the d stages before and p-1-d after it
            for j in range(i, n):
                if i < d or n - 1 - j < p - 1 - d:
                    continue
                seg = {k: v[j + 1] - v[i] for k, v in
                       (("t_f", tf), ("t_b", tb), ("t_w", tw), ("m_b", mb), ("m_w", mw),
                        ("static", st))}
                need = seg["static"] + seg["m_b"]
                if caps is not None and not within_cap(need, caps[d]):
                    row_e[j] = need - caps[d]
                    continue
                wait = (tf[n] - tf[i]) + (tb[n] - tb[j + 1]) + 2 * (p - 1 - d) * comm
                capacity = INF if caps is None else caps[d] - seg["static"]
                trip = wait + seg["t_b"]
                held = held_count(capacity, seg["m_b"], m)
                gap = 0.0 if caps is None else release_gap(
                    held, m, seg["t_b"], seg["t_w"], seg["m_b"], seg["m_w"], seg["static"], caps[d])
                own, idle, ramp = _device_bound(seg, m, wait, capacity, gap)
                room = INF if caps is None else cap_limit(caps[d]) - seg["static"]
                if 0 < room < INF:  # zbopt.bounds' memory_area, mostly below the rounds here
                    own = max(own, held_area(m, seg["m_b"], trip, seg["m_w"], seg["t_w"]) / room)
                window = max(window_work(m, seg["t_f"], seg["t_b"], seg["t_w"], seg["m_b"],
                                         seg["m_w"], capacity, idle),
                             window_tail(m, seg["t_f"], seg["t_b"], seg["t_w"], seg["m_b"],
                                         seg["m_w"], capacity, wait, ramp),
                             start_chain(m, seg["t_f"], [(held, trip + gap)]) + trip)
                # the paths from device 0 to d and back: R_0 - R_d
                paths = (tf[i] - tf[0]) + (tb[i] - tb[0]) + 2 * d * comm
                row_b[j] = max(own, paths + window + tw_first)
                row_w[j], row_h[j], row_g[j] = window, held, gap
            rows_b.append(tuple(row_b))
            rows_e.append(tuple(row_e))
            rows_w.append(tuple(row_w))
            rows_h.append(tuple(row_h))
            rows_g.append(tuple(row_g))
            done += max(0, n - p + d - i + 1) if i >= d else 0
            if progress is not None:
                progress(done, cells)
            if deadline is not None and _cut_short(began, clock(), deadline, done, cells):
                return None
        bound.append(tuple(rows_b))
        excess.append(tuple(rows_e))
        windows.append(tuple(rows_w))
        helds.append(tuple(rows_h))
        gaps.append(tuple(rows_g))
    return SegmentBounds(model, tuple(bound), tuple(excess), tuple(windows), tuple(helds),
                         tuple(gaps), {"t_f": tf, "t_b": tb, "t_w": tw})


def _cut_short(began: float, now: float, deadline: float, done: int, cells: int) -> bool:
    """Whether a table begun at `began` stops at `now`: the deadline has passed, or a twentieth
    of the time to it has and the rate so far (cells a second) leaves the rest past it."""
    if now >= deadline:
        return True
    spent = now - began
    if done >= cells or spent < (deadline - began) / 20:
        return False
    return began + spent * cells / max(done, 1) > deadline


def device_caps(model: LayeredModel) -> tuple[float, ...] | None:
    """The model's memory cap per device (None: uncapped)."""
    cap = model.memory_cap
    if cap is None:
        return None
    if isinstance(cap, (list, tuple)):
        return tuple(float(x) for x in cap)
    return (float(cap),) * model.devices


def _device_bound(seg: dict, m: int, wait: float, capacity: float,
                  gap: float = 0.0) -> tuple[float, float, float]:
    """(zbopt.bounds.device_bound for a device with one stage of these totals, raised by the
    memory throughput bound where the cap cannot hold every micro-batch at once; the forced idle
    it adds to the load; the ramp idle alone). `gap`: the release gap (zbopt.plan.memory_bound)."""
    load = m * (seg["t_f"] + seg["t_b"] + seg["t_w"])
    if math.isfinite(capacity):
        ramp_busy = knapsack_max([(seg["m_b"], seg["t_f"], m)], capacity)
        items = [(seg["m_b"], seg["t_b"] + seg["t_w"], m - 1), (seg["m_w"], seg["t_w"], m - 1)]
        drain_busy = seg["t_f"] + knapsack_max(items, capacity - seg["m_b"])
        drain = max(0.0, wait - drain_busy)
    else:
        ramp_busy, drain = m * seg["t_f"], 0.0
    ramp = max(0.0, wait - ramp_busy)
    if m * seg["m_b"] > capacity + 1e-9:
        # some forward starts after the first B: disjoint windows
        return max(load + ramp + drain, _throughput(seg, m, wait, capacity, gap)), ramp + drain, ramp
    return load + max(ramp, drain), max(ramp, drain), ramp


def _throughput(seg: dict, m: int, wait: float, capacity: float, gap: float = 0.0) -> float:
    """Memory throughput: a micro-batch holds m_b from the start of its F to the end of its B,
    at least the round trip plus t_b, and its slot lasts `gap` longer (the release gap of
    zbopt.plan.memory_bound); at most k = floor(capacity / m_b) slots overlap, so the m slots
    split into k chains of disjoint ones (interval colouring), the longest holds ceil(m / k),
    and the W of its last B still follows on the device (at least t_w >= gap after that B)."""
    if seg["m_b"] <= 0:
        return 0.0
    k = math.floor(capacity / seg["m_b"] + 1e-9)
    if k < 1:
        return INF
    return math.ceil(m / k) * (wait + seg["t_b"] + gap) - gap + seg["t_w"]


# ----- the dynamic programme over (stage, first layer) -----------------------------------------

def suffix_minmax(table: SegmentBounds) -> list[list[float]]:
    """best[d][i]: least possible max bound of stages d.. when stage d starts at layer i."""
    p, n = table.stages, table.layers
    best = [[INF] * (n + 1) for _ in range(p + 1)]
    best[p][n] = 0.0
    after = np.array(best[p])
    for d in range(p - 1, -1, -1):
        # min over j of max(bound[d][i][j], best[d + 1][j + 1]); j < i is inf in the table
        best[d][:n] = np.maximum(table.matrix(d), after[None, 1:]).min(axis=1).tolist()
        after = np.array(best[d])
    return best


def least_bound(table: SegmentBounds) -> float:
    """The least partition bound over every partition (inf: none fits the cap)."""
    return suffix_minmax(table)[0][0]


def count_below(table: SegmentBounds, threshold: float) -> int:
    """How many partitions have a bound strictly below `threshold`."""
    p, n = table.stages, table.layers
    ways = [[0] * (n + 1) for _ in range(p + 1)]
    ways[p][n] = 1
    for d in range(p - 1, -1, -1):
        for i in range(n):
            row = table.bound[d][i]
            ways[d][i] = sum(ways[d + 1][j + 1] for j in range(i, n) if row[j] < threshold)
    return ways[0][0]


def count_below_float(table: SegmentBounds, threshold: float) -> float:
    """count_below in floating point, a matrix product per stage: exact up to 2^53, so a
    comparison with a few thousand is; for the threshold search, which counts many times."""
    p, n = table.stages, table.layers
    ways = np.zeros(n + 1)
    ways[n] = 1.0
    for d in range(p - 1, -1, -1):
        now = np.zeros(n + 1)
        now[:n] = (table.matrix(d) < threshold).astype(float) @ ways[1:]
        ways = now
    return float(ways[0])


def partitions_below(table: SegmentBounds, threshold: float,
                     best: list[list[float]] | None = None) -> Iterator[tuple[int, ...]]:
    """Every partition (layers per stage) whose bound is below `threshold`."""
    best = best or suffix_minmax(table)
    p, n = table.stages, table.layers

    def walk(d: int, i: int, sizes: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
        if d == p:
            if i == n:
                yield sizes
            return
        row = table.bound[d][i]
        for j in range(i, n):
            if row[j] < threshold and best[d + 1][j + 1] < threshold:
                yield from walk(d + 1, j + 1, sizes + (j - i + 1,))

    if best[0][0] < threshold:
        yield from walk(0, 0, ())


def argmin_partition(table: SegmentBounds, best: list[list[float]] | None = None) -> tuple[int, ...] | None:
    """A partition with the least bound; among those, each stage as long as the others allow
    (ties go to the segment whose own bound is smallest)."""
    best = best or suffix_minmax(table)
    target = best[0][0]
    if not math.isfinite(target):
        return None
    sizes, i = [], 0
    for d in range(table.stages):
        row = table.bound[d][i]
        options = [j for j in range(i, table.layers)
                   if max(row[j], best[d + 1][j + 1]) <= target]
        j = min(options, key=lambda k: (best[d + 1][k + 1], row[k]))
        sizes.append(j - i + 1)
        i = j + 1
    return tuple(sizes)


def least_excess(table: SegmentBounds) -> tuple[float, int, tuple[int, ...]]:
    """(least over partitions of the largest memory shortfall, the device short by it, that
    partition) for a cap that no partition fits."""
    return _least_excess(table.excess, table.stages, table.layers)


def least_excess_of(model: LayeredModel) -> tuple[float, int, tuple[int, ...]]:
    """least_excess of the model's table from its memory sums alone (the same sums, so the
    same answer), without the bounds the table also computes: O(p n^2) additions."""
    n, p = model.num_layers, model.devices
    st, mb = model.prefix_sums("static"), model.prefix_sums("m_b")
    caps = device_caps(model) or (INF,) * p
    excess = []
    for d in range(p):
        rows = []
        for i in range(n):
            row = [0.0] * n
            if i >= d:
                for j in range(i, n - (p - 1 - d)):
                    need = (st[j + 1] - st[i]) + (mb[j + 1] - mb[i])
                    if not within_cap(need, caps[d]):
                        row[j] = need - caps[d]
            rows.append(row)
        excess.append(rows)
    return _least_excess(excess, p, n)


def _least_excess(excess, p: int, n: int) -> tuple[float, int, tuple[int, ...]]:
    best = [[INF] * (n + 1) for _ in range(p + 1)]
    choice = [[-1] * (n + 1) for _ in range(p + 1)]
    best[p][n] = 0.0
    for d in range(p - 1, -1, -1):
        for i in range(d, n):
            for j in range(i, n - (p - 1 - d)):
                value = max(excess[d][i][j], best[d + 1][j + 1])
                if value < best[d][i]:
                    best[d][i], choice[d][i] = value, j
    sizes, i, worst, device = [], 0, -1.0, 0
    for d in range(p):
        j = choice[d][i]
        if excess[d][i][j] > worst:
            worst, device = excess[d][i][j], d
        sizes.append(j - i + 1)
        i = j + 1
    return best[0][0], device, tuple(sizes)


# ----- without the table: bounds that hold over every partition, in O(p n) or a bisection -------

def _need(model: LayeredModel) -> tuple[np.ndarray, np.ndarray]:
    return np.array(model.prefix_sums("static")), np.array(model.prefix_sums("m_b"))


def _last_fitting(static: np.ndarray, held: np.ndarray, starts: np.ndarray,
                  limit: float) -> np.ndarray:
    """For each first layer i in `starts`, the last layer j such that layers i..j's static
    memory and activations ((static[j+1] - static[i]) + (held[j+1] - held[i]), as the table
    sums them) are at most `limit`; i - 1 where layer i alone is over it."""
    n = len(static) - 1
    total = static + held
    ends = np.searchsorted(total, total[starts] + limit, side="right") - 2
    ends = np.clip(ends, starts - 1, n - 1)

    def need(j):
        return (static[j + 1] - static[starts]) + (held[j + 1] - held[starts])
    for _ in range(n + 1):  # rounding can leave the sum of prefixes a step off: correct it
        over = (ends >= starts) & (need(np.maximum(ends, starts)) > limit)
        under = (ends + 1 < n) & (need(np.minimum(ends + 1, n - 1)) <= limit) & ~over
        if not over.any() and not under.any():
            break
        ends = ends - over + under
    return ends


def contiguous_fits(model: LayeredModel) -> bool:
    """Whether some contiguous partition fits the cap: every device's static memory and one
    micro-batch's activations within it (as the table's excess is 0). Stage d can start at
    layer i when stage d - 1 can start at some i' < i whose segment i'..i-1 fits, and the
    layers a stage can end at from a start form a run (memory only grows with the segment),
    so each stage's starts follow from the last's in O(n)."""
    caps = device_caps(model)
    if caps is None:
        return True
    n, p = model.num_layers, model.devices
    static, held = _need(model)
    reach = np.zeros(n + 1, dtype=bool)
    reach[0] = True
    for d in range(p):
        starts = np.flatnonzero(reach[:n])
        # the last layer stage d may end at leaves one for each stage after it
        ends = np.minimum(_last_fitting(static, held, starts, cap_limit(caps[d])), n - p + d)
        fits = ends >= starts
        marks = np.zeros(n + 2, dtype=int)
        np.add.at(marks, starts[fits] + 1, 1)
        np.add.at(marks, ends[fits] + 2, -1)
        reach = np.cumsum(marks)[:n + 1] > 0
    return bool(reach[n])


def least_stage_load(model: LayeredModel) -> float:
    """A lower bound on every contiguous schedule of every partition, without the table: the
    least over partitions of the largest stage load (m times its t_f + t_b + t_w; a device's
    span holds its stage's load)."""
    work = [f + b + w for f, b, w in zip(*(model.prefix_sums(k) for k in ("t_f", "t_b", "t_w")))]
    return model.microbatches * least_largest_part(work, model.devices)[0]


def least_largest_part(prefix: Sequence[float], parts: int) -> tuple[float, tuple[int, ...]]:
    """The least over partitions of n layers into `parts` contiguous non-empty parts of the
    largest part sum (prefix[j] - prefix[i] for layers i..j-1; `prefix` nondecreasing, n + 1
    entries), and a partition that reaches it. Bisection on that sum: a part may end at the last
    layer within it (the sums only grow), so the greedy test (each part takes the most layers
    it can, leaving one for each part after it) holds exactly from the least sum up, and the
    bisection ends on it, to the float."""
    n = len(prefix) - 1

    def greedy(limit: float) -> Optional[tuple[int, ...]]:
        sizes, i = [], 0
        for k in range(parts - 1):
            last = n - parts + k
            j = min(bisect_right(prefix, prefix[i] + limit) - 2, last)
            while j >= i and prefix[j + 1] - prefix[i] > limit:  # sums round unlike prefixes
                j -= 1
            while j < last and prefix[j + 2] - prefix[i] <= limit:
                j += 1
            if j < i:
                return None
            sizes.append(j - i + 1)
            i = j + 1
        return (*sizes, n - i) if prefix[n] - prefix[i] <= limit else None

    low, high = 0.0, float(prefix[n] - prefix[0])  # the greedy holds at the whole sum
    if greedy(low) is not None:
        return low, greedy(low)
    while True:
        middle = (low + high) / 2
        if not low < middle < high:  # adjacent floats: low fails, high holds
            return high, greedy(high)
        if greedy(middle) is None:
            low = middle
        else:
            high = middle
