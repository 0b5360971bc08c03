"""Handwritten schedule families, one module each; they register in zbopt.registry."""

from ..registry import Method, generate, get_method, methods, prepare, register


def families() -> dict[str, Method]:
    """The registered schedule generators (handwritten families and heuristics) by name."""
    return methods("schedule")


def get_family(name: str) -> Method:
    return get_method(name, "schedule")


__all__ = ["families", "generate", "get_family", "prepare", "register"]
