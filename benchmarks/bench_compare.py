"""Wall time of `zbopt compare` (the real CLI, in a subprocess) at p=64 and p=32, m=256, caps 1p
and 2p, with one and two worker processes; per-method times; where a method's time goes
(generation, evaluate(), the lower bound). Writes results/compare.md. Target: p=64, m=256 in
under 10 s.

Usage: python benchmarks/bench_compare.py [--repeats N] [--cases 64:2p,32:1p] [--no-split]
       [--before REV]  (also runs commit REV's package, the peer, in the same run)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from peer import package_at

ROOT = Path(__file__).resolve().parents[1]
COSTS = {"t_f": 5, "t_b": 6, "t_w": 4, "comm": 1, "m_b": 1, "m_w": 0.5}
TARGET = 10.0
LOADED = 1.5  # a 1-minute load average above this (2 cores) means other work shared the CPU


def instance_file(folder: Path, p: int, cap: str) -> Path:
    path = folder / f"p{p}-m256-{cap}.toml"
    body = [f"devices = {p}", "microbatches = 256"] + [f"{k} = {v}" for k, v in COSTS.items()]
    path.write_text("\n".join(body + [f'memory_cap = "{cap}"', ""]))
    return path


def cli(path: Path, *extra: str, root: Path = ROOT) -> tuple[float, float, str]:
    """(wall s, CPU s of the command and its workers, stdout) of one `zbopt compare` of the
    package in `root` (`python -m` runs the zbopt/ of its working directory)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "zbopt", "compare", str(path), "--quiet", *extra],
                          cwd=root, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def split(p: int, cap: str) -> list[tuple[str, float, float, float]]:
    """Per method, in this process: (name, generation s, evaluate() s, lower bound s)."""
    from zbopt.instance import Instance
    from zbopt.registry import methods, prepare, schedule_bound
    from zbopt.schedule import evaluate
    base = Instance(devices=p, microbatches=256, **COSTS).with_cap(cap)
    out, bounded = [], set()
    for name, method in methods("schedule").items():
        placed = prepare(method, base)
        began = time.perf_counter()
        try:
            order = method.generate(placed, **method.params)
        except Exception:  # noqa: BLE001 (a method that does not apply: its time is all generation)
            out.append((name, time.perf_counter() - began, 0.0, 0.0))
            continue
        generated = time.perf_counter()
        evaluate(placed, order)
        evaluated = time.perf_counter()
        bound = 0.0
        if placed not in bounded:  # computed once per placement (registry.run caches it)
            schedule_bound(placed)
            bound = time.perf_counter() - evaluated
            bounded.add(placed)
        out.append((name, generated - began, evaluated - generated, bound))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cases", default="64:1p,64:2p,32:1p,32:2p")
    parser.add_argument("--no-split", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "results" / "compare.md"))
    parser.add_argument("--before", default="", help="also time this commit's package (2 processes)")
    args = parser.parse_args()
    cases = [(int(c.split(":")[0]), c.split(":")[1]) for c in args.cases.split(",")]
    folder = Path(tempfile.mkdtemp())
    loads = [os.getloadavg()[0]]
    rows, per_method = [], {}
    earlier = package_at(args.before, folder) if args.before else None
    for p, cap in cases:
        path = instance_file(folder, p, cap)
        result = {}
        for jobs in (1, 2):
            runs = []
            for _ in range(args.repeats):
                runs.append(cli(path, "--jobs", str(jobs))[:2])
                loads.append(os.getloadavg()[0])
            result[jobs] = (statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs),
                            min(w for w, _ in runs))
        peer = ""
        if earlier is not None:
            runs = []
            for _ in range(args.repeats):
                runs.append(cli(path, "--jobs", "2", root=earlier)[0])
                loads.append(os.getloadavg()[0])
            was = statistics.median(runs)
            peer = f" {was:.1f} ({min(runs):.1f}) | {was / result[2][0]:.2f}x |"
        wall, cpu, out = cli(path, "--jobs", "1", "--json")
        loads.append(os.getloadavg()[0])
        per_method[(p, cap)] = {r["method"]: r["runtime"] for r in json.loads(out)}
        row = (f"| {p} | 256 | {cap} | {result[1][0]:.1f} ({result[1][2]:.1f}) | {result[1][1]:.1f} "
               f"| {result[2][0]:.1f} ({result[2][2]:.1f}) | {result[2][1]:.1f} "
               f"| {result[1][0] / result[2][0]:.2f}x | {'yes' if result[2][0] < TARGET else 'no'} |"
               + peer)
        print(row, flush=True)
        rows.append(row)
    shared = max(loads) > LOADED
    cpu_model = next((line.split(":", 1)[1].strip() for line in
                      Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
                     platform.processor()) if Path("/proc/cpuinfo").exists() else platform.processor()
    lines = [
        "# `zbopt compare` at scale", "",
        f"Target: `zbopt compare` at p=64, m=256 in under {TARGET:g} s (wall, the whole command: "
        "start-up, every family and heuristic, the table and verdict).", "",
        "Instances: contiguous, t_f/t_b/t_w = 5/6/4, comm 1, m_b 1, m_w 0.5, m=256. Command per "
        "row: `python -m zbopt compare FILE --quiet --jobs N` (a subprocess), "
        f"median of {args.repeats} runs (fastest in brackets); CPU = user + system seconds of the "
        "command and its workers. `--jobs 2` is the default on a machine with 2 cores.", "",
        (f"*before*: the same command (2 processes) run by the package of commit "
         f"`{args.before}`, in the same run, case by case." if args.before else ""), "",
        "| p | m | cap | wall, 1 process (s) | CPU (s) | wall, 2 processes (s) | CPU (s) "
        "| 1 / 2 | under target |" + (" before, 2 processes (s) | before / now |" if args.before else ""),
        "|" + "---|" * (11 if args.before else 9), *rows, "",
        f"Machine: {cpu_model}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{platform.system()}. 1-minute load average between runs (these runs included): {min(loads):.1f} to "
        f"{max(loads):.1f}" + (": other work shared the CPU during these runs, so the seconds "
                               "are longer than on a quiet machine (the 2-process runs lose "
                               "the most: their second core was not free)." if shared else
                               " (a quiet machine)."), "",
        "## Per method", "",
        "Seconds each method took inside the command (`runtime` of `zbopt compare --json "
        "--jobs 1`: generation and evaluate(), and the lower bound for the first method of a "
        "placement), one run.", ""]
    keys = list(per_method)
    lines += ["| method | " + " | ".join(f"p={p} {cap}" for p, cap in keys) + " |",
              "|---|" + "---|" * len(keys)]
    names = list(per_method[keys[0]])
    for name in sorted(names, key=lambda n: -per_method[keys[0]][n]):
        lines.append(f"| {name} | " + " | ".join(f"{per_method[k].get(name, 0):.2f}" for k in keys) + " |")
    lines.append("| **sum** | " + " | ".join(f"**{sum(per_method[k].values()):.1f}**" for k in keys)
                 + " |")
    if not args.no_split:
        p, cap = cases[0]
        parts = split(p, cap)
        loads.append(os.getloadavg()[0])
        lines += ["", f"## Where the time goes (p={p}, m=256, cap {cap}, in one process)", "",
                  "Seconds of each step, measured in-process with `perf_counter` (one run): the "
                  "method's generator, `evaluate()` of its schedule, and the lower bound "
                  "(`registry.schedule_bound`, computed once per placement).", "",
                  "| method | generate | evaluate | bound |", "|---|---|---|---|"]
        for name, g, e, b in sorted(parts, key=lambda t: -t[1]):
            lines.append(f"| {name} | {g:.2f} | {e:.2f} | {b:.2f} |")
        total = [sum(t[i] for t in parts) for i in (1, 2, 3)]
        lines.append(f"| **sum** | **{total[0]:.1f}** | **{total[1]:.1f}** | **{total[2]:.1f}** |")
    command = f"python benchmarks/bench_compare.py --repeats {args.repeats} --cases {args.cases}" \
              + (f" --before {args.before}" if args.before else "")
    lines += ["", f"Command: `{command}{' --no-split' if args.no_split else ''}`", ""]
    Path(args.out).write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
