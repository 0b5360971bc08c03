"""Schedule files, format "zbopt.schedule/1": an evaluated schedule that can be re-judged later.

Layout (JSON):
    format     "zbopt.schedule/1"
    method     who produced the orders
    instance   Instance.to_dict()
    devices    per device: {"device": d, "items": [...]}; an item is
               {"item": "0F1", "start": t0, "end": t1} for one pass, or for an atomic block
               (fused full backward, overlapped F&B) {"item": "(0B1;0W1)", "start", "end",
               "passes": [{"pass": "0B1", "start", "end"}, ...]} so blocks stay blocks
    release    per-device earliest start, a finite number in [0, MAX_TOTAL] (only when the
               schedule has one)
    metrics    Timeline.metrics() at write time
    solver     {"solver", "status", "objective", "lower_bound", "gap", "runtime", "scale", ...}
               when a solver made it
    partition  a plan's layer split: {"sizes": [layers per model part], "stages": [[layer names
               of part k], ...], "placement"}; with it
    model      the layered model (LayeredModel.to_dict()) the instance was cut from
    plan       a plan's verdict: status, bound over all partitions, gap, scope, baselines, gain
Entry d of `devices` is device d (a "device" label, when given, must say d), and a key no
writer ever wrote (`_TOP_KEYS` and the others) is refused, as a typo.
The times are informative: reading a file keeps only the orders (and release) and the instance;
`evaluate()` recomputes everything, so a hand-edited file cannot lie about its own quality.
A file written again from a plan's split (evaluate --out, solve --out) keeps the plan's
entries: `plan_entries`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..dag import format_pass
from ..errors import ZboptError
from ..instance import (
    FILE_KEYS,
    MAX_TOTAL,
    MAX_TOTAL_TEXT,
    Instance,
    finite,
    shown,
    too_long_integer,
)
from ..schedule import Schedule, Timeline, evaluate, format_item, parse_item, structure_problems

FORMAT = "zbopt.schedule/1"


@dataclass(frozen=True)
class ScheduleFile:
    """What a schedule file holds: the problem, the orders, who made them, and the rest as meta.

    `meta` has the stored "metrics", "solver" (if any) and "path"; a plan's "partition" and
    "model" (checked against the instance) and "plan" (its verdict, as stored).
    """

    instance: Instance
    schedule: Schedule
    method: str
    meta: dict = field(default_factory=dict)

    def evaluate(self) -> Timeline:
        """evaluate() of the file's orders; an order that deadlocks is named by its file."""
        try:
            return evaluate(self.instance, self.schedule)
        except ZboptError as err:
            if not self.meta.get("path"):
                raise
            raise ZboptError(f"{self.meta['path']}: {err}") from None


def _number(x: float) -> float | int:
    # integers stay integers in the file (the paper instances are integer microseconds)
    if isinstance(x, float) and x.is_integer() and abs(x) < 2**53:
        return int(x)
    return x


