"""A wrong argument to a public Python function is one ZboptError saying what to give, raised
before any work: never a TypeError or AttributeError from deep inside, never a value taken
silently (a truthy string for a flag, True for one second, a string iterated letter by letter);
and Result.to_dict() is a JSON document whatever number types the parameters came as."""

import json

import numpy as np
import pytest

from zbopt import bounds
from zbopt.compare import best_of, compare
from zbopt.errors import ZboptError
from zbopt.frontier import frontier
from zbopt.instance import Instance
from zbopt.layers import load_model
from zbopt.plan import plan
from zbopt.registry import run

INSTANCE = Instance(devices=2, microbatches=4, m_b=2, m_w=1)


@pytest.fixture(scope="module")
def model():
    return load_model("blocks16-p4")


# ----- 1: bare Python errors become ZboptErrors ------------------------------------------------

@pytest.mark.parametrize("call, message", [
    (lambda: run("cpsat", INSTANCE, time_limit=2, progress=5),
     r"^progress must be a function taking a dict, or None; got int 5$"),
    (lambda: run(["1f1b"], INSTANCE),
     r"^the method must be the name of a method such as '1f1b', got list \['1f1b'\]: give one "
     r"name \(compare\(instance, \[\.\.\.\]\) runs several\)$"),
    (lambda: bounds.lower_bounds(None), r"^lower_bounds\(\): expected a zbopt Instance, got "
                                        r"NoneType: load one with"),
    (lambda: bounds.best_lower_bound({"devices": 2}),
     r"^best_lower_bound\(\): expected a zbopt Instance, got dict: build one with "
     r"Instance.from_dict"),
    (lambda: bounds.min_feasible_cap(None), r"^min_feasible_cap\(\): expected a zbopt Instance"),
    (lambda: frontier(None, ["1p"]), r"^frontier\(\): expected a zbopt Instance, got NoneType"),
    (lambda: frontier(INSTANCE, ["1p"], progress=5),
     r"^progress must be a function taking a cap and a dict, or None; got int 5$"),
    (lambda: compare(None), r"^compare\(\): expected a zbopt Instance"),
    (lambda: compare(INSTANCE, [["1f1b"]]),
     r"^compare\(\): methods must be names such as '1f1b', got list \['1f1b'\]: give a list of "
     r"method names$"),
])
def test_a_wrong_argument_is_a_zbopt_error_saying_what_to_give(call, message):
    with pytest.raises(ZboptError, match=message):
        call()


def test_plan_refuses_a_progress_that_is_not_a_function(model):
    with pytest.raises(ZboptError, match=r"^progress must be a function taking a dict, or None; "
                                         r"got int 5$"):
        plan(model, progress=5, time_limit=2, exact=False)


# ----- 2: values taken silently or refused late ------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    ({"threads": 0}, r"^threads must be a positive integer, got 0$"),
    ({"threads": "2"}, r"^threads must be a positive integer, got '2'$"),
    ({"max_partitions": "x"}, r"^max_partitions must be a whole number of at least 1, got 'x'$"),
    ({"max_partitions": -5}, r"^max_partitions must be a whole number of at least 1, got -5$"),
    ({"time_limit": True}, r"^time limit must be a positive number of seconds, got True$"),
    ({"exact": "no"}, r"^exact must be True or False, got 'no'$"),
    ({"solver": ["cpsat"]}, r"^the method must be the name of a solver"),
])
def test_plan_checks_every_argument_up_front_even_with_the_solver_phase_skipped(model, kwargs,
                                                                               message):
    with pytest.raises(ZboptError, match=message):
        plan(model, **{"exact": False, "time_limit": 2, **kwargs})


def test_plan_takes_numpy_counts_for_its_limits(model):
    chosen = plan(model, exact=False, time_limit=np.float64(5), threads=np.int64(1),
                  max_partitions=np.int64(50))
    assert chosen.result.fits()


