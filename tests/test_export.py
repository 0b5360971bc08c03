"""Schedule files (zbopt.schedule/1), Chrome traces, and the evaluate / export commands."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zbopt.cli import main
from zbopt.errors import ZboptError
from zbopt.export.chrome_trace import chrome_trace, write_chrome_trace
from zbopt.export.schedule_file import (
    FORMAT,
    compare_metrics,
    read_schedule_file,
    schedule_document,
    write_schedule_file,
)
from zbopt.families import families, generate, get_family, prepare
from zbopt.instance import Instance
from zbopt.result import Result
from zbopt.schedule import Schedule, evaluate, fused


def family_timeline(name: str, instance: Instance):
    placed = prepare(get_family(name), instance)
    return evaluate(placed, generate(name, placed))


def small_instance(**overrides) -> Instance:
    base = dict(devices=3, microbatches=6, t_f=[2, 3, 2.5], t_b=[3, 4, 3.5], t_w=[1, 1.5, 2],
                comm=0.25, m_b=4, m_w=1, time_unit="us", memory_unit="MB")
    base.update(overrides)
    return Instance(**base)


APPLICABLE = ["1f1b", "gpipe", "zb-h1", "zb-h2", "interleaved-1f1b", "zb-v", "dualpipev",
              "dualpipe"]


# ----- schedule files: round trip -----------------------------------------------------------


@pytest.mark.parametrize("name", [n for n in APPLICABLE if n in families()])
def test_schedule_file_round_trip_every_family(tmp_path, name):
    instance = Instance(devices=4, microbatches=8, t_f=3, t_b=4, t_w=2, comm=1, m_b=3, m_w=1,
                        memory_cap="2p", time_unit="us")
    timeline = family_timeline(name, instance)
    path = write_schedule_file(tmp_path / "s.json", timeline)
    loaded = read_schedule_file(path)
    assert loaded.schedule.orders == timeline.schedule.orders  # blocks stay blocks
    assert loaded.method == name
    assert loaded.instance == timeline.instance
    again = loaded.evaluate()
    assert again.metrics() == timeline.metrics()
    assert again.start == timeline.start and again.end == timeline.end
    assert compare_metrics(loaded.meta["metrics"], again.metrics()) == []


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(p=st.integers(1, 4), m=st.integers(1, 6),
       costs=st.lists(st.floats(0.1, 50, allow_nan=False), min_size=3, max_size=3),
       comm=st.floats(0, 5), name=st.sampled_from(["1f1b", "zb-h1", "zb-h2", "gpipe"]))
def test_round_trip_is_exact_for_any_costs(tmp_path, p, m, costs, comm, name):
    """Float costs too: the file keeps exact values, the re-evaluation is bit-identical."""
    instance = Instance(devices=p, microbatches=m, t_f=costs[0], t_b=costs[1], t_w=costs[2],
                        comm=comm, m_b=2, m_w=1)
    timeline = family_timeline(name, instance)
    path = write_schedule_file(tmp_path / "s.json", timeline, force=True)
    assert read_schedule_file(path).evaluate().metrics() == timeline.metrics()


def test_items_carry_times_and_blocks_list_their_passes(tmp_path):
    timeline = family_timeline("1f1b", small_instance())
    doc = json.loads(write_schedule_file(tmp_path / "s.json", timeline).read_text())
    assert doc["format"] == FORMAT
    assert doc["instance"] == timeline.instance.to_dict()
    for d, entry in enumerate(doc["devices"]):
        assert entry["device"] == d
        assert len(entry["items"]) == len(timeline.schedule.orders[d])
        for item, (t0, t1) in zip(entry["items"], timeline.item_times[d]):
            assert (item["start"], item["end"]) == (t0, t1)
    blocks = [i for e in doc["devices"] for i in e["items"] if "passes" in i]
    assert blocks, "1F1B has fused backward blocks"
    for block in blocks:
        assert block["item"].startswith("(") and len(block["passes"]) == 2
        assert block["passes"][0]["start"] == block["start"]
        assert block["passes"][-1]["end"] == block["end"]


def test_release_is_kept(tmp_path):
    instance = small_instance()
    schedule = generate("zb-h1", instance)
    released = replace(schedule, release=(0.0, 5.5, 11.0))
    timeline = evaluate(instance, released)
    loaded = read_schedule_file(write_schedule_file(tmp_path / "s.json", timeline))
    assert loaded.schedule.release == (0.0, 5.5, 11.0)
    assert loaded.evaluate().metrics() == timeline.metrics()
    # the release changes the timing, so dropping it would have been visible
    assert evaluate(instance, schedule).device_span != timeline.device_span


def test_solver_fields_are_written(tmp_path):
    timeline = family_timeline("zb-h1", small_instance())
    result = Result("cpsat", "solver", "feasible", timeline.instance, timeline,
                    lower_bound=timeline.span * 0.9, runtime=1.5, scale=4.0)
    doc = json.loads(write_schedule_file(tmp_path / "s.json", timeline, result).read_text())
    solver = doc["solver"]
    assert solver["solver"] == "cpsat" and solver["status"] == "feasible"
    assert solver["objective"] == timeline.span
    assert solver["lower_bound"] == pytest.approx(timeline.span * 0.9)
    assert solver["gap"] == pytest.approx(0.1)
    assert solver["runtime"] == 1.5 and solver["scale"] == 4
    assert read_schedule_file(tmp_path / "s.json").meta["solver"] == solver


def test_refuses_to_overwrite_without_force(tmp_path):
    timeline = family_timeline("1f1b", small_instance())
    path = tmp_path / "s.json"
    path.write_text("precious")
    with pytest.raises(ZboptError, match="force=True"):  # the Python keyword, not the flag
        write_schedule_file(path, timeline)
    assert path.read_text() == "precious"
    write_schedule_file(path, timeline, force=True)
    assert read_schedule_file(path).method == "1f1b"


def test_stored_metrics_mismatch_is_reported(tmp_path):
    timeline = family_timeline("1f1b", small_instance())
    doc = schedule_document(timeline)
    doc["metrics"]["span"] += 1
    differences = compare_metrics(doc["metrics"], timeline.metrics())
    assert len(differences) == 1 and differences[0].startswith("span: file ")
    assert compare_metrics(schedule_document(timeline)["metrics"], timeline.metrics()) == []


# ----- schedule files: malformed input --------------------------------------------------------


def _valid_doc() -> dict:
    instance = Instance(devices=2, microbatches=2, t_f=1, t_b=1, t_w=1)
    return schedule_document(evaluate(instance, generate("zb-h1", instance)))


def _write(tmp_path, doc) -> str:
    path = tmp_path / "bad.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def _mutated(change) -> dict:
    doc = _valid_doc()
    change(doc)
    return doc


@pytest.mark.parametrize("doc, message", [
    ('{"format": "zbopt.schedule/1", ', "not valid JSON"),
    ([1, 2], "expected a JSON object"),
    (_mutated(lambda d: d.update(format="zbopt.schedule/2")), "format is 'zbopt.schedule/2'"),
    (_mutated(lambda d: d.pop("format")), "format is None"),
    (_mutated(lambda d: d.pop("instance")), "missing the 'instance'"),
    (_mutated(lambda d: d["instance"].update(devices=0)), "devices must be >= 1"),
    (_mutated(lambda d: d["devices"][0]["items"][0].update(item="0X0")), "is not a pass"),
    (_mutated(lambda d: d["devices"][0]["items"][0].update(item="7F0")), "unknown stage 7"),
    (_mutated(lambda d: d["devices"][1]["items"].pop()), "missing: 1W1"),
    (_mutated(lambda d: [e["items"].__delitem__(slice(None))
                         for e in d["devices"]] and None), "missing"),
    (_mutated(lambda d: d["devices"].pop()), "'devices' has 1 entries"),
    (_mutated(lambda d: d["devices"][0]["items"].append({"item": "0F0"})), "appears 2 times"),
    (_mutated(lambda d: d["devices"][0]["items"].append({"item": "1F0"})), "lives on device 1"),
    (_mutated(lambda d: d.update(release=[0])), "'release' must list 2"),
    (_mutated(lambda d: d["devices"][0]["items"].__setitem__(0, 5)), "expected a cell"),
])
def test_malformed_schedule_files_fail_in_one_line(tmp_path, doc, message):
    with pytest.raises(ZboptError) as err:
        read_schedule_file(_write(tmp_path, doc))
    text = str(err.value)
    assert message in text
    assert "\n" not in text and "bad.json" in text


def test_an_instance_file_given_for_a_schedule_says_which_file_to_give(tmp_path):
    """A .toml (an instance or a layered model) where a schedule file belongs: the line names
    the file to give and the commands that write it, not a JSON parse position."""
    path = tmp_path / "model.toml"
    path.write_text((Path(__file__).parents[1] / "instances" / "models" / "blocks16-p4.toml")
                    .read_text())
    with pytest.raises(ZboptError) as err:
        read_schedule_file(path)
    text = str(err.value)
    assert "schedule or plan file" in text and "--out" in text and "JSON" not in text
    assert "\n" not in text


def test_missing_file(tmp_path):
    with pytest.raises(ZboptError, match="not found"):
        read_schedule_file(tmp_path / "nope.json")


# ----- Chrome trace ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["1f1b", "zb-h1", "dualpipev"])
def test_chrome_trace_matches_the_evaluator(name):
    instance = Instance(devices=4, microbatches=8, t_f=3, t_b=4, t_w=2, comm=1, m_b=3, m_w=1,
                        time_unit="ms", memory_unit="GB", memory_cap="3p")
    if name not in families():
        pytest.skip(f"{name} is not registered")
    timeline = family_timeline(name, instance)
    events = chrome_trace(timeline)["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert sorted(names) == list(range(instance.devices))
    passes = [e for e in events if e["ph"] == "X" and e["cat"] in "FBW"]
    assert len(passes) == timeline.instance.num_passes
    for e in passes:
        stage, mb, kind = e["args"]["stage"], e["args"]["microbatch"], e["cat"]
        p = (stage, mb, kind)
        assert e["name"] == f"{stage}{kind}{mb}"
        assert e["pid"] == timeline.instance.device_of(stage)
        assert e["ts"] == pytest.approx(timeline.start[p] * 1000)  # ms -> trace microseconds
        assert e["dur"] == pytest.approx((timeline.end[p] - timeline.start[p]) * 1000)
    blocks = [e for e in events if e.get("cat") == "block"]
    expected_blocks = sum(len(i) > 1 for order in timeline.schedule.orders for i in order)
    assert len(blocks) == expected_blocks
    for d in range(instance.devices):
        counter = [(e["ts"], e["args"]["activation memory"]) for e in events
                   if e["ph"] == "C" and e["pid"] == d]
        assert counter == [(t * 1000, level) for t, level in timeline.memory_curve[d]]
        assert max(level for _, level in counter) == timeline.peak_memory[d]


def test_chrome_trace_unknown_unit_is_said(tmp_path):
    instance = Instance(devices=2, microbatches=2, t_f=1, t_b=1, t_w=1, time_unit="ticks")
    timeline = evaluate(instance, generate("1f1b", instance))
    path = write_chrome_trace(tmp_path / "t.json", timeline)
    doc = json.loads(path.read_text())
    assert doc["otherData"]["time_unit_known"] is False
    assert doc["otherData"]["span"] == timeline.span
    with pytest.raises(ZboptError, match="--force"):
        write_chrome_trace(path, timeline)


# ----- CLI ------------------------------------------------------------------------------------


@pytest.fixture
def instance_file(tmp_path):
    path = tmp_path / "p3.toml"
    path.write_text('devices = 3\nmicrobatches = 6\nt_f = 2\nt_b = 3\nt_w = 1.5\ncomm = 0.5\n'
                    'm_b = 2\nm_w = 1\nmemory_cap = "1p"\ntime_unit = "us"\n')
    return path


def test_cli_simulate_then_evaluate_round_trip(tmp_path, instance_file, capsys):
    out = tmp_path / "zb.json"
    assert main(["simulate", str(instance_file), "-s", "zb-h1", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(out), "--json", "--check"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["stored_metrics_match"] is True
    stored = json.loads(out.read_text())["metrics"]
    for key in ("makespan", "span", "ideal", "bubble_rate", "peak_memory", "fits_cap"):
        assert data[key] == stored[key]


def test_cli_evaluate_check_fails_on_edited_metrics(tmp_path, instance_file, capsys):
    out = tmp_path / "zb.json"
    main(["simulate", str(instance_file), "-s", "1f1b", "--out", str(out)])
    doc = json.loads(out.read_text())
    doc["metrics"]["makespan"] = 1
    out.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["evaluate", str(out), "--check"]) == 1
    assert "stored metrics differ" in capsys.readouterr().out


def test_cli_export_writes_csv_sidecar_and_trace(tmp_path, instance_file, capsys):
    sched = tmp_path / "zb.json"
    main(["simulate", str(instance_file), "-s", "zb-h1", "--out", str(sched)])
    csv_path, trace = tmp_path / "zb-torch.csv", tmp_path / "trace.json"
    assert main(["export", str(sched), "--torch-csv", str(csv_path),
                 "--chrome-trace", str(trace)]) == 0
    rows = csv_path.read_text().splitlines()
    assert len(rows) == 3 and rows[0].startswith("0F0,")
    side = json.loads((tmp_path / "zb-torch.csv.json").read_text())
    assert side["n_microbatches"] == 6 and side["stages_per_rank"] == 1
    assert json.loads(trace.read_text())["traceEvents"]
    capsys.readouterr()
    # a second export refuses to overwrite any of the three files
    for extra in (["--torch-csv", str(csv_path)], ["--chrome-trace", str(trace)]):
        assert main(["export", str(sched), *extra]) == 2
        err = capsys.readouterr().err
        assert "--force" in err and err.count("\n") == 1
    assert main(["export", str(sched), "--torch-csv", str(csv_path), "--force"]) == 0


def test_cli_export_sidecar_never_takes_the_schedule_files_name(tmp_path, instance_file, capsys):
    # the README's own example: schedule s.json, CSV s.csv
    sched = tmp_path / "s.json"
    main(["simulate", str(instance_file), "-s", "zb-h1", "--out", str(sched)])
    before = sched.read_text()
    capsys.readouterr()
    assert main(["export", str(sched), "--torch-csv", str(tmp_path / "s.csv")]) == 0
    assert sched.read_text() == before
    assert json.loads((tmp_path / "s.csv.json").read_text())["csv"] == "s.csv"


def test_cli_export_never_replaces_its_input(tmp_path, instance_file, capsys):
    sched = tmp_path / "zb.csv.json"
    main(["simulate", str(instance_file), "-s", "zb-h1", "--out", str(sched)])
    before = sched.read_text()
    capsys.readouterr()
    assert main(["export", str(sched), "--torch-csv", str(tmp_path / "zb.csv"), "--force"]) == 2
    err = capsys.readouterr().err
    assert "would replace the input" in err and err.count("\n") == 1
    assert sched.read_text() == before and not (tmp_path / "zb.csv").exists()


@pytest.mark.parametrize("blocker", ["trace", "titan"])
def test_cli_export_writes_nothing_when_one_output_is_refused(tmp_path, instance_file, capsys,
                                                             blocker):
    sched = tmp_path / "zb.json"
    main(["simulate", str(instance_file), "-s", "zb-h1", "--out", str(sched)])
    trace, titan = tmp_path / "trace.json", tmp_path / "tt"
    if blocker == "trace":
        trace.write_text("mine")
    else:
        titan.mkdir()
        (titan / "torchtitan.toml").write_text("mine")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    capsys.readouterr()
    argv = ["export", str(sched), "--torch-csv", str(tmp_path / "new.csv"),
            "--chrome-trace", str(trace), "--torchtitan", str(titan)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "exists" in err and "--force" in err and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # new.csv, its sidecar: absent
    assert main(argv + ["--force"]) == 0
    assert (tmp_path / "new.csv").exists() and (tmp_path / "new.csv.json").exists()
    assert (titan / "schedule.csv").read_text() == (tmp_path / "new.csv").read_text()


def test_cli_export_missing_folder_writes_nothing(tmp_path, instance_file, capsys):
    sched = tmp_path / "zb.json"
    main(["simulate", str(instance_file), "-s", "zb-h1", "--out", str(sched)])
    capsys.readouterr()
    argv = ["export", str(sched), "--torch-csv", str(tmp_path / "a.csv"),
            "--chrome-trace", str(tmp_path / "no" / "t.json")]
    assert main(argv) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "a.csv").exists() and not (tmp_path / "a.csv.json").exists()


@pytest.mark.parametrize("argv, message", [
    (["evaluate", "missing.json"], "not found"),
    (["evaluate", "x.toml"], "--torch-csv"),
    (["export", "missing.json", "--torch-csv", "o.csv"], "not found"),
    (["export", "x.json"], "nothing to export"),
])
def test_cli_errors_are_one_line(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.json").write_text(json.dumps(_valid_doc()))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_cli_evaluate_bad_version(tmp_path, capsys):
    doc = _valid_doc()
    doc["format"] = "zbopt.schedule/0"
    path = _write(tmp_path, doc)
    assert main(["evaluate", path]) == 2
    assert "zbopt.schedule/0" in capsys.readouterr().err


def test_fused_blocks_survive_as_blocks(tmp_path):
    instance = Instance(devices=1, microbatches=2, t_f=1, t_b=2, t_w=3)
    schedule = Schedule.build([[(0, 0, "F"), fused(0, 0), (0, 1, "F"), (0, 1, "B"), (0, 1, "W")]])
    timeline = evaluate(instance, schedule)
    loaded = read_schedule_file(write_schedule_file(tmp_path / "s.json", timeline))
    assert loaded.schedule.orders[0][1] == fused(0, 0)
    assert loaded.schedule.orders[0][3] == ((0, 1, "B"),)


def test_cli_export_refuses_two_outputs_with_one_name(tmp_path, instance_file, capsys):
    sched = tmp_path / "zb.json"
    main(["simulate", str(instance_file), "-s", "zb-h1", "--out", str(sched)])
    capsys.readouterr()
    # the trace would take the CSV's sidecar name
    argv = ["export", str(sched), "--torch-csv", str(tmp_path / "a.csv"),
            "--chrome-trace", str(tmp_path / "a.csv.json")]
    assert main(argv) == 2
    assert "written twice" in capsys.readouterr().err
    assert not (tmp_path / "a.csv").exists()


def test_write_all_leaves_nothing_when_a_write_fails(tmp_path, monkeypatch):
    from zbopt.export import outputs

    calls = []
    real = outputs.os.replace

    def failing_replace(src, dst):
        calls.append(dst)
        if len(calls) == 1:
            raise OSError(28, "No space left on device", str(dst))
        return real(src, dst)

    monkeypatch.setattr(outputs.os, "replace", failing_replace)
    with pytest.raises(ZboptError, match="No space left"):
        outputs.write_all({tmp_path / "a.txt": "a", tmp_path / "new" / "b.txt": "b"},
                          new_dirs=[tmp_path / "new"])
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no temporaries, no new folder
