"""Sweep specs (TOML): which instances, which methods; expanded into jobs with stable keys.

A spec names instances in one or both of two ways:

    name = "unit-grid"
    instances = ["instances/paper/*.toml"]     # files or globs, relative to the spec file, or
                                               # shipped names ("zb-1.5b-p8-m24", "blocks16-p4")

    [base]                                    # or: base = "instances/unit/unit-p4-m8.toml"
    devices = 4
    microbatches = 8
    m_b = 2
    m_w = 1
    [axes]                                    # any instance key: the cartesian product
    devices = [2, 4, 8]
    microbatches = [8, 16, 32]
    memory_cap = ["1p", "2p", "none"]

and the methods to run on every instance:

    methods = ["1f1b", "zb-h1", "zb-greedy"]  # registered families/heuristics, or "all"
    [[methods]]                               # (alternative form, with generator parameters)
    name = "zb-greedy"
    params = { }
    [[solvers]]
    name = "cpsat"                            # cpsat, cbc, highs
    time_limit = 30
    threads = 1
    objective = "span"

Axes apply to every base: the [base] table and each instance file.
A `placement` axis re-places the base model (same layers re-split into chunks, see
Instance.with_placement) rather than reusing per-stage costs for a different stage count.

A base may also be a layered model (a file or table with [[layers]]): each grid point is the
model with the point's settings, split as every command but `plan` splits it (the even split,
zbopt.plan.baselines.default_split). Its axes are the pipeline settings of LAYERED_AXES; a
"kp" memory_cap is p times device 0's activation above each device's static memory (an absolute
cap includes static memory, as in the model file).
"""

from __future__ import annotations

import glob
import hashlib
import inspect
import itertools
import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..errors import ZboptError, reason
from ..instance import (
    FILE_KEYS,
    Instance,
    check_chunks,
    check_file_keys,
    finite,
    read_table,
    shipped_instances,
    shown,
    too_long_integer,
)
from ..sizes import in_unit

SOLVER_KEYS = ("name", "time_limit", "threads", "objective")
SPEC_KEYS = ("name", "base", "axes", "instances", "methods", "solvers", "job_timeout")
# the most jobs a spec may give: the grid is expanded in memory (about 3 KB a job) before any
# runs, so a larger one is refused up front with its count
MAX_JOBS = 100_000
# the axes of a layered base: its pipeline settings (its costs are per layer)
LAYERED_AXES = ("devices", "microbatches", "placement", "chunks", "comm", "overlap", "memory_cap")
# short forms used in generated instance names (p8-m24-cap2p reads better than devices=8...)
_SHORT = {"devices": "p", "microbatches": "m", "memory_cap": "cap", "placement": "",
          "chunks": "v"}


@dataclass(frozen=True)
class MethodSpec:
    """One method of a sweep: a registered family/heuristic, or an exact solver with limits."""

    name: str
    kind: str  # "family" or "solver"
    params: tuple[tuple[str, Any], ...] = ()  # sorted (key, value) pairs

    @property
    def label(self) -> str:
        """The method's name in tables: `cpsat[time_limit=30,threads=1]`, or the family name."""
        if not self.params:
            return self.name
        return f"{self.name}[" + ",".join(f"{k}={v}" for k, v in self.params) + "]"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "params": dict(self.params)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "MethodSpec":
        return cls(data["name"], data["kind"], tuple(sorted(dict(data.get("params", {})).items())))


@dataclass(frozen=True)
class Job:
    """One (instance, method) pair; `key` identifies it across runs (resume)."""

    instance: dict[str, Any]  # Instance.to_dict(): plain data, cheap to send to a worker
    method: MethodSpec
    key: str = field(default="")

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", job_key(self.instance, self.method))


@dataclass(frozen=True)
class SweepSpec:
    name: str
    instances: tuple[Instance, ...]
    methods: tuple[MethodSpec, ...]
    job_timeout: float | None = None  # wall seconds before a job's worker is killed

    def jobs(self) -> list[Job]:
        """Every (instance, method) pair, instance-major, duplicates removed."""
        seen: set[str] = set()
        out = []
        for instance in self.instances:
            data = instance.to_dict()
            for method in self.methods:
                job = Job(data, method)
                if job.key not in seen:
                    seen.add(job.key)
                    out.append(job)
        return out


