import json
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"
REFERENCE = Path(__file__).resolve().parent / "data"


def load_reference(name: str) -> dict:
    """Reference values: the repo's copy in tests/data (shared/reference is not in the repo)."""
    return json.loads((REFERENCE / name).read_text())


@pytest.fixture
def paper_rows():
    return load_reference("zb_paper_table5.json")["rows"]


@pytest.fixture
def unit_grid():
    data = load_reference("unit_cost_grid.json")
    return [dict(zip(data["columns"], row)) for row in data["rows"]]
