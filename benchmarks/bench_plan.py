"""Partition planning benchmarks: what `zbopt plan` gains over the even and torchtitan splits,
with which certified gap, and whether it ever loses to trying every split with every heuristic.

Parts:
- presets:   the shipped tiny presets (llama-tiny, gpt2-tiny) profiled on this machine with
             `zbopt profile` (p=2, m=8), planned on p=2 uncapped and capped; every split is also
             tried with every registered heuristic (exhaustive)
- estimated: LLaMA-like models from `zbopt estimate`'s formulas: 32 blocks (Llama-3-8B shape)
             on p=8, m=32 and 80 blocks (Llama-2-70B shape) on p=16, m=64, vocabularies 32,000
             and 128,256, sequence 2048, micro-batch 1; caps from tight to loose (below)
- exhaustive: 8 blocks (Llama-3-8B shape) on p=4, m=8: plan against every split with every
             heuristic (84 splits)
- moe:       (only when named in --only) mixtures of experts estimated from their published
             configs (DeepSeek-V3 on p=16, m=32, Qwen3-30B-A3B on p=8, m=32), flash attention,
             expert parallelism; caps as below
- analogues: (only when named in --only) 8 blocks on p=4, m=6 at the tight and mid caps: CP-SAT
             on every split the plan's bound leaves open, to tell whether the plan's span or its
             bound is the weak side of the certified gap
- collisions: (only when named in --only) the collision relaxation against the other bounds and
             CP-SAT's best schedule on the split of least bound, where it applies: 8 blocks on p=4,
             m=8, and 32 blocks on p=8 at m=8, 12 and 32 with the caps of the m=32 rows
- windows:   (only when named in --only) the window relaxation (every pair of neighbouring
             devices) against the other bounds and CP-SAT's best schedule, on the splits and caps
             of the collisions part
- solve:     (only when named in --only) `solve()` on one split, as `zbopt solve` runs on a plan
             file: the bound and gap it certifies with the relaxations `plan` uses (one-device,
             collision) against the same run without them (the backend's own bound), on the
             split of least segment bound: 8 blocks on p=4, m=8 and 32 blocks on p=8, m=32, tight
             and mid caps
- vfloor, ifloor, dfloor: (only when named in --only) the V (interleaved, dualpipe)
             placement's bound over all partitions against the total load over p, on every
             estimated model and cap, and plan() with the contiguous and V (interleaved,
             dualpipe) placements with and without it on the p=8 models
- lfloor:    (only when named in --only) zbopt.plan.load_floor (the least largest device load over
             fitting partitions, CP-SAT) against the total load over p and the paired programmes
             on V and interleaved with 2, 3 and 4 chunks, every estimated model and cap
- guided:    (only when named in --only) plan() on V, interleaved and dualpipe alone with the
             guided walk of zbopt.plan.moves and without it (the peer), and on contiguous for
             scale, on the p=8 estimated models at the caps of --caps (tight and mid);
             guided16 the same on the p=16 models at their tight caps
- others:    (only when named in --only) plan() on contiguous alone and with others=True (the
             command line's default): what the short searches on the other placements find and
             what their share of the time costs the plan; p=8 at --caps, p=16 at tight
- headroom:  (only when named in --only) where the 128k tight row's gap sits: on its split of
             least bound, cpsat-lns for --analogue-limit seconds with the cap as it is (run first
             and last, as the peer) and with one device at a time given room for one more
             pending W (its cap raised by its m_w): a device whose extra room shortens the span
             well below the peer's is the one whose memory loop the schedule waits on
- solvers:   (only when named in --only) plan() with each solver of --solvers (cpsat and
             cpsat-lns by default) for its exact phase, --reps runs each, on the estimated models'
             tight and mid caps (--filter as for estimated): which solver plan should default to
- limits:    (only when named in --only) plan() on the p=8 estimated models' tight and mid caps
             (--filter as for estimated) at each time limit of --limits: how the certified gap
             of the joint problem falls with the time given, the span and the bound apart
- short:     (only when named in --only) plan() over every placement against contiguous alone
             (the peer) at the short limits of --short-limits (5, 10 and 20 s), --reps pairs
             each, on the p=8 estimated models' tight and mid caps and Llama-3-8B at sequence
             4096 under 80 GB (--filter as for estimated)
Caps: c_min is the least cap any split admits (static memory plus one micro-batch's activations,
from the segment DP), c_1f1b what 1F1B needs on the even split (static plus p-d micro-batches on
device d); "tight" = c_min + 25% of the difference, "mid" = c_min + 60%, "1f1b" = c_1f1b,
"none" = uncapped. All plans use 2 threads, the span objective and plan's default solver (auto:
cpsat-lns on splits of 750 passes or more, the estimated models' here; cpsat on the others),
except the solvers part.

Usage:
  python benchmarks/bench_plan.py [--only presets,estimated,exhaustive,analogues,collisions,windows,solve,
                                          solvers,vfloor,ifloor,dfloor,lfloor,guided,guided16,
                                          others,headroom,limits,short,p32,p32v,moe]
                                  [--time-limit S] [--caps tight,mid] [--solvers A,B] [--reps N] [--limits S,S,...]
                                  [--short-limits S,S,...]
                                  [--time-limit-p16 S] [--filter TEXT] [--analogue-limit S]
                                  [--out results/plan.md]
Sections of the parts not run are kept from the previous results/plan.md, and so are the
estimated rows of models --filter leaves out (--filter llama-32L: the p=8 rows only).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from unittest import mock

from zbopt.bounds import best_lower_bound, lower_bounds
from zbopt.compare import best_of
from zbopt.errors import ZboptError
from zbopt.estimate import Accelerator, DecoderShape, estimate_model
from zbopt.layers import LayeredModel, load_model
from zbopt.plan import even_split, plan
from zbopt.plan.bound import argmin_partition, least_excess, segment_bounds
from zbopt.plan.collision_bound import collision_bound
from zbopt.plan.device_bound import relaxation_bound
from zbopt.plan.memory_bound import pipeline_bound
from zbopt.plan.search import schedule_methods
from zbopt.plan.window_bound import best_window
from zbopt.registry import run
from zbopt.result import relative_gap
from zbopt.solvers.api import solve

ROOT = Path(__file__).resolve().parents[1]
LLAMA3_8B = dict(hidden=4096, heads=32, kv_heads=8, layers=32, ffn=14336)
LLAMA2_70B = dict(hidden=8192, heads=64, kv_heads=8, layers=80, ffn=28672)
HEADER = ("| model | p | m | cap | cap GB | even | torchtitan | plan | gain vs even | "
          "gain vs torchtitan | bound (all splits) | certified gap | status | time s | "
          "splits scheduled | solver runs | plan split | bound from |")


def estimated(shape: dict, vocab: int, devices: int, microbatches: int, blocks=None) -> LayeredModel:
    dims = {**shape, "layers": blocks or shape["layers"]}
    decoder = DecoderShape(**dims, vocab=vocab, gated_mlp=True, model_type="llama")
    return estimate_model(decoder, 1, 2048, Accelerator(), devices=devices,
                          microbatches=microbatches,
                          name=f"llama-{dims['layers']}L-v{vocab // 1000}k")


def cap_levels(model: LayeredModel) -> dict:
    """The caps of the module doc, in the model's memory unit."""
    short, _, _ = least_excess(segment_bounds(model.with_settings(memory_cap=1.0)))
    c_min = short + 1.0
    inst = model.with_settings(memory_cap=None).instance(even_split(model))
    p = model.devices
    c_1f1b = max(inst.static_memory[d] + (p - d) * inst.m_b[d] for d in range(p))
    return {"tight": c_min + 0.25 * (c_1f1b - c_min), "mid": c_min + 0.6 * (c_1f1b - c_min),
            "1f1b": c_1f1b, "none": None}


def exhaustive(model: LayeredModel) -> tuple[float, int]:
    """(best span over every split with every registered heuristic, splits that fit)."""
    n, parts = model.num_layers, model.num_parts
    best, fitting = float("inf"), 0
    for cuts in itertools.combinations(range(1, n), parts - 1):
        bounds = (0, *cuts, n)
        sizes = tuple(bounds[k + 1] - bounds[k] for k in range(parts))
        try:
            instance = model.instance(sizes)
        except ZboptError:
            continue
        result = best_of(run(name, instance) for name in schedule_methods(model.placement))
        if result is not None:
            fitting += 1
            best = min(best, result.span)
    return best, fitting


