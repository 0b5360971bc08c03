"""zbopt sweep SPEC --out DIR: run every (instance, method) job of a spec, resumable."""

from __future__ import annotations

import argparse
import sys

from ..errors import ZboptError
from ..progress import wanted
from ..sweep.spec import MAX_JOBS

_SPEC_HELP = """spec format (see sweeps/*.toml; top-level keys come before the tables):
  name = "grid"
  instances = ["instances/paper/*.toml"]   # files/globs (relative to the spec) or shipped
                                           # names (`zbopt instances`), and/or [base];
                                           # a layered model runs on the even split, its axes
                                           # its pipeline settings (devices, memory_cap...)
  methods = "all"                          # or ["1f1b", "zb-h1", {name = ..., params = {}}]
                                           # (params: the keywords the method takes)
  job_timeout = 600                        # optional: seconds before a job is killed
  [base]                                   # a base instance (table, or base = "file.toml"
                                           # or a shipped name)
  devices = 4
  microbatches = 8
  [axes]                                   # any instance key; cartesian product over
  microbatches = [8, 16, 32]               # every base (the [base] and each file)
  memory_cap = ["1p", "2p", "none"]
  [[solvers]]
  name = "cpsat"                           # any solver of `zbopt methods`
  time_limit = 30
  threads = 1
"""


def register(sub) -> None:
    parser = sub.add_parser(
        "sweep", help="run a sweep spec (instances x methods) into a resumable result store",
        description="Run every job of a sweep spec (TOML); finished jobs are appended to "
                    "OUT/results.jsonl and skipped on a rerun; Ctrl-C keeps them.",
        epilog=_SPEC_HELP + f"A spec gives at most {MAX_JOBS:,} jobs (bases x grid points x "
                            f"methods).\n",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", help="sweep spec (.toml)")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="result folder, e.g. results/NAME (created if missing; one "
                             "sweep at a time writes into it)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="parallel jobs: worker processes (default 1) or, with --executor "
                             "ray, tasks in flight (default: the cluster's CPUs)")
    parser.add_argument("--executor", choices=("local", "ray"), default="local")
    parser.add_argument("--address", default=None,
                        help="Ray cluster address (default: start a local Ray)")
    parser.add_argument("--retry-errors", action="store_true",
                        help="run again the jobs recorded with an error")
    parser.add_argument("--no-report", action="store_true",
                        help="skip writing results.csv/results.md/plots at the end")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--progress", action="store_true",
                        help="show the progress bar (with its ETA) on stderr even when it is not "
                             "a terminal")
    parser.add_argument("--force", action="store_true",
                        help="use an --out folder that holds other files or another spec's results")
    parser.set_defaults(func=run)


def run(args) -> int:
    from ..sweep.run import run_sweep
    from ..sweep.spec import load_spec
    if args.jobs is not None and args.jobs < 1:
        raise ZboptError(f"--jobs must be >= 1, got {args.jobs}")
    jobs = args.jobs if args.jobs is not None or args.executor == "ray" else 1
    spec = load_spec(args.spec)
    summary = run_sweep(spec, args.out, jobs=jobs, executor=args.executor,
                        address=args.address, retry_errors=args.retry_errors,
                        progress=wanted(args),
                        report=not args.no_report, spec_path=args.spec, force=args.force)
    left = summary.total - summary.skipped - summary.ran
    print(f"{spec.name}: {summary.total} jobs, {summary.skipped} already done, "
          f"{summary.ran} run now ({summary.errors} errors), {left} left; "
          f"results in {summary.out}/results.jsonl")
    if summary.interrupted:
        print("zbopt: interrupted: finished jobs are kept; rerun the same command to continue",
              file=sys.stderr)
        return 130
    return 0
