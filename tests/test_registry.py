"""The one registry and the one Result: every method behind run(), one JSON shape, one cap."""

import json

import pytest

from zbopt.cli import main
from zbopt.instance import Instance
from zbopt.registry import get_method, methods, run, solver_names
from zbopt.result import STATUSES

SHARED_KEYS = {"method", "kind", "status", "span", "makespan", "lower_bound", "gap", "runtime",
               "peak_memory", "fits_cap", "placement", "memory_cap", "bubble_rate", "ideal",
               "message"}


def test_registry_holds_families_heuristics_and_solvers():
    kinds = {m.kind for m in methods().values()}
    assert kinds == {"handwritten", "heuristic", "solver"}
    assert {"cpsat", "cbc", "highs"} <= set(solver_names())
    for m in methods().values():
        assert m.placements and m.description
        assert (m.backend is not None) == (m.kind == "solver")


def test_unknown_method_is_one_clear_error():
    from zbopt.errors import ZboptError
    with pytest.raises(ZboptError, match="unknown solver 'nope'"):
        get_method("nope", "solver")


def test_one_cap_for_every_row_of_compare(tmp_path, capsys):
    # device 3 holds most: "1p" is read once, on the instance as written, for every method
    path = Instance(devices=4, microbatches=8, m_b=[4, 1, 1, 8], m_w=[1, 0, 0, 2],
                    memory_cap="1p").save(tmp_path / "uneven.toml")
    assert main(["compare", str(path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    caps = {json.dumps(row["memory_cap"]) for row in rows}
    assert caps == {json.dumps([16] * 4)}, caps
    assert any(row["method"] == "dualpipe" and row["placement"] == "dualpipe" for row in rows)


def test_compare_and_solve_json_share_the_result_keys(tmp_path, capsys):
    path = Instance(devices=2, microbatches=4, m_b=2, m_w=1, memory_cap="1p").save(
        tmp_path / "small.toml")
    assert main(["compare", str(path), "--json", "--methods", "1f1b,zb-h1"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert main(["solve", str(path), "--json", "--time-limit", "5"]) == 0
    solved = json.loads(capsys.readouterr().out)
    for doc in [*rows, solved]:
        assert SHARED_KEYS <= set(doc), SHARED_KEYS - set(doc)
        assert doc["status"] in STATUSES
    # the keys solve --json had before the redesign are still there
    assert {"objective", "solver", "best_heuristic", "best_heuristic_objective", "gain",
            "scale"} <= set(solved)
    assert solved["status"] == "optimal" and solved["gap"] == 0


def test_run_reports_not_applicable_with_the_reason():
    result = run("dualpipe", Instance(devices=2, microbatches=3))
    assert result.status == "not-applicable" and "even" in result.message
    assert result.to_dict()["span"] is None


@pytest.mark.parametrize("name", ["1f1b", "zb-h1", "zb-greedy"])
def test_a_schedule_meeting_its_bound_has_gap_zero_and_a_bound_name(name):
    result = run(name, Instance(devices=3, microbatches=6, memory_cap="1p"))
    assert result.fits() and result.lower_bound is not None and result.bound_name
    assert result.lower_bound <= result.span + 1e-9
    assert result.gap == pytest.approx((result.span - result.lower_bound) / result.span)


def test_a_schedule_file_gives_its_instance_to_compare(tmp_path, capsys):
    path = Instance(devices=3, microbatches=6, m_b=2, m_w=1, memory_cap="1p").save(
        tmp_path / "i.toml")
    out = tmp_path / "s.json"
    assert main(["simulate", str(path), "-s", "zb-h1", "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["compare", str(out), "--json", "--methods", "zb-h1", "--quiet"]) == 0
    direct = main(["compare", str(path), "--json", "--methods", "zb-h1", "--quiet"])
    first, second = capsys.readouterr().out.split("\n[", 1)
    assert direct == 0 and json.loads(first)[0]["span"] == json.loads("[" + second)[0]["span"]