@pytest.mark.parametrize("kwargs, message", [
    ({"symmetry": "no"}, r"^symmetry must be True or False, got 'no'$"),
    ({"prove_with_bounds": 1}, r"^prove_with_bounds must be True or False, got 1$"),
    ({"time_limit": True}, r"^time limit must be a positive number of seconds, got True$"),
    ({"threads": 1.0}, r"^threads must be a positive integer, got 1.0$"),
    ({"options": ["bound_cuts"]}, r"^options must be a dict of backend switches, or None; "
                                  r"got list$"),
])
def test_a_solver_refuses_values_of_the_wrong_type(kwargs, message):
    with pytest.raises(ZboptError, match=message):
        run("cpsat", INSTANCE, **{"time_limit": 2, **kwargs})


def test_compare_takes_one_method_name_given_as_a_string():
    rows = compare(INSTANCE, "1f1b")
    assert [row.method for row in rows] == ["1f1b"]


@pytest.mark.parametrize("caps, given", [("1p", "the str '1p'"), (2.0, "float")])
def test_frontier_wants_a_list_of_caps_and_says_so_in_python_terms(caps, given):
    with pytest.raises(ZboptError) as err:
        frontier(INSTANCE, caps)
    assert str(err.value).startswith(f"frontier(): caps must be a list of caps such as "
                                     f"['1p', '1.5p', 4e6], got {given}: write [")
    assert "--caps" not in str(err.value)


def test_frontier_names_its_caps_parameter_not_the_command_line_flag():
    with pytest.raises(ZboptError) as err:
        frontier(INSTANCE, ["1p", "x"])
    assert str(err.value).startswith("frontier(): caps: cap x: ")
    with pytest.raises(ZboptError, match=r"^frontier\(\): no caps given: pass e.g. "
                                         r"caps=\['1p', '2p'\]$"):
        frontier(INSTANCE, [])


def test_best_of_refuses_an_unknown_objective_even_for_one_row():
    rows = compare(INSTANCE, ["1f1b"])
    with pytest.raises(ZboptError, match=r"^unknown objective 'x': use 'span' or 'makespan'$"):
        best_of(rows, objective="x")
    assert best_of(rows, objective="makespan") is rows[0]


def test_run_refuses_an_unknown_objective_where_no_bound_would_have_noticed():
    overlapped = Instance(devices=2, microbatches=4, overlap=0.5)  # no bound is asked for
    with pytest.raises(ZboptError, match=r"^unknown objective 'x': use 'span' or 'makespan'$"):
        run("1f1b", overlapped, objective="x")


# ----- 3: a group size no instance could take -------------------------------------------------

@pytest.mark.parametrize("value", [0, -1, np.int64(-3)])
def test_a_group_size_below_one_is_an_error_not_a_row(value):
    with pytest.raises(ZboptError) as err:
        run("interleaved-1f1b", INSTANCE, group_size=value)
    assert str(err.value) == (f"interleaved-1f1b: group_size must be at least the number of "
                              f"devices, got {int(value)}: give a whole number >= p, or None "
                              f"for N = p")


def test_a_group_size_below_this_instances_devices_is_still_not_applicable():
    result = run("interleaved-1f1b", Instance(devices=4, microbatches=8), group_size=2)
    assert result.status == "not-applicable"
    assert result.message == "interleaved-1f1b needs group size N >= p = 4, got 2"


# ----- 5: JSON documents whatever the parameters' number types ---------------------------------

def test_a_result_of_numpy_parameters_is_a_json_document_of_plain_numbers():
    result = run("interleaved-1f1b", INSTANCE, group_size=np.int64(4))
    assert result.params == {"group_size": 4} and type(result.params["group_size"]) is int
    assert json.loads(json.dumps(result.to_dict()))["params"] == {"group_size": 4}


def test_a_solver_result_keeps_plain_limits():
    result = run("cpsat", INSTANCE, time_limit=np.float64(5), threads=np.int64(1))
    assert result.params == {"time_limit": 5.0, "threads": 1}
    assert {type(v) for v in result.params.values()} == {float, int}
    json.dumps(result.to_dict())
