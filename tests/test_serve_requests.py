"""zbopt serve: odd request values (null, JSON objects, empty fields, huge figures, deep JSON),
the per-device limits of the comparison table and its caches, downloads of a solve and the
served instance's per-device static memory, against a real `zbopt serve` subprocess."""

from __future__ import annotations

import json
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
