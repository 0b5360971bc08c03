"""What the explorer's server computes, without HTTP: the page's settings parsed into an
Instance and a method, the evaluated Result with the timeline data the page draws, the
comparison rows and the download files.

Every number comes from zbopt: registry.run / compare for the schedules (so evaluate() times
them), the report's timeline_data for the drawing, events.step_states for the step control.
"""

from __future__ import annotations

import inspect
import math
import re
from dataclasses import dataclass, replace
from typing import Any, Mapping

from ..commands._common import parse_cap
from ..compare import compare
from ..errors import ZboptError
from ..instance import MAX_TOTAL, MAX_TOTAL_TEXT, PLACEMENTS, Instance, finite, shown
from ..registry import get_method, methods, prepare, run, solver_names
from ..result import Result
from .events import step_states

# setting -> the label the page shows next to its control
LABELS = {
    "schedule": "schedule", "placement": "placement", "devices": "devices",
    "microbatches": "micro-batches", "chunks": "chunks", "group_size": "group size",
    "t_f": "t_f", "t_b": "t_b", "t_w": "t_w", "comm": "comm", "m_b": "m_b", "m_w": "m_w",
    "memory_cap": "memory cap",
}
INTEGER_RANGES = {"devices": (1, 64), "microbatches": (1, 1024), "chunks": (0, 16),
                  "group_size": (0, 1024)}
COST_FIELDS = ("t_f", "t_b", "t_w", "m_b", "m_w")
# the most passes one view may hold: beyond it the page could not draw it in time
MAX_PASSES = 60_000
SOLVE_TIME_LIMIT = (0.1, 600.0)
# the most values a list setting may hold: one per stage of the largest instance the controls
# allow (a longer one is refused before any of its values is read)
MAX_VALUES = INTEGER_RANGES["devices"][1] * INTEGER_RANGES["chunks"][1]


