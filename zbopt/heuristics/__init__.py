"""Heuristic schedulers; each module registers its generators in zbopt.families.registry."""
