"""The one registry of methods: handwritten families, heuristics and solver backends, by name,
and `run(name, instance, **params) -> Result`, the entry point behind every command.

A module registers itself when it is imported: schedule generators in `zbopt/families/` and
`zbopt/heuristics/` with `@register(...)`, solver backends in `zbopt/solvers/backends/` with
`register_backend(...)`. The registry imports every module of those packages, so adding a
method is adding one module.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional

from .errors import ZboptError
from .instance import PLACEMENTS, Instance, plain, require_instance
from .result import KINDS, Result
from .schedule import Schedule, evaluate

Generator = Callable[..., Schedule]
_SCHEDULE_PACKAGES = ("zbopt.families", "zbopt.heuristics")
_SOLVER_PACKAGE = "zbopt.solvers.backends"
_SCHEDULE_KINDS = ("schedule", "handwritten", "heuristic")


@dataclass(frozen=True)
class Method:
    """A registered method.

    kind: "handwritten" or "heuristic" (a `generate(instance, **params) -> Schedule` for one
    placement; a contiguous instance is re-placed for it) or "solver" (a `backend` behind the
    protocol of zbopt.solvers.protocol, run by zbopt.solvers.solve on any placement).
    params: the parameters it takes, with their defaults.
    checks: per parameter, a `check(method_name, value)` raising ZboptError for a value no
    instance could take (a group size that is not a whole number): run(), generate() and a
    sweep's spec refuse it up front, where a value that does not suit one instance (a group
    size below its devices) is a not-applicable row when the method runs.
    """

    name: str
    kind: str
    placements: tuple[str, ...]
    description: str
    params: dict = field(default_factory=dict)
    generate: Optional[Generator] = None
    backend: Any = None
    chunks: int = 0  # chunks used when re-placing a contiguous instance (interleaved)
    checks: dict = field(default_factory=dict)

    @property
    def placement(self) -> str:
        """The placement a schedule generator needs (solvers take any: the first listed)."""
        return self.placements[0]

    def applies_to(self, placement: str) -> bool:
        return placement in self.placements or (
            self.kind != "solver" and placement == "contiguous")


_REGISTRY: dict[str, Method] = {}


def _add(method: Method) -> None:
    if method.name in _REGISTRY:
        raise RuntimeError(f"method {method.name!r} registered twice")
    _REGISTRY[method.name] = method


def register(name: str, placement: str, description: str, kind: str = "handwritten",
             chunks: int = 0, checks: dict | None = None,
             **defaults) -> Callable[[Generator], Generator]:
    """Decorator for a schedule generator `(instance, **params) -> Schedule` on `placement`;
    `checks`: see Method."""
    def wrap(fn: Generator) -> Generator:
        _add(Method(name, kind, (placement,), description, dict(defaults), generate=fn,
                    chunks=chunks, checks=dict(checks or {})))
        return fn
    return wrap


def register_backend(name: str, description: str, backend: Any, **defaults) -> None:
    """A solver backend (see zbopt.solvers.protocol.Backend); `defaults` are solve()'s params."""
    _add(Method(name, "solver", PLACEMENTS, description, dict(defaults), backend=backend))


@functools.cache
def _load(package_name: str) -> None:
    package = importlib.import_module(package_name)
    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package_name}.{info.name}")


def _load_kind(kind: str | None) -> None:
    """Import the modules that register methods of `kind`: the solver backends (and the solver
    libraries they import, seconds of start-up) only when solvers are asked for."""
    for package_name in _SCHEDULE_PACKAGES:
        _load(package_name)
    if kind not in _SCHEDULE_KINDS:
        _load(_SOLVER_PACKAGE)


def _of_kind(method: Method, kind: str | None) -> bool:
    return kind is None or (method.kind != "solver" if kind == "schedule" else method.kind == kind)


def methods(kind: str | None = None) -> dict[str, Method]:
    """Every registered method by name (of one kind, or of the schedule kinds with "schedule")."""
    _load_kind(kind)
    # a fixed order (kind, then name), whatever order the modules happened to be imported in
    ordered = sorted(_REGISTRY.values(), key=lambda m: (KINDS.index(m.kind), m.name))
    return {m.name: m for m in ordered if _of_kind(m, kind)}


def solver_names() -> tuple[str, ...]:
    return tuple(methods("solver"))


def get_method(name: str, kind: str | None = None) -> Method:
    if not isinstance(name, str):
        what = {"solver": "a solver", "schedule": "a schedule method"}.get(kind or "", "a method")
        several = " (compare(instance, [...]) runs several)" \
            if isinstance(name, (list, tuple, set)) else ""
        raise ZboptError(f"the method must be the name of {what} such as '1f1b', got "
                         f"{type(name).__name__} {name!r}: give one name{several}")
    _load_kind("schedule")
    if name in _REGISTRY and _of_kind(_REGISTRY[name], kind):
        return _REGISTRY[name]  # a family or heuristic: no need to import the solvers
    registry = methods(kind)
    if name not in registry:
        what = {"solver": "solver", "schedule": "schedule"}.get(kind or "", "method")
        raise ZboptError(f"unknown {what} {name!r}: choose one of {', '.join(sorted(registry))}")
    return registry[name]


