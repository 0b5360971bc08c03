"""zbopt plan LAYERED: the layer split and the schedule chosen together, with a certified gap."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from ..errors import ZboptError
from ..progress import wanted
from ..report.numbers import gap_text
from ..sizes import byte_unit, readable
from ._common import (
    add_progress_arguments,
    brief,
    check_output,
    check_solver,
    console,
    fmt,
    nonempty,
    parse_cap,
    positive_int,
    print_json,
    solver_threads,
)


def register(sub) -> None:
    parser = sub.add_parser("plan", help="choose the layer split and the schedule of a layered "
                                         "model together (lower bound over all splits)")
    parser.add_argument("model", help="layered model file (.toml/.json with [[layers]]) or a "
                        "shipped model's name (`zbopt instances`, group models)")
    parser.add_argument("--devices", type=positive_int, default=None, metavar="P",
                        help="override devices")
    parser.add_argument("--microbatches", type=positive_int, default=None, metavar="M",
                        help="override microbatches")
    parser.add_argument("--placements", default=None,
                        help="comma-separated placements to plan over: contiguous, v, "
                             "interleaved, dualpipe, or 'all' (those that can hold the layers; "
                             "default: the file's)")
    parser.add_argument("--mem", default=None, metavar="CAP",
                        help="absolute memory per device, static memory included: a number in "
                             "the file's memory unit or a size such as 80GB or 16GiB (when that "
                             "unit is a byte size), one per device separated by commas, or "
                             "'none'")
    parser.add_argument("--time-limit", type=float, default=60.0, metavar="S",
                        help="seconds for the whole search (default 60); a split once "
                             "started is scheduled to the end, and the baselines of the first "
                             "placement are scheduled whatever the limit")
    parser.add_argument("--solver", default="auto",
                        help="exact solver: auto (default: cpsat-lns on splits of 750 passes or "
                             "more, else cpsat) or a name `zbopt methods` lists")
    parser.add_argument("--threads", type=solver_threads, default=2, help="solver threads (default 2)")
    parser.add_argument("--max-partitions", type=int, default=2000,
                        help="most splits listed for scheduling (default 2000)")
    parser.add_argument("--out", metavar="FILE.json", help="write the plan file (a schedule "
                        "file with the partition; checked before the search, never the model "
                        "file itself)")
    parser.add_argument("--force", action="store_true", help="overwrite --out if it exists (not "
                                                             "the model file)")
    parser.add_argument("--json", action="store_true", help="print a JSON document")
    add_progress_arguments(parser)
    parser.set_defaults(func=run)


def _memory_column(inst) -> tuple[float, str]:
    """(factor, header suffix) of the memory columns: GB where the file counts in bytes and
    holds a GB or more, else the file's own unit."""
    unit = inst.memory_unit
    top = max([*(inst.cap or ()), *inst.static_memory, max(inst.m_b)])
    if byte_unit(unit) == 1 and top >= 1e9:
        return 1e-9, " (GB)"
    return 1.0, f" ({unit})" if unit.strip() else ""


def _cap(text: str, unit: str):
    if "," in text and any(not x.strip() for x in text.split(",")):
        raise ZboptError(f"--mem {brief(text)!r}: a cap between commas is empty: give a number "
                         f"for every device")
    try:
        parts = [parse_cap(x.strip(), unit, per_stage=False) for x in text.split(",")]
    except ZboptError as err:
        raise ZboptError(f"--mem {brief(text)}: {err}") from None
    words = [x for x in parts if isinstance(x, str)]  # parse_cap's "kp" or what it cannot read
    unread = [x for x in words if not re.fullmatch(r"\s*[0-9.eE+-]+\s*p\s*", x)]
    if unread:
        raise ZboptError(f"--mem {brief(text)!r}: {brief(unread[0].strip())!r} is not a cap: give "
                         f"a number in the file's memory unit (or a size such as 80GB), one per "
                         f"device, or 'none'")
    if words:
        raise ZboptError(f"--mem {brief(text)!r}: a layered model's cap is absolute bytes (or the "
                         f"file's memory unit) per device, static memory included, not a "
                         f"multiple of p; give a number (or a size such as 80GB), one per device, or 'none'")
    if len(parts) == 1:
        return parts[0]
    if any(x is None for x in parts):
        raise ZboptError(f"--mem {brief(text)!r}: give a number for every device")
    return tuple(parts)


