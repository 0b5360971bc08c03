"""CP-SAT with large-neighbourhood search around the warm start (zbopt.solvers.lns)."""

from __future__ import annotations

from ...registry import register_backend
from ..lns import solve_lns

register_backend("cpsat-lns", "CP-SAT: the full model for its bound, then re-optimised windows "
                 "of micro-batches, devices or time around the best schedule", solve_lns)
