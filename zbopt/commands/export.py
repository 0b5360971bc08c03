"""zbopt export FILE.json --torch-csv OUT.csv | --chrome-trace OUT.json: hand a schedule on."""

from __future__ import annotations

from ..errors import ZboptError
from ._common import console


def register(sub) -> None:
    parser = sub.add_parser(
        "export", help="export a schedule file to a PyTorch CSV (+ sidecar) or a Chrome trace",
        description="Export a zbopt.schedule/1 file: --torch-csv writes PyTorch pipelining's "
                    "compute-only CSV and a sidecar OUT.json (placement, micro-batches, torch "
                    "version, torchtitan settings); --chrome-trace writes a Perfetto/Chrome "
                    "trace with the evaluated times and a memory counter per device.")
    parser.add_argument("file", metavar="FILE.json", help="schedule file (zbopt.schedule/1)")
    parser.add_argument("--torch-csv", metavar="OUT.csv", help="write the PyTorch CSV here")
    parser.add_argument("--chrome-trace", metavar="OUT.json", help="write the trace here")
    parser.add_argument("--torch-check", action="store_true",
                        help="also run torch's own schedule validators on the CSV (needs torch)")
    parser.add_argument("--force", action="store_true", help="overwrite existing outputs")
    parser.set_defaults(func=run)


def run(args) -> int:
    from ..export.schedule_file import read_schedule_file

    if not args.torch_csv and not args.chrome_trace:
        raise ZboptError("nothing to export: give --torch-csv OUT.csv and/or "
                         "--chrome-trace OUT.json")
    loaded = read_schedule_file(args.file)
    timeline = loaded.evaluate()
    out = console()
    if args.torch_csv:
        from ..export.torch_csv import torch_check, torch_rows, write_torch_csv
        if args.torch_csv.endswith(".json"):
            raise ZboptError(f"{args.torch_csv}: give the CSV a .csv name (its sidecar gets "
                             f".json)")
        from pathlib import Path
        if Path(args.torch_csv).with_suffix(".json").resolve() == Path(args.file).resolve():
            raise ZboptError(f"the CSV's sidecar {Path(args.torch_csv).with_suffix('.json')} "
                             f"would replace the schedule file {args.file}: name the CSV "
                             f"differently")
        if args.torch_check:
            torch_check(torch_rows(loaded.instance, loaded.schedule),
                        loaded.instance.num_stages, loaded.instance.microbatches)
        csv_path, side = write_torch_csv(args.torch_csv, loaded.instance, loaded.schedule,
                                         force=args.force)
        out.print(f"wrote {csv_path} ({loaded.instance.devices} ranks) and {side}"
                  + (" (torch validators: ok)" if args.torch_check else ""))
    if args.chrome_trace:
        from ..export.chrome_trace import write_chrome_trace
        path = write_chrome_trace(args.chrome_trace, timeline, force=args.force)
        out.print(f"wrote {path}: open it in https://ui.perfetto.dev")
    return 0
