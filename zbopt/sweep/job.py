"""Run one sweep job (in a worker process or a Ray task) into a plain JSON-able record.

Every number comes from zbopt.compare.run_method (families, heuristics) or zbopt.solvers.solve,
both judged by the one evaluator; this module only copies them out.

Record `status`: "ok" (a schedule was evaluated), "not-applicable" (the family's preconditions
fail, with `reason`), "no-schedule" (a solver found none within its limit), "error" (an
exception, a crashed worker or a timeout, with `error`).
"""

from __future__ import annotations

import time
import traceback
from datetime import datetime, timezone
from typing import Any

from ..errors import ZboptError
from ..instance import Instance
from ..schedule import Timeline
from .spec import Job


def describe_instance(instance: Instance) -> dict[str, Any]:
    """The instance fields reports group and plot by."""
    cap = instance.cap
    unit = instance.devices * instance.activation_unit
    return {
        "instance_name": instance.name,
        "devices": instance.devices,
        "microbatches": instance.microbatches,
        "placement": instance.placement,
        "memory_cap": _plain_cap(instance.memory_cap),
        "cap": max(cap) if cap else None,
        # the cap as a multiple of p (one "1p" = the 1F1B peak on device 0)
        "cap_p": round(max(cap) / unit, 6) if cap and unit else None,
    }


def _plain_cap(spec: Any) -> Any:
    return list(spec) if isinstance(spec, tuple) else spec


def timeline_fields(timeline: Timeline) -> dict[str, Any]:
    schedule = timeline.schedule
    return {
        "run_placement": timeline.instance.placement,
        "run_chunks": timeline.instance.chunks,
        "makespan": timeline.makespan,
        "span": timeline.span,
        "ideal": timeline.ideal,
        "bubble_rate": timeline.bubble_rate,
        "peak_memory": max(timeline.peak_memory),
        "fits_cap": timeline.fits_cap,
        # the orders themselves, so any result can be re-evaluated later
        "schedule": schedule.text(),
        "release": list(schedule.release) if schedule.release is not None else None,
    }


def base_record(job: Job) -> dict[str, Any]:
    """What a record says about its job before (or without) running it."""
    record: dict[str, Any] = {"key": job.key, "instance": job.instance,
                              "method": job.method.label, "method_spec": job.method.to_dict()}
    try:
        record.update(describe_instance(Instance.from_dict(job.instance)))
    except ZboptError:
        record["instance_name"] = job.instance.get("name", "")
    return record


def error_record(job: Job, error: str, runtime: float | None = None) -> dict[str, Any]:
    return {**base_record(job), "status": "error", "error": error, "runtime": runtime,
            "finished_at": _now()}


def run_job(job: Job) -> dict[str, Any]:
    """Run one job; never raises (an exception becomes an error record)."""
    t0 = time.perf_counter()
    try:
        record = base_record(job)
        instance = Instance.from_dict(job.instance)
        if job.method.kind == "solver":
            record.update(_run_solver(job, instance))
        else:
            record.update(_run_family(job, instance))
    except Exception as err:  # noqa: BLE001  a bug in one method must not stop the sweep
        return error_record(job, _describe_exception(err), time.perf_counter() - t0)
    record["runtime"] = time.perf_counter() - t0
    record["finished_at"] = _now()
    return record


def _run_family(job: Job, instance: Instance) -> dict[str, Any]:
    from ..compare import run_method
    if instance.cap is not None:
        # the absolute cap: a family that re-places the model (dualpipe keeps two copies) gets
        # the same memory, not its own placement's reading of "kp"
        instance = instance.with_cap(list(instance.cap))
    row = run_method(job.method.name, instance, **dict(job.method.params))
    out: dict[str, Any] = {"kind": row.kind}
    if not row.applies:
        out.update(status="not-applicable", reason=row.message)
        return out
    out.update(status="ok", **timeline_fields(row.timeline))
    return out


def _run_solver(job: Job, instance: Instance) -> dict[str, Any]:
    try:
        from ..solvers import solve
        params = dict(job.method.params)
        result = solve(instance, solver=job.method.name, objective=params["objective"],
                       time_limit=params["time_limit"], threads=params["threads"])
    except ImportError as err:
        raise ZboptError(f"solvers are not available: {err}") from None
    out: dict[str, Any] = {
        "kind": "solver", "solver_status": result.status, "objective": result.objective,
        "lower_bound": result.lower_bound, "gap": result.gap, "solver_runtime": result.runtime,
        "scale": result.scale,
    }
    if result.timeline is None:
        out.update(status="no-schedule", reason=result.message or result.status)
        return out
    out.update(status="ok", **timeline_fields(result.timeline))
    return out


def _describe_exception(err: BaseException) -> str:
    frames = traceback.extract_tb(err.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(err).__name__}: {err}{where}"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
