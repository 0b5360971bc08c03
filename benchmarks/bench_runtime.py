"""Predicted against measured step time: profile llama-tiny, plan it, run 1f1b, zb-h1 and the plan.

    python benchmarks/bench_runtime.py [--steps 5] [--warmup 2] [--out results/runtime.md]

On this machine, two gloo processes (one torch thread each): `zbopt profile --preset llama-tiny`
measures every layer, `zbopt plan` chooses split and schedule, then for m = 8 and 16 each of
1f1b, zb-h1 (both on the plan's split) and the plan runs `--steps` timed steps after `--warmup`
(zbopt.export.timing.time_many, the code behind `zbopt verify-torch --timed`; the three
schedules run in one launch, their steps alternating, so drifting load touches all alike). Reported per run:
the predicted span (evaluate() on the profiled costs), the measured span (median over steps, and
its range), the error, and the span re-predicted from the costs measured in the run itself, which
separates what the profile got wrong from what the schedule model gets wrong. Writes markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from zbopt.export.chrome_trace import time_scale  # noqa: E402
from zbopt.export.schedule_file import read_schedule_file  # noqa: E402
from zbopt.export.timing import preset_of, time_many  # noqa: E402
from zbopt.export.torchtitan import split_fqns  # noqa: E402
from zbopt.registry import generate, get_method, prepare  # noqa: E402
from zbopt.schedule import evaluate  # noqa: E402

METHODS = ("1f1b", "zb-h1")
ALTERNATING = ", the three schedules alternating step by step in one launch"


def progress(text: str) -> None:
    print(f"[bench_runtime {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def zbopt(*argv: str) -> None:
    subprocess.run([sys.executable, "-m", "zbopt", *argv], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)


def seconds_per_unit(instance) -> float:
    return time_scale(instance.time_unit)[0] * 1e-6


def measured_instance(instance, timing):
    """The instance with the per-stage costs measured in the run (contiguous: one stage per
    device); a fused backward's time is split as the profile splits B and W."""
    t_f, t_b, t_w = list(instance.t_f), list(instance.t_b), list(instance.t_w)
    unit = seconds_per_unit(instance)
    m = instance.microbatches
    for dev in timing.per_device:
        (stage,) = instance.stages_of(dev.device)
        got = dev.measured
        t_f[stage] = got["F"] / m / unit
        if "BW" in got:
            share = t_b[stage] / max(t_b[stage] + t_w[stage], 1e-12)
            t_b[stage], t_w[stage] = (got["BW"] * share / m / unit,
                                      got["BW"] * (1 - share) / m / unit)
        else:
            t_b[stage], t_w[stage] = got["B"] / m / unit, got["W"] / m / unit
    return replace(instance, t_f=tuple(t_f), t_b=tuple(t_b), t_w=tuple(t_w))


def schedule_for(method: str, plan):
    """`method` on the plan's split and placement."""
    placed = prepare(get_method(method), plan.instance)
    return placed, generate(method, placed)