def job_key(instance: Mapping[str, Any], method: MethodSpec) -> str:
    """A stable hash of the instance's file form and the method spec (same on every machine)."""
    text = json.dumps({"instance": instance, "method": method.to_dict()}, sort_keys=True,
                      separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


# ----- grid expansion ----------------------------------------------------------------------------

def expand_grid(base: Mapping[str, Any], axes: Mapping[str, list]) -> list[dict[str, Any]]:
    """The cartesian product of `axes` over `base`: one dict per combination, last axis fastest.

    Each dict also gets a `name` built from the base name and the axis values.
    """
    keys = list(axes)
    combos = itertools.product(*(axes[k] for k in keys)) if keys else [()]
    out = []
    for values in combos:
        data = dict(base)
        data.update(zip(keys, values))
        parts = [_name_part(k, v) for k, v in zip(keys, values)]
        data["name"] = "-".join([base.get("name") or "grid"] + parts) if parts \
            else base.get("name", "")
        out.append(data)
    return out


def _name_part(key: str, value: Any) -> str:
    short = _SHORT.get(key, key)
    if isinstance(value, (list, tuple)):
        value = "x".join(str(x) for x in value)
    if value is None:
        value = "none"
    return f"{short}{value}" if short else str(value)


def no_cap(value: Any) -> bool:
    """Whether a spec's memory_cap value means no cap ("none", "unlimited", any case): TOML
    has no None."""
    return isinstance(value, str) and value.strip().lower() in ("none", "unlimited")


def instance_from_grid_point(data: Mapping[str, Any], source: str,
                             replace_model: bool = False) -> Instance:
    """An Instance from one grid point.

    With `replace_model` (a placement axis), the point's costs describe the contiguous model and
    are re-split for its placement, so every placement runs the same model.
    """
    data = dict(data)
    if no_cap(data.get("memory_cap")):
        data.pop("memory_cap")
    placement = data.get("placement", "contiguous")
    if not replace_model or placement == "contiguous":
        return Instance.from_dict(data, source=source)
    chunks = data.pop("chunks", 0)
    cap = data.pop("memory_cap", None)
    contiguous = Instance.from_dict({**data, "placement": "contiguous"}, source=source)
    try:
        return contiguous.with_placement(placement, chunks).with_cap(cap)
    except ZboptError as err:
        raise ZboptError(f"{source}: {err}") from None


# ----- parsing -----------------------------------------------------------------------------------

def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate a sweep spec; every problem is one ZboptError line."""
    path = Path(path)
    if path.is_dir():
        raise ZboptError(f"sweep spec {path} is a directory: give the spec's .toml file")
    if not path.is_file():
        where = "" if path.is_absolute() else f" (a relative path counts from the current " \
            f"folder, {Path.cwd()}; the repository's examples are in its sweeps/ folder)"
        raise ZboptError(f"sweep spec {path} not found{where}")
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8-sig"))
    except UnicodeDecodeError as err:
        raise ZboptError(f"{path}: not a UTF-8 text file (byte {err.start}): give a TOML "
                         f"sweep spec") from None
    except (tomllib.TOMLDecodeError, RecursionError) as err:
        raise ZboptError(f"{path}: not valid TOML: {reason(err)}") from None
    except ValueError as err:  # Python refuses to read an integer of more than 4,300 digits
        raise too_long_integer(path, err) from None
    return parse_spec(data, base_dir=path.parent, source=str(path),
                      default_name=path.stem, spec_file=path)


def parse_spec(data: Mapping[str, Any], base_dir: Path = Path("."), source: str = "spec",
               default_name: str = "sweep", spec_file: Path | None = None) -> SweepSpec:
    unknown = sorted(set(data) - set(SPEC_KEYS))
    if unknown:
        raise ZboptError(f"{source}: unknown key(s) {', '.join(unknown)}; a sweep spec takes "
                         f"{', '.join(SPEC_KEYS)}")
    name = data.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise ZboptError(f"{source}: name must be a non-empty string, got {name!r}")
    methods = _families(data.get("methods"), source) + _solvers(data.get("solvers"), source)
    if not methods:
        raise ZboptError(f"{source}: no methods: add `methods = [\"1f1b\", ...]` or a "
                         f"[[solvers]] table")
    duplicates = listed_twice([m.label for m in methods])
    if duplicates:
        raise ZboptError(f"{source}: {duplicates}")
    timeout = data.get("job_timeout")
    if timeout is not None and (not _positive(timeout)):
        raise ZboptError(f"{source}: job_timeout must be a positive, finite number of seconds, "
                         f"got {shown(timeout)}")
    # the grid last: the slow part
    instances = _instances(data, base_dir, source, len(methods), spec_file)
    return SweepSpec(name, tuple(instances), tuple(methods), timeout)


def listed_twice(names: list, what: str = "method(s)") -> str:
    """"method(s) listed twice: a, b: list each once" for the values `names` repeats (as text),
    "" if none (the sweep spec, `compare --methods` and `frontier --caps` say it alike)."""
    duplicates = sorted({str(x) for x in names if names.count(x) > 1})
    return f"{what} listed twice: {', '.join(duplicates)}: list each once" if duplicates \
        else ""


def _positive(x: Any) -> bool:
    """A positive finite number (TOML's inf and nan are floats too)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and finite(x) and x > 0


def _instances(data: Mapping[str, Any], base_dir: Path, source: str,
               methods: int = 1, spec_file: Path | None = None) -> list[Instance]:
    """Every base (the [base] table or file, then each instance file) expanded by the axes;
    refused before the expansion if the jobs (grid points x `methods`) exceed MAX_JOBS."""
    bases = []
    if "base" in data:
        bases.append(_base(data["base"], base_dir, source))
    files = data.get("instances", [])
    if isinstance(files, str):
        files = [files]
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise ZboptError(f"{source}: instances must be a list of file names or globs, "
                         f"got {files!r}")
    for pattern in files:
        matches = _named_files(pattern, base_dir, source, "instances entry", spec_file)
        bases += [_file_base(m, f"{source}: instances entry {pattern!r}: ") for m in matches]
    axes = _axes(data.get("axes", {}), source)
    if not bases:
        raise ZboptError(f"{source}: no instances: give a [base] table (with [axes]) or "
                         f"`instances = [...]` files")
    check_job_count(len(bases), axes, methods, source)
    return [instance for base in bases for instance in _grid(base, axes, source)]


def check_job_count(bases: int, axes: Mapping[str, list], methods: int, source: str) -> None:
    """Refuse a spec of more than MAX_JOBS jobs, counted without expanding its grid."""
    points = math.prod(len(values) for values in axes.values())
    jobs = bases * points * methods
    if jobs > MAX_JOBS:
        sizes = " x ".join(f"{len(v)} {k}" for k, v in axes.items()) or "no axes"
        raise ZboptError(f"{source}: the spec gives {jobs:,} jobs ({bases} base(s) x "
                         f"{sizes} x {methods} method(s)), above the limit of {MAX_JOBS:,}: "
                         f"use fewer axis values, instances or methods, or split it into "
                         f"several specs")


def _named_files(entry: str, base_dir: Path, source: str, what: str,
                 spec_file: Path | None = None, wildcards: bool = True) -> list[str]:
    """The files an `instances` entry (a glob) or the `base` path names, relative to the spec's
    folder or, when none there matches and the entry has no folder or wildcard, the shipped
    instance of that name (whatever the current folder). A glob never matches the spec
    itself."""
    full = entry if Path(entry).is_absolute() else str(base_dir / entry)
    matches = sorted(glob.glob(full if wildcards else glob.escape(full)))
    if wildcards and spec_file is not None and glob.escape(entry) != entry:
        matches = [m for m in matches if not Path(m).resolve() == spec_file.resolve()]
    if not matches and not set("*?[/\\") & set(entry):
        shipped = shipped_instances().get(entry[:-5] if entry.endswith(".toml") else entry)
        matches = [str(shipped)] if shipped is not None else []
    if not matches:
        raise ZboptError(f"{source}: {what} {entry!r} matches no file (paths are relative to "
                         f"the spec's folder {base_dir}) and names no shipped instance "
                         f"(`zbopt instances`)")
    return matches


def _file_base(path: str | Path, where: str = "") -> dict[str, Any]:
    """An instance file's keys, or a layered model's as written (split per grid point);
    `where` (the spec and its key) leads any error."""
    try:
        data = read_table(path)
        if "layers" in data:
            return data
        check_file_keys(data, str(path))  # as load_instance does, without reading it again
        return Instance.from_dict(data, source=str(path)).to_dict()
    except ZboptError as err:
        raise ZboptError(f"{where}{err}") from None


def _base(base: Any, base_dir: Path, source: str) -> dict[str, Any]:
    if isinstance(base, str):
        path, = _named_files(base, base_dir, source, "base", wildcards=False)
        return _file_base(path, f"{source}: base {base!r}: ")
    if not isinstance(base, dict):
        raise ZboptError(f"{source}: base must be a table of instance keys or a file path, "
                         f"got {base!r}")
    return base


def _axes(axes: Any, source: str) -> dict[str, list]:
    if not isinstance(axes, dict):
        raise ZboptError(f"{source}: axes must be a table `key = [values]`, got {axes!r}")
    for key, values in axes.items():
        if key not in FILE_KEYS or key == "name":
            raise ZboptError(f"{source}: axis {key!r} is not an instance key; use one of "
                             f"{', '.join(k for k in FILE_KEYS if k != 'name')}")
        if not isinstance(values, list) or not values:
            raise ZboptError(f"{source}: axis {key!r} must be a non-empty list of values, "
                             f"got {values!r}")
        seen: dict[Any, Any] = {}
        for value in values:  # two spellings of one value would run every job twice
            meaning = _axis_value(key, value)
            if meaning in seen:
                same = seen[meaning]
                what = f"{value!r} twice" if repr(same) == repr(value) else \
                    f"{same!r} and {value!r}, the same value"
                raise ZboptError(f"{source}: axis {key!r} lists {what}: list it once")
            seen[meaning] = value
    return axes


def _axis_value(key: str, value: Any) -> Any:
    """What an axis value means, for telling two spellings of one apart: no cap, numbers as
    floats (5 and 5.0), text in any case; lists value by value."""
    if key == "memory_cap" and no_cap(value):
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return value.strip().lower()
    if isinstance(value, list):
        return tuple(_axis_value("", x) for x in value)
    return repr(value)


def _layered_grid(base: dict[str, Any], axes: dict[str, list], source: str) -> list[Instance]:
    wrong = [k for k in axes if k not in LAYERED_AXES]
    if wrong:
        raise ZboptError(f"{source}: axis {wrong[0]!r} does not apply to the layered model "
                         f"{base.get('name') or 'base'} (its costs and static memory are per "
                         f"layer); its axes are {', '.join(LAYERED_AXES)}")
    from ..layers import LayeredModel
    from ..plan.baselines import default_split
    out = []
    for point in expand_grid(base, axes):
        where = f"{source}: {point['name'] or 'base'}"
        cap = _sized(point, where).pop("memory_cap", None)
        if no_cap(cap):
            cap = None
        relative = isinstance(cap, str)
        model = LayeredModel.from_dict(point if relative or cap is None
                                       else {**point, "memory_cap": cap}, source=where)
        sizes, _ = default_split(model)
        try:
            instance = model.instance(sizes)
            out.append(instance.with_cap(cap) if relative else instance)
        except ZboptError as err:
            raise ZboptError(f"{where}: {err}") from None
    return out


def _grid(base: dict[str, Any], axes: dict[str, list], source: str) -> list[Instance]:
    if "layers" in base:
        return _layered_grid(base, axes, source)
    if "placement" in axes and base.get("placement", "contiguous") != "contiguous":
        raise ZboptError(f"{source}: a placement axis re-splits a contiguous model: "
                         f"give a contiguous base")
    out = []
    for point in expand_grid(base, axes):
        where = f"{source}: {point['name'] or 'base'}"
        check_chunks(point, where)  # as an instance file's: 0 would silently mean 2 (or 1)
        out.append(instance_from_grid_point(_sized(point, where), where,
                                            replace_model="placement" in axes))
    return out


def _sized(point: dict[str, Any], where: str) -> dict[str, Any]:
    """The grid point with a memory cap written in bytes ("80GB") in its memory unit
    (zbopt.sizes.in_unit)."""
    cap = point.get("memory_cap")
    if isinstance(cap, str):
        try:
            value = in_unit(cap, point.get("memory_unit") or "")
        except ZboptError as err:
            raise ZboptError(f"{where}: memory_cap {err}") from None
        if value is not None:
            point["memory_cap"] = value
    return point


def _families(entries: Any, source: str) -> list[MethodSpec]:
    from ..registry import methods, solver_names
    if entries is None:
        return []
    registry = methods("schedule")
    if entries == "all":
        return [MethodSpec(n, "family") for n in registry]
    if not isinstance(entries, list):
        raise ZboptError(f"{source}: methods must be \"all\" or a list of names/tables, "
                         f"got {entries!r}")
    out = []
    for entry in entries:
        if isinstance(entry, str):
            name, params = entry, {}
        elif isinstance(entry, dict) and isinstance(entry.get("name"), str) \
                and set(entry) <= {"name", "params"} and isinstance(entry.get("params", {}), dict):
            name, params = entry["name"], entry.get("params", {})
        else:
            raise ZboptError(f"{source}: a method is a name or a table {{name = ..., "
                             f"params = {{...}}}}, got {entry!r}")
        if name in solver_names():
            raise ZboptError(f"{source}: {name!r} is a solver: list it under [[solvers]] "
                             f"with its time_limit and threads")
        if name not in registry:
            raise ZboptError(f"{source}: unknown method {name!r}: choose from "
                             f"{', '.join(sorted(registry))}")
        if no_cap(params.get("memory_cap")):
            params = {**params, "memory_cap": None}  # TOML has no None: as the axes read it
        _check_params(registry[name], params, source)
        out.append(MethodSpec(name, "family", tuple(sorted(params.items()))))
    return out


def _check_params(method: Any, params: Mapping[str, Any], source: str) -> None:
    """Refuse parameters the method's generator does not take (registry.run passes them as
    keywords after the instance, over the registered defaults; `objective` is run_job's, for
    the bound), and non-finite numbers (which results.jsonl could not hold as standard JSON).
    A value no instance could take (the method's registered checks: a group size that is not a
    whole number) is refused here; whether a value suits an instance (a group size against its
    devices) is the method's to say when it runs: a not-applicable row."""
    from ..registry import check_values
    accepted = [p for p in list(inspect.signature(method.generate).parameters.values())[1:]
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY, p.VAR_KEYWORD)]
    names = [p.name for p in accepted if p.kind != p.VAR_KEYWORD] + ["objective"]
    if params.get("objective", "span") not in ("span", "makespan"):
        raise ZboptError(f"{source}: method {method.name!r}: objective must be 'span' or "
                         f"'makespan', got {params['objective']!r}")
    unknown = sorted(set(params) - set(names))
    if unknown and not any(p.kind == p.VAR_KEYWORD for p in accepted):
        takes = f"it takes {', '.join(names)}" if names else "it takes no parameters"
        raise ZboptError(f"{source}: method {method.name!r}: unknown parameter(s) "
                         f"{', '.join(unknown)}; {takes}")
    for key, value in params.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ZboptError(f"{source}: method {method.name!r}: parameter {key} = {value}: "
                             f"give a finite number")
    try:
        check_values(method, params)
    except ZboptError as err:
        raise ZboptError(f"{source}: {err}") from None


def _solvers(entries: Any, source: str) -> list[MethodSpec]:
    from ..registry import solver_names
    if entries is None:
        return []
    solvers = solver_names()
    if not isinstance(entries, list):
        raise ZboptError(f"{source}: solvers must be an array of tables [[solvers]], "
                         f"got {entries!r}")
    out = []
    for entry in entries:
        if not isinstance(entry, dict) or "name" not in entry:
            raise ZboptError(f"{source}: each [[solvers]] table needs name = "
                             f"{' | '.join(solvers)}, got {entry!r}")
        unknown = sorted(set(entry) - set(SOLVER_KEYS))
        if unknown:
            raise ZboptError(f"{source}: solver {entry['name']!r}: unknown key(s) "
                             f"{', '.join(unknown)}; use {', '.join(SOLVER_KEYS)}")
        if entry["name"] not in solvers:
            raise ZboptError(f"{source}: unknown solver {entry['name']!r}: use one of "
                             f"{', '.join(solvers)}")
        params = {"time_limit": entry.get("time_limit", 60), "threads": entry.get("threads", 1),
                  "objective": entry.get("objective", "span")}
        if not _positive(params["time_limit"]):
            raise ZboptError(f"{source}: solver time_limit must be a positive, finite number of "
                             f"seconds, got {shown(params['time_limit'])}")
        if not isinstance(params["threads"], int) or isinstance(params["threads"], bool) \
                or params["threads"] < 1:
            raise ZboptError(f"{source}: solver threads must be an integer >= 1, "
                             f"got {params['threads']!r}")
        if params["objective"] not in ("span", "makespan"):
            raise ZboptError(f"{source}: solver objective must be 'span' or 'makespan', "
                             f"got {params['objective']!r}")
        out.append(MethodSpec(entry["name"], "solver", tuple(sorted(params.items()))))
    return out