def _fmt(x) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.3g}"


def _sizes(sizes) -> str:
    return "-".join(str(n) for n in sizes)


def _bound_from(result) -> str:
    """Which split's proven bound is the bound over all splits (the one to prove higher or to
    schedule shorter to close the gap)."""
    if result.result.status == "optimal":
        return "-"
    if result.bound_split is None:
        return "unlisted splits"
    split = "plan split" if tuple(result.bound_split) == tuple(result.split.sizes) \
        else _sizes(result.bound_split)
    return f"{split} ({result.bound_split_proof})" if result.bound_split_proof else split


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def plan_row(label: str, model: LayeredModel, cap_name: str, cap, time_limit: float) -> tuple[str, dict]:
    capped = model.with_settings(memory_cap=cap)
    print(f"[bench_plan] {label} cap {cap_name} ...", file=sys.stderr, flush=True)
    began = time.perf_counter()
    result = plan(capped, time_limit=time_limit)
    wall = time.perf_counter() - began
    r = result.result
    gain = result.gain()
    base = {k: (f"{_fmt(s.span)} ({s.result.method})" if s is not None and s.result else "nothing fits")
            for k, s in result.baselines.items()}
    row = (f"| {label} | {model.devices} | {model.microbatches} | {cap_name} | "
           f"{'-' if cap is None else f'{cap / 1e9:.1f}'} | {base['even']} | {base['torchtitan']} | "
           f"{_fmt(r.span)} ({r.method}) | {_pct(gain['even'])} | {_pct(gain['torchtitan'])} | "
           f"{_fmt(r.lower_bound)} | {_pct(r.gap)} | {r.status} | {wall:.1f} | "
           f"{result.partitions_scheduled} | {result.solver_runs} | {_sizes(result.split.sizes)} | "
           f"{_bound_from(result)} |")
    print(row, file=sys.stderr, flush=True)
    return row, {"gap": r.gap, "gain": gain, "wall": wall, "span": r.span, "sizes": result.split.sizes}


def part_estimated(args) -> list[str]:
    lines = ["Models from `zbopt estimate`'s formulas (sequence 2048, micro-batch 1, A100 figures: "
             "312 TFLOP/s at 50%, 100 GB/s links; times in us). Spans in us. *bound from*: the split "
             "whose proven bound is the bound over all splits (the plan's own or another) and, in "
             "brackets, the bound that proved it.", "", HEADER,
             _rule(HEADER)]
    gaps, gains_even, gains_tt, walls = [], [], [], []
    kept = _previous_rows(args.previous.get("estimated", ""))
    carried = []
    for shape, p, m, limit in ((LLAMA3_8B, 8, 32, args.time_limit),
                               (LLAMA2_70B, 16, 64, args.time_limit_p16)):
        for vocab in (32000, 128256):
            model = estimated(shape, vocab, p, m)
            if args.filter and args.filter not in model.name:
                # keep the rows of the earlier run for the models this run leaves out
                for row in kept.get(model.name, []):
                    missing = HEADER.count("|") - row.count("|")
                    row += " - |" * max(0, missing)  # columns added since that run
                    lines.append(row)
                    carried.append(model.name)
                    cells = [c.strip() for c in row.strip("|").split("|")]
                    gains_even.append(_unpct(cells[8]))
                    gains_tt.append(_unpct(cells[9]))
                    if p == 8:
                        gaps.append(_unpct(cells[11]))
                        walls.append(float(cells[13]))
                continue
            for cap_name, cap in cap_levels(model).items():
                row, data = plan_row(model.name, model, cap_name, cap, limit)
                lines.append(row)
                if p == 8:
                    gaps.append(data["gap"])
                    walls.append(data["wall"])
                gains_even.append(data["gain"]["even"] or 0.0)
                gains_tt.append(data["gain"]["torchtitan"] or 0.0)
    if carried:
        # a model the earlier section already carried keeps the stamp of the run it came from
        earlier = args.previous.get("estimated", "")
        stamps = {}
        for names, stamp in re.findall(r"Rows of (.*?) are kept from the earlier run \(([^)]*)\)",
                                       earlier):
            stamps.update({name: stamp for name in names.split(", ")})
        by_stamp: dict[str, list[str]] = {}
        for name in dict.fromkeys(carried):
            stamp = stamps.get(name, args.previous_stamp.get("estimated", "see git history"))
            by_stamp.setdefault(stamp, []).append(name)
        for stamp, names in by_stamp.items():
            lines += ["", f"Rows of {', '.join(names)} are kept from the earlier run ({stamp}): "
                          f"this run's --filter left them out."]
    if gaps:
        lines += ["", f"p=8, 32 blocks, m=32: certified gap median {_pct(statistics.median(gaps))}, "
                      f"max {_pct(max(gaps))}; {sum(g <= 0.01 for g in gaps)} of {len(gaps)} plans "
                      f"within 1%; wall time median {statistics.median(walls):.1f} s, max "
                      f"{max(walls):.1f} s."]
    if gains_even:
        lines += [f"All estimated rows: gain over the even split median "
                  f"{_pct(statistics.median(gains_even))} (max {_pct(max(gains_even))}); over "
                  f"torchtitan's rule median {_pct(statistics.median(gains_tt))} (max "
                  f"{_pct(max(gains_tt))})."]
    return lines


def _previous_rows(section: str) -> dict[str, list[str]]:
    """Table rows of an earlier estimated section, by model name."""
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        if line.startswith("| llama-"):
            rows.setdefault(line.split("|")[1].strip(), []).append(line)
    return rows


def _unpct(cell: str) -> float:
    return float(cell.rstrip("%")) / 100 if cell.endswith("%") else 0.0


def _rule(header: str) -> str:
    return "|" + "---|" * (header.count("|") - 1)


def part_exhaustive(args) -> list[str]:
    lines = ["8 blocks (Llama-3-8B shape), p=4, m=8: `plan` against trying every split (84) with "
             "every registered heuristic of the placement.", "",
             "| model | cap | exhaustive best | splits that fit | exhaustive time s | plan | plan "
             "time s | plan <= exhaustive | certified gap | status |", _rule("|" * 11)]
    for vocab in (32000, 128256):
        model = estimated(LLAMA3_8B, vocab, 4, 8, blocks=8)
        for cap_name, cap in cap_levels(model).items():
            capped = model.with_settings(memory_cap=cap)
            print(f"[bench_plan] exhaustive {model.name} cap {cap_name}", file=sys.stderr, flush=True)
            began = time.perf_counter()
            best, fitting = exhaustive(capped)
            spent = time.perf_counter() - began
            began = time.perf_counter()
            result = plan(capped, time_limit=args.time_limit)
            wall = time.perf_counter() - began
            r = result.result
            lines.append(f"| {model.name} | {cap_name} | {_fmt(best)} | {fitting} | {spent:.1f} | "
                         f"{_fmt(r.span)} ({r.method}) | {wall:.1f} | "
                         f"{'yes' if r.span <= best + 1e-6 else 'NO'} | {_pct(r.gap)} | {r.status} |")
            print(lines[-1], file=sys.stderr, flush=True)
    return lines


