"""zbopt evaluate FILE.json | --torch-csv FILE.csv INSTANCE: re-judge a saved or foreign schedule."""

from __future__ import annotations

from pathlib import Path

from ..errors import ZboptError
from ..report.numbers import gap_text
from ..schedule import evaluate
from ._common import (
    check_input,
    check_output,
    console,
    fmt,
    load_input,
    nonempty,
    print_json,
    print_timeline,
    with_mem,
)


def register(sub) -> None:
    parser = sub.add_parser(
        "evaluate", help="re-evaluate a schedule file, or a PyTorch CSV under an instance's costs",
        description="zbopt evaluate FILE.json re-evaluates a zbopt.schedule/1 file and says whether "
                    "the stored metrics still hold; zbopt evaluate --torch-csv FILE.csv INSTANCE "
                    "evaluates a PyTorch pipelining CSV (ours, torchtitan's or a torch dump).")
    parser.add_argument("file", metavar="FILE",
                        help="schedule file (.json), or the instance file with --torch-csv")
    parser.add_argument("--torch-csv", metavar="CSV",
                        help="evaluate this PyTorch CSV; FILE is then the instance")
    parser.add_argument("--mem", default=None, metavar="CAP",
                        help="memory cap overriding the instance's: a number, '1p', '1.5p', "
                             "'none', or a size such as 80GB where the memory unit is a "
                             "byte size")
    parser.add_argument("--out", metavar="FILE",
                        help="write the evaluated schedule as a zbopt.schedule/1 file")
    parser.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    parser.add_argument("--check", action="store_true",
                        help="exit with status 1 if the file's stored metrics differ")
    parser.add_argument("--json", action="store_true", help="print a JSON document")
    parser.set_defaults(func=run)


def run(args) -> int:
    from ..export.schedule_file import (
        compare_metrics,
        kept_entries,
        read_schedule_file,
        write_schedule_file,
    )

    stored = solver = None
    kept: dict = {}  # what --out keeps of a schedule or plan file
    left_out = ""  # and what its line says it cannot keep
    nonempty(args.file, "the schedule file" if args.torch_csv is None else "the instance",
             "a schedule or plan file (.json)" if args.torch_csv is None else
             "an instance file or a shipped instance's name (`zbopt instances`)")
    if args.torch_csv is not None:
        nonempty(args.torch_csv, "--torch-csv", "a PyTorch pipelining CSV")
    if args.check and args.torch_csv is not None:
        raise ZboptError("--check compares a schedule file's stored metrics with a fresh "
                         "evaluation, and a CSV stores none: drop --check")
    if args.check and args.mem is not None:
        raise ZboptError("--check compares the file's stored metrics, made under its own cap, "
                         "and --mem changes the cap: drop --check or --mem")
    if args.out is not None:
        # FILE --out FILE --force rewrites a schedule re-evaluated in place; with --torch-csv the
        # CSV's orders would replace the file's own, so neither input may be written over
        check_output(args.out, args.force, (".json",), "schedule file",
                     [args.file, args.torch_csv] if args.torch_csv else [])
    if args.torch_csv:
        from ..export.torch_csv import parse_torch_csv, sidecar_split, torch_csv_text
        args.instance = args.file
        text = torch_csv_text(args.torch_csv)  # each input read once: a pipe reads too
        recorded = sidecar_split(args.torch_csv)
        instance, loaded, even = load_input(args)
        _check_split(args.file, args.torch_csv, recorded, loaded, even)
        try:
            schedule = parse_torch_csv(text, instance, source=args.torch_csv,
                                       method=f"torch-csv:{Path(args.torch_csv).name}")
        except ZboptError:
            _check_shape(args.file, args.torch_csv, instance)
            raise
        source = args.torch_csv
        if loaded is not None:  # a schedule or plan file as the instance: a plan stays a plan
            kept, left_out = _csv_entries(loaded, instance, schedule)
    else:
        if not args.file.endswith(".json"):
            raise ZboptError(f"{args.file}: expected a zbopt.schedule/1 .json file; for a "
                             f"PyTorch CSV use --torch-csv FILE.csv INSTANCE")
        check_input(args.file, "schedule file")
        loaded = read_schedule_file(args.file)
        instance, schedule = loaded.instance, loaded.schedule
        if args.mem is not None:
            instance = with_mem(instance, args.mem)
        else:
            stored = loaded.meta.get("metrics")
            if args.check and stored is None:
                raise ZboptError(f"{args.file} holds no stored metrics for --check to compare: "
                                 f"drop --check, or write the file again with --out")
        solver = loaded.meta.get("solver")
        source = args.file
        # the same schedule: a plan stays a plan; the solver's record and the plan's verdict
        # hold only under the cap they were made for
        kept, left_out = kept_entries(loaded, instance, solver=True)
    try:
        timeline = evaluate(instance, schedule)
    except ZboptError as err:  # an order that deadlocks: named by its file, as in plot
        raise ZboptError(f"{source}: {err}") from None
    metrics = timeline.metrics()
    differences = compare_metrics(stored, metrics) if stored is not None else None
    if args.out:
        write_schedule_file(args.out, timeline, force=args.force, **kept)
    if args.json:
        data = dict(metrics, source=source, placement=instance.placement,
                    devices=instance.devices, microbatches=instance.microbatches)
        if stored is not None:
            data["stored_metrics_match"] = not differences
            data["differences"] = differences
        if solver:
            data["solver"] = solver
        print_json(data)
    else:
        _print(timeline, source, differences, solver)
        if args.out:
            console().print(f"wrote {args.out}{left_out}", markup=False, soft_wrap=True)
    return 1 if args.check and differences else 0


