"""Time the charts and the HTML report and measure the report's size; write to results/report.md.

Usage: python benchmarks/bench_report.py [--repeats N]
Cases: the shipped paper instance (p=8, m=24, every registered method) and a larger
zb-h1 schedule (p=16, m=128, 6,144 passes) for one chart. The default instance's report must
stay at most 1 MB with every chart in it.
"""

from __future__ import annotations

import argparse
import io
import platform
import statistics
import time
from pathlib import Path

from zbopt.compare import compare, run_method
from zbopt.instance import Instance, default_instance_path, load_instance
from zbopt.report.gantt import plot_schedule, plot_stacked
from zbopt.report.html import render_report


def timed(fn, repeats: int) -> tuple[float, float, float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times), out


def png(figure) -> int:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return len(buffer.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    paper = load_instance(default_instance_path())
    rows = compare(paper)
    timelines = [r.timeline for r in rows if r.applies]
    zbh1 = next(t for t in timelines if t.schedule.method == "zb-h1")
    large = run_method("zb-h1", Instance(devices=16, microbatches=128, t_f=18522, t_b=18086,
                                         t_w=9337, comm=601, m_b=201216, m_w=73728,
                                         memory_cap="1p")).timeline
    cases = [
        (f"plot_schedule + PNG, paper p=8 m=24, zb-h1 ({paper.num_passes} passes)",
         lambda: png(plot_schedule(zbh1))),
        (f"plot_stacked + PNG, paper p=8 m=24, {len(timelines)} methods",
         lambda: png(plot_stacked(timelines))),
        (f"render_report, paper p=8 m=24, {len(timelines)} methods (charts included)",
         lambda: len(render_report(paper, rows).encode())),
        (f"render_report, paper p=8 m=24, {len(timelines)} methods (timelines only, charts=False)",
         lambda: len(render_report(paper, rows, charts=False).encode())),
        (f"plot_schedule + PNG, p=16 m=128 zb-h1 ({large.instance.num_passes} passes)",
         lambda: png(plot_schedule(large))),
    ]
    lines = ["# Charts and HTML report speed", "",
             f"{args.repeats} runs each; median (min, max) seconds; output size of the last run. "
             f"Python {platform.python_version()}, {platform.machine()}; a shared 2-core "
             f"machine, so expect noise.", "",
             "| case | seconds | output bytes |", "|---|---|---|"]
    for name, fn in cases:
        median, low, high, size = timed(fn, args.repeats)
        row = f"| {name} | {median:.2f} ({low:.2f}, {high:.2f}) | {size:,} |"
        print(row)
        lines.append(row)
    page = render_report(paper, rows)
    size = len(page.encode())
    charts = page.count('src="data:image/png;base64,')
    lines += ["", f"The default instance's report: {size:,} bytes with {charts} charts "
              f"({len(timelines)} methods and the stacked chart) and {len(timelines)} "
              f"interactive timelines; the limit is 1,000,000 bytes "
              f"({'met' if size <= 1_000_000 else 'NOT met'}). It was 4,163,556 bytes before the "
              f"compact timeline JSON and palette PNGs.",
              "", f"Command: `python benchmarks/bench_report.py --repeats {args.repeats}`", ""]
    out = Path(__file__).resolve().parents[1] / "results" / "report.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
