"""zbopt simulate INSTANCE --schedule NAME: evaluate one method, metrics and a per-device table."""

from __future__ import annotations

from ..errors import ZboptError
from ..registry import get_method
from ..registry import run as run_method
from ._common import (
    add_instance_arguments,
    add_progress_arguments,
    check_chunks,
    check_output,
    chunk_count,
    console,
    load,
    own_inputs,
    print_json,
    print_timeline,
    progress,
)


def register(sub) -> None:
    parser = sub.add_parser("simulate", help="evaluate one schedule family on an instance")
    add_instance_arguments(parser)
    parser.add_argument("--schedule", "-s", required=True, metavar="NAME",
                        help="family or heuristic name, e.g. 1f1b, zb-h1, interleaved-1f1b")
    parser.add_argument("--chunks", type=chunk_count, default=0,
                        help="chunks per device (2 or more) when re-placing for interleaved "
                             "families")
    parser.add_argument("--json", action="store_true", help="print a JSON document")
    parser.add_argument("--out", metavar="FILE", help="write the schedule file (zbopt.schedule/1)")
    parser.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    add_progress_arguments(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    family = get_method(args.schedule, "schedule")
    if args.out is not None:
        check_output(args.out, args.force, (".json",), "schedule file", own_inputs(args))
    instance = load(args)
    check_chunks(args.chunks, instance, [family.name])
    if args.chunks and family.placement == "interleaved" and instance.placement == "contiguous":
        instance = instance.with_placement("interleaved", args.chunks)
    with progress(args) as report:
        report.update(f"simulate: {family.name}")
        row = run_method(family.name, instance)
    if not row.applies:
        raise ZboptError(f"{family.name} does not apply: {row.message}")
    tl = row.timeline
    if args.out:
        from ..export.schedule_file import write_schedule_file
        write_schedule_file(args.out, tl, force=args.force)
    if args.json:
        data = row.to_dict()
        data["devices"] = [
            {"device": d, "start": s, "end": e, "busy": tl.busy[d], "idle": tl.idle[d],
             "peak_memory": tl.peak_memory[d],
             "memory_cap": tl.instance.cap[d] if tl.instance.cap else None}
            for d, (s, e) in enumerate(tl.device_span)]
        print_json(data)
        return 0
    out = console()
    inst = tl.instance
    out.print(f"[bold]{family.name}[/] on {inst.name or 'instance'}: p={inst.devices} "
              f"m={inst.microbatches} placement={inst.placement} chunks={inst.chunks}")
    print_timeline(out, tl)
    return 0