def load_model(args):
    from ..layers import load_model as read
    nonempty(args.model, "the model", "a layered model file or a shipped model's name (`zbopt "
                                      "instances`)")
    model = read(args.model)
    changes = {}
    if args.devices is not None:
        changes["devices"] = args.devices
    if args.microbatches is not None:
        changes["microbatches"] = args.microbatches
    if args.mem is not None:
        changes["memory_cap"] = _cap(args.mem, model.memory_unit)
    if changes:  # the flags' values checked against the file's layers: the flags are named
        flags = " ".join(f"--{key} {getattr(args, key)}" for key in ("devices", "microbatches")
                         if key in changes)
        if "memory_cap" in changes:
            flags = f"{flags} --mem {args.mem}".strip()
        try:
            model = model.with_settings(**changes)
        except ZboptError as err:
            raise ZboptError(f"{args.model} with {flags}: {err}") from None
    return model


def _placements(args, model) -> tuple[str, ...]:
    from ..instance import PLACEMENTS
    from ..plan.search import placed
    if args.placements is None:
        return (model.placement,)
    if args.placements.strip() == "all":  # every placement that can hold the layers
        names = []
        for name in PLACEMENTS:
            try:
                placed(model, name)
                names.append(name)
            except ZboptError:
                pass
        return tuple(names)
    names = tuple(x.strip() for x in args.placements.split(",") if x.strip())
    bad = [x for x in names if x not in PLACEMENTS]
    if not names or bad:
        raise ZboptError(f"--placements {args.placements!r}: use a comma-separated list of "
                         f"{', '.join(PLACEMENTS)}, or 'all'")
    from ..sweep.spec import listed_twice
    twice = listed_twice(list(names), "placement(s)")
    if twice:  # as compare --methods refuses a method named twice
        raise ZboptError(f"--placements {args.placements!r}: {twice}")
    unfit = []  # every placement that cannot hold the layers, named at once
    for name in names:
        try:
            placed(model, name)
        except ZboptError as err:
            unfit.append((name, err))
    if len(unfit) == 1:
        raise unfit[0][1]
    if unfit:
        fit = [x for x in names if x not in dict(unfit)]
        keep = f"keep {','.join(fit)}" if fit else "use fewer devices or chunks"
        raise ZboptError(f"--placements {args.placements!r}: {' and '.join(n for n, _ in unfit)} "
                         f"need more stages than the model's {model.num_layers} layers "
                         f"(every stage needs at least one): {keep}")
    return names


class _Progress:
    """One line on stderr per phase, and at most one a second while a phase runs; on a terminal
    unless --quiet, elsewhere with --progress."""

    def __init__(self, args):
        self.quiet = not wanted(args)
        self.last, self.phase = 0.0, None

    def __call__(self, info: dict) -> None:
        now = time.monotonic()
        if self.quiet or (info["phase"] == self.phase and now - self.last < 1.0):
            return
        self.last, self.phase = now, info["phase"]
        best, gap, bound = info.get("incumbent"), info.get("gap"), info.get("bound")
        found = info.get("solver_incumbent")  # the exact solver's, while it runs on one split
        if found is not None and (best is None or found < best):
            best = found
            gap = None if bound is None else max(0.0, (best - bound) / best)
        table = "" if info.get("table") is None else \
            f"  {info.get('placement', '')} segment table {info['table']:.0%}"
        print(f"plan: {info['elapsed']:6.1f}s {info['phase']:<12} best span {fmt(best)}  bound "
              f"{fmt(bound)}  gap {gap_text(gap)}  "
              f"splits scheduled {info.get('scheduled', 0)}{table}", file=sys.stderr, flush=True)


def compact(names: list[str]) -> str:
    """Layer names with runs of numbered layers folded: "layers.0-3". Only numbers written
    without leading zeros fold ("blk.00", "blk.01" stay as written: "blk.0-1" would name
    neither)."""
    out: list[str] = []
    run: list = []  # [prefix, first, last]
    for name in names:
        match = re.fullmatch(r"(.*)\.(0|[1-9]\d*)", name)
        if match and run and run[0] == match.group(1) and int(match.group(2)) == run[2] + 1:
            run[2] += 1
            continue
        if run:
            out.append(f"{run[0]}.{run[1]}" + (f"-{run[2]}" if run[2] != run[1] else ""))
            run = []
        if match:
            run = [match.group(1), int(match.group(2)), int(match.group(2))]
        else:
            out.append(name)
    if run:
        out.append(f"{run[0]}.{run[1]}" + (f"-{run[2]}" if run[2] != run[1] else ""))
    return ", ".join(out)


