"""Partition planning: the layer split of a layered model chosen together with the schedule."""

from .baselines import BASELINES, even_split, torchtitan_split
from .search import Plan, Split, plan

__all__ = ["BASELINES", "Plan", "Split", "even_split", "plan", "torchtitan_split"]
