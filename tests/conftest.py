import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import settings

from zbopt.solvers import api
from zbopt.solvers.protocol import BackendResult

REFERENCE = Path(__file__).resolve().parent / "data"

# The property tests draw the same examples on every run (derandomize: from each test's own
# source), so the README's `pytest -q` and .ci/run pass or fail alike on every machine; a draw
# that fails is then found by the run that adds it, not by a later one. `pytest
# --hypothesis-profile=explore` draws fresh examples (and keeps failing ones in .hypothesis/) to
# look for new failures.
settings.register_profile("deterministic", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile("deterministic")


def load_reference(name: str) -> dict:
    """Reference values: the published tables in tests/data (sources in tests/data/REFERENCE.md)."""
    return json.loads((REFERENCE / name).read_text())


@pytest.fixture
def paper_rows():
    return load_reference("zb_paper_table5.json")["rows"]


@pytest.fixture
def unit_grid():
    data = load_reference("unit_cost_grid.json")
    return [dict(zip(data["columns"], row)) for row in data["rows"]]


class _Recorder:
    """A backend that finds nothing and keeps the request it was given."""

    def __init__(self):
        self.requests = []

    def __call__(self, request):
        self.requests.append(request)
        return BackendResult("unknown", None, None, None, message="nothing found")


@pytest.fixture
def recorder(monkeypatch):
    """solve() with a backend that finds nothing: the requests it got, to inspect the hint."""
    backend = _Recorder()
    monkeypatch.setattr(api, "get_method", lambda name, kind: SimpleNamespace(backend=backend))
    return backend