def run(args) -> tuple[list[dict], dict]:
    load = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-runtime-") as work:
        model_path = Path(work) / "llama-tiny.toml"
        progress("profiling llama-tiny (zbopt profile --preset llama-tiny)")
        zbopt("profile", "--preset", "llama-tiny", "--devices", "2", "--microbatches", "8",
              "--out", str(model_path))
        for m in args.microbatches:
            plan_path = Path(work) / f"plan-m{m}.json"
            progress(f"m={m}: zbopt plan")
            zbopt("plan", str(model_path), "--microbatches", str(m), "--out", str(plan_path),
                  "--quiet", "--time-limit", "30")
            plan = read_schedule_file(plan_path)
            layers = plan.meta["partition"]["stages"]
            fqns = [split_fqns(names) for names in layers]
            spec = preset_of(plan.meta["model"], m)
            runs = [(name, *schedule_for(name, plan)) for name in METHODS]
            runs.append((f"plan ({plan.method})", plan.instance, plan.schedule))
            progress(f"m={m}: timing {', '.join(r[0] for r in runs)}, {args.warmup} + "
                     f"{args.steps} steps each, alternating")
            timings = time_many([(inst, sched) for _, inst, sched in runs], spec, fqns,
                                steps=args.steps, warmup=args.warmup, stage_layers=layers)
            for (label, instance, schedule), timing in zip(runs, timings):
                again = evaluate(measured_instance(instance, timing), schedule).span
                unit = seconds_per_unit(instance)
                rows.append({
                    "m": m, "schedule": label, "split": "+".join(map(str, plan.meta["partition"]
                                                                     ["sizes"])),
                    "predicted": timing.predicted_span, "measured": timing.measured_span,
                    "low": min(timing.measured_spans), "high": max(timing.measured_spans),
                    "error": timing.error, "repredicted": again * unit,
                    "repredicted_error": (timing.measured_span - again * unit) / (again * unit),
                    "busy": [{k: v for k, v in d.measured.items()} for d in timing.per_device],
                    "busy_predicted": [dict(d.predicted) for d in timing.per_device],
                })
    meta = {"steps": args.steps, "warmup": args.warmup, "load_before": load[0],
            "load_after": os.getloadavg()[0], "cores": os.cpu_count(),
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "microbatches": list(args.microbatches), "alternating": True}
    return rows, meta