def check_out(args) -> None:
    """--out before any search (as solve, evaluate and plot check theirs): never the model file
    read, --force or not (the model is what a user re-plans from); a .json name in a folder
    that exists; not an existing file without --force."""
    from ..instance import resolve_instance
    out, model = Path(nonempty(args.out, "--out", "a file name for the plan file")), \
        resolve_instance(args.model)
    if out.exists() and model.exists() and out.resolve() == model.resolve():
        raise ZboptError(f"--out {args.out} would replace the model file {args.model}: choose "
                         f"another name for the plan file")
    check_output(args.out, args.force, (".json",), "plan file")


def _estimate_comments(name: str) -> list[str]:
    """The comment lines `zbopt estimate` opens a model file with (none for another file)."""
    from ..instance import resolve_instance
    try:
        with open(resolve_instance(name), encoding="utf-8") as file:
            head = [next(file, "") for _ in range(12)]
    except (OSError, UnicodeDecodeError, ZboptError):
        return []
    return [line[2:].rstrip("\n") for line in head if line.startswith("# ")]


def _refusal_hint(name: str) -> str:
    """What to change in `zbopt estimate` when no split of the file it wrote fits: the paper's
    activations (s x s scores), else the static bytes per parameter."""
    from .estimate import PAPER_ACTIVATIONS, STATIC_BYTES
    comments = _estimate_comments(name)
    if PAPER_ACTIVATIONS in comments:
        return ("; this file was estimated with the paper's activations, which keep the s x s "
                "attention scores: `zbopt estimate --flash-attention` keeps none")
    static = [line for line in comments if line.startswith(STATIC_BYTES)]
    if static:
        return (f"; this file was estimated with {static[0][len(STATIC_BYTES):]} of static "
                f"memory a parameter: "
                f"`zbopt estimate --optimizer-bytes` sets what a device keeps where data "
                f"parallelism shards them (16/N with FSDP over N ranks)")
    return ""


def run(args) -> int:
    from ..plan import plan
    check_solver(args.solver)
    model = load_model(args)
    placements = _placements(args, model)
    if args.out is not None:  # before spending the time limit
        check_out(args)
    if args.max_partitions < 1:
        raise ZboptError(f"--max-partitions must be >= 1, got {args.max_partitions}")
    from ..plan.search import NoSplitFits
    try:
        result = plan(model, placements, time_limit=args.time_limit, solver=args.solver,
                      threads=args.threads, max_partitions=args.max_partitions,
                      progress=_Progress(args), others=args.placements is None)
    except NoSplitFits as err:
        hint = _refusal_hint(args.model)
        if not hint:
            raise
        raise ZboptError(f"{err}{hint}") from None
    data = result.to_dict()
    if args.out:
        from ..export.schedule_file import write_schedule_file
        placed = model.with_settings(placement=result.split.placement,
                                     chunks=model.chunks if result.split.placement == "interleaved" else 0)
        verdict = {k: data[k] for k in ("status", "span", "lower_bound", "gap", "scope", "baselines",
                                        "gain", "partitions_scheduled", "partitions_pruned",
                                        "other_placements", "stopped_early")}
        write_schedule_file(args.out, result.result.timeline,
                            result=result.result if result.result.kind == "solver" else None,
                            force=args.force, partition=result.partition_dict(),
                            model=placed.to_dict(), plan=verdict)
    if args.json:
        print_json(data)
        return 0
    _print(result, model, args)
    return 0


def _others(result) -> list[str]:
    """One line per placement not planned over: whether its bound leaves room to beat the plan."""
    others = result.other_placements()
    if not others:
        return []
    span = result.result.span
    unit = f" {result.result.instance.time_unit}" if result.result.instance.time_unit else ""
    lines = ["other placements (bound over all their partitions, not planned over):"]
    for name, verdict in others.items():
        floor = verdict["lower_bound"]
        if not verdict["fits"]:
            lines.append(f"  {name}: no split fits the cap")
        elif not verdict["may_be_shorter"]:
            lines.append(f"  {name}: cannot be shorter (bound {fmt(floor)}{unit} >= this span)")
        else:
            both = f"--placements {result.split.placement},{name} plans over both"
            found = verdict.get("found")
            if verdict.get("shorter"):
                lines.append(f"  {name}: shorter, {fmt(found['span'])}{unit} "
                             f"({(span - found['span']) / span:.1%} below this span) on split "
                             f"{'-'.join(map(str, found['sizes']))} ({found['method']}, found in "
                             f"a short search); {both}")
                continue
            tried = "; its short search had no time to schedule a split (a longer " \
                "--time-limit gives it more)" if "found" not in verdict else \
                "; a short search found no schedule that fits" if found is None else \
                f"; a short search found {fmt(found['span'])}{unit}, not shorter"
            lines.append(f"  {name}: not ruled out (its bound {fmt(floor)}{unit} is "
                         f"{(span - floor) / span:.1%} below this span{tried}); {both}")
    return lines


