"""zbopt plot FILE.json -o out.png|out.svg: a schedule file's Gantt chart with memory curves."""

from __future__ import annotations

from ..errors import ZboptError
from ._common import add_progress_arguments, check_input, check_output, nonempty, progress


def register(sub) -> None:
    parser = sub.add_parser("plot", help="draw a schedule file as a Gantt chart (PNG, SVG, PDF)")
    parser.add_argument("schedule_file", metavar="FILE.json",
                        help="schedule file (zbopt.schedule/1, e.g. from simulate --out)")
    parser.add_argument("-o", "--out", required=True, metavar="OUT",
                        help="chart to write: .png, .svg or .pdf")
    parser.add_argument("--force", action="store_true", help="overwrite OUT if it exists")
    add_progress_arguments(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    # matplotlib loads lazily: the other subcommands should not pay for it
    from ..export.schedule_file import read_schedule_file
    from ..report.gantt import PLOT_SUFFIXES, plot_schedule, save_figure
    from ..schedule import evaluate
    out = check_output(args.out, args.force, PLOT_SUFFIXES, "chart", [args.schedule_file],
                       flag="-o")
    check_input(nonempty(args.schedule_file, "the schedule file", "a schedule or plan file "
                                                                  "(.json)"), "schedule file")
    loaded = read_schedule_file(args.schedule_file)
    # the file's stored times are informative only: the chart is drawn from a fresh evaluation
    try:
        timeline = evaluate(loaded.instance, loaded.schedule)
    except ZboptError as err:  # a deadlocking order: named by its file, as the reader's errors
        raise ZboptError(f"{args.schedule_file}: {err}") from None
    with progress(args) as report:  # after every check: bad input gets its one line alone
        report.update(f"plot: drawing {loaded.instance.num_passes:,} passes on "
                      f"{loaded.instance.devices} devices")
        figure = plot_schedule(timeline)
        report.update(f"plot: writing {out} (rendering the chart)")
        save_figure(figure, out, force=args.force)
    print(f"wrote {out}")
    return 0
