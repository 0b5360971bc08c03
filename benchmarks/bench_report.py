"""Time the charts and the HTML report and measure the report's size; write to results/report.md.

Usage: python benchmarks/bench_report.py [--repeats N] [--peer REV]
Cases: the shipped paper instance (p=8, m=24, every registered method), a larger
zb-h1 schedule (p=16, m=128, 6,144 passes) for one chart, and p=32, m=64 charts (one schedule,
four methods stacked). The default instance's report must stay at most 1 MB with every chart in
it. The report cases with jobs=2 draw their charts in two processes (zbopt.report.gantt.drawn), a
peer from before that option in one. With --peer, the same cases are timed again in the same
run with zbopt/report as it was at commit REV (benchmarks/peer.py), after this tree's, and the
table gives the ratio.
"""

from __future__ import annotations

import argparse
import inspect
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from zbopt.compare import compare, run_method
from zbopt.instance import Instance, default_instance_path, load_instance
from zbopt.report.gantt import plot_schedule, plot_stacked
from zbopt.report.html import render_report

# the charts in two processes (a peer from before --jobs draws them in one)
JOBS = {"jobs": 2} if "jobs" in inspect.signature(render_report).parameters else {}


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


def cases(paper, rows) -> list:
    timelines = [r.timeline for r in rows if r.applies]
    zbh1 = next(t for t in timelines if t.schedule.method == "zb-h1")
    large = run_method("zb-h1", Instance(devices=16, microbatches=128, t_f=18522, t_b=18086,
                                         t_w=9337, comm=601, m_b=201216, m_w=73728,
                                         memory_cap="1p")).timeline
    p32 = Instance(devices=32, microbatches=64, t_f=18522, t_b=18086, t_w=9337, comm=601,
                   m_b=201216, m_w=73728, memory_cap="1p")
    wide_rows = [run_method(name, p32) for name in ("1f1b", "zb-h1", "zb-h2", "zb-greedy")]
    wide = [r.timeline for r in wide_rows]
    return [
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
        (f"plot_schedule + PNG, p=32 m=64 zb-h1 ({p32.num_passes} passes)",
         lambda: png(plot_schedule(wide[1]))),
        (f"plot_stacked + PNG, p=32 m=64, {len(wide)} methods",
         lambda: png(plot_stacked(wide))),
        (f"render_report, paper p=8 m=24, {len(timelines)} methods, jobs=2",
         lambda: len(render_report(paper, rows, **JOBS).encode())),
        (f"render_report, p=32 m=64, {len(wide)} methods, jobs=1",
         lambda: len(render_report(p32, wide_rows).encode())),
        (f"render_report, p=32 m=64, {len(wide)} methods, jobs=2",
         lambda: len(render_report(p32, wide_rows, **JOBS).encode())),
    ]


def measure(repeats: int, paper, rows) -> list[tuple]:
    """(case, median, min, max, output bytes) per case, in this process's zbopt."""
    out = []
    for name, fn in cases(paper, rows):
        median, low, high, size = timed(fn, repeats)
        out.append((name, median, low, high, size))
        print(f"{name}: {median:.2f} s", file=sys.stderr)
    return out


def peer_measure(rev: str, repeats: int) -> list[tuple]:
    """measure() run with zbopt/report as it was at `rev`, in a child process."""
    from peer import package_at
    with tempfile.TemporaryDirectory() as folder:
        root = package_at(rev, Path(folder), "zbopt/report")
        env = {**os.environ, "PYTHONPATH": str(root)}
        done = subprocess.run([sys.executable, __file__, "--repeats", str(repeats), "--json"],
                              env=env, check=True, capture_output=True, text=True)
    return [tuple(row) for row in json.loads(done.stdout)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--peer", metavar="REV", help="also time zbopt/report as at REV")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # for the peer
    args = parser.parse_args()
    paper = load_instance(default_instance_path())
    rows = compare(paper)
    mine = measure(args.repeats, paper, rows)
    if args.json:
        print(json.dumps(mine))
        return
    theirs = {row[0]: row for row in peer_measure(args.peer, args.repeats)} if args.peer else {}
    lines = ["# Charts and HTML report speed", "",
             f"{args.repeats} runs each; median (min, max) seconds; output size of the last run. "
             f"Python {platform.python_version()}, {platform.machine()}; a shared 2-core "
             f"machine, so expect noise."
             + (f" The peer is zbopt/report at commit {args.peer}, timed in the same run "
                f"after this tree's cases; the ratio is this tree's median over the peer's."
                if args.peer else ""), ""]
    if theirs:
        lines += ["| case | seconds | output bytes | peer seconds | peer bytes | ratio |",
                  "|---|---|---|---|---|---|"]
    else:
        lines += ["| case | seconds | output bytes |", "|---|---|---|"]
    for name, median, low, high, size in mine:
        row = f"| {name} | {median:.2f} ({low:.2f}, {high:.2f}) | {size:,} |"
        if name in theirs:
            _, p_median, p_low, p_high, p_size = theirs[name]
            row += (f" {p_median:.2f} ({p_low:.2f}, {p_high:.2f}) | {p_size:,} | "
                    f"{median / p_median:.2f} |")
        lines.append(row)
    page = render_report(paper, rows)
    size = len(page.encode())
    charts = page.count('src="data:image/png;base64,')
    timelines = [r for r in rows if r.applies]
    command = f"python benchmarks/bench_report.py --repeats {args.repeats}" + (
        f" --peer {args.peer}" if args.peer else "")
    lines += ["", f"The default instance's report: {size:,} bytes with {charts} charts "
              f"({len(timelines)} methods and the stacked chart) and {len(timelines)} "
              f"interactive timelines; the limit is 1,000,000 bytes "
              f"({'met' if size <= 1_000_000 else 'NOT met'}). It was 4,163,556 bytes before the "
              f"compact timeline JSON and palette PNGs.",
              "", f"Command: `{command}`", ""]
    out = Path(__file__).resolve().parents[1] / "results" / "report.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