def _caps(inst) -> str:
    """The header's cap: one value, or per device when the devices' caps differ (in the memory
    columns' unit)."""
    if inst.cap is None:
        return "cap=unlimited"
    if len(set(inst.cap)) == 1:
        return f"cap={readable(inst.cap[0], inst.memory_unit)}"
    per, unit = _memory_column(inst)
    return "caps per device=" + "/".join(fmt(c * per, 2) for c in inst.cap) + unit.replace(
        "(", "").replace(")", "")


def _print(result, model, args) -> None:
    from rich.table import Table

    from ..plan.search import OVERLAP_FLOOR, PLACEMENT_FLOOR
    out = console()
    r = result.result
    inst = r.instance
    unit = f" {inst.time_unit}" if inst.time_unit else ""
    out.print(f"[bold]{model.name or args.model}[/]: {model.num_layers} layers, p={inst.devices} "
              f"m={inst.microbatches} placement={inst.placement} {_caps(inst)}")
    gap = gap_text(r.gap)
    out.print(f"status      {r.status} ({result.scope})")
    out.print(f"span        {fmt(r.span)}{unit} ({r.method})")
    where = [] if result.bound_placement is None else \
        [f"the least is the {result.bound_placement} placement's"]
    if result.bound_split is not None:
        where.append(f"the least proven bound is split {'+'.join(str(n) for n in result.bound_split)}'s, "
                     f"its {result.bound_split_proof}")
    if result.optimal_proof == OVERLAP_FLOOR:
        where.append("the overlap floor meets the span")
    elif result.optimal_proof == PLACEMENT_FLOOR:
        where.append(f"the {result.split.placement} placement's bound over all its partitions "
                     f"meets the span")
    elif result.optimal_proof is not None:
        where.append(f"the chosen split's {result.optimal_proof} meets the span, every other "
                     f"split's bound is at least it")
    out.print(f"lower bound {fmt(r.lower_bound)}{unit} (over all partitions{''.join('; ' + x for x in where)})")
    out.print(f"gap         {gap}")
    out.print(f"searched    {result.partitions_scheduled} splits scheduled, "
              f"{result.partitions_pruned:,} pruned by their bound, {result.solver_runs} solver "
              f"run(s), {r.runtime:.1f} s"
              + ("; stopped on request (SIGUSR1): the best plan found so far" if
                 result.stopped_early else ""))
    per, memory = _memory_column(inst)
    table = Table("stage", "device", "layers", "t_f+t_b+t_w", f"static{memory}",
                  f"peak memory{memory}", f"cap{memory}")
    placed = model.with_settings(placement=inst.placement,
                                 chunks=model.chunks if inst.placement == "interleaved" else 0)
    for k, group in enumerate(placed.stage_layers(result.split.sizes)):
        stage_load = inst.t_f[k] + inst.t_b[k] + inst.t_w[k]
        d = inst.device_of(k)
        table.add_row(str(k), str(d), compact([x.name for x in group]), fmt(stage_load),
                      fmt(inst.static_memory[d] * per, 2), fmt(r.peak_memory[d] * per, 2),
                      fmt(inst.cap[d] * per, 2) if inst.cap else "-")
    out.print(table)
    base = Table("baseline", "split", "schedule", "span", "plan's gain")
    for name, split in result.baselines.items():
        gain = result.gain()[name]
        if split is None:
            base.add_row(name, "does not apply", "-", "-", "-")
            continue
        base.add_row(name, "+".join(str(n) for n in split.sizes),
                     split.result.method if split.result else "nothing fits",
                     fmt(split.span) if split.result else "-",
                     "-" if gain is None else f"{gain:.2%}")
    out.print(base)
    for line in _others(result):
        out.print(line)
    if inst.placement == "dualpipe":
        from ..export.plan_parts import no_runtime_form
        out.print(f"note: {no_runtime_form(inst.devices, model.num_layers, model.chunks)}")
    if args.out:
        out.print(f"wrote {args.out}")
