"""Schedule generation: the generators of a base commit against the working tree, same run.

Two checks, each generator run in a fresh process on its own code:

- equivalence: every registered schedule generator on a set of instances (contiguous, v and
  interleaved; small and large; several caps; uneven per-stage costs; comm 0 and 1) must give
  the SAME orders with the base commit's generator files as with the working tree's. The
  "old" tree is the working tree's zbopt/ with only the generator files (GENERATOR_FILES)
  taken from the base commit, so changes elsewhere (evaluate(), other heuristics) do not count.
- speed: CPU seconds of one generate() per method at p=32 and p=64, m=256, old and new in the
  same run, with the ratio old / new (generation only: no evaluate() of the result).

Writes results/generate.md.

Usage: python benchmarks/bench_generate.py [--base COMMIT] [--repeats N] [--out PATH]
       [--skip-speed] [--quick]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The generators whose speed work this benchmark checks (the rest of zbopt/ is shared).
GENERATOR_FILES = (
    "zbopt/families/dualpipe.py", "zbopt/families/gpipe.py", "zbopt/families/interleaved.py",
    "zbopt/families/one_f_one_b.py", "zbopt/families/zbv.py",
    "zbopt/families/zero_bubble_handcrafted.py", "zbopt/heuristics/_engine.py",
    "zbopt/heuristics/_search.py", "zbopt/heuristics/zb_greedy.py",
    "zbopt/heuristics/list_scheduler.py", "zbopt/heuristics/v_greedy.py",
    "zbopt/heuristics/interleaved_zb.py", "zbopt/heuristics/refine.py",
    "zbopt/heuristics/local_search.py", "zbopt/heuristics/sink_placement.py",
)
SPEED_NOTE = " (with the speed runs' p=32 and p=64)"
# The last commit before the generator speed work.
DEFAULT_BASE = "99bab19"

COSTS = [  # (name, instance fields besides devices and microbatches)
    ("unit", dict(t_f=1, t_b=1, t_w=1)),
    ("5/6/4 comm 1", dict(t_f=5, t_b=6, t_w=4, comm=1, m_b=1, m_w=0.5)),
    ("1.5B", dict(t_f=18522, t_b=18086, t_w=9337, comm=601, m_b=201216, m_w=73728)),
]


def uneven(p: int, stages: int) -> dict:
    """Per-stage costs that differ from stage to stage (a heavier first and last stage)."""
    t_f = [3 + (s % 3) + (2 if s in (0, stages - 1) else 0) for s in range(stages)]
    t_b = [4 + (s * 7) % 4 for s in range(stages)]
    t_w = [2 + (s * 5) % 3 for s in range(stages)]
    m_b = [1 + (s % 2) for s in range(stages)]
    return dict(t_f=t_f, t_b=t_b, t_w=t_w, comm=1, m_b=m_b, m_w=[x / 2 for x in m_b])


def equivalence_jobs(quick: bool = False) -> list[dict]:
    """(instance fields, placement, chunks) of the equivalence set; every method on each."""
    jobs = []
    sizes = ((2, 4), (3, 7), (4, 8), (4, 12), (6, 24))
    for p, m in sizes[:3] if quick else sizes:
        for name, costs in COSTS:
            for cap in (None, "1p", "2p", "3p"):
                jobs.append(dict(label=f"p={p} m={m} {name} cap={cap}",
                                 fields=dict(devices=p, microbatches=m, memory_cap=cap, **costs)))
        for placement, stages in (("contiguous", p), ("v", 2 * p), ("interleaved", 2 * p)):
            for cap in (None, "1p", "2p"):
                jobs.append(dict(label=f"p={p} m={m} uneven {placement} cap={cap}",
                                 fields=dict(devices=p, microbatches=m, memory_cap=cap,
                                             placement=placement,
                                             chunks=1 if placement == "contiguous" else 2,
                                             **uneven(p, stages))))
    return jobs


# ----- worker: runs in a subprocess on one tree -----------------------------------------------

def _digest(schedule) -> str:
    return hashlib.sha256(repr(schedule.orders).encode()).hexdigest()[:16]


def worker(jobs: list[dict], timing: bool) -> list[dict]:
    from zbopt import registry
    from zbopt.errors import ZboptError
    from zbopt.instance import Instance

    out = []
    for job in jobs:
        instance = Instance(**job["fields"])
        for name, method in registry.methods("schedule").items():
            try:
                target = registry.prepare(method, instance)
            except ZboptError:
                continue
            _forget_searches()
            t0 = time.process_time()
            try:
                digest = _digest(registry.generate(name, target))
            except ZboptError as err:
                digest = "error: " + str(err)
            seconds = time.process_time() - t0
            out.append(dict(label=job["label"], method=name, digest=digest,
                            seconds=seconds if timing else None))
    return out


def _forget_searches() -> None:
    """Each method timed on its own: drop what a generator remembers from the previous one
    (zb-greedy under a 2p cap reuses zb-2p's search, which compare gains from)."""
    from zbopt.heuristics import zb_greedy

    recent = getattr(zb_greedy, "_RECENT", None)
    if recent is not None:
        recent.clear()


# ----- driver -----------------------------------------------------------------------------------

def snapshot(where: Path) -> Path:
    """A copy of the working tree's zbopt/, so both sides see the same other files even if
    they change while the benchmark runs."""
    shutil.copytree(ROOT / "zbopt", where / "zbopt",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return where


def old_tree(base: str, where: Path) -> Path:
    """The working tree's zbopt/ with GENERATOR_FILES from `base`."""
    snapshot(where)
    for path in GENERATOR_FILES:
        text = subprocess.run(["git", "show", f"{base}:{path}"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout
        (where / path).write_text(text)
    return where


def run_worker(tree: Path, jobs: list[dict], timing: bool) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run([sys.executable, __file__, "--worker", "--timing" if timing else "--no-timing"],
                          input=json.dumps(jobs), capture_output=True, text=True, env=env,
                          cwd=tree, check=False)
    if proc.returncode:
        raise SystemExit(f"worker on {tree} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def speed_jobs() -> list[dict]:
    return [dict(label=f"p={p} m=256 5/6/4 cap=2p",
                 fields=dict(devices=p, microbatches=256, memory_cap="2p", **COSTS[1][1]))
            for p in (32, 64)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", default=DEFAULT_BASE)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "results" / "generate.md"))
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--quick", action="store_true", help="equivalence on the smallest sizes only")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--timing", action=argparse.BooleanOptionalAction, default=False,
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(json.load(sys.stdin), args.timing)))
        return

    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        old = old_tree(args.base, Path(tmp) / "old")
        new = snapshot(Path(tmp) / "new")
        jobs = equivalence_jobs(args.quick)
        print(f"equivalence: {len(jobs)} instances, old tree", file=sys.stderr, flush=True)
        before = run_worker(old, jobs, False)
        print("equivalence: new tree", file=sys.stderr, flush=True)
        after = run_worker(new, jobs, False)
        speed: dict[tuple[str, str], dict[str, list[float]]] = {}
        if not args.skip_speed:
            for i in range(args.repeats):
                for side, tree in (("old", old), ("new", new)):
                    print(f"speed: run {i + 1}/{args.repeats}, {side}", file=sys.stderr, flush=True)
                    for row in run_worker(tree, speed_jobs(), True):
                        key = (row["label"], row["method"])
                        speed.setdefault(key, {"old": [], "new": []})[side].append(row["seconds"])
                        (before if side == "old" else after).append(row)
    load_after = os.getloadavg()[0]

    old_map: dict[tuple[str, str], set[str]] = {}
    new_map: dict[tuple[str, str], set[str]] = {}
    for rows, digests in ((before, old_map), (after, new_map)):
        for r in rows:
            digests.setdefault((r["label"], r["method"]), set()).add(r["digest"])
    differ = sorted(k for k in old_map.keys() | new_map.keys()
                    if old_map.get(k) != new_map.get(k) or len(old_map[k]) != 1)
    errors = sum(1 for d in old_map.values() if next(iter(d)).startswith("error"))
    lines = [
        "# Schedule generation: before and after the generator speed work",
        "",
        f"Base (old generators): commit `{args.base}`; new: the working tree. Both are copies of "
        f"the working tree's zbopt/ taken at the start, the old one with the generator files from "
        f"the base commit "
        f"({', '.join(Path(f).name for f in GENERATOR_FILES)}), each side run in its own process.",
        "",
        "## Equivalence",
        "",
        f"{len(jobs) + (2 if speed else 0)} instances"
        f"{SPEED_NOTE if speed else ''} "
        f"x every registered schedule generator on its placement: "
        f"{len(old_map)} (instance, method) runs ({errors} of them refuse the instance, and the "
        f"refusal text is compared too). Orders compared by a SHA-256 of the per-device orders.",
        "",
        f"**{len(old_map) - len(differ)} of {len(old_map)} identical; {len(differ)} differ.**",
        "",
    ]
    lines += [f"- differs: {label} / {method}" for label, method in differ[:50]]
    if speed:
        lines += [
            "",
            "## Speed",
            "",
            f"CPU seconds of one `generate()` (this process's CPU time, so load inflates it "
            f"less than wall clock), median of {args.repeats} runs, old and new alternating in "
            f"one benchmark run; each method on its own (nothing remembered from another "
            f"method's search). Instance: devices p, 256 micro-batches, t_f 5, t_b 6, t_w 4, "
            f"comm 1, m_b 1, m_w 0.5, memory_cap \"2p\", on each method's placement.",
            "",
            f"Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores; "
            f"1-minute load average {load_before:.1f} before, {load_after:.1f} after "
            f"(other work shared the CPU when it is above ~1).",
            "",
            "| method | p=32 old s | p=32 new s | p=32 old/new | p=64 old s | p=64 new s | "
            "p=64 old/new |",
            "|---|---|---|---|---|---|---|",
        ]
        methods = list(dict.fromkeys(m for _, m in speed))
        totals = {k: 0.0 for k in ("32old", "32new", "64old", "64new")}
        for method in methods:
            cells = []
            for p in (32, 64):
                t = speed.get((f"p={p} m=256 5/6/4 cap=2p", method))
                if t is None:
                    cells += ["-", "-", "-"]
                    continue
                o, n = statistics.median(t["old"]), statistics.median(t["new"])
                totals[f"{p}old"] += o
                totals[f"{p}new"] += n
                cells += [f"{o:.3f}", f"{n:.3f}", f"{o / n:.1f}x" if n else "-"]
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
        lines.append(f"| **sum** | {totals['32old']:.2f} | {totals['32new']:.2f} | "
                     f"{totals['32old'] / totals['32new']:.1f}x | {totals['64old']:.2f} | "
                     f"{totals['64new']:.2f} | {totals['64old'] / totals['64new']:.1f}x |")
    flags = (" --quick" if args.quick else "") + (" --skip-speed" if args.skip_speed else "") \
        + (f" --repeats {args.repeats}" if args.repeats != 3 else "")
    lines += ["", f"Command: `python benchmarks/bench_generate.py --base {args.base}{flags}`", ""]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))
    if differ:
        raise SystemExit(f"{len(differ)} (instance, method) runs differ from the base commit")


if __name__ == "__main__":
    main()
