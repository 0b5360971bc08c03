"""One registry of schedule generators (handwritten families and heuristics), by name.

A generator is `(instance, **params) -> Schedule`. Each entry names the placement it runs on;
`prepare()` re-places a contiguous instance for it (same model, layers re-split into chunks) or
says why it does not apply.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field, replace
from typing import Callable

from ..errors import ZboptError
from ..instance import Instance
from ..schedule import Schedule

Generator = Callable[..., Schedule]


@dataclass(frozen=True)
class Family:
    name: str
    generate: Generator
    placement: str  # the placement it needs: contiguous, interleaved, v, dualpipe
    description: str
    kind: str = "handwritten"  # or "heuristic"
    chunks: int = 0  # chunks used when re-placing a contiguous instance (interleaved)
    defaults: dict = field(default_factory=dict)


_REGISTRY: dict[str, Family] = {}


def register(name: str, placement: str, description: str, kind: str = "handwritten",
             chunks: int = 0, **defaults) -> Callable[[Generator], Generator]:
    def wrap(fn: Generator) -> Generator:
        if name in _REGISTRY:
            raise RuntimeError(f"schedule family {name!r} registered twice")
        _REGISTRY[name] = Family(name, fn, placement, description, kind, chunks, defaults)
        return fn
    return wrap


def _load_all() -> None:
    """Import every module of zbopt.families and zbopt.heuristics so they register."""
    for package_name in ("zbopt.families", "zbopt.heuristics"):
        package = importlib.import_module(package_name)
        for info in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package_name}.{info.name}")


def families() -> dict[str, Family]:
    _load_all()
    return dict(_REGISTRY)


def get_family(name: str) -> Family:
    registry = families()
    if name not in registry:
        raise ZboptError(f"unknown schedule {name!r}: choose one of {', '.join(sorted(registry))}")
    return registry[name]


def prepare(family: Family, instance: Instance) -> Instance:
    """The instance on the family's placement; ZboptError with the reason if impossible."""
    if instance.placement == family.placement:
        return instance
    if instance.placement != "contiguous":
        raise ZboptError(f"{family.name} runs on placement {family.placement!r}, "
                         f"the instance is {instance.placement!r}")
    return instance.with_placement(family.placement, family.chunks)


def generate(name: str, instance: Instance, **params) -> Schedule:
    """The schedule of family `name` for `instance` (already on the family's placement)."""
    family = get_family(name)
    if instance.placement != family.placement:
        raise ZboptError(f"{name} runs on placement {family.placement!r}, the instance is "
                         f"{instance.placement!r}: use Instance.with_placement or `prepare`")
    schedule = family.generate(instance, **{**family.defaults, **params})
    return replace(schedule, method=name)
