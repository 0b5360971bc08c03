"""The relaxations' dynamic programmes: their time against a peer commit's, in the same run.

`zbopt plan` and `solve()` raise their bounds with three dynamic programmes over a device's (or
a window's) orders of passes, each keeping per state only the labels nothing earlier beats
(zbopt.dominance): the one-device relaxation (zbopt.plan.device_bound), the window of two
devices (zbopt.plan.window_bound) and the one-device relaxation of interleaved and V placements
(zbopt.solvers.chunk_relaxation). Within a time limit, a faster programme reaches more labels
and so a higher bound: on a slower machine the window of the last two devices of the v128k
plan split (below) took longer than the 2 s plan gives a window at first, and plan certified
less.

Cases (each run to its end, with no deadline):
- device: every device's relaxation on a split, the label limits of device_bound.LABELS in
  turn until one is exact (as plan runs them);
- window: the pairs of neighbouring devices plan tries first on a split (the fewest
  activations held), window_bound.LABELS in turn;
- chunk: orders_optimum on the interleaved pipeline of bench_relaxations (2 chunks, cap 1p,
  p=8, m=10), device 0.
Splits: the p=8, 32-block plan splits of results/plan.md at the tight cap (v128k 3-4-4-4-4-5-5-5,
v32k 4-4-4-4-4-4-4-6). Each case runs in a fresh process for this tree and for the peer (the
package of commit --before, from git), alternating which goes first, --repeats times; the
table gives the medians, their ratio and whether both computed the same value.
Then what it changes in `zbopt plan`: plan() on the v128k model at the tight cap (p=8, m=32,
60 s, as bench_plan runs it), this tree and the peer alternating, --plan-repeats times each:
span, certified bound and gap of every run (0 skips it).

Usage:
  python benchmarks/bench_programmes.py --before REV [--repeats N] [--plan-repeats N]
                                        [--out results/programmes.md]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_plan import LLAMA3_8B, cap_levels, estimated  # noqa: E402
from bench_relaxations import interleaved  # noqa: E402
from peer import package_at  # noqa: E402

from zbopt.plan.memory_bound import held_counts  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SPLITS = (("llama-32L-v128k", 128256, (3, 4, 4, 4, 4, 5, 5, 5)),
          ("llama-32L-v32k", 32000, (4, 4, 4, 4, 4, 4, 4, 6)))
PAIRS = 3  # windows per split: the pairs holding the fewest activations, as plan orders them

# what each child process runs: one case, printed as JSON (value, seconds)
CHILD = r"""
import json, math, sys, time
from zbopt.instance import Instance
from zbopt.plan import device_bound, window_bound
from zbopt.solvers.chunk_relaxation import orders_optimum
task = json.load(open(sys.argv[1]))
instance = Instance.from_dict(task["instance"])
far = time.perf_counter() + 1e9
# the label passes as plan runs them, without a deadline (written here, not imported: the
# peer's passes_bound may return another shape)
def passes(least_span, labels):
    best = 0.0
    for limit in labels:
        value, exact = least_span(limit, far)
        best = max(best, value)
        if exact:
            break
    return best
began = time.perf_counter()  # after the imports: only the programme is timed
if task["kind"] == "device":
    value = max(passes(device_bound._Rules(instance, d).least_span, device_bound.LABELS)
                for d in task["devices"])
elif task["kind"] == "window":
    value = passes(window_bound._Window(instance, task["first"], 2).least_span,
                   window_bound.LABELS)
else:
    value = orders_optimum(instance, task["device"], far)
print(json.dumps([value, time.perf_counter() - began]))
"""


PLAN_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from bench_plan import LLAMA3_8B, cap_levels, estimated
from zbopt.plan import plan
model = estimated(LLAMA3_8B, 128256, 8, 32)
result = plan(model.with_settings(memory_cap=cap_levels(model)["tight"]), time_limit=60).result
print(json.dumps([result.span, result.lower_bound, result.gap]))
"""


def plan_runs(peer: Path, repeats: int) -> list[str]:
    """Rows of plan() on the v128k tight row, this tree and the peer alternating."""
    rows = []
    for repeat in range(repeats):
        for who in (("now", "peer") if repeat % 2 == 0 else ("peer", "now")):
            print(f"[bench_programmes] plan v128k tight: {who}, run {repeat + 1} (60 s) ...",
                  file=sys.stderr, flush=True)
            package = ROOT if who == "now" else peer
            done = subprocess.run([sys.executable, "-c", PLAN_CHILD, str(ROOT / "benchmarks")],
                                  env={**os.environ, "PYTHONPATH": str(package)}, check=True,
                                  capture_output=True, text=True, cwd=package)
            span, bound, gap = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append(f"| {repeat + 1} | {who} | {span:,.0f} | {bound:,.0f} | {gap:.2%} |")
    return rows


