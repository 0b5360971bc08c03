"""Property: random bytes and mutated valid files into every command that reads a file end in
exit 0 or a one-line refusal with exit status 2, never a traceback.

(benchmarks/fuzz_cli.py runs many more cases, and the commands of other modules, and writes
the counts to results/fuzz.md.)
"""

from __future__ import annotations

import contextlib
import io
import itertools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from zbopt.cli import main
from zbopt.errors import ZboptError
from zbopt.instance import load_instance

ROOT = Path(__file__).resolve().parents[1]
UNIT = ROOT / "instances" / "unit" / "unit-p4-m8.toml"
TOKENS = [b"nan", b"-1", b"0", b"1e309", b"99", b"inf", b"[", b"]", b"{", b'"', b"=", b",",
          b"\n", b"\x00", b"true", b"0p", b"\xe9", b"[[layers]]", b"null", b"1.5", b'"v"',
          b'"dualpipe"', b'"interleaved"', b"chunks = 0\n", b"3"]
COUNTER = itertools.count()


def cli(argv: list[str]) -> tuple[int, str]:
    """Exit status and stderr of one command line, run in this process."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, err.getvalue()


def assert_clean(argv: list[str]) -> None:
    code, err = cli(argv)  # an exception here is the traceback a user would see
    assert code in (0, 2), (code, err)
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("zbopt: error: "), err


@st.composite
def mutated(draw, valid: bytes) -> bytes:
    """`valid` with a few random edits: flipped bytes, deletions, repeats, inserted tokens."""
    data = valid
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["flip", "delete", "repeat", "insert", "truncate"]))
        if op == "flip" and data:
            at = min(at, len(data) - 1)
            data = data[:at] + bytes([data[at] ^ (1 << draw(st.integers(0, 7)))]) + data[at + 1:]
        elif op == "delete":
            data = data[:at] + data[at + draw(st.integers(1, 12)):]
        elif op == "repeat":
            size = draw(st.integers(1, 24))
            data = data[:at] + data[at:at + size] * 2 + data[at + size:]
        elif op == "insert":
            data = data[:at] + draw(st.sampled_from(TOKENS) | st.binary(max_size=6)) + data[at:]
        else:
            data = data[:at]
    return data


def inputs(valid: bytes):
    return st.binary(max_size=400) | mutated(valid)


def small_enough(path: Path) -> bool:
    """Keep the property test quick: instances a mutation blew up to many passes are left to
    the benchmark (which times them out); anything that fails to load is kept."""
    try:
        return load_instance(path).num_passes <= 2000
    except ZboptError:
        return True


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("seeds")
    schedule = folder / "schedule.json"
    csv = folder / "schedule.csv"
    assert cli(["simulate", UNIT, "-s", "zb-h1", "--out", schedule])[0] == 0
    assert cli(["export", schedule, "--torch-csv", csv])[0] == 0
    return {"instance": UNIT, "schedule": schedule, "csv": csv, "folder": folder}


SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow, HealthCheck.data_too_large])


def write(folder: Path, data: bytes, suffix: str) -> Path:
    path = folder / f"fuzz{next(COUNTER)}{suffix}"
    path.write_bytes(data)
    return path


@pytest.mark.slow
@SETTINGS
@given(data=inputs(UNIT.read_bytes()), suffix=st.sampled_from([".toml", ".json"]))
def test_compare_and_simulate_never_trace_back(seeds, data, suffix):
    path = write(seeds["folder"], data, suffix)
    assume(small_enough(path))
    assert_clean(["compare", path, "--methods", "1f1b,zb-h1,zb-v,dualpipe,interleaved-1f1b,zb-greedy"])
    assert_clean(["simulate", path, "-s", "zb-h2"])


@pytest.mark.slow
@SETTINGS
@given(st.data())
def test_evaluate_and_csv_never_trace_back(seeds, data):
    schedule = write(seeds["folder"], data.draw(inputs(seeds["schedule"].read_bytes())), ".json")
    assert_clean(["evaluate", schedule])
    csv = write(seeds["folder"], data.draw(inputs(seeds["csv"].read_bytes())), ".csv")
    assert_clean(["evaluate", UNIT, "--torch-csv", csv])
    instance = write(seeds["folder"], data.draw(inputs(UNIT.read_bytes())), ".toml")
    assume(small_enough(instance))
    assert_clean(["evaluate", instance, "--torch-csv", seeds["csv"]])


@pytest.mark.slow
@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=inputs(UNIT.read_bytes()))
def test_solve_frontier_report_plot_never_trace_back(seeds, data):
    path = write(seeds["folder"], data, ".toml")
    assume(small_enough(path))
    assert_clean(["solve", path, "--time-limit", "2", "--threads", "1"])
    assert_clean(["frontier", path, "--caps", "1p,2p", "--time-limit", "2"])
    out = seeds["folder"] / f"report{next(COUNTER)}.html"
    assert_clean(["report", path, "-o", out, "--methods", "1f1b"])


@pytest.mark.slow
@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.data())
def test_plot_never_traces_back(seeds, data):
    schedule = write(seeds["folder"], data.draw(inputs(seeds["schedule"].read_bytes())), ".json")
    assert_clean(["plot", schedule, "-o", seeds["folder"] / f"chart{next(COUNTER)}.png"])
