"""Time evaluate() and validate() at p=32 and p=64, m=256 against the evaluator before the pass
table (loaded from git into a temporary module, in the same run); write results/evaluate.md.

"warm": the instance's pass table is already built (a second schedule on the same instance, as
in compare); "cold": it is built inside the timed call. The old evaluator has no table.

Usage: python benchmarks/bench_evaluate.py [--repeats N] [--before COMMIT]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from zbopt import schedule
from zbopt.instance import Instance
from zbopt.registry import methods, prepare

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "99bab19"  # the last commit with the dict-based evaluator
SCHEDULES = ("1f1b", "zb-h1", "interleaved-1f1b", "zb-v")


def load_before(commit: str):
    """zbopt/schedule.py as of `commit`, as a module of the zbopt package (its relative imports
    resolve against today's passes.py and instance.py, which it calls unchanged)."""
    source = subprocess.run(["git", "show", f"{commit}:zbopt/schedule.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "schedule_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("zbopt._schedule_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def timed(fn, *args, before=None) -> float:
    if before is not None:
        before()
    began = time.perf_counter()
    fn(*args)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--before", default=BEFORE)
    args = parser.parse_args()
    old = load_before(args.before)
    load = os.getloadavg()
    lines = ["# evaluate() speed", "",
             f"Median seconds of `evaluate()` / `validate()` over {args.repeats} runs (interleaved "
             f"with the old evaluator's, so both see the same machine), and the ratio old / new. "
             f"Old: `zbopt/schedule.py` as of commit {args.before} (dict-based, run in the same "
             f"process). Costs t_f/t_b/t_w = 5/6/4, comm 1, m_b 1, m_w 0.5, cap 2p.", "",
             "| p | m | schedule | passes | old evaluate | new warm | ratio | new cold | ratio cold "
             "| old validate | new validate | ratio |", "|" + "---|" * 12]
    for p in (32, 64):
        base = Instance(devices=p, microbatches=256, t_f=5, t_b=6, t_w=4, comm=1, m_b=1, m_w=0.5,
                        memory_cap="2p")
        for name in SCHEDULES:
            method = methods()[name]
            instance = prepare(method, base)
            order = method.generate(instance, **method.params)
            a = old.evaluate(instance, order)
            b = schedule.evaluate(instance, order)
            assert (a.item_times, a.peak_memory, a.memory_curve, a.start, a.end) == \
                (b.item_times, b.peak_memory, b.memory_curve, b.start, b.end), name
            old_e, new_e, new_c, old_v, new_v = [], [], [], [], []
            for _ in range(args.repeats):
                old_e.append(timed(old.evaluate, instance, order))
                new_e.append(timed(schedule.evaluate, instance, order))
                new_c.append(timed(schedule.evaluate, instance, order,
                                   before=schedule._table.cache_clear))
                old_v.append(timed(old.validate, instance, order))
                new_v.append(timed(schedule.validate, instance, order))
            m = {k: statistics.median(v) for k, v in
                 dict(oe=old_e, ne=new_e, nc=new_c, ov=old_v, nv=new_v).items()}
            row = (f"| {p} | 256 | {name} | {instance.num_passes:,} | {m['oe']:.3f} | {m['ne']:.3f} "
                   f"| {m['oe'] / m['ne']:.1f}x | {m['nc']:.3f} | {m['oe'] / m['nc']:.1f}x "
                   f"| {m['ov']:.3f} | {m['nv']:.3f} | {m['ov'] / m['nv']:.1f}x |")
            print(row, flush=True)
            lines.append(row)
    after = os.getloadavg()
    lines += ["", f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
              f"{platform.python_version()}. Load average (1 min) {load[0]:.1f} at the start, "
              f"{after[0]:.1f} at the end" + (" — other work shared the CPU, so the seconds are "
                                               "inflated; the ratios compare runs side by side."
                                               if max(load[0], after[0]) > 1.5 else "."),
              "", "Both evaluators give the same item times, per-pass times, peaks and memory "
              "curves on every schedule above (checked by the script before timing).", "",
              f"Command: `python benchmarks/bench_evaluate.py --repeats {args.repeats}`", ""]
    out = ROOT / "results" / "evaluate.md"
    out.write_text("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
