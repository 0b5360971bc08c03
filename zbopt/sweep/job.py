"""Run one sweep job (in a worker process or a Ray task) into a plain JSON-able record.

A record is `Result.to_dict()` of the method's run (zbopt.registry.run: families, heuristics
and solvers alike, judged by the one evaluator) plus the job's own fields (JOB_FIELDS): its
key, the instance as the spec wrote it, the method's label and spec, the fields reports group
by, and the schedule's orders so any result can be re-evaluated later. `status` is the
Result's (optimal, feasible, heuristic, infeasible, not-applicable, error); a job that raised,
crashed its worker or timed out is an "error" with the reason in `message`.
"""

from __future__ import annotations

import time
import traceback
from datetime import datetime, timezone
from typing import Any

from ..errors import ZboptError
from ..instance import Instance
from ..result import Result
from .spec import Job

# The job's fields beside the Result's; none of them is a key of Result.to_dict().
JOB_FIELDS = ("key", "instance", "label", "method_spec", "instance_name", "devices",
              "microbatches", "instance_placement", "cap_spec", "cap_p", "schedule", "release",
              "finished_at")


def describe_instance(instance: Instance) -> dict[str, Any]:
    """The instance fields reports group and plot by."""
    cap_p = instance.cap_in_p()
    return {
        "instance_name": instance.name,
        "devices": instance.devices,
        "microbatches": instance.microbatches,
        "instance_placement": instance.placement,
        "cap_spec": _plain_cap(instance.memory_cap),
        # the cap as a multiple of p (one "1p" = the 1F1B peak on device 0)
        "cap_p": round(cap_p, 6) if cap_p is not None else None,
    }


def _plain_cap(spec: Any) -> Any:
    return list(spec) if isinstance(spec, tuple) else spec


def job_fields(job: Job) -> dict[str, Any]:
    """What a record says about its job, whatever happened when it ran."""
    fields: dict[str, Any] = {"key": job.key, "instance": job.instance,
                              "label": job.method.label, "method_spec": job.method.to_dict()}
    try:
        fields.update(describe_instance(Instance.from_dict(job.instance)))
    except ZboptError:
        fields["instance_name"] = job.instance.get("name", "")
    return fields


def _kind(job: Job) -> str:
    if job.method.kind == "solver":
        return "solver"
    try:
        from ..registry import get_method
        return get_method(job.method.name).kind
    except ZboptError:
        return job.method.kind


def error_record(job: Job, error: str, runtime: float | None = None) -> dict[str, Any]:
    """The record of a job that raised, crashed its worker or timed out."""
    try:
        result = Result(job.method.name, _kind(job), "error", Instance.from_dict(job.instance),
                        message=error, runtime=runtime or 0.0)
        record = result.to_dict()
    except ZboptError:  # the instance itself is bad: the Result's keys, empty
        record = {"method": job.method.name, "kind": _kind(job), "status": "error",
                  "message": error, "runtime": runtime}
    return {**record, **job_fields(job), "finished_at": _now()}


def result_record(job: Job, result: Result) -> dict[str, Any]:
    schedule = result.schedule
    return {**result.to_dict(), **job_fields(job),
            "schedule": schedule.text() if schedule is not None else None,
            "release": list(schedule.release) if schedule is not None
            and schedule.release is not None else None,
            "finished_at": _now()}


def run_job(job: Job) -> dict[str, Any]:
    """Run one job; never raises (an exception becomes an error record)."""
    from ..registry import run
    t0 = time.perf_counter()
    try:
        instance = Instance.from_dict(job.instance)
        params = dict(job.method.params)
        result = run(job.method.name, instance, objective=params.pop("objective", "span"),
                     **params)
    except ImportError as err:
        return error_record(job, f"the solvers are not available: {err}",
                            time.perf_counter() - t0)
    except Exception as err:  # noqa: BLE001  a bug in one method must not stop the sweep
        return error_record(job, _describe_exception(err), time.perf_counter() - t0)
    return result_record(job, result)


def _describe_exception(err: BaseException) -> str:
    frames = traceback.extract_tb(err.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(err).__name__}: {err}{where}"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
