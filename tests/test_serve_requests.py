"""zbopt serve: odd request values (null, JSON objects, empty fields, huge figures, deep JSON),
the per-device limits of the comparison table and its caches, downloads of a solve and the
served instance's per-device static memory, against a real `zbopt serve` subprocess."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from test_serve import UNIT, Server, q  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    path = tmp_path_factory.mktemp("serve-requests") / "unit.toml"
    path.write_text(UNIT)
    srv = Server(path)
    yield srv
    srv.stop()


def post_raw(server: Server, data: bytes) -> tuple[int, dict]:
    req = urllib.request.Request(server.url + "api/solve", data=data,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_a_deeply_nested_body_is_a_422_not_a_crash(server):
    deep = 100_000
    status, body = post_raw(server, ('{"page":"h","t_f":' + "[" * deep + "]" * deep + "}")
                            .encode())
    assert status == 422 and body["field"] == "request", body
    assert body["error"].startswith("the request body must be a JSON object")
    # nested less deeply than Python's limit: the list inside a list is named, not printed
    status, body = post_raw(server, ('{"page":"h","t_f":' + "[" * 500 + "]" * 500 + "}")
                            .encode())
    assert status == 422 and body["field"] == "t_f", body
    assert "a list holding lists or objects" in body["error"]


@pytest.mark.parametrize("params, field, message", [
    (dict(devices=""), "devices", "devices is empty: give a whole number from 1 to 64"),
    (dict(microbatches=" "), "microbatches", "micro-batches is empty: give a whole number"),
    (dict(comm=""), "comm", "comm is empty: give a number >= 0"),
    (dict(t_f="1,,2"), "t_f", "t_f has an empty value between commas in '1,,2'"),
    (dict(m_b="2, ,2"), "m_b", "m_b has an empty value between commas in '2, ,2'"),
    (dict(t_f="99999999999999999999999"), "t_f",
     "t_f must be at most 10^15, got '99999999999999999999999'"),
    (dict(m_w="99999999999999999999999"), "m_w",
     "m_w must be at most 10^15, got '99999999999999999999999'"),
])
def test_messages_say_what_was_given(server, params, field, message):
    status, body, _ = server.request("/api/evaluate?" + q(**params))
    assert status == 422 and body["field"] == field, body
    assert body["error"].startswith(message), body


@pytest.mark.parametrize("body, field, message", [
    ({"t_f": {"a": 1}}, "t_f", "t_f must be a number or a list of numbers, got a JSON object"),
    ({"t_f": [1, {"a": 1}]}, "t_f", "got a list holding lists or objects"),
    ({"devices": None}, "devices", "devices must be a whole number, got null"),
    ({"comm": None}, "comm", "comm must be a number, got null"),
    ({"m_b": None}, "m_b", "m_b must be a number or a list of numbers, got null"),
    ({"memory_cap": None}, "memory_cap", "'none' (no cap), got null"),
    ({"schedule": None}, "schedule", "schedule must be a name (text), got null"),
    ({"time_limit": None}, "time_limit", "time limit must be a number of seconds, got null"),
    ({"solver": None}, "solver", "unknown solver null"),
    ({"page": 123}, "page", "page must be 1-64 letters"),
    ({"page": None}, "page", "page must be 1-64 letters"),
])
def test_null_and_json_objects_are_refused_alike(server, body, field, message):
    status, answer, _ = server.request("/api/solve", {"page": "nulls", "time_limit": 1,
                                                      **body})
    assert status == 422 and answer["field"] == field, answer
    assert message in answer["error"], answer


# ----- the comparison table's sizes and the caches ------------------------------------------------

def test_compare_does_not_run_a_method_too_large_to_draw():
    from zbopt.instance import Instance
    from zbopt.serve import api
    base = Instance(devices=4, microbatches=8)
    settings = api.parse_settings({"devices": "64", "microbatches": "299",
                                   "schedule": "interleaved-zb"}, base)
    with pytest.raises(api.SettingError) as refused:
        api.evaluate_settings(settings, base)
    assert refused.value.field == "microbatches"
    rows = api.compare_settings(settings, base, ["interleaved-zb", "zb-v"])
    assert [(r.method, r.status, r.applies) for r in rows] == \
        [("interleaved-zb", "not-applicable", False), ("zb-v", "not-applicable", False)]
    # the row says what the view says: a second asking gets the same answer
    assert all(r.message == str(refused.value) for r in rows)
    assert str(refused.value).startswith("114,816 passes is more than the explorer draws")


def test_the_caches_are_bounded_by_the_passes_they_hold():
    from zbopt.instance import Instance
    from zbopt.registry import run
    from zbopt.serve.app import _Recent, held_passes
    small = run("1f1b", Instance(devices=2, microbatches=4))  # 24 passes
    large = run("1f1b", Instance(devices=4, microbatches=16))  # 192 passes
    assert (held_passes(small), held_passes(large)) == (24, 192)
    cache = _Recent(size=10, budget=60)
    cache.put("a", small)
    cache.put("b", small)
    assert cache.held == 48 and len(cache) == 2
    cache.put("c", small)  # 72 > 60: the oldest goes
    assert cache.held == 48 and cache.get("a") is None and cache.get("b") is small
    cache.put("d", large)  # larger than the budget alone: kept, every other entry goes
    assert cache.held == 192 and len(cache) == 1 and cache.get("d") is large
    # a comparison growing method by method is re-weighed each time it is put again
    rows: dict = {}
    cache.put("table", rows)
    assert cache.held == 0 and len(cache) == 1
    rows["1f1b"] = [small]
    cache.put("table", rows)
    rows["gpipe"] = [small, run("gpipe", Instance(devices=2, microbatches=4))]
    cache.put("table", rows)
    assert cache.held == 72 and len(cache) == 1
    not_applied = run("interleaved-1f1b", Instance(devices=2, microbatches=3))
    assert not not_applied.applies and held_passes(not_applied) == 0


# ----- solves: refused up front, and downloads that never mix two instances -----------------------

def _wait_done(server: Server, job: str) -> dict:
    for _ in range(600):
        status, state, _ = server.request(f"/api/solve/{job}")
        assert status == 200
        if state["state"] == "done":
            return state
        time.sleep(0.2)
    raise AssertionError("the solve did not finish")


def test_a_solve_whose_time_limit_is_too_short_is_refused_up_front(server):
    body = {"page": "short", "devices": 64, "microbatches": 64, "schedule": "1f1b",
            "memory_cap": "none", "time_limit": 1}
    status, answer, _ = server.request("/api/solve", body)
    assert status == 422 and answer["field"] == "time_limit", answer
    assert "12,288 passes" in answer["error"] and "at least 4 s" in answer["error"]


def test_a_solve_downloads_only_with_the_settings_it_was_solved_for(server):
    settings = {"schedule": "zb-h1", "devices": 2, "microbatches": 4}
    status, job, _ = server.request("/api/solve", {**settings, "page": "mix", "time_limit": 1})
    assert status == 202, job
    done = _wait_done(server, job["job"])
    assert done["result"]["applies"], done
    ident = job["job"]
    for what in ("schedule", "report"):
        status, _, _ = server.request(f"/api/download/{what}?" + q(job=ident, **settings),
                                      raw=True)
        assert status == 200
        status, body, _ = server.request(f"/api/download/{what}?" +
                                         q(job=ident, **{**settings, "devices": 4}))
        assert status == 422 and body["field"] == "job", body
        assert f"solve {ident} was run on another instance than these settings " \
               f"(devices 2, not 4)" in body["error"]
    # the schedule alone needs no settings; the report is about settings, so it needs them
    status, _, _ = server.request(f"/api/download/schedule?job={ident}", raw=True)
    assert status == 200
    status, body, _ = server.request(f"/api/download/report?job={ident}")
    assert status == 422 and body["field"] == "job" and "devices 2, not 4" in body["error"]


# ----- a served instance with per-device static memory --------------------------------------------

STATIC = UNIT.replace('name = "unit-p4-m8"', 'name = "static-p4"') + \
    'static_memory = [3, 1, 1, 3]\nmemory_unit = "MB"\n'


def test_changing_devices_drops_per_device_static_memory_with_a_note(tmp_path):
    path = tmp_path / "static.toml"
    path.write_text(STATIC.replace('memory_cap = "2p"', "memory_cap = 40"))
    srv = Server(path)
    try:
        status, doc, _ = srv.request("/api/evaluate")
        assert status == 200 and doc["notes"] == []
        assert doc["instance"]["static_memory"] == [3, 1, 1, 3]
        status, doc, _ = srv.request("/api/evaluate?" + q(devices=3))
        assert status == 200, doc
        assert doc["instance"]["devices"] == 3 and doc["instance"].get("static_memory", 0) == 0
        assert doc["notes"] == ["the served instance's static memory per device (3, 1, 1, 3 MB) "
                                "is for 4 devices: left out with 3 (set devices to 4 to count "
                                "it)"]
        status, rows, _ = srv.request("/api/compare?" + q(devices=3))
        assert status == 200 and all(r["status"] != "error" for r in rows)
    finally:
        srv.stop()


def test_compare_progress_says_how_many_methods_are_done(server):
    settings = {"devices": 2, "microbatches": 6}
    status, before, _ = server.request("/api/compare/progress?" + q(**settings))
    assert status == 200 and before["done"] == 0 and before["running"] is None
    assert before["total"] > 10
    status, rows, _ = server.request("/api/compare?" + q(**settings))
    assert status == 200
    status, after, _ = server.request("/api/compare/progress?" + q(**settings, schedule="1f1b"))
    assert after == {"done": before["total"], "total": before["total"], "running": None}
    assert len({r["method"] for r in rows}) == before["total"]
    status, body, _ = server.request("/api/compare/progress?" + q(devices=0))
    assert status == 422 and body["field"] == "devices"


def test_an_oversized_solve_body_is_refused_before_it_is_read(server):
    from zbopt.serve.app import MAX_BODY
    # 40 MB of one list: refused at once (413), not parsed for seconds holding the server
    status, body = post_raw(server, b'{"page":"h","t_f":"' + b"1," * (20 * MAX_BODY) + b'1"}')
    assert status == 413 and body["field"] == "request", body
    assert body["error"] == f"the request body is {40 * MAX_BODY + 22:,} bytes: a solve request " \
                            f"takes at most {MAX_BODY:,} (one value per stage in each list)"
    assert server.request("/api/evaluate?" + q(devices=3))[0] == 200  # and the server goes on


@pytest.mark.parametrize("field", ["t_f", "memory_cap"])
def test_a_list_longer_than_the_largest_instance_is_refused_by_its_length(server, field):
    from zbopt.serve.api import MAX_VALUES
    values = ",".join(["1"] * 5000)
    for status, body, _ in (server.request("/api/evaluate?" + q(**{field: values})),
                            server.request("/api/solve", {"page": "h", field: [1] * 5000})):
        assert status == 422 and body["field"] == field, body
        label = "memory cap" if field == "memory_cap" else field
        assert body["error"] == f"{label} has 5,000 values: give at most {MAX_VALUES:,}, " \
                                f"one per stage (the explorer's largest instance has " \
                                f"{MAX_VALUES:,} stages)"


def test_a_setting_given_twice_is_refused_not_guessed(server):
    status, body, _ = server.request("/api/evaluate?devices=4&microbatches=8&devices=5")
    assert status == 422 and body == {"error": "devices is given 2 times: give it once",
                                      "field": "devices"}