def cases() -> list[tuple[str, dict]]:
    """(label, task) of every case."""
    out = []
    for name, vocab, split in SPLITS:
        model = estimated(LLAMA3_8B, vocab, 8, 32)
        instance = model.with_settings(memory_cap=cap_levels(model)["tight"]).instance(split)
        data = instance.to_dict()
        split_name = f"{name} tight {'-'.join(map(str, split))}"
        out.append((f"{split_name}: device, all 8",
                    {"kind": "device", "devices": list(range(8)), "instance": data}))
        held = held_counts(instance)
        pairs = sorted(range(7), key=lambda e: (held[e] + held[e + 1], -e))[:PAIRS]
        out.extend((f"{split_name}: window {e}-{e + 1}",
                    {"kind": "window", "first": e, "instance": data}) for e in pairs)
    out.append(("interleaved p=8 m=10 1p: chunk, device 0",
                {"kind": "chunk", "device": 0, "instance": interleaved(8, 10).to_dict()}))
    return out


def run_child(package: Path, task_file: Path) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": str(package)}
    done = subprocess.run([sys.executable, "-c", CHILD, str(task_file)], env=env, check=True,
                          capture_output=True, text=True, cwd=package)
    value, seconds = json.loads(done.stdout.strip().splitlines()[-1])
    return value, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, help="the peer: a commit of this repository")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--plan-repeats", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "results" / "programmes.md"))
    args = parser.parse_args()
    if args.repeats < 1 or args.plan_repeats < 0:
        print("error: --repeats takes a positive number, --plan-repeats one >= 0",
              file=sys.stderr)
        return 2
    stamp = (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.machine()}, "
             f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        peer = package_at(args.before, Path(folder))
        for index, (label, task) in enumerate(cases()):
            task_file = Path(folder) / f"task{index}.json"
            task_file.write_text(json.dumps(task))
            times = {"now": [], "peer": []}
            values = {"now": set(), "peer": set()}
            for repeat in range(args.repeats):
                order = ("now", "peer") if repeat % 2 == 0 else ("peer", "now")
                for who in order:
                    print(f"[bench_programmes] {label}: {who}, run {repeat + 1} ...",
                          file=sys.stderr, flush=True)
                    value, seconds = run_child(ROOT if who == "now" else peer, task_file)
                    times[who].append(seconds)
                    values[who].add(value)
            now, was = statistics.median(times["now"]), statistics.median(times["peer"])
            same = values["now"] == values["peer"] and len(values["now"]) == 1
            value = next(iter(values["now"]))
            rows.append(f"| {label} | {value:,.1f} | {'yes' if same else 'NO'} | {now:.2f} | "
                        f"{was:.2f} | {was / now:.2f}x |")
            print(rows[-1], file=sys.stderr, flush=True)
        planned = plan_runs(peer, args.plan_repeats)
    ratios = [float(r.rsplit("|", 2)[-2].strip().rstrip("x")) for r in rows]
    lines = ["# The relaxations' dynamic programmes against a peer commit", "",
             f"Written by `benchmarks/bench_programmes.py` (see its docstring). Command: "
             f"`python benchmarks/bench_programmes.py --before {args.before} --repeats "
             f"{args.repeats} --plan-repeats {args.plan_repeats}` ({stamp}).", "",
             f"Medians of {args.repeats} runs each, this tree and the package of commit "
             f"{args.before} alternating; seconds to the programme's end (device: all 8 devices; "
             f"window and chunk: one). Value: the bound it computes (the largest over the "
             f"devices for `device`).", "",
             "| case | value | same value | now s | peer s | peer / now |",
             "|---|---:|---|---:|---:|---:|", *rows, "",
             f"Median peer / now over the cases: {statistics.median(ratios):.2f}x.", ""]
    if planned:
        lines += ["## plan on the v128k tight row", "",
                  "`plan()` with 60 s on the Llama-3-8B shape, 32 blocks, vocabulary 128,256, "
                  "p=8, m=32, tight cap (bench_plan's row), this tree and the peer alternating. "
                  "The bound is what plan certifies over all splits.", "",
                  "| run | package | span | bound | gap |", "|---:|---|---:|---:|---:|",
                  *planned, ""]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    print(f"[bench_programmes] wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
