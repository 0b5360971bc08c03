"""zbopt export FILE.json --torch-csv OUT.csv | --chrome-trace OUT.json | --torchtitan DIR."""

from __future__ import annotations

from pathlib import Path

from ..errors import ZboptError
from ..report.numbers import counted
from ._common import console, nonempty


def register(sub) -> None:
    parser = sub.add_parser(
        "export", help="export a schedule or plan file to a PyTorch CSV (+ sidecar), a Chrome "
                       "trace or a torchtitan job config",
        description="Export a zbopt.schedule/1 file (a plan file is one): --torch-csv writes "
                    "PyTorch pipelining's compute-only CSV and a sidecar OUT.csv.json "
                    "(placement, micro-batches, torch version, torchtitan keys); "
                    "--chrome-trace writes a Perfetto/Chrome trace with the evaluated times "
                    "and a memory counter per device; --torchtitan DIR writes DIR/schedule.csv "
                    "(+ sidecar) and DIR/torchtitan.toml, the job-config keys that make "
                    "torchtitan run it, with the plan's module split. All outputs are written "
                    "or none.")
    parser.add_argument("file", metavar="FILE.json", help="schedule or plan file (zbopt.schedule/1)")
    parser.add_argument("--torch-csv", metavar="OUT.csv", help="write the PyTorch CSV here")
    parser.add_argument("--chrome-trace", metavar="OUT.json", help="write the trace here")
    parser.add_argument("--torchtitan", metavar="DIR",
                        help="write the CSV and a torchtitan job-config fragment into DIR")
    parser.add_argument("--microbatch-size", type=int, default=None, metavar="N",
                        help="torchtitan micro-batch size (local batch = N x micro-batches; "
                             "default: the size the plan was profiled at, else 1)")
    parser.add_argument("--torch-check", action="store_true",
                        help="also run torch's own schedule validators on the CSV (needs torch)")
    parser.add_argument("--force", action="store_true", help="overwrite existing outputs")
    parser.set_defaults(func=run)


def run(args) -> int:
    from ..export.outputs import check_targets, write_all
    from ..export.schedule_file import read_schedule_file

    nonempty(args.file, "the schedule file", "a schedule or plan file (.json)")
    for flag, value in (("--torch-csv", args.torch_csv), ("--chrome-trace", args.chrome_trace),
                        ("--torchtitan", args.torchtitan)):
        if value is not None:
            nonempty(value, flag, "a file name" if flag != "--torchtitan" else "a directory")
    if not (args.torch_csv or args.chrome_trace or args.torchtitan):
        raise ZboptError("nothing to export: give --torch-csv OUT.csv, --chrome-trace "
                         "OUT.json and/or --torchtitan DIR")
    if args.torch_csv:  # its sidecar is then NAME.csv.json, never a schedule file's name
        from ..export.torch_csv import check_csv_name
        check_csv_name(args.torch_csv)
    if args.chrome_trace and Path(args.chrome_trace).suffix.lower() != ".json":
        name = Path(args.chrome_trace).stem.strip(".") or "trace"
        raise ZboptError(f"{args.chrome_trace}: give the trace a name ending in .json, such as "
                         f"{name}.json (Perfetto and chrome://tracing read JSON)")
    check_targets(_targets(args), args.force, [args.file],  # before reading and evaluating
                  [args.torchtitan] if args.torchtitan else [])
    loaded = read_schedule_file(args.file)
    if args.torch_csv or args.torchtitan:
        from ..export.plan_parts import refuse_dualpipe_plan
        refuse_dualpipe_plan(loaded, args.file)
    timeline = loaded.evaluate()
    texts: dict[Path, str] = {}
    lines: list[str] = []
    new_dirs: list[Path] = []
    if args.torch_csv or args.torchtitan:
        from ..export.torch_csv import torch_check, torch_rows
        if args.torch_check:
            torch_check(torch_rows(loaded.instance, loaded.schedule),
                        loaded.instance.num_stages, loaded.instance.microbatches)
    if args.torch_csv:
        from ..export.plan_parts import plan_experts, plan_model
        from ..export.timing import profiled_microbatch_size
        from ..export.torch_csv import sidecar_path, torch_csv_texts
        # the sidecar's torchtitan keys: micro-batches of the size the plan was profiled at
        size = args.microbatch_size if args.microbatch_size is not None else \
            profiled_microbatch_size(plan_model(loaded)) or 1
        _add(texts, torch_csv_texts(args.torch_csv, loaded.instance, loaded.schedule,
                                    partition=loaded.meta.get("partition"), source=args.file,
                                    microbatch_size=size, expert_parallel=plan_experts(loaded)))
        lines.append(f"wrote {args.torch_csv} ({loaded.instance.devices} ranks) and "
                     f"{sidecar_path(args.torch_csv)}"
                     + (" (torch validators: ok)" if args.torch_check else ""))
    if args.chrome_trace:
        import json

        from ..export.chrome_trace import chrome_trace
        _add(texts, {Path(args.chrome_trace): json.dumps(chrome_trace(timeline)) + "\n"})
        lines.append(f"wrote {args.chrome_trace}: open it in https://ui.perfetto.dev")
    if args.torchtitan:
        from ..export.torchtitan import titan_export
        export = titan_export(loaded, args.torchtitan, args.microbatch_size)
        _add(texts, export.texts)
        new_dirs.append(export.directory)
        lines.extend(_titan_lines(export))
    write_all(texts, force=args.force, inputs=[args.file], new_dirs=new_dirs)
    out = console()
    for line in lines:
        out.print(line, markup=False, soft_wrap=True)
    return 0


def _targets(args) -> list[Path]:
    """Every file the export will write, to check before any work."""
    from ..export.torch_csv import sidecar_path
    from ..export.torchtitan import titan_paths
    paths = [Path(args.torch_csv), sidecar_path(args.torch_csv)] if args.torch_csv else []
    paths += [Path(args.chrome_trace)] if args.chrome_trace else []
    return paths + (titan_paths(args.torchtitan) if args.torchtitan else [])


def _add(texts: dict[Path, str], new: dict[Path, str]) -> None:
    """Collect outputs; two outputs with one name (e.g. a trace named like the CSV's sidecar)
    are refused before anything is written."""
    for path, text in new.items():
        if any(path.resolve() == known.resolve() for known in texts):
            raise ZboptError(f"{path} is written twice by this export: choose distinct names")
        texts[path] = text


def _titan_lines(export) -> list[str]:
    settings = export.settings
    names = ", ".join(str(p) for p in export.texts)
    lines = [f"wrote {names}",
             f"torchtitan: {counted(settings.degree, 'rank')}, schedule {settings.schedule} + "
             f"CSV, {counted(settings.microbatches, 'micro-batch')} (local_batch_size "
             f"{settings.local_batch_size} / microbatch_size {settings.microbatch_size})"
             + (f", keys checked against torchtitan {export.checked_against}"
                if export.checked_against else ", keys not checked (torchtitan not installed)")]
    if settings.module_fqns is not None:
        for k, part in enumerate(settings.module_fqns):
            lines.append(f"  stage {k}: {' '.join(part)}")
    lines += [f"note: {note}" for note in settings.notes]
    return lines