def _check_split(given: str, csv_path: str, recorded: tuple[list[int] | None, str], loaded,
                 even: list[int] | None) -> None:
    """A plan's CSV (its sidecar records the plan's split, `recorded`: sidecar_split) is judged
    on that split: the input `given` taken on another (a plan file's split, or `even`, a
    layered model's even split) would give other stage costs, so that is refused in one line.
    A per-stage instance or a plain schedule file has no split to compare."""
    sizes, source = recorded
    partition = loaded.meta.get("partition") if loaded is not None else None
    if sizes is None or (partition is None and even is None):
        return
    used = list(partition["sizes"]) if partition is not None else even
    if used == sizes:
        return
    what = f"the plan {given} splits it" if partition is not None else \
        f"the layered model {given} is taken on its even split"
    plan = source or "PLAN.json"
    raise ZboptError(f"{csv_path} was exported from a plan split {'+'.join(map(str, sizes))} "
                     f"layers per stage (its sidecar says so), but {what} "
                     f"{'+'.join(map(str, used))}: give the plan file instead (zbopt evaluate "
                     f"{plan} --torch-csv {csv_path})")


def _check_shape(given: str, csv_path: str, instance) -> None:
    """A CSV that does not fit the instance `given` (a schedule made on a re-placed instance,
    evaluated under the file it was re-placed from): when its sidecar says what it was made for,
    that and the file to give instead, in one line."""
    from ..export.torch_csv import shape_text, sidecar_shape
    shape, source = sidecar_shape(csv_path, instance)
    if not shape:
        return
    inst = shape_text(instance.placement, instance.num_stages, instance.devices,
                      instance.microbatches)
    beside = Path(csv_path).with_name(source) if source else None
    instead = f"zbopt evaluate {beside if beside.is_file() else source} --torch-csv " \
        f"{csv_path}" if source else "the schedule or plan file it was exported from"
    raise ZboptError(f"{csv_path} was exported for {shape} (its sidecar says so), but "
                     f"{given} is {inst}: give an instance of the CSV's shape, or {instead}")


def _csv_entries(loaded, instance, schedule) -> tuple[dict, str]:
    """What --out keeps of the schedule or plan file given as the instance of --torch-csv, with
    what its line says is left out: where the CSV holds the file's own orders (as `zbopt export
    --torch-csv` writes them), what `evaluate FILE.json --out` keeps (kept_entries); for other
    orders the partition and the model only, as the plan's verdict and the solver's record
    describe the file's schedule, not the CSV's."""
    from ..export.schedule_file import kept_entries
    kept, left_out = kept_entries(loaded, instance, solver=True)
    if schedule.orders == loaded.schedule.orders:
        return kept, left_out
    dropped = [name for key, name in (("plan", "the plan's verdict"), ("solver", "the solver's record"))
               if loaded.meta.get(key) is not None]
    kept = {key: kept[key] for key in ("partition", "model") if key in kept}
    note = f" (without {' and '.join(dropped)}, made for the file's schedule, not the CSV's)" \
        if dropped else ""
    return kept, note


def _print(timeline, source, differences, solver) -> None:
    out = console()
    inst = timeline.instance
    out.print(f"[bold]{timeline.schedule.method or 'schedule'}[/] from {source}: "
              f"p={inst.devices} m={inst.microbatches} placement={inst.placement} "
              f"chunks={inst.chunks}")
    if solver:
        gap = solver.get("gap")
        out.print(f"made by {solver.get('solver')} ({solver.get('status')}): objective "
                  f"{fmt(solver.get('objective'))}, lower bound {fmt(solver.get('lower_bound'))}"
                  f", gap {gap_text(gap)}")
    print_timeline(out, timeline)
    if differences is not None:
        if differences:
            out.print("[red]stored metrics differ from this evaluation:[/] "
                      + "; ".join(differences))
        else:
            out.print("stored metrics: identical to this evaluation")
    for message in timeline.cap_violations[:3]:
        out.print(f"[red]over the cap:[/] {message}")