def _clean(value: Any) -> Any:
    """JSON-safe copy: tuples to lists, non-finite floats to None (JSON has no inf/nan)."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, float):
        return _number(value) if math.isfinite(value) else None
    return value


def solver_meta(result) -> dict:
    """The solver fields of a SolveResult for the file (bound and gap in the instance's unit)."""
    return _clean({
        "solver": result.solver, "status": result.status,
        "objective_name": result.objective_name, "objective": result.objective,
        "lower_bound": result.lower_bound, "gap": result.gap, "runtime": result.runtime,
        "scale": result.scale, "message": result.message,
    })


def schedule_document(timeline: Timeline, result=None, partition: Optional[dict] = None,
                      model: Optional[dict] = None, plan: Optional[dict] = None) -> dict:
    """The file's content as a dict (see the module doc); a plan adds its partition and model.

    `result` is the solver's Result, or the "solver" entry of a file read back (kept as it is).
    """
    schedule = timeline.schedule
    devices = []
    for d, order in enumerate(schedule.orders):
        items = []
        for item, (t0, t1) in zip(order, timeline.item_times[d]):
            entry: dict[str, Any] = {"item": format_item(item), "start": _number(t0),
                                     "end": _number(t1)}
            if len(item) > 1:
                entry["passes"] = [{"pass": format_pass(p), "start": _number(timeline.start[p]),
                                    "end": _number(timeline.end[p])} for p in item]
            items.append(entry)
        devices.append({"device": d, "items": items})
    doc: dict[str, Any] = {
        "format": FORMAT,
        "method": schedule.method,
        "instance": timeline.instance.to_dict(),
        "devices": devices,
    }
    if schedule.release is not None:
        doc["release"] = [_number(float(r)) for r in schedule.release]
    doc["metrics"] = _clean(timeline.metrics())
    if result is not None:
        doc["solver"] = _clean(result) if isinstance(result, dict) else solver_meta(result)
    if partition is not None:
        doc["partition"] = _clean(partition)
        doc["model"] = _clean(model)
    if plan is not None:
        doc["plan"] = _clean(plan)
    return doc


def write_schedule_file(path: str | Path, timeline: Timeline, result=None,
                        force: bool = False, partition: Optional[dict] = None,
                        model: Optional[dict] = None, plan: Optional[dict] = None) -> Path:
    """Write `timeline` (and the solver's `result`, if any; a plan's `partition` and layered
    `model`) as a zbopt.schedule/1 JSON file, whole or not at all (outputs.write_file). Refuses
    to overwrite an existing file unless `force`. A Result given for `timeline` gives its
    timeline (and, a solver's, its solver entry too).
    """
    from ..result import Result
    from .outputs import require_path, write_file
    require_path(path, "write_schedule_file()'s path")
    if isinstance(timeline, Result):
        if timeline.timeline is None:
            raise ZboptError(f"write_schedule_file(): the {timeline.method} result has no "
                             f"schedule (status {timeline.status}): write a result that applies")
        if result is None and timeline.kind == "solver":
            result = timeline
        timeline = timeline.timeline
    elif isinstance(timeline, Schedule):
        raise ZboptError("write_schedule_file(): expected a Timeline or a Result, got a "
                         "Schedule: pass evaluate(instance, schedule)")
    elif not isinstance(timeline, Timeline):
        raise ZboptError(f"write_schedule_file(): expected a Timeline (evaluate(instance, "
                         f"schedule)) or a Result, got {type(timeline).__name__}")
    if (partition is None) != (model is None):
        raise ZboptError("write_schedule_file(): a plan file records both its partition and "
                         "its model: give both or neither")
    text = render(schedule_document(timeline, result, partition, model, plan))
    return write_file(path, text, force, force_flag="force=True")


def render(doc: dict) -> str:
    """JSON text with one line per item, so a long schedule stays readable and diffable."""
    parts = []
    for key, value in doc.items():
        if key == "devices":
            devices = []
            for entry in value:
                items = ",\n   ".join(json.dumps(item) for item in entry["items"])
                devices.append(f'  {{"device": {entry["device"]}, "items": [\n   {items}\n  ]}}')
            parts.append(' "devices": [\n' + ",\n".join(devices) + "\n ]")
        else:
            body = json.dumps(value, indent=1).replace("\n", "\n ")
            parts.append(f" {json.dumps(key)}: {body}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def _fail(source: str, message: str) -> ZboptError:
    return ZboptError(f"{source}: {message}")


def _parse_orders(source: str, devices: Any, instance: Instance) -> list[list[tuple]]:
    if not isinstance(devices, list):
        raise _fail(source, "'devices' must be a list with one entry per device")
    if len(devices) != instance.devices:
        raise _fail(source, f"'devices' has {len(devices)} entries but the instance has "
                            f"{instance.devices} devices: give one per device")
    orders = []
    for d, entry in enumerate(devices):
        items = entry.get("items") if isinstance(entry, dict) else None
        if not isinstance(items, list):
            raise _fail(source, f"device {d} must be an object with a list 'items'")
        _check_keys(source, entry, _DEVICE_KEYS, f"device {d}")
        _check_device_label(source, entry, d, instance.devices)
        order = []
        for i, raw in enumerate(items):
            if isinstance(raw, dict):
                _check_item_keys(source, raw, f"device {d} item {i}")
            text = raw.get("item") if isinstance(raw, dict) else raw
            if not isinstance(text, str):
                raise _fail(source, f"device {d} item {i}: expected a cell such as \"0F1\" or "
                                    f"\"(0B1;0W1)\", got {text!r}")
            try:
                item = parse_item(text)
            except ZboptError as err:  # a stage or micro-batch of more than 4,300 digits too
                raise _fail(source, f"device {d} item {i}: {err}") from None
            for stage, _, _kind in item:
                if stage >= instance.num_stages:
                    raise _fail(source, f"device {d} item {i} ({text}): unknown stage {stage}, "
                                        f"the instance has stages 0..{instance.num_stages - 1}")
            order.append(item)
        orders.append(order)
    return orders


# every key a zbopt writer has put in a schedule file (at the top, in a device's entry, in an
# item, in a block's pass); anything else is a typo or a file from elsewhere, refused
_TOP_KEYS = ("format", "method", "instance", "devices", "release", "metrics", "solver",
             "partition", "model", "plan")
_DEVICE_KEYS = ("device", "items")
_ITEM_KEYS = ("item", "start", "end", "passes")
_PASS_KEYS = ("pass", "start", "end")


# the top-level keys of an instance or layered model file that no schedule file has
_INSTANCE_KEYS = tuple(key for key in (*FILE_KEYS, "layers") if key not in (*_TOP_KEYS, "name"))


def _not_a_schedule(source: str) -> ZboptError:
    """An instance or layered model file (TOML or JSON) given where a schedule belongs."""
    return _fail(source, "this is an instance or model file; give a schedule or plan file "
                         "(.json), which `zbopt solve`, `simulate` or `plan` write with --out")


def _check_keys(source: str, entry: dict, known: tuple[str, ...], where: str) -> None:
    unknown = [key for key in entry if key not in known]
    if unknown:
        raise _fail(source, f"{where}: unknown key {_shown(unknown[0])} (known: "
                            f"{', '.join(known)}): fix or remove it")


def _check_item_keys(source: str, item: dict, where: str) -> None:
    """An item's keys, and those of its block's passes (informative, but no typos either)."""
    _check_keys(source, item, _ITEM_KEYS, where)
    passes = item.get("passes", [])
    if not isinstance(passes, list):
        raise _fail(source, f"{where}: 'passes' must be a list of {{\"pass\", \"start\", "
                            f"\"end\"}} objects, got {_shown(passes)}")
    for k, entry in enumerate(passes):
        if not isinstance(entry, dict):
            raise _fail(source, f"{where} pass {k}: expected an object such as {{\"pass\": "
                                f"\"0B1\", \"start\": 0, \"end\": 1}}, got {_shown(entry)}")
        _check_keys(source, entry, _PASS_KEYS, f"{where} pass {k}")


def _check_device_label(source: str, entry: dict, d: int, devices: int) -> None:
    """The entries are read in order, entry d for device d: a "device" label (optional) must say
    the same, or a swapped pair of entries would run on the wrong devices."""
    if "device" not in entry:
        return
    label = entry["device"]
    if isinstance(label, bool) or not isinstance(label, int):
        raise _fail(source, f"'devices' entry {d}: \"device\" must be the integer {d}, got "
                            f"{_shown(label)}")
    if label != d:
        raise _fail(source, f"'devices' entry {d} is labelled device {_shown(label)}: the "
                            f"entries are read in device order 0..{devices - 1} (entry d for "
                            f"device d): put each entry at its device's position or fix its "
                            f"label")


def read_schedule_file(path: str | Path) -> ScheduleFile:
    """Read a zbopt.schedule/1 file. Every problem raises ZboptError with a one-line message."""
    from .outputs import require_path
    path = require_path(path, "read_schedule_file()'s path")
    source = str(path)
    if path.is_dir():
        raise ZboptError(f"{path} is a directory: give a schedule or plan file (.json) in it")
    if not path.is_file():
        raise ZboptError(f"schedule file {path} not found")
    try:
        doc = json.loads(path.read_text(encoding="utf-8-sig"))  # a byte-order mark is skipped
    except json.JSONDecodeError as err:
        if path.suffix.lower() == ".toml":
            raise _not_a_schedule(source) from None
        raise _fail(source, f"not valid JSON ({err.msg} at line {err.lineno} column "
                            f"{err.colno})") from None
    except (OSError, UnicodeDecodeError) as err:
        raise _fail(source, f"cannot read it: {err}") from None
    except ValueError as err:  # Python refuses to read an integer of more than 4,300 digits
        raise too_long_integer(source, err) from None
    except RecursionError:  # JSON nested deeper than Python's parser goes
        raise _fail(source, "not valid JSON (nested too deeply to read)") from None
    return schedule_from_document(doc, source)


def schedule_from_document(doc: Any, source: str) -> ScheduleFile:
    """The schedule file whose JSON document `doc` was read from `source` (read_schedule_file
    without reading it again); every problem raises ZboptError naming `source`."""
    if not isinstance(doc, dict):
        raise _fail(source, "expected a JSON object")
    if "format" not in doc and any(key in doc for key in _INSTANCE_KEYS):
        raise _not_a_schedule(source)  # an instance or model written as JSON
    version = doc.get("format")
    if version != FORMAT:
        raise _fail(source, f"format is {version!r}, this zbopt reads {FORMAT!r}: "
                            f"write the file with a matching zbopt")
    _check_keys(source, doc, _TOP_KEYS, "top level")
    if not isinstance(doc.get("instance"), dict):
        raise _fail(source, "missing the 'instance' object")
    instance = Instance.from_dict(doc["instance"], source=f"{source}: instance")
    orders = _parse_orders(source, doc.get("devices"), instance)
    release = _release(source, doc.get("release"), instance.devices)
    for key, what in _RECORDS.items():
        if key in doc and not isinstance(doc[key], dict):
            raise _fail(source, f"'{key}' must be an object ({what}), got "
                                f"{_shown(doc[key])}: fix or remove the entry (evaluate recomputes "
                                f"the schedule's quality without it)")
    _check_solver(source, doc.get("solver"))
    method = doc.get("method") or ""
    if not isinstance(method, str):
        raise _fail(source, "'method' must be a string")
    schedule = Schedule.build(orders, method, release)
    problems = structure_problems(instance, schedule)
    if problems:
        raise _fail(source, "; ".join(problems))
    meta: dict[str, Any] = {"path": source, "metrics": doc.get("metrics")}
    if "solver" in doc:
        meta["solver"] = doc["solver"]
    if "partition" in doc or "model" in doc:
        meta["partition"], meta["model"] = _plan_partition(source, doc, instance)
    if "plan" in doc:
        meta["plan"] = doc["plan"]
    return ScheduleFile(instance, schedule, method, meta)


# the entries a reader only stores (evaluate recomputes them), with what each holds
_RECORDS = {"metrics": "the metrics at write time", "solver": "the solver's status, objective, "
            "bound and gap", "plan": "the plan search's verdict"}


def _shown(value: Any) -> str:
    """`value` for a one-line message, cut short (a hand-edited number may have 400 digits:
    zbopt.instance.shown)."""
    text = shown(value)
    return text if len(text) <= 32 or isinstance(value, int) else f"{text[:20]}..."


def _finite(value: Any) -> bool:
    """A JSON number that is finite as a float (a huge integer is not: zbopt.instance.finite)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and finite(value)


def _release(source: str, release: Any, devices: int) -> Optional[list]:
    """The per-device earliest starts, each a finite number >= 0 and at most MAX_TOTAL, the
    limit on the passes' total time (None when absent)."""
    if release is None:
        return None
    if not isinstance(release, list) or len(release) != devices:
        raise _fail(source, f"'release' must list {devices} non-negative numbers, one per "
                            f"device (its earliest start)")
    for d, value in enumerate(release):
        if not _finite(value) or value < 0:
            raise _fail(source, f"'release' of device {d} is {_shown(value)}: give a finite "
                                f"number >= 0")
        if value > MAX_TOTAL:
            raise _fail(source, f"'release' of device {d} is {_shown(value)}, beyond zbopt's "
                                f"limit of {MAX_TOTAL_TEXT} on times (past it sums lose "
                                f"precision): give a start of at most {MAX_TOTAL_TEXT}")
    return release


def _check_solver(source: str, solver: Optional[dict]) -> None:
    """The fields evaluate prints: names are strings, numbers are finite (or null)."""
    for key in ("solver", "status"):
        if solver and not isinstance(solver.get(key), (str, type(None))):
            raise _fail(source, f"'solver': {key} must be a string, got "
                                f"{_shown(solver[key])}")
    for key in ("objective", "lower_bound", "gap"):
        if solver and solver.get(key) is not None and not _finite(solver[key]):
            raise _fail(source, f"'solver': {key} must be a finite number or null, got "
                                f"{_shown(solver[key])}")


def plan_entries(loaded: ScheduleFile, instance: Optional[Instance] = None) -> dict:
    """What a file written from `loaded`'s split keeps of it, as keyword arguments of
    write_schedule_file: a plan's "partition", "model" and "plan" ({} for a plain schedule file).

    `instance` is the one the new file holds; where its cap is not the file's (--mem), the
    model takes the new cap and the plan's verdict, judged under the old one, is left out.
    """
    if loaded.meta.get("partition") is None:
        return {}
    entries = {"partition": loaded.meta["partition"], "model": loaded.meta["model"],
               "plan": loaded.meta.get("plan")}
    if instance is not None and instance.cap != loaded.instance.cap:
        from ..layers import LayeredModel
        cap = instance.cap
        if cap is not None and len(set(cap)) == 1:
            cap = cap[0]
        model = LayeredModel.from_dict(loaded.meta["model"], source=loaded.meta["path"])
        entries["model"] = model.with_settings(memory_cap=cap).to_dict()
        entries["plan"] = None
    return entries


def kept_entries(loaded: ScheduleFile, instance: Instance, solver: bool = False) \
        -> tuple[dict, str]:
    """plan_entries, and with `solver` the stored solver's record where the cap is the file's;
    with what an --out line says of what is left out ("" where nothing is)."""
    kept = plan_entries(loaded, instance)
    dropped = []
    if loaded.meta.get("plan") is not None and kept.get("plan") is None:
        dropped.append("the plan's verdict")
    if solver and loaded.meta.get("solver"):
        if instance.cap == loaded.instance.cap:
            kept["result"] = loaded.meta["solver"]
        else:
            dropped.append("the solver's record")
    note = f" (without {' and '.join(dropped)}, made under the file's cap, not --mem's)" \
        if dropped else ""
    return kept, note


def _plan_partition(source: str, doc: dict, instance: Instance) -> tuple[dict, dict]:
    """A plan's partition and model, checked against the instance they must produce."""
    from ..layers import LayeredModel
    partition, model = doc.get("partition"), doc.get("model")
    if not isinstance(partition, dict) or not isinstance(model, dict):
        raise _fail(source, "a plan records both 'partition' (an object with 'sizes' and "
                            "'stages') and 'model' (the layered model)")
    layered = LayeredModel.from_dict(model, source=f"{source}: model")
    placement = partition.get("placement", instance.placement)
    if placement != instance.placement:
        raise _fail(source, f"the partition is for placement {placement!r}, the instance is "
                            f"{instance.placement!r}")
    layered = layered.with_settings(placement=instance.placement,
                                    chunks=instance.chunks if placement == "interleaved" else 0,
                                    devices=instance.devices, microbatches=instance.microbatches)
    sizes = partition.get("sizes")
    if not isinstance(sizes, list) or not all(isinstance(n, int) and not isinstance(n, bool)
                                              for n in sizes):
        raise _fail(source, "'partition' needs 'sizes': the number of layers of each stage")
    try:
        groups = layered.stage_layers(sizes)
    except ZboptError as err:
        raise _fail(source, f"partition: {err}") from None
    names = [[layer.name for layer in group] for group in groups]
    if partition.get("stages", names) != names:
        raise _fail(source, "the partition's 'stages' do not match its 'sizes' and the model's "
                            "layers: re-plan the model")
    try:
        cut = layered.instance(sizes)
    except ZboptError as err:
        raise _fail(source, f"partition: {err}") from None
    edited = _edited_field(cut, instance, model)
    if edited:
        raise _fail(source, f"the instance's {edited}: the file was edited; re-plan the "
                            f"model")
    return {**partition, "placement": placement, "stages": names}, model


# what the model implies for a split and the stored instance must hold alike (its name is a
# label: a renamed instance is the same problem)
_PER_STAGE = ("t_f", "t_b", "t_w", "m_b", "m_w", "static_memory")
_SCALARS = ("comm", "overlap")
_UNITS = ("time_unit", "memory_unit")


def _edited_field(cut: Instance, instance: Instance, model: dict) -> str:
    """How the first field in which `instance` is not what the model gives its split (`cut`)
    differs ("comm is 999 where the model gives 50"); "" where none does."""
    def close(a: Any, b: Any) -> bool:
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)

    for key in ("devices", "microbatches"):  # the model states its own
        stated = model.get(key)
        if isinstance(stated, int) and stated != getattr(instance, key):
            return f"{key} is {getattr(instance, key)} where the model has {stated}"
    for key in _PER_STAGE:
        a, b = getattr(cut, key), getattr(instance, key)
        if len(a) != len(b) or not all(map(close, a, b)):
            return f"{key} is not what the partition gives the model's layers"
    for key in _SCALARS:
        a, b = getattr(cut, key), getattr(instance, key)
        if not close(a, b):
            return f"{key} is {shown(b)} where the model gives {shown(a)}"
    for key in _UNITS:
        a, b = getattr(cut, key), getattr(instance, key)
        if a != b:
            return f"{key} is {b!r} where the model has {a!r}"
    if (cut.cap is None) != (instance.cap is None) or (
            cut.cap is not None and not all(map(close, cut.cap, instance.cap))):
        return "memory_cap is not the cap the model gives this split"
    return ""


def compare_metrics(stored: Optional[dict], fresh: dict, rel: float = 1e-9) -> list[str]:
    """Differences between the metrics stored in a file and a fresh evaluation (empty: same)."""
    if not stored:
        return ["the file stores no metrics"]
    out = []
    for key in ("makespan", "span", "ideal", "bubble_rate", "peak_memory", "fits_cap"):
        a, b = stored.get(key), fresh.get(key)
        if isinstance(b, (list, tuple)):
            same = isinstance(a, list) and len(a) == len(b) and all(
                _close(x, y, rel) for x, y in zip(a, b))
        elif isinstance(b, bool) or b is None:
            same = a == b
        else:
            same = _close(a, b, rel)
        if not same:
            out.append(f"{key}: file {a!r}, now {b!r}")
    return out


def _close(stored: Any, fresh: float, rel: float) -> bool:
    """A stored number equal to a fresh one; anything else a hand edit put there is not."""
    return _finite(stored) and math.isclose(stored, fresh, rel_tol=rel, abs_tol=1e-12)