def render(rows: list[dict], meta: dict) -> str:
    lines = []
    lines.append("# Predicted against measured step time (llama-tiny, 2 processes, CPU)\n")
    lines.append(f"Made by `python benchmarks/bench_runtime.py --steps {meta['steps']} --warmup "
                 f"{meta['warmup']}` on {meta['when']}: "
                 f"`zbopt profile --preset llama-tiny` (1 thread), `zbopt plan`, then each "
                 f"schedule timed with `zbopt.export.timing.time_many` (what `zbopt "
                 f"verify-torch PLAN --timed` runs): two gloo processes, one torch thread each, "
                 f"{meta['warmup']} warm-up and {meta['steps']} timed steps per schedule"
                 f"{ALTERNATING if meta.get('alternating') else ''}, span = max over devices "
                 f"of last pass end - first pass start, median over the steps.\n")
    lines.append(f"The machine has {meta['cores']} cores shared with other work: load average "
                 f"{meta['load_before']:.1f} before, {meta['load_after']:.1f} after (1-minute).\n")
    lines.append("| m | schedule | split | predicted ms | measured ms (min-max) | error | "
                 "re-predicted from measured costs ms | error vs re-predicted | busy ms, all "
                 "devices (measured / profile) |")
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lines.append(f"| {r['m']} | {r['schedule']} | {r['split']} | {r['predicted'] * 1e3:.0f} "
                     f"| {r['measured'] * 1e3:.0f} ({r['low'] * 1e3:.0f}-{r['high'] * 1e3:.0f}) "
                     f"| {r['error']:+.1%} | {r['repredicted'] * 1e3:.0f} | "
                     f"{r['repredicted_error']:+.1%} | {_busy(r['busy']) * 1e3:.0f} / "
                     f"{_busy(r['busy_predicted']) * 1e3:.0f} |")
    errors = [abs(r["error"]) for r in rows]
    again = [abs(r["repredicted_error"]) for r in rows]
    lines.append(f"\nMedian |error| against the profile's prediction: "
                 f"**{statistics.median(errors):.1%}** (target 15%); against the span "
                 f"re-predicted from the run's own per-pass costs: "
                 f"**{statistics.median(again):.1%}**.\n")
    lines.append("Order of the three schedules (fastest first), predicted and measured:\n")
    for m in meta["microbatches"]:
        mine = [r for r in rows if r["m"] == m]
        predicted = [r["schedule"] for r in sorted(mine, key=lambda r: r["predicted"])]
        measured = [r["schedule"] for r in sorted(mine, key=lambda r: r["measured"])]
        verdict = "same" if predicted == measured else "differs"
        lines.append(f"- m={m}: predicted {' < '.join(predicted)}; measured "
                     f"{' < '.join(measured)} ({verdict})")
    ratios = sorted(sum(d.values()) / sum(w.values()) for r in rows
                    for d, w in zip(r["busy"], r["busy_predicted"]))
    error = statistics.median(abs(r["error"]) for r in rows) if rows else float("nan")
    gaps = max(_gaps(rows, meta))
    lines.append(f"\n**What limits the prediction.** The span `evaluate()` computes from the costs "
                 f"measured in the same run is within {statistics.median(again):.1%} (median) of "
                 f"the measured span, so the schedule model (pass order, dependencies, the "
                 f"span) holds on the real runtime. The rest of the error comes from the costs: "
                 f"a device's measured busy time per step is {ratios[0]:.1f}x to "
                 f"{ratios[-1]:.1f}x (median {statistics.median(ratios):.1f}x) what the profile "
                 f"predicts (the profile ran one process on a core; here two processes share "
                 f"{meta['cores']} cores, load average {meta['load_before']:.0f}-"
                 f"{meta['load_after']:.0f}), and the spread of one schedule's steps (min-max "
                 f"above) is of the same size. "
                 + ("The median error is within the 15% target. " if error <= 0.15 else
                    "With costs off by that much the 15% target is not met on this run. ")
                 + f"The predicted spans of the three schedules are within {gaps:.0%} of each "
                 f"other, less than that noise, so their measured order is not a test of the "
                 f"prediction here. Two systematic gaps remain: torch computes no input gradient "
                 f"on the first stage (its B is ~0 and W holds the whole backward, unlike the "
                 f"profile's split), and the same passes cost more under some schedules than "
                 f"others (the busy time, not only the idle time, differs by schedule), which a "
                 f"model with one cost per pass cannot predict.\n")
    lines.append("\nBusy time per device and pass kind, measured (median per step) against the "
                 "profile, ms:\n")
    lines.append("| m | schedule | device | kind | measured | predicted |")
    lines.append("|---|---|---|---|---|---|")
    for r in rows:
        for d, (got, want) in enumerate(zip(r["busy"], r["busy_predicted"])):
            for kind in sorted(set(got) | set(want)):
                lines.append(f"| {r['m']} | {r['schedule']} | {d} | {kind} | "
                             f"{got.get(kind, 0) * 1e3:.0f} | {want.get(kind, 0) * 1e3:.0f} |")
    lines.append("\nRaw rows (JSON):\n\n```json\n" + json.dumps({"meta": meta, "rows": rows})
                 + "\n```\n")
    return "\n".join(lines) + "\n"


def _busy(devices: list[dict]) -> float:
    return sum(sum(d.values()) for d in devices)


def _gaps(rows: list[dict], meta: dict) -> list[float]:
    """Per m, how far apart the predicted spans of the three schedules are (max/min - 1)."""
    out = []
    for m in meta["microbatches"]:
        spans = [r["predicted"] for r in rows if r["m"] == m]
        out.append(max(spans) / min(spans) - 1)
    return out


def rows_from(path: Path) -> tuple[list[dict], dict]:
    """The raw rows and settings a previous run embedded in its markdown."""
    text = path.read_text()
    body = text.split("```json\n", 1)[1].split("\n```", 1)[0]
    data = json.loads(body)
    return data["rows"], data["meta"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--microbatches", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--out", default=str(ROOT / "results" / "runtime.md"))
    parser.add_argument("--render", metavar="MD", help="only re-render a previous run's markdown")
    args = parser.parse_args()
    rows, meta = rows_from(Path(args.render)) if args.render else run(args)
    Path(args.out).write_text(render(rows, meta))
    progress(f"wrote {args.out}")


if __name__ == "__main__":
    main()
