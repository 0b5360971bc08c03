"""Handwritten schedule families; see registry.py for the registry by name."""

from .registry import Family, families, generate, get_family, prepare, register

__all__ = ["Family", "families", "generate", "get_family", "prepare", "register"]