class SettingError(ZboptError):
    """A ZboptError that names the setting to change (the page shows it next to that control)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field

    def __reduce__(self):  # raised in the comparison worker process, re-raised here
        return (SettingError, (self.field, str(self)))


@dataclass(frozen=True)
class Settings:
    """One view: a method on the instance as written. `chunks` re-places a contiguous
    instance for interleaved methods (0: the method's default); `group_size` 0: the default."""

    schedule: str
    placement: str
    devices: int
    microbatches: int
    chunks: int
    group_size: int
    t_f: Any
    t_b: Any
    t_w: Any
    comm: float
    m_b: Any
    m_w: Any
    memory_cap: Any


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(_text(x) for x in value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _uniform(values: tuple) -> Any:
    return values[0] if len(set(values)) == 1 else list(values)


def defaults(base: Instance) -> dict[str, str]:
    """The page's initial control values (as text) for the served instance."""
    cap = base.memory_cap
    return {
        "schedule": "zb-h1" if base.placement == "contiguous" else _first_method(base.placement),
        "placement": base.placement,
        "devices": str(base.devices), "microbatches": str(base.microbatches),
        "chunks": str(base.chunks if base.placement == "interleaved" else 2),
        "group_size": "0",
        **{k: _text(_uniform(getattr(base, k))) for k in COST_FIELDS},
        "comm": _text(base.comm),
        "memory_cap": "none" if cap is None else _text(cap),
    }


def _first_method(placement: str) -> str:
    return next(n for n, m in methods("schedule").items() if m.placement == placement)


# a count as text: decimal digits only (int() would also take "1_0", "+ 5" or other scripts'
# digits), with a sign so that a negative one is told its range
_WHOLE = re.compile(r"[+-]?[0-9]+")


def _integer(field: str, raw: Any) -> int:
    low, high = INTEGER_RANGES[field]
    label = LABELS[field]
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    else:
        _empty(field, raw, f"a whole number from {low} to {high}")
        text = str(raw).strip()
        if not isinstance(raw, str) or not _WHOLE.fullmatch(text):
            raise SettingError(field, f"{label} must be a whole number, got {_quoted(raw)}")
        try:
            value = int(text)
        except ValueError:  # more digits than Python reads: far out of range
            raise SettingError(field, f"{label} must be between {low} and {high}, got an "
                                      f"integer of {len(text.lstrip('+-'))} digits") from None
    if not low <= value <= high:
        raise SettingError(field, f"{label} must be between {low} and {high}, got "
                                  f"{shown(value)}")
    return value


def _plain(text: str) -> bool:
    """Whether text writes a number as the page does: no digit separators or other scripts'
    digits, which float() and int() would read (a file or a sweep spec cannot hold them)."""
    return text.isascii() and "_" not in text


def _quoted(raw: Any) -> str:
    """A request's value for a one-line message: repr, a long integer described by its length,
    long text cut short, JSON's null, true, false, objects and lists named as JSON writes them."""
    if raw is None or isinstance(raw, bool):
        return {None: "null", True: "true", False: "false"}[raw]
    if isinstance(raw, dict):
        return "a JSON object"
    if isinstance(raw, (list, tuple)):
        if any(isinstance(x, (list, tuple, dict)) for x in raw):
            return "a list holding lists or objects"
        return f"a list of {len(raw)}"
    text = shown(raw)
    return text if len(text) <= 40 or isinstance(raw, int) else f"{text[:30]}...{text[-1]}"


def _empty(field: str, raw: Any, wanted: str) -> None:
    """SettingError when a value is empty text (a number field the browser could not read is
    sent empty too), saying what to give."""
    if isinstance(raw, str) and not raw.strip():
        raise SettingError(field, f"{LABELS[field]} is empty: give {wanted}")


def _number(field: str, raw: Any) -> float:
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        value = raw
    else:
        _empty(field, raw, "a number >= 0")
        text = str(raw).strip()
        try:
            if not isinstance(raw, str) or not _plain(text):
                raise ValueError(text)
            value = float(text)
        except ValueError:
            raise SettingError(field, f"{LABELS[field]} must be a number, got "
                                      f"{_quoted(raw)}") from None
        value = int(value) if value.is_integer() and "." not in text and "e" not in text.lower() \
            else value
    # finite(): an integer too large for a float (JSON allows one) is as unusable as inf
    if not finite(value) or value < 0:
        raise SettingError(field, f"{LABELS[field]} must be a finite number >= 0, got "
                                  f"{_quoted(raw)}")
    if value > MAX_TOTAL and field != "memory_cap":  # a cap that large binds nothing
        # refused here, quoting what was given: the instance would quote its own float of it
        raise SettingError(field, f"{LABELS[field]} must be at most {MAX_TOTAL_TEXT}, got "
                                  f"{_quoted(raw)}: zbopt's limit is {MAX_TOTAL_TEXT} on the "
                                  f"passes' total time and on a device's memory; give it in a "
                                  f"larger unit")
    return value


def _numbers(field: str, raw: Any) -> Any:
    """A number, or one number per stage (a list, or text separated by commas or spaces)."""
    if isinstance(raw, (list, tuple)):
        parts = list(raw)
        if any(not isinstance(x, (int, float, str)) or isinstance(x, bool) for x in parts):
            raise SettingError(field, f"{LABELS[field]} must be a number or a list of numbers, "
                                      f"got {_quoted(raw)}")
    elif isinstance(raw, (int, float)) and not isinstance(raw, bool):  # a JSON number
        parts = [raw]
    elif not isinstance(raw, str):  # null, true, false or a JSON object
        raise SettingError(field, f"{LABELS[field]} must be a number or a list of numbers, "
                                  f"got {_quoted(raw)}")
    else:
        text = str(raw).strip()
        if re.search(r",\s*,", text):  # "1,,2": a value left out, not two values
            raise SettingError(field, f"{LABELS[field]} has an empty value between commas in "
                                      f"{_quoted(raw)}: give one number per stage")
        parts = [x for x in re.split(r"[,\s]+", text) if x]
    if not parts:
        raise SettingError(field, f"{LABELS[field]} is empty: give a number (or one per stage)")
    if len(parts) > MAX_VALUES:
        raise SettingError(field, f"{LABELS[field]} has {len(parts):,} values: give at most "
                                  f"{MAX_VALUES:,}, one per stage (the explorer's largest "
                                  f"instance has {MAX_VALUES:,} stages)")
    values = [_number(field, x) for x in parts]
    return values[0] if len(values) == 1 else tuple(values)


def parse_settings(params: Mapping[str, Any], base: Instance) -> Settings:
    """Settings from a request's parameters (text or JSON values); missing ones take the served
    instance's values. Unknown or malformed parameters raise SettingError."""
    unknown = sorted(set(params) - set(LABELS))
    if unknown:
        raise SettingError(unknown[0], f"unknown parameter(s) {', '.join(unknown)}: use "
                                       f"{', '.join(LABELS)}")
    given = {**defaults(base), **{k: v for k, v in params.items()}}
    for key in ("schedule", "placement"):
        if not isinstance(given[key], str):
            raise SettingError(key, f"{LABELS[key]} must be a name (text), got "
                                    f"{_quoted(given[key])}")
    schedule = str(given["schedule"]).strip()
    if schedule not in methods("schedule"):
        raise SettingError("schedule", f"unknown schedule {schedule!r}: choose one of "
                                       f"{', '.join(sorted(methods('schedule')))}")
    placement = str(given["placement"]).strip()
    if placement not in PLACEMENTS:
        raise SettingError("placement", f"unknown placement {placement!r}: use one of "
                                        f"{', '.join(PLACEMENTS)}")
    cap_text = str(given["memory_cap"]).strip()
    if given["memory_cap"] is None or isinstance(given["memory_cap"], (bool, dict)):
        raise SettingError("memory_cap", f"memory cap must be a number, '1p', '1.5p', one "
                                         f"number per device or 'none' (no cap), got "
                                         f"{_quoted(given['memory_cap'])}")
    if not cap_text:
        raise SettingError("memory_cap", "memory cap is empty: give a number, '1p', '1.5p' or "
                                         "'none'")
    if isinstance(given["memory_cap"], (list, tuple)):  # settings are hashable: tuples
        cap = _numbers("memory_cap", given["memory_cap"])
        cap = cap if isinstance(cap, tuple) else (cap,)
    elif isinstance(given["memory_cap"], (int, float)) \
            and not isinstance(given["memory_cap"], bool):
        cap = _number("memory_cap", given["memory_cap"])
    elif "," in cap_text:  # one cap per device
        cap = _numbers("memory_cap", cap_text)
    elif not _plain(cap_text):
        raise SettingError("memory_cap", f"memory cap must be a number, '1p', '1.5p' or "
                                         f"'none', got {_quoted(given['memory_cap'])}")
    else:
        try:
            cap = parse_cap(cap_text, base.memory_unit)
        except ZboptError as err:  # a size in bytes on an instance counted in another unit
            raise SettingError("memory_cap", str(err)) from None
    return Settings(
        schedule=schedule, placement=placement,
        devices=_integer("devices", given["devices"]),
        microbatches=_integer("microbatches", given["microbatches"]),
        chunks=_integer("chunks", given["chunks"]),
        group_size=_integer("group_size", given["group_size"]),
        comm=_number("comm", given["comm"]), memory_cap=cap,
        **{k: _numbers(k, given[k]) for k in COST_FIELDS})


# the setting a zbopt message is about, by the first name it mentions (checked in this order)
_MENTIONS = (("group size", "group_size"), ("memory_cap", "memory_cap"),
             ("memory cap", "memory_cap"), ("m_w", "m_w"), ("m_b", "m_b"), ("t_f", "t_f"),
             ("t_b", "t_b"), ("t_w", "t_w"), ("comm", "comm"), ("chunks", "chunks"),
             ("microbatches", "microbatches"), ("micro-batches", "microbatches"),
             ("devices", "devices"), ("placement", "placement"))


def field_of(message: str, default: str = "schedule") -> str:
    for words, field in _MENTIONS:
        if words in message:
            return field
    return default


def _static_memory(settings: Settings, base: Instance) -> Any:
    """The served instance's static memory for the settings' devices: one figure for all,
    its list when the device count is the served one, else none (the page has no control for
    it: notes() says so)."""
    static = base.static_memory
    if len(set(static)) == 1:
        return static[0]
    return list(static) if len(static) == settings.devices else 0


def notes(settings: Settings, base: Instance) -> list[str]:
    """What the view leaves out of the served instance, one line each (the page shows them)."""
    static = base.static_memory
    if len(set(static)) > 1 and len(static) != settings.devices:
        unit = f" {base.memory_unit}" if base.memory_unit else ""
        return [f"the served instance's static memory per device ({_text(list(static))}{unit}) "
                f"is for {base.devices} devices: left out with {settings.devices} (set devices "
                f"to {base.devices} to count it)"]
    return []


def instance_of(settings: Settings, base: Instance) -> Instance:
    """The instance as written: the served instance with the page's settings (its per-device
    static memory left out when the device count differs, see notes())."""
    static = _static_memory(settings, base)
    try:
        return replace(base, devices=settings.devices, microbatches=settings.microbatches,
                       placement=settings.placement,
                       chunks=settings.chunks if settings.placement == "interleaved" else 0,
                       t_f=settings.t_f, t_b=settings.t_b, t_w=settings.t_w, comm=settings.comm,
                       m_b=settings.m_b, m_w=settings.m_w, memory_cap=settings.memory_cap,
                       static_memory=static)
    except ZboptError as err:
        raise SettingError(field_of(str(err), "devices"), str(err)) from None


def _method_params(name: str, settings: Settings) -> dict:
    if settings.group_size and takes_group_size(name):
        return {"group_size": settings.group_size}
    return {}


def target_instance(name: str, instance: Instance, chunks: int) -> Instance:
    """What `zbopt simulate --chunks` runs a method on: a contiguous instance re-placed with
    `chunks` for an interleaved method."""
    method = get_method(name, "schedule")
    if chunks and method.placement == "interleaved" and instance.placement == "contiguous":
        if chunks < 2:
            raise SettingError("chunks", f"interleaved methods need chunks >= 2, got {chunks}")
        return instance.with_placement("interleaved", chunks)
    return instance


def too_large(instance: Instance) -> str:
    """Why the explorer does not draw `instance` (more than MAX_PASSES passes), or ""."""
    if instance.num_passes <= MAX_PASSES:
        return ""
    return f"{instance.num_passes:,} passes is more than the explorer draws ({MAX_PASSES:,}): " \
           f"lower devices, micro-batches or chunks"


def check_size(instance: Instance) -> None:
    reason = too_large(instance)
    if reason:
        raise SettingError("microbatches", reason)


def placed_instance(name: str, target: Instance) -> Instance:
    """The instance method `name` runs on (re-placed for its placement); `target` itself when
    the method does not apply there (run() then says why)."""
    try:
        return prepare(get_method(name, "schedule"), target)
    except ZboptError:
        return target


def settings_instance(settings: Settings, base: Instance) -> Instance:
    """The instance the settings' method runs on (a Result's instance), without running it."""
    name = settings.schedule
    return placed_instance(name, target_instance(name, instance_of(settings, base),
                                                 settings.chunks))


_COMPARED = ("devices", "microbatches", "placement", "chunks", "t_f", "t_b", "t_w", "comm",
             "m_b", "m_w", "memory_cap", "static_memory", "overlap")


def difference(ran: Instance, asked: Instance) -> str:
    """The first setting in which two instances differ, as "devices 8, not 4", or ""."""
    if ran == asked:
        return ""
    for key in _COMPARED:
        a, b = getattr(ran, key), getattr(asked, key)
        if a != b:
            return f"{key} {_text(_uniform(a) if isinstance(a, tuple) else a)}, not " \
                   f"{_text(_uniform(b) if isinstance(b, tuple) else b)}"
    return "another instance"


def evaluate_settings(settings: Settings, base: Instance) -> Result:
    """The Result of the chosen method, as `zbopt simulate` computes it; SettingError (naming
    the control) when the settings are invalid or the method does not apply."""
    instance = instance_of(settings, base)
    name = settings.schedule
    target = target_instance(name, instance, settings.chunks)
    check_size(placed_instance(name, target))
    result = run(name, target, **_method_params(name, settings))
    if not result.applies:
        # a family's precondition names the setting it needs changed; a placement clash is
        # about the schedule chosen
        field = "schedule" if "runs on placement" in result.message \
            else field_of(result.message, "schedule")
        raise SettingError(field, f"{name} does not apply: {result.message}")
    return result


def takes_group_size(name: str) -> bool:
    return "group_size" in inspect.signature(get_method(name, "schedule").generate).parameters


def normalized(settings: Settings) -> Settings:
    """The same view with the settings its method ignores at 0 (chunks unless something is
    interleaved, group size unless the method takes one): one cache entry per distinct view."""
    interleaved = settings.placement == "interleaved" or \
        get_method(settings.schedule, "schedule").placement == "interleaved"
    return replace(settings, chunks=settings.chunks if interleaved else 0,
                   group_size=settings.group_size if takes_group_size(settings.schedule) else 0)


def compare_settings(settings: Settings, base: Instance, names: list[str] | None = None
                     ) -> list[Result]:
    """Every schedule method (or `names`) on the instance as written, through compare(); the
    page's group size is used for the methods that take one. A method whose placed instance
    is larger than a view may be (MAX_PASSES) is not run: its row is not-applicable, saying so
    (its view would be refused, so the table offers none)."""
    instance = instance_of(settings, base)
    check_size(instance)
    rows = []
    for name in names if names is not None else list(methods("schedule")):
        try:
            target = target_instance(name, instance, settings.chunks)
        except ZboptError:  # the method does not apply: compare()'s row says why
            target, reason = instance, ""
        else:
            reason = too_large(placed_instance(name, target))
        if reason:
            rows.append(Result(name, get_method(name, "schedule").kind, "not-applicable",
                               target, message=reason))
            continue
        params = _method_params(name, settings)
        if params:
            rows.append(run(name, target_instance(name, instance, settings.chunks), **params))
        else:
            rows.extend(compare(instance, [name], chunks=settings.chunks))
    return rows


def _compact(x: float) -> float | int:
    return int(x) if float(x).is_integer() else round(float(x), 6)


def drawing(result: Result) -> dict:
    """The timeline as the page draws it, in columns (plain numbers: encoding them is a small
    part of an answer): every pass's stage, micro-batch, kind, start and end from evaluate() in
    each device's order, the multi-pass blocks as [start, end, overlapped, pass indices...],
    colours and path steps per kind and stage, and each device's memory curve as times and
    levels."""
    # the report modules import matplotlib: loaded on first use (the server warms them up)
    from ..report.gantt import is_overlapped, label_colour, pass_colour
    from ..report.html import path_step
    timeline = result.timeline
    instance = timeline.instance
    starts, ends = timeline.start, timeline.end
    stage, mb, kind, start, end, blocks = [], [], [], [], [], []
    for d, order in enumerate(timeline.schedule.orders):
        for item, (t0, t1) in zip(order, timeline.item_times[d]):
            if len(item) > 1:
                first = len(stage)
                blocks.append([t0, t1, int(is_overlapped(item)), *range(first, first + len(item))])
            for p in item:
                stage.append(p[0])
                mb.append(p[1])
                kind.append(p[2])
                start.append(starts[p])
                end.append(ends[p])
    stages = range(instance.num_stages)
    cap = instance.cap
    return {"method": result.method, "devices": instance.devices,
            "time_unit": instance.time_unit, "memory_unit": instance.memory_unit,
            "makespan": _compact(timeline.makespan), "span": _compact(timeline.span),
            "device_span": [[_compact(a), _compact(b)] for a, b in timeline.device_span],
            "passes": {"stage": stage, "mb": mb, "kind": "".join(kind), "start": start,
                       "end": end},
            "blocks": blocks,
            "stage_device": [instance.device_of(s) for s in stages],
            "colour": [[pass_colour(timeline, s, k) for s in stages] for k in "FBW"],
            "ink": [[label_colour(timeline, s, k) for s in stages] for k in "FBW"],
            "step": [[path_step(instance, s, k) for s in stages] for k in "FBW"],
            "memory": [[[t for t, _ in curve], [level for _, level in curve]]
                       for curve in timeline.memory_curve],
            "peak": [_compact(x) for x in timeline.peak_memory],
            "cap": [_compact(x) for x in cap] if cap is not None else None,
            "memory_top": _compact(max([*timeline.peak_memory, *(cap or ())]))}


def view_document(result: Result, events: bool = True) -> dict:
    """What the page draws for one Result: the Result document, the placed instance, the
    timeline (per pass start/end per device, memory per device) and (unless `events` is
    False: the page then asks for them after drawing) the step states."""
    doc = {"result": result.to_dict(), "instance": result.instance.to_dict(),
           "timeline": drawing(result)}
    if events:
        doc["events"] = step_states(result.timeline)
    return doc


def solve_arguments(params: Mapping[str, Any]) -> tuple[str, float]:
    """(solver, time limit) from a solve request; SettingError when out of range."""
    solver = params.get("solver", "cpsat")
    if not isinstance(solver, str) or solver not in solver_names():
        raise SettingError("solver", f"unknown solver {_quoted(solver)}: use one of "
                                     f"{', '.join(solver_names())}")
    low, high = SOLVE_TIME_LIMIT
    raw = params.get("time_limit", 10)
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise SettingError("time_limit", f"time limit must be a number of seconds, got "
                                         f"{_quoted(raw)}")
    try:
        if isinstance(raw, str) and not _plain(raw):
            raise ValueError(raw)
        limit = float(raw)
    except ValueError:
        raise SettingError("time_limit", f"time limit must be a number of seconds, got "
                                         f"{_quoted(raw)}") from None
    except OverflowError:  # an integer too large for a float
        limit = math.inf
    if not (math.isfinite(limit) and low <= limit <= high):
        raise SettingError("time_limit", f"time limit must be between {low:g} and {high:g} "
                                         f"seconds, got {_quoted(raw)}")
    return solver, limit


def check_solvable(instance: Instance, time_limit: float) -> None:
    """SettingError (about the time limit) when solve() would refuse `instance` at once for
    `time_limit`: the page hears it before a job starts, with the smallest limit that does."""
    from ..solvers.api import check_size as check_time
    try:
        check_time(instance, time_limit)
    except ZboptError as err:
        raise SettingError("time_limit", str(err)) from None


def warm_up() -> None:
    """Import what the first answers need (every registered method, the report's drawing)."""
    methods()
    from ..report import gantt, html  # noqa: F401


def method_list() -> list[dict]:
    """Every schedule method: name, kind, placement, description, whether it takes a group size."""
    out = []
    for name, method in methods("schedule").items():
        out.append({"name": name, "kind": method.kind, "placement": method.placement,
                    "description": method.description, "group_size": takes_group_size(name)})
    return out


# ----- downloads -----------------------------------------------------------------------------

def _slug(result: Result) -> str:
    inst = result.instance
    return re.sub(r"[^A-Za-z0-9.-]+", "-", f"{result.method}-p{inst.devices}-m{inst.microbatches}")


def schedule_file_text(result: Result) -> tuple[str, str]:
    """(file name, zbopt.schedule/1 JSON) of a Result's schedule."""
    from ..export.schedule_file import render, schedule_document
    doc = schedule_document(result.timeline, result if result.kind == "solver" else None)
    return f"{_slug(result)}.json", render(doc)


def torch_csv_text(result: Result) -> tuple[str, str]:
    """(file name, PyTorch CSV) of a Result's schedule; ZboptError where torch has no form."""
    from ..export.torch_csv import csv_text, torch_rows
    try:
        rows = torch_rows(result.instance, result.timeline.schedule)
    except ZboptError as err:
        raise SettingError("download", str(err)) from None
    return f"{_slug(result)}.csv", csv_text(rows)


def report_text(instance: Instance, rows: list[Result], shown: Result) -> tuple[str, str]:
    """(file name, self-contained HTML report) of the comparison rows and the shown result
    (charts left out: the interactive timelines carry the same data and render in a second)."""
    from ..report.html import render_report
    if not any(r.method == shown.method and r.kind == shown.kind for r in rows):
        rows = [*rows, shown]
    title = f"zbopt report: {instance.name or 'explorer'} p={instance.devices} " \
            f"m={instance.microbatches}"
    return f"{_slug(shown)}-report.html", render_report(instance, rows, title, charts=False)