def _accepted(method: Method) -> tuple[tuple[str, ...], bool]:
    """(the keywords `method` takes past the instance, whether it takes any keyword): a
    generator's own parameters, or for a solver those of zbopt.solvers.api.solve (less the
    solver's name, which run() passes)."""
    if method.kind == "solver":
        from .solvers.api import solve
        fn, skip = solve, {"solver"}
    else:
        fn, skip = method.generate, set()
    parameters = list(inspect.signature(fn).parameters.values())[1:]  # past the instance
    names = tuple(p.name for p in parameters if p.name not in skip and p.kind in (
        p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    return names, any(p.kind == p.VAR_KEYWORD for p in parameters)


def check_params(method: Method, params: dict, also: tuple[str, ...] = (),
                 caller: str = "") -> None:
    """ZboptError naming the method, the keywords it does not take and those it does, rather
    than a TypeError from the call; `also`: keywords `caller` (run()) takes itself. Then each
    value the method checks (Method.checks) must be one some instance could take."""
    names, any_keyword = _accepted(method)
    extra = tuple(key for key in also if key not in names)
    unknown = [key for key in params if key not in names and key not in extra]
    if unknown and not any_keyword:
        quoted = ", ".join(map(repr, unknown))
        takes = f"it takes {', '.join(names)}" if names else "it takes none"
        if extra:
            takes += f" ({caller} also takes {', '.join(extra)})"
        raise ZboptError(f"{method.name} takes no parameter{'s' if len(unknown) > 1 else ''} "
                         f"{quoted}: {takes}")
    check_values(method, params)


def check_values(method: Method, params: dict) -> None:
    """ZboptError for a value of `params` no instance could take (Method.checks)."""
    for key, value in params.items():
        if key in method.checks:
            method.checks[key](method.name, value)


def prepare(method: Method, instance: Instance) -> Instance:
    """The instance on the method's placement; ZboptError with the reason if impossible.

    A re-placed instance keeps the absolute per-device cap of the instance as written, so every
    method is judged against the same memory.
    """
    require_instance(instance, "prepare()")
    if method.kind == "solver" or instance.placement == method.placement:
        return instance
    if instance.placement != "contiguous":
        raise ZboptError(f"{method.name} runs on placement {method.placement!r}, "
                         f"the instance is {instance.placement!r}")
    return instance.with_placement(method.placement, method.chunks)


def generate(name: str, instance: Instance, **params) -> Schedule:
    """The schedule of generator `name` for `instance` (already on its placement)."""
    method = get_method(name, "schedule")
    require_instance(instance, "generate()")
    check_params(method, params)
    if instance.placement != method.placement:
        raise ZboptError(f"{name} runs on placement {method.placement!r}, the instance is "
                         f"{instance.placement!r}: use Instance.with_placement or `prepare`")
    schedule = method.generate(instance, **{**method.params, **params})
    return replace(schedule, method=name)


@functools.lru_cache(maxsize=256)
def _bound(instance: Instance, objective: str) -> tuple[str, float]:
    from .bounds import best_lower_bound
    return best_lower_bound(instance, objective)


def schedule_bound(instance: Instance, objective: str = "span") -> tuple[str, float] | None:
    """(name, value) of the best lower bound on schedules of single passes for `instance`;
    None where it does not hold: overlapped F&B blocks with an overlap discount can beat it."""
    if instance.overlap:
        return None
    return _bound(instance, objective)


def run(name: str, instance: Instance, objective: str = "span", **params) -> Result:
    """Run one registered method on `instance`: the single entry point behind every command.

    Schedule generators: the instance is re-placed for the method if needed, the schedule is
    judged by evaluate(), and a schedule within the cap gets the best lower bound of its
    (placed) instance. A failed precondition gives status "not-applicable" with the reason.
    Solvers: zbopt.solvers.solve() with `params` (time_limit, threads, ...).
    A keyword the method does not take, a value of it no instance could take (Method.checks),
    or an `instance` that is not an Instance, is a ZboptError.
    """
    from .bounds import check_objective
    method = get_method(name)
    require_instance(instance, "run()")
    check_objective(objective)
    check_params(method, params, also=("objective",), caller="run()")
    params = {key: plain(value) for key, value in params.items()}  # numpy's numbers as Python's
    if method.kind == "solver":
        from .solvers.api import solve
        return solve(instance, solver=name, objective=objective, **params)
    began = time.perf_counter()
    try:
        placed = prepare(method, instance)
        schedule = method.generate(placed, **{**method.params, **params})
        timeline = evaluate(placed, replace(schedule, method=name))
    except ZboptError as err:
        return Result(name, method.kind, "not-applicable", instance, message=str(err),
                      objective_name=objective, params=dict(params),
                      runtime=time.perf_counter() - began)
    bound = schedule_bound(placed, objective) if timeline.fits_cap else None
    return Result(name, method.kind, "heuristic", placed, timeline,
                  lower_bound=bound[1] if bound else None,
                  bound_name=bound[0] if bound else None,
                  runtime=time.perf_counter() - began, objective_name=objective,
                  params=dict(params))