def part_presets(args) -> list[str]:
    lines = ["The shipped presets profiled here (`zbopt profile --preset NAME --devices 2 "
             "--microbatches 8`, CPU, float32, one thread), planned on p=2; exhaustive = every split "
             "with every heuristic. Times in the profile's unit.", "", HEADER, _rule(HEADER)]
    extra = ["", "| preset | cap | exhaustive best | plan <= exhaustive |", "|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for preset in ("llama-tiny", "gpt2-tiny"):
            out = Path(tmp) / f"{preset}.toml"
            cmd = [sys.executable, "-m", "zbopt", "profile", "--preset", preset, "--devices", "2",
                   "--microbatches", "8", "--out", str(out)]
            print(f"[bench_plan] {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                lines.append(f"| {preset} | profile failed: {done.stderr.strip()[:200]} |")
                continue
            model = load_model(out)
            for cap_name, cap in cap_levels(model).items():
                row, data = plan_row(preset, model, cap_name, cap, args.time_limit)
                lines.append(row)
                best, _ = exhaustive(model.with_settings(memory_cap=cap))
                extra.append(f"| {preset} | {cap_name} | {_fmt(best)} | "
                             f"{'yes' if data['span'] <= best + 1e-6 else 'NO'} |")
    return lines + extra


def part_analogues(args) -> list[str]:
    """Which side of the certified gap is weak: on small analogues (8 blocks, p=4, m=6) every
    split whose bound lies below the plan's span is solved by CP-SAT, and the least proven bound
    and the best span over all splits are set against the plan's."""
    limit = args.analogue_limit
    lines = [f"8 blocks (Llama-3-8B shape), p=4, m=6, tight and mid caps: `plan` (30 s, 1 thread) "
             f"against CP-SAT on every split whose bound lies below the plan's span ({limit:g} s, "
             f"1 thread, warm-started from the registered methods). If CP-SAT proves every such "
             f"split, its least optimum is the optimum over all splits: the plan's span minus it "
             f"is the span side of the gap, it minus the plan's bound the bound side.", "",
             "| model | cap | plan span | plan bound | plan gap | splits solved | proven optimal | "
             "best span over all splits | least proven bound over all splits | span side | "
             "bound side |", _rule("|" * 12)]
    for vocab in (32000, 128256):
        model = estimated(LLAMA3_8B, vocab, 4, 6, blocks=8)
        for cap_name in ("tight", "mid"):
            capped = model.with_settings(memory_cap=cap_levels(model)[cap_name])
            print(f"[bench_plan] analogue {model.name} cap {cap_name}", file=sys.stderr, flush=True)
            result = plan(capped, time_limit=30, threads=1)
            r = result.result
            table = segment_bounds(capped)
            best, low, solved, proven = r.span, math.inf, 0, 0
            for cuts in itertools.combinations(range(1, capped.num_layers), 3):
                edges = (0, *cuts, capped.num_layers)
                sizes = tuple(edges[k + 1] - edges[k] for k in range(4))
                bound = table.full_bound(sizes)
                if not math.isfinite(bound):
                    continue  # the cap cannot hold this split
                if bound >= r.span * (1 - 1e-9):
                    low = min(low, bound)
                    continue
                answer = solve(capped.instance(sizes), time_limit=limit, threads=1)
                solved += 1
                proven += answer.status == "optimal"
                best, low = min(best, answer.span), min(low, answer.lower_bound)
            low = min(low, best)
            lines.append(f"| {model.name} | {cap_name} | {_fmt(r.span)} | {_fmt(r.lower_bound)} | "
                         f"{_pct(r.gap)} | {solved} | {proven} | {_fmt(best)} | {_fmt(low)} | "
                         f"{_pct((r.span - best) / r.span)} | "
                         f"{_pct((best - r.lower_bound) / r.span) if proven == solved else 'unknown'} |")
            print(lines[-1], file=sys.stderr, flush=True)
    return lines


# (shape, p, m, blocks, m of the caps): the splits of the collisions and windows parts
RELAXATION_CASES = [(LLAMA3_8B, 4, 8, 8, None), (LLAMA3_8B, 8, 8, None, 32),
                    (LLAMA3_8B, 8, 12, None, 32), (LLAMA3_8B, 8, 32, None, 32)]


def _least_bound_splits(part: str):
    """(model, p, m, cap name, split, instance) of the split of least segment bound of each
    model and cap of RELAXATION_CASES; the 32-block models keep the caps of their m=32 rows."""
    for shape, p, m, blocks, cap_m in RELAXATION_CASES:
        for vocab in (32000, 128256):
            model = estimated(shape, vocab, p, m, blocks=blocks)
            levels = cap_levels(estimated(shape, vocab, p, cap_m, blocks=blocks) if cap_m else model)
            for cap_name in ("tight", "mid"):
                capped = model.with_settings(memory_cap=levels[cap_name])
                print(f"[bench_plan] {part} {model.name} m={m} cap {cap_name}",
                      file=sys.stderr, flush=True)
                sizes = argmin_partition(segment_bounds(capped))
                yield model, p, m, cap_name, sizes, capped.instance(sizes)


def _gap_summary(before: list, after: list, what: str) -> list[str]:
    return ["", f"Gap on these splits: median {_pct(statistics.median(before))} before, "
                f"{_pct(statistics.median(after))} with {what}; "
                f"{sum(a < b - 1e-9 for a, b in zip(after, before))} of "
                f"{len(after)} splits' gaps shrink."]


def part_collisions(args) -> list[str]:
    """What the collision relaxation (zbopt.plan.collision_bound) adds where it applies: on the
    split of least segment bound of each model and cap (the split that decides a plan's certified
    gap), the other bounds, the collision bound, and the best schedule CP-SAT finds in its time
    (warm-started from the registered methods), at the micro-batch counts the relaxation reaches;
    the 32-block models keep the caps of their m=32 rows."""
    limit = args.analogue_limit
    lines = [f"The split of least segment bound per model and cap; `others` = the largest of "
             f"zbopt.bounds, the memory-aware coupled bound and the one-device relaxations "
             f"(10 s); `collision` = zbopt.plan.collision_bound (30 s); `best span` = CP-SAT's "
             f"best schedule in {limit:g} s (2 threads, warm-started), its own proven bound "
             f"included in `others` when higher. Gaps are (best span - bound) / best span.", "",
             "| model | p | m | cap | split | others | collision | best span | gap before | "
             "gap with collision | collision s | time s |", _rule("|" * 13)]
    before_gaps, after_gaps = [], []
    for model, p, m, cap_name, sizes, instance in _least_bound_splits("collisions"):
        began = time.perf_counter()
        others = max(pipeline_bound(instance), best_lower_bound(instance)[1],
                     relaxation_bound(instance, time.perf_counter() + 10))
        result = solve(instance, time_limit=limit, threads=2)
        others = max(others, result.lower_bound or 0.0)
        collided = time.perf_counter()
        collision = collision_bound(instance, collided + 30, result.span)
        wall = time.perf_counter() - began
        collided = time.perf_counter() - collided
        before = max(0.0, (result.span - others) / result.span)
        after = max(0.0, (result.span - max(others, collision)) / result.span)
        before_gaps.append(before)
        after_gaps.append(after)
        lines.append(f"| {model.name} | {p} | {m} | {cap_name} | {_sizes(sizes)} | "
                     f"{_fmt(others)} | {_fmt(collision) if collision else '-'} | "
                     f"{_fmt(result.span)} | {_pct(before)} | {_pct(after)} | {collided:.1f} | "
                     f"{wall:.0f} |")
        print(lines[-1], file=sys.stderr, flush=True)
    return lines + _gap_summary(before_gaps, after_gaps, "the collision bound")


def part_windows(args) -> list[str]:
    """What the window relaxation (zbopt.plan.window_bound, every pair of neighbouring devices)
    adds to the one-device and collision relaxations, on the splits and caps of the collisions
    part: each bound with its time, and the best schedule CP-SAT finds in --analogue-limit
    seconds (warm-started, with only its own bound, so that no relaxation enters the span
    column's run)."""
    limit = args.analogue_limit
    lines = [f"The split of least segment bound per model and cap (as in the collisions part); "
             f"`others` = the largest of zbopt.bounds, the memory-aware coupled bound, the "
             f"one-device relaxations (10 s) and the collision relaxation (30 s); `window` = "
             f"zbopt.plan.window_bound (every pair of neighbouring devices holding at most "
             f"four activations, at most 2 s each and 30 s in all) and the pair that gave it; "
             f"`best span` = CP-SAT's best schedule in {limit:g} s (2 threads, warm-started). "
             f"Gaps are (best span - bound) / best span.", "",
             "| model | p | m | cap | split | others | window | pair | best span | gap before | "
             "gap with window | window s |", _rule("|" * 13)]
    before_gaps, after_gaps = [], []
    for model, p, m, cap_name, sizes, instance in _least_bound_splits("windows"):
        result = solve(instance, time_limit=limit, threads=2, known_bound=("none", 0.0))
        others = max(pipeline_bound(instance), best_lower_bound(instance)[1],
                     relaxation_bound(instance, time.perf_counter() + 10),
                     collision_bound(instance, time.perf_counter() + 30, result.span),
                     result.lower_bound or 0.0)
        began = time.perf_counter()
        window, which = best_window(instance, began + 30)
        seconds = time.perf_counter() - began
        pair = f"{which[0]}-{which[0] + which[1] - 1}" if which else "-"
        before = max(0.0, (result.span - others) / result.span)
        after = max(0.0, (result.span - max(others, window)) / result.span)
        before_gaps.append(before)
        after_gaps.append(after)
        lines.append(f"| {model.name} | {p} | {m} | {cap_name} | {_sizes(sizes)} | "
                     f"{_fmt(others)} | {_fmt(window) if window else '-'} | {pair} | "
                     f"{_fmt(result.span)} | {_pct(before)} | {_pct(after)} | {seconds:.1f} |")
        print(lines[-1], file=sys.stderr, flush=True)
    return lines + _gap_summary(before_gaps, after_gaps, "the window relaxation")


def part_solve(args) -> list[str]:
    """solve() on the split of least segment bound, with its contiguous relaxations and without
    them (known_bound=("none", 0) skips them), the same limit and threads each."""
    limit = args.solve_limit
    lines = [f"solve() on the split of least segment bound, {limit:g} s and 2 threads each: "
             f"`per device` = zbopt.bounds without the coupled bound, `coupled` = its "
             f"memory_pipeline bound; `with` = solve() as it is (the one-device, window and "
             f"collision relaxations for up to 15% of the limit, then CP-SAT), `without` = the same call "
             f"told a bound of 0 (the relaxations skipped: zbopt.bounds and CP-SAT's own "
             f"bound). Gaps are "
             f"(span - bound) / span.", "",
             "| model | p | m | cap | split | per device | coupled | with: bound | from | span | "
             "gap | without: bound | from | span | gap |", _rule("|" * 16)]
    with_gaps, without_gaps = [], []
    for blocks, p in ((8, 4), (None, 8)):
        for vocab in (32000, 128256):
            m = 8 if p == 4 else 32
            model = estimated(LLAMA3_8B, vocab, p, m, blocks=blocks)
            levels = cap_levels(model)
            for cap_name in ("tight", "mid"):
                capped = model.with_settings(memory_cap=levels[cap_name])
                print(f"[bench_plan] solve {model.name} cap {cap_name}", file=sys.stderr, flush=True)
                sizes = argmin_partition(segment_bounds(capped))
                instance = capped.instance(sizes)
                values = lower_bounds(instance)
                device = max(v for k, v in values.items() if k != "memory_pipeline")
                coupled = values.get("memory_pipeline", 0.0)
                cells = []
                for known in (None, ("none", 0.0)):
                    r = solve(instance, time_limit=limit, threads=2, known_bound=known)
                    (with_gaps if known is None else without_gaps).append(r.gap)
                    cells.append(f"{_fmt(r.lower_bound)} | {r.bound_name} | {_fmt(r.span)} | "
                                 f"{_pct(r.gap)}")
                lines.append(f"| {model.name} | {p} | {m} | {cap_name} | {_sizes(sizes)} | "
                             f"{_fmt(device)} | {_fmt(coupled) if coupled else '-'} | "
                             f"{cells[0]} | {cells[1]} |")
                print(lines[-1], file=sys.stderr, flush=True)
    lines += ["", f"Certified gap median {_pct(statistics.median(with_gaps))} with the relaxations, "
                  f"{_pct(statistics.median(without_gaps))} without; "
                  f"{sum(a < b - 1e-9 for a, b in zip(with_gaps, without_gaps))} of "
                  f"{len(with_gaps)} smaller with them."]
    return lines


def part_solvers(args) -> list[str]:
    """plan() with each solver of --solvers on the capped estimated rows, --reps runs each."""
    solvers = [x for x in args.solvers.split(",") if x]
    lines = [f"`plan()` with each solver for its exact phase (the rest of the search the same), "
             f"{args.reps} run(s) each, the solvers taking turns within each repetition, on the "
             f"estimated models' tight and mid caps (the rows where the solver runs). Spans and "
             f"gaps are medians over the runs; `span / first` is the median span over the median "
             f"span of the first solver ({solvers[0]}) on the same row.", "",
             "| model | p | m | cap | solver | spans | median span | median gap | span / first |",
             _rule("|" * 10)]
    ratios: dict[str, list[float]] = {name: [] for name in solvers}
    for shape, p, m, limit in ((LLAMA3_8B, 8, 32, args.time_limit),
                               (LLAMA2_70B, 16, 64, args.time_limit_p16)):
        for vocab in (32000, 128256):
            model = estimated(shape, vocab, p, m)
            if args.filter and args.filter not in model.name:
                continue
            levels = cap_levels(model)
            for cap_name in ("tight", "mid"):
                capped = model.with_settings(memory_cap=levels[cap_name])
                spans: dict[str, list[float]] = {name: [] for name in solvers}
                gaps: dict[str, list[float]] = {name: [] for name in solvers}
                for rep in range(args.reps):
                    for name in solvers:
                        print(f"[bench_plan] solvers {model.name} cap {cap_name} {name} run "
                              f"{rep + 1}/{args.reps}", file=sys.stderr, flush=True)
                        r = plan(capped, time_limit=limit, solver=name).result
                        spans[name].append(r.span)
                        gaps[name].append(r.gap)
                first = statistics.median(spans[solvers[0]])
                for name in solvers:
                    ratio = statistics.median(spans[name]) / first
                    ratios[name].append(ratio)
                    lines.append(f"| {model.name} | {p} | {m} | {cap_name} | {name} | "
                                 f"{', '.join(_fmt(x) for x in spans[name])} | "
                                 f"{_fmt(statistics.median(spans[name]))} | "
                                 f"{_pct(statistics.median(gaps[name]))} | {ratio:.4f} |")
                    print(lines[-1], file=sys.stderr, flush=True)
    if ratios[solvers[0]]:
        lines += [""] + [f"{name}: span / {solvers[0]} median {statistics.median(r):.4f}, min "
                         f"{min(r):.4f}, max {max(r):.4f} over {len(r)} rows."
                         for name, r in ratios.items() if name != solvers[0]]
    return lines


def part_limits(args) -> list[str]:
    """plan() on the p=8 estimated models' tight and mid caps at each time limit of --limits."""
    limits = args.limits
    lines = [f"`plan()` on the p=8 estimated models (32 blocks, m=32) at each time limit, one run "
             f"each, 2 threads, its default solver. Each run is separate: a longer run does not "
             f"start from a shorter one's result, so spans and bounds need not fall or rise "
             f"monotonically. `span / first` is the span over the span at the first limit "
             f"({limits[0]:g} s) on the same row, `bound / first` the same for the bound over all "
             f"splits; the gap is (span - bound) / span.", "",
             "| model | cap | limit s | wall s | span | span / first | bound (all splits) | "
             "bound / first | certified gap | status | split |", _rule("|" * 12)]
    for vocab in (32000, 128256):
        model = estimated(LLAMA3_8B, vocab, 8, 32)
        if args.filter and args.filter not in model.name:
            continue
        levels = cap_levels(model)
        for cap_name in ("tight", "mid"):
            capped = model.with_settings(memory_cap=levels[cap_name])
            first = None
            for limit in limits:
                print(f"[bench_plan] limits {model.name} cap {cap_name} {limit:g} s",
                      file=sys.stderr, flush=True)
                began = time.perf_counter()
                done = plan(capped, time_limit=limit)
                wall = time.perf_counter() - began
                r = done.result
                first = first or (r.span, r.lower_bound)
                lines.append(f"| {model.name} | {cap_name} | {limit:g} | {wall:.1f} | "
                             f"{_fmt(r.span)} | {r.span / first[0]:.4f} | {_fmt(r.lower_bound)} | "
                             f"{r.lower_bound / first[1]:.4f} | "
                             f"{_pct(r.gap)} | {r.status} | "
                             f"{_sizes(done.split.sizes)} |")
                print(lines[-1], file=sys.stderr, flush=True)
    return lines


def part_headroom(args) -> list[str]:
    """cpsat-lns on the 128k tight row's split of least bound, its cap as is and each device's
    raised by that device's m_w (room for one more pending W)."""
    limit = args.analogue_limit
    model = estimated(LLAMA3_8B, 128256, 8, 32)
    capped = model.with_settings(memory_cap=cap_levels(model)["tight"])
    sizes = argmin_partition(segment_bounds(capped))
    instance = capped.instance(sizes)
    window, pair = best_window(instance, time.perf_counter() + 60)
    where = f"window of devices {pair[0]}-{pair[0] + pair[1] - 1}" if pair else "zbopt.bounds"
    bound = max(best_lower_bound(instance)[1], window)
    lines = [f"{model.name}, p=8, m=32, tight cap, split {_sizes(sizes)} (the split of least "
             f"bound): cpsat-lns, {limit:g} s and 2 threads a run, warm-started from the "
             f"registered heuristics, relaxations skipped. `as is` runs first and last (the peer); "
             f"`+ m_w on device d` gives device d room for one more pending W. The split's "
             f"bound {_fmt(bound)} ({where}) is a bound of the problem as is only: "
             f"raising a cap relaxes the problem, so its column says how far the bound is from "
             f"what a little more memory on one device allows.", "",
             "| run | span | span / as is (first) | (span - bound) / span |", _rule("|" * 5)]
    runs = [("as is", None)] + [(f"+ m_w on device {d}", d) for d in range(instance.devices)] \
        + [("as is (again)", None)]
    first = None
    spans = {}
    for label, d in runs:
        cap = list(instance.cap)
        if d is not None:
            cap[d] += instance.m_w[d]
        relaxed = instance.with_cap(cap)
        print(f"[bench_plan] headroom {label}", file=sys.stderr, flush=True)
        r = solve(relaxed, solver="cpsat-lns", time_limit=limit, threads=2,
                  known_bound=("none", 0.0))
        first = first or r.span
        spans[label] = r.span
        lines.append(f"| {label} | {_fmt(r.span)} | "
                     f"{r.span / first:.4f} | {_pct(relative_gap(r.span, bound))} |")
        print(lines[-1], file=sys.stderr, flush=True)
    peer = statistics.median([spans["as is"], spans["as is (again)"]])
    best = min((s, k) for k, s in spans.items() if k.startswith("+"))
    lines += ["", f"Shortest with one device's extra room: {best[1]}, {_fmt(best[0])}, "
                  f"{best[0] / peer:.4f} x the median of the two runs as is ({_fmt(peer)})."]
    return lines


def part_vfloor(args) -> list[str]:
    """The V placement's bound over all partitions against the total load over p it replaced."""
    return _part_paired(args, "V", "v", "v_floor")


def part_ifloor(args) -> list[str]:
    """The same for the interleaved placement (two chunks)."""
    return _part_paired(args, "interleaved (two chunks)", "interleaved", "interleaved_floor")


def part_dfloor(args) -> list[str]:
    """The same for the dualpipe placement."""
    return _part_paired(args, "dualpipe", "dualpipe", "dualpipe_floor")


def _estimated_caps(args):
    """(model, p, m, cap name, the model at that cap) for every estimated model --filter keeps
    and each of its caps from tight to none."""
    for shape, p, m in ((LLAMA3_8B, 8, 32), (LLAMA2_70B, 16, 64)):
        for vocab in (32000, 128256):
            model = estimated(shape, vocab, p, m)
            if args.filter and args.filter not in model.name:
                continue
            levels = cap_levels(model)
            for cap_name in ("tight", "mid", "1f1b", "none"):
                yield model, p, m, cap_name, model.with_settings(memory_cap=levels[cap_name])


def _part_paired(args, label: str, placement: str, name: str) -> list[str]:
    """A placement's bound over all partitions (zbopt.plan.paired_bound) against the total load
    over p it replaced, and plan(placements=contiguous,<placement>) with each: p=8 models."""
    import zbopt.plan.paired_bound as paired_module
    import zbopt.plan.search as search_module
    floor_of = getattr(paired_module, name)
    lines = [f"The {label} placement's bound over all partitions: `{name}` (the least, over "
             f"partitions that fit, of the largest device bound from its load, the memory "
             f"throughput of each of its two stages and their memory area together) against the "
             f"total load over p, on every estimated "
             f"model and cap (- where the programme is too large and the plan keeps the total "
             f"load over p); and on the p=8 models `plan(placements=(contiguous, {placement}))` "
             f"for {args.time_limit:g} s twice, one after the other: with `{name}` and with it "
             f"switched off (the peer, bound = the total load over p as before). The bound over "
             f"all partitions is the least of the two placements'.", "",
             f"| model | p | m | cap | total load / p | {name} | {name} s | ratio | "
             "plan span (peer) | plan bound (peer) | gap (peer) | plan span | plan bound | gap |",
             _rule("|" * 15)]
    ratios, gaps = [], []
    for model, p, m, cap_name, capped in _estimated_caps(args):
        placed = capped.with_settings(placement=placement)
        began = time.perf_counter()
        floor = floor_of(placed)
        seconds = time.perf_counter() - began
        total = search_module._total_load(placed) / p
        if floor is not None and math.isfinite(floor):
            ratios.append(floor / total)
        cells = ["-"] * 6
        if p == 8:
            runs = []
            for use in (False, True):
                print(f"[bench_plan] {name} {model.name} cap {cap_name} "
                      f"{'with' if use else 'without'} it", file=sys.stderr, flush=True)
                # plan() looks its floors up in PAIRED; the peer switches this one off, and
                # load_floor, which stands in where a paired programme gives nothing
                off = {} if use else {placement: lambda model, budget=None: None}
                load = search_module.load_floor if use else (lambda model, seconds: None)
                with mock.patch.dict(search_module.PAIRED, off), \
                        mock.patch.object(search_module, "load_floor", load):
                    r = plan(capped, placements=("contiguous", placement),
                             time_limit=args.time_limit).result
                runs += [_fmt(r.span), _fmt(r.lower_bound), _pct(r.gap)]
                gaps.append((use, r.gap))
            cells = runs
        fits = floor is None or math.isfinite(floor)
        ratio = f"{floor / total:.3f}" if floor is not None and fits else "-"
        lines.append(f"| {model.name} | {p} | {m} | {cap_name} | {_fmt(total)} | "
                     f"{_fmt(floor) if fits else 'no split fits'} | {seconds:.2f} | "
                     f"{ratio} | " + " | ".join(cells) + " |")
        print(lines[-1], file=sys.stderr, flush=True)
    if ratios:
        lines += ["", f"{name} / (total load / p): median {statistics.median(ratios):.3f}, "
                      f"min {min(ratios):.3f}, max {max(ratios):.3f} over the {len(ratios)} rows where "
                      f"it ran and a split fits."]
    peer = [g for use, g in gaps if not use]
    mine = [g for use, g in gaps if use]
    if mine:
        lines.append(f"plan with contiguous and {placement}, certified gap: median "
                     f"{_pct(statistics.median(mine))} (max {_pct(max(mine))}) with {name}, median "
                     f"{_pct(statistics.median(peer))} (max {_pct(max(peer))}) without, over "
                     f"{len(mine)} rows.")
    return lines


def part_guided(args) -> list[str]:
    """plan() on V, interleaved and dualpipe with the guided walk (zbopt.plan.moves) and
    without it, on the p=8 estimated models at the caps of --caps, and plan() on contiguous for
    scale."""
    return _guided(args, 8, args.caps.split(","), args.time_limit)


def part_guided16(args) -> list[str]:
    """The same on the p=16 estimated models at their tight caps (--time-limit-p16 each), with
    a second peer: the guided walk weighing every move (no shortlist, zbopt.plan.moves.MANY)."""
    return _guided(args, 16, ["tight"], args.time_limit_p16, every_move=True)


def _guided(args, devices: int, caps: list[str], limit: float,
            every_move: bool = False) -> list[str]:
    import zbopt.plan.moves as moves_module
    import zbopt.plan.search as search_module
    placements = ("v", "interleaved", "dualpipe")
    old_walk = [mock.patch.object(search_module._Search, "guided_starts", lambda self, *a: []),
                mock.patch.object(search_module._Search, "explore", lambda self, *a: None),
                mock.patch.object(moves_module, "transfers", moves_module.adjacent)]
    runs = [("peer", old_walk)]
    if every_move:
        runs.append(("every move", [mock.patch.object(moves_module, "MANY", math.inf)]))
    runs.append(("guided", []))
    names = [name for name, _ in runs]
    lines = [f"`plan(placements=(P,))` for {limit:g} s on each placement P without a "
             f"segment table, {len(runs)} times one after the other: without the guide (the "
             f"peer: no guided starts, no exploration, and the local search moves one boundary "
             f"by one layer, as before zbopt.plan.moves)"
             + (", with the guide weighing every move (every move: past zbopt.plan.moves.MANY "
                "moves, no shortlist)" if every_move else "")
             + " and with it (starts where the cheap bound leads, moves of one layer between "
             "any two stages, then the splits in the order of that bound; past MANY moves a "
             "split, the shortlist the per-split paired bound ranks first); `contiguous` is "
             "`plan` on the contiguous placement in the same run, for scale. Spans in us; gain "
             "= (peer - guided) / peer" + ("; vs every = (every move - guided) / every move"
                                           if every_move else "") + ".", "",
             "| model | cap | contiguous | " + " | ".join(
                 " | ".join(f"{pl} ({name})" if name != "guided" else pl for name in names)
                 + " | gain" + (" | vs every" if every_move else "") for pl in placements) + " |",
             _rule("|" * (3 + (len(runs) + 1 + every_move) * len(placements) + 1))]
    gains = {pl: [] for pl in placements}
    versus = {pl: [] for pl in placements}
    for model, p, _, cap_name, capped in _estimated_caps(args):
        if p != devices or cap_name not in caps:
            continue
        print(f"[bench_plan] guided {model.name} {cap_name} contiguous", file=sys.stderr,
              flush=True)
        cells = [_fmt(plan(capped, time_limit=limit).result.span)]
        for placement in placements:
            spans = []
            for name, patches in runs:
                print(f"[bench_plan] guided {model.name} {cap_name} {placement} {name}",
                      file=sys.stderr, flush=True)
                with contextlib.ExitStack() as stack:
                    for patch in patches:
                        stack.enter_context(patch)
                    try:
                        spans.append(plan(capped, placements=(placement,),
                                          time_limit=limit).result.span)
                    except ZboptError as err:
                        print(f"[bench_plan]   {err}", file=sys.stderr, flush=True)
                        spans.append(math.inf)
            mine = spans[-1]
            cells += [_fmt(x) if math.isfinite(x) else "none fits" for x in spans]
            for before, store in ((spans[0], gains), (spans[1], versus))[:1 + every_move]:
                value = (before - mine) / before \
                    if math.isfinite(before) and math.isfinite(mine) else None
                if value is not None:
                    store[placement].append(value)
                cells.append(_pct(value) if value is not None else "-")
        lines.append(f"| {model.name} | {cap_name} | " + " | ".join(cells) + " |")
        print(lines[-1], file=sys.stderr, flush=True)
    lines.append("")
    for placement, values in gains.items():
        if values:
            lines.append(f"{placement}: gain median {_pct(statistics.median(values))}, min "
                         f"{_pct(min(values))}, max {_pct(max(values))} over {len(values)} rows"
                         + (f"; against every move median {_pct(statistics.median(versus[placement]))}"
                            if versus[placement] else "") + ".")
    return lines


def part_others(args) -> list[str]:
    """plan() on the contiguous placement alone (the peer) and with others=True, as the command
    line runs a file without --placements: what the short searches on the other placements find
    and what the time they take costs the plan; p=8 models at --caps, p=16 at tight."""
    from zbopt.plan.search import OTHERS_SHARE
    placements = ("v", "interleaved", "dualpipe")
    lines = [f"`plan(model)` on the contiguous placement, twice one after the other: alone (the "
             f"peer) and with `others=True` (as `zbopt plan` runs a file without --placements: "
             f"the other placements' bounds, then a short search on each whose bound lies below "
             f"the plan's span, in {OTHERS_SHARE:.0%} of the time), {args.time_limit:g} s on "
             f"the p=8 models at the caps of --caps and {args.time_limit_p16:g} s on the p=16 "
             f"models at their tight caps. Per placement: the schedule its short search found "
             f"(- where its bound ruled it out, none where no split fitted in its time) and, in "
             f"brackets, how much shorter than the plan. Spans in us.", "",
             "| model | cap | plan span (peer) | gap (peer) | plan span | gap | " +
             " | ".join(placements) + " |", _rule("|" * (7 + len(placements)))]
    costs, shorter = [], 0
    for model, p, _, cap_name, capped in _estimated_caps(args):
        if cap_name not in (args.caps.split(",") if p == 8 else ["tight"]):
            continue
        limit = args.time_limit if p == 8 else args.time_limit_p16
        runs = []
        for others in (False, True):
            print(f"[bench_plan] others {model.name} {cap_name} others={others}", file=sys.stderr,
                  flush=True)
            runs.append(plan(capped, time_limit=limit, others=others))
        peer, mine = runs
        costs.append((mine.result.span - peer.result.span) / peer.result.span)
        cells = [_fmt(peer.result.span), _pct(peer.result.gap), _fmt(mine.result.span),
                 _pct(mine.result.gap)]
        verdicts = mine.other_placements()
        for placement in placements:
            verdict = verdicts.get(placement, {})
            if "found" not in verdict:
                cells.append("-" if verdict.get("fits", True) else "no split fits")
            elif verdict["found"] is None:
                cells.append("none")
            else:
                span = verdict["found"]["span"]
                shorter += verdict["shorter"]
                cells.append(f"{_fmt(span)} "
                             f"({_pct((mine.result.span - span) / mine.result.span)})")
        lines.append(f"| {model.name} | {cap_name} | " + " | ".join(cells) + " |")
        print(lines[-1], file=sys.stderr, flush=True)
    if costs:
        lines += ["", f"plan span with others=True against the peer: median "
                      f"{_pct(statistics.median(costs))} (min {_pct(min(costs))}, max "
                      f"{_pct(max(costs))}; positive = longer) over {len(costs)} rows; "
                      f"{shorter} short searches found a schedule shorter than the plan."]
    return lines


def part_lfloor(args) -> list[str]:
    """zbopt.plan.load_floor (CP-SAT's least largest device load over fitting partitions)
    against the total load over p and the paired programmes, on V, interleaved (2, 3 and 4
    chunks) and dualpipe of every estimated model and cap."""
    import zbopt.plan.search as search_module
    from zbopt.plan.load_floor import load_floor
    from zbopt.plan.paired_bound import dualpipe_floor, interleaved_floor, v_floor
    paired_of = {"v": v_floor, "interleaved": interleaved_floor, "dualpipe": dualpipe_floor}
    lines = ["`load_floor` (CP-SAT, 2 s, one worker: the least, over partitions whose devices hold "
             "their static memory and one micro-batch's activations, of the largest device load) "
             "against the total load over p, which the plan kept where no paired programme runs "
             "(three or more chunks, or past the programme's budget), and against the paired "
             "programme where it runs (its bound also counts memory round trips, so it is the "
             "higher where both run). `plan` takes the paired programme where it runs, else "
             "`load_floor`.", "",
             "| model | p | m | cap | placement | total load / p | load_floor | s | load_floor / "
             "(total / p) | paired floor | s |", _rule("|" * 12)]
    ratios, times = [], []
    for model, p, m, cap_name, capped in _estimated_caps(args):
        for placement, chunks in (("v", 0), ("interleaved", 2), ("interleaved", 3),
                                  ("interleaved", 4), ("dualpipe", 0)):
            placed = capped.with_settings(placement=placement, chunks=chunks)
            total = search_module._total_load(placed) / p
            print(f"[bench_plan] lfloor {model.name} {cap_name} {placement} {chunks}",
                  file=sys.stderr, flush=True)
            began = time.perf_counter()
            floor = load_floor(placed, 2.0)
            seconds = time.perf_counter() - began
            times.append(seconds)
            paired, paired_s = None, None
            if chunks in (0, 2):
                began = time.perf_counter()
                paired = paired_of[placement](placed)
                paired_s = time.perf_counter() - began
            fits = floor is not None and math.isfinite(floor)
            if fits:
                ratios.append(floor / total)
            label = f"interleaved {chunks}" if placement == "interleaved" else placement
            lines.append(
                f"| {model.name} | {p} | {m} | {cap_name} | {label} | {_fmt(total)} | "
                f"{_fmt(floor) if fits else ('no split fits' if floor else '-')} | "
                f"{seconds:.2f} | {f'{floor / total:.3f}' if fits else '-'} | "
                f"{_fmt(paired) if paired is not None else '-'} | "
                f"{f'{paired_s:.2f}' if paired_s is not None else '-'} |")
            print(lines[-1], file=sys.stderr, flush=True)
    if ratios:
        lines += ["", f"load_floor / (total load / p): median {statistics.median(ratios):.3f}, "
                      f"min {min(ratios):.3f}, max {max(ratios):.3f} over {len(ratios)} rows; "
                      f"its time: median {statistics.median(times):.2f} s, max {max(times):.2f} s."]
    return lines


def part_short(args) -> list[str]:
    """plan() over every placement against contiguous alone (the peer, run just before it) at
    the short limits of --short-limits, --reps pairs each, on the p=8 estimated models at the
    tight and mid caps (--filter as for estimated): what asking for every placement costs when
    the time is short."""
    from zbopt.plan.search import PLACEMENTS
    lines = [f"plan() on contiguous alone (the peer) and over every placement "
             f"({', '.join(PLACEMENTS)}), one right after the other, {args.reps} pairs at each "
             f"limit, 2 threads, on the p=8 estimated models at the tight and mid caps and on "
             f"Llama-3-8B at sequence 4096 with 80 GB a device. Spans in "
             f"us; the ratio is the plan over every placement against the peer (below 1: "
             f"shorter).", "",
             "| model | cap | limit s | contiguous alone | every placement | placement chosen | "
             "ratio |", _rule("|" * 8)]
    ratios = defaultdict(list)
    # and what `zbopt estimate config.json --mem 80GB` gives for Llama-3-8B (sequence 4096)
    user = estimate_model(DecoderShape(**LLAMA3_8B, vocab=128256, gated_mlp=True,
                                       model_type="llama"), 1, 4096, Accelerator(), devices=8,
                          microbatches=32, name="llama-32L-v128k-s4096")
    for model, caps in [(estimated(LLAMA3_8B, vocab, 8, 32), None) for vocab in (32000, 128256)] \
            + [(user, {"80 GB": 80e9})]:
        if args.filter and args.filter not in model.name:
            continue
        levels = caps or {name: cap_levels(model)[name] for name in ("tight", "mid")}
        for cap_name, cap in levels.items():
            capped = model.with_settings(memory_cap=cap)
            for limit in args.short_limits:
                for _ in range(args.reps):
                    print(f"[bench_plan] short {model.name} {cap_name} {limit:g} s",
                          file=sys.stderr, flush=True)
                    alone = plan(capped, ("contiguous",), time_limit=limit)
                    every = plan(capped, PLACEMENTS, time_limit=limit)
                    ratio = every.result.span / alone.result.span
                    ratios[limit].append(ratio)
                    lines.append(f"| {model.name} | {cap_name} | {limit:g} | "
                                 f"{_fmt(alone.result.span)} | {_fmt(every.result.span)} | "
                                 f"{every.split.placement} | {ratio:.4f} |")
                    print(lines[-1], file=sys.stderr, flush=True)
    lines.append("")
    for limit, values in sorted(ratios.items()):
        lines.append(f"- {limit:g} s: ratio median {statistics.median(values):.4f}, min "
                     f"{min(values):.4f}, max {max(values):.4f} over {len(values)} pairs")
    return lines


LLAMA31_405B = dict(hidden=16384, heads=128, kv_heads=8, layers=126, ffn=53248)


def part_p32(args) -> list[str]:
    """plan() with others=True (as `zbopt plan` runs a file without --placements) on a Llama 3.1
    405B-shaped model (126 blocks and a 128k vocabulary: 128 layers) at p=32, m=64, its tight and
    mid caps, twice one after the other: the peer ranks the walk's moves one SplitBound call per
    move (as before SplitBound.many), then as zbopt does, all of a split's moves at once."""
    import zbopt.plan.moves as moves_module
    from zbopt.plan.moves import Guide, transfers
    from zbopt.plan.paired_bound import SplitBound
    from zbopt.plan.search import placed

    def one_by_one(self, moves):
        if self.quick is None or len(moves) <= moves_module.MANY:
            return None
        for sizes in moves:
            if sizes not in self.quick_cache:
                self.quick_cache[sizes] = self.quick(sizes)
        return sorted(moves, key=self.quick_cache.__getitem__)[:moves_module.SHORTLIST]

    model = estimated(LLAMA31_405B, 128256, 32, 64)
    caps = cap_levels(model)
    placements = ("v", "interleaved", "dualpipe")
    lines = [f"`plan(model, time_limit={args.time_limit:g}, others=True)` on {model.name} "
             f"(Llama 3.1 405B's shape, estimated as in part estimated) at p=32, m=64, on the "
             f"contiguous placement with the short searches on the others (15% of the time). "
             f"Peer: the walk's moves ranked one SplitBound call per move; now: all at once "
             f"(SplitBound.many). Per placement the short search's schedule and, in brackets, "
             f"how much shorter than the plan (- ruled out by its bound, no time: no split "
             f"scheduled in its share, none: none fitted). Spans in us.", "",
             "| cap | cap GB | ranking | plan span | gap | " + " | ".join(placements) + " |",
             _rule("|" * (6 + len(placements)))]
    for cap_name in ("tight", "mid"):
        capped = model.with_settings(memory_cap=caps[cap_name])
        for label in ("one call per move", "all at once"):
            print(f"[bench_plan] p32 {cap_name} {label}", file=sys.stderr, flush=True)
            patch = mock.patch.object(Guide, "shortlist", one_by_one) \
                if label == "one call per move" else contextlib.nullcontext()
            with patch:
                result = plan(capped, time_limit=args.time_limit, others=True)
            cells = [_fmt(result.result.span), _pct(result.result.gap)]
            verdicts = result.other_placements()
            for placement in placements:
                verdict = verdicts.get(placement, {})
                if "found" not in verdict:
                    cells.append("-" if not verdict.get("may_be_shorter") else "no time")
                elif verdict["found"] is None:
                    cells.append("none")
                else:
                    span = verdict["found"]["span"]
                    cells.append(f"{_fmt(span)} "
                                 f"({_pct((result.result.span - span) / result.result.span)})")
            lines.append(f"| {cap_name} | {caps[cap_name] / 1e9:.0f} | {label} | "
                         + " | ".join(cells) + " |")
            print(lines[-1], file=sys.stderr, flush=True)
    v = placed(model.with_settings(memory_cap=caps["tight"]), "v")
    bound = SplitBound(v)
    moves = list(transfers(even_split(v)))
    began = time.perf_counter()
    one = [bound(sizes) for sizes in moves]
    middle = time.perf_counter()
    many = bound.many(moves)
    end = time.perf_counter()
    assert one == many
    lines += ["", f"Ranking the {len(moves):,} moves of V's even split (tight cap): "
                  f"{middle - began:.2f} s one call per move, {end - middle:.3f} s at once "
                  f"(the same values)."]
    return lines


def part_p32v(args) -> list[str]:
    """plan(model, ("v",)) on part p32's model at its tight and mid caps, twice one after the
    other: the peer keeps V's bound programme within BUDGET (PLANNED_FLOOR_SHARE = 0: past it
    the load over p or CP-SAT's largest device load stands in), then as zbopt does, the
    programme with up to PLANNED_FLOOR_SHARE of the placement's time."""
    import zbopt.plan.search as search_module
    model = estimated(LLAMA31_405B, 128256, 32, 64)
    caps = cap_levels(model)
    lines = [f"`plan(model, (\"v\",), time_limit={args.time_limit:g})` on {model.name} at p=32, "
             f"m=64 (part p32's model). Peer: V's bound programme within BUDGET alone; now: "
             f"with up to {search_module.PLANNED_FLOOR_SHARE:.0%} of the placement's time. "
             f"Spans and bounds in us.", "",
             "| cap | programme | span | bound (all splits) | certified gap | splits scheduled |",
             _rule("|" * 7)]
    for cap_name in ("tight", "mid"):
        capped = model.with_settings(memory_cap=caps[cap_name])
        for label in ("within BUDGET", "with its share"):
            print(f"[bench_plan] p32v {cap_name} {label}", file=sys.stderr, flush=True)
            patch = mock.patch.object(search_module, "PLANNED_FLOOR_SHARE", 0.0) \
                if label == "within BUDGET" else contextlib.nullcontext()
            with patch:
                result = plan(capped, ("v",), time_limit=args.time_limit)
            lines.append(f"| {cap_name} | {label} | {_fmt(result.result.span)} | "
                         f"{_fmt(result.result.lower_bound)} | {_pct(result.result.gap)} | "
                         f"{result.partitions_scheduled} |")
            print(lines[-1], file=sys.stderr, flush=True)
    return lines


# mixtures of experts of instances/configs (published configs' sizes), with the pipeline devices,
# micro-batches and expert-parallel devices part moe plans them on
MOE_MODELS = {"deepseek-v3": (16, 32, 32), "qwen3-30b-a3b": (8, 32, 8),
              "llama-4-maverick": (16, 32, 8), "gpt-oss-20b": (8, 32, 8)}


def part_moe(args) -> list[str]:
    """plan() on mixtures of experts estimated from their published configs (zbopt estimate's
    formulas with --flash-attention and --expert-parallel), at every cap level."""
    from zbopt.estimate import shape_from_config
    accelerator = Accelerator(peak_flops=989e12, efficiency=0.4, link_bandwidth=50e9,
                              expert_bandwidth=50e9)
    lines = ["Mixtures of experts from `zbopt estimate`'s formulas on their published configs "
             "(sequence 4096, micro-batch 1, flash attention, H100 figures: 989 TFLOP/s at 40%, "
             "50 GB/s links and all-to-all; times in us), each stage's routed experts shared "
             "out over the expert-parallel devices given (the all-to-all timed into F and B); "
             "gpt-oss-20b's sliding-window blocks (128 tokens, every other block) and Llama 4 "
             "Maverick's chunked-attention ones (8,192 tokens, longer than the sequence) costed "
             "over their window. Columns as in part estimated.", "", HEADER, _rule(HEADER)]
    gains_even, gains_tt = [], []
    for name, (p, m, experts) in MOE_MODELS.items():
        shape = shape_from_config(ROOT / "instances" / "configs" / f"{name}.json",
                                  expert_parallel=experts)
        model = estimate_model(shape, 1, 4096, accelerator, devices=p, microbatches=m,
                               flash=True, name=f"{name} (EP {experts})")
        limit = args.time_limit if p <= 8 else args.time_limit_p16
        for cap_name, cap in cap_levels(model).items():
            row, data = plan_row(model.name, model, cap_name, cap, limit)
            lines.append(row)
            gains_even.append(data["gain"]["even"])
            gains_tt.append(data["gain"]["torchtitan"])

    def summary(gains: list, baseline: str) -> str:
        """The median and max gain over the rows where the baseline fits a schedule."""
        fits = [g for g in gains if g is not None]
        left = len(gains) - len(fits)
        return (f"over {baseline} median {_pct(statistics.median(fits))} (max {_pct(max(fits))}"
                + (f"; {left} row(s) where it fits no schedule left out" if left else "") + ")")
    lines += ["", f"Gain {summary(gains_even, 'the even split')}; "
                  f"{summary(gains_tt, 'torchtitan' + chr(39) + 's rule')}."]
    return lines


PARTS = {"presets": part_presets, "estimated": part_estimated, "exhaustive": part_exhaustive,
         "analogues": part_analogues, "collisions": part_collisions, "windows": part_windows,
         "solve": part_solve, "solvers": part_solvers, "vfloor": part_vfloor, "ifloor": part_ifloor,
         "dfloor": part_dfloor, "lfloor": part_lfloor, "guided": part_guided,
         "guided16": part_guided16, "others": part_others, "headroom": part_headroom,
         "limits": part_limits, "short": part_short, "p32": part_p32,
         "p32v": part_p32v, "moe": part_moe}
DEFAULT_PARTS = ("presets", "estimated", "exhaustive")


def _limits(text: str) -> list[float]:
    """--limits: positive seconds, comma-separated, in increasing order."""
    try:
        limits = sorted(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        limits = []
    if not limits or not all(math.isfinite(x) and x > 0 for x in limits):
        raise argparse.ArgumentTypeError(f"{text!r}: give positive seconds, comma-separated "
                                         f"(e.g. 30,60,120)")
    return limits


def _sections(text: str) -> dict[str, str]:
    return dict(re.findall(r"<!-- part:(\w+) -->\n(.*?)<!-- /part -->", text, flags=re.S))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default=",".join(DEFAULT_PARTS),
                        help=f"parts among {', '.join(PARTS)} (analogues, collisions, windows, solve, "
                             f"solvers, vfloor, ifloor, dfloor, lfloor, guided, guided16, others, "
                             f"headroom, limits, short, p32, p32v, moe only when named)")
    parser.add_argument("--analogue-limit", type=float, default=120.0,
                        help="CP-SAT seconds per split in the analogues and collisions parts")
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--solve-limit", type=float, default=30.0,
                        help="solve() seconds per run in the solve part")
    parser.add_argument("--time-limit-p16", type=float, default=120.0)
    parser.add_argument("--filter", default="")
    parser.add_argument("--caps", default="tight,mid",
                        help="caps the guided part runs (comma-separated: tight, mid, 1f1b, none)")
    parser.add_argument("--solvers", default="cpsat,cpsat-lns",
                        help="solvers the solvers part compares, the first the reference")
    parser.add_argument("--reps", type=int, default=2, help="runs per solver in the solvers part")
    parser.add_argument("--limits", type=_limits, default="30,60,120,300",
                        help="plan() time limits (seconds, comma-separated) in the limits part")
    parser.add_argument("--short-limits", type=_limits, default="5,10,20",
                        help="plan() time limits (seconds, comma-separated) in the short part")
    parser.add_argument("--out", default=str(ROOT / "results" / "plan.md"))
    args = parser.parse_args()
    out = Path(args.out)
    sections = _sections(out.read_text()) if out.exists() else {}
    args.previous = dict(sections)
    args.previous_stamp = {k: m.group(1) for k, v in sections.items()
                           if (m := re.search(r"Command: `[^`]*` \(([^;]*);", v))}
    command = "python benchmarks/bench_plan.py " + " ".join(sys.argv[1:])
    for name in args.only.split(","):
        began = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        load = os.getloadavg()[0]
        body = PARTS[name](args)
        sections[name] = (f"Command: `{command}` ({began}; {platform.processor() or platform.machine()}, "
                          f"{os.cpu_count()} cores shared with other work, load average {load:.1f} "
                          f"at the start)\n\n" + "\n".join(body) + "\n")
    text = ["# Partition planning (`zbopt plan`)", "",
            "Written by `benchmarks/bench_plan.py` (see its docstring for the caps and models). "
            "Gains are (baseline span - plan span) / baseline span, each baseline with its best "
            "registered schedule; the certified gap is (plan span - the lower bound over ALL "
            "splits) / plan span; status optimal means that bound is met (scope: schedules of "
            "single passes on the contiguous placement, every split).", "",
            "These runs shared the machine's 2 cores with other engineers' work (each section "
            "gives the load average at its start): wall times are noisy, and a time-limited "
            "search on a busy machine schedules fewer splits and gives the solver less, so gaps "
            "and gains may be pessimistic.", ""]
    for name in PARTS:
        if name in sections:
            text += [f"## {name}", "", f"<!-- part:{name} -->", sections[name].rstrip("\n"),
                     "<!-- /part -->", ""]
    out.write_text("\n".join(text))
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
