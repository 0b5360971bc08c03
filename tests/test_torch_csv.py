"""PyTorch compute-only CSV: mapping, round trips, torch's own validators, malformed input."""

from __future__ import annotations

import json

import pytest

from zbopt.cli import main
from zbopt.errors import ZboptError
from zbopt.export.torch_csv import (
    csv_text,
    item_to_cell,
    parse_torch_csv,
    read_torch_csv,
    sidecar,
    torch_check,
    torch_rows,
    write_torch_csv,
)
from zbopt.families import families, generate, prepare
from zbopt.instance import Instance
from zbopt.schedule import Schedule, evaluate, fused


def placed(name: str, p: int, m: int, **costs) -> tuple[Instance, Schedule]:
    base = dict(t_f=3, t_b=4, t_w=2, comm=1, m_b=3, m_w=1)
    base.update(costs)
    try:
        instance = prepare(families()[name], Instance(devices=p, microbatches=m, **base))
        return instance, generate(name, instance)
    except ZboptError as err:  # the family says it does not apply here: not this file's concern
        pytest.skip(f"{name} does not apply at p={p}, m={m}: {err}")


def exportable_families() -> list[str]:
    return sorted(n for n, f in families().items() if f.placement != "dualpipe")


def family_cases(ps=(2, 4, 8)):
    """(family, p, m) for every exportable family; m a multiple of p (interleaved needs it)."""
    return [(name, p, 2 * p) for name in exportable_families() for p in ps]


# ----- mapping --------------------------------------------------------------------------------


def test_cell_mapping():
    assert item_to_cell(((2, 5, "F"),)) == "2F5"
    assert item_to_cell(((2, 5, "B"),)) == "2I5"  # our B is torch's backward-input
    assert item_to_cell(((2, 5, "W"),)) == "2W5"
    assert item_to_cell(fused(2, 5)) == "2B5"  # fused block: torch's full backward
    assert item_to_cell(((0, 3, "F"), (3, 1, "B"))) == "(0F3;3I1)OVERLAP_F_B"
    assert item_to_cell(((0, 3, "F"), (3, 1, "B"), (3, 1, "W"))) == "(0F3;3B1)OVERLAP_F_B"
    with pytest.raises(ZboptError, match="no PyTorch form"):
        item_to_cell(((0, 1, "B"), (0, 2, "W")))


def test_adjacent_split_backward_stays_split():
    """B then W as separate items are not merged into torch B: that would delay the gradient."""
    instance = Instance(devices=1, microbatches=1, t_f=1, t_b=1, t_w=1)
    schedule = Schedule.build([[(0, 0, "F"), (0, 0, "B"), (0, 0, "W")]])
    assert torch_rows(instance, schedule) == [["0F0", "0I0", "0W0"]]


@pytest.mark.parametrize("name", ["1f1b", "gpipe", "interleaved-1f1b"])
def test_fused_families_export_full_backward(name):
    instance, schedule = placed(name, 4, 8)
    cells = [c for row in torch_rows(instance, schedule) for c in row]
    kinds = [c.lstrip("0123456789")[0] for c in cells]
    assert set(kinds) == {"F", "B"}
    assert kinds.count("B") == kinds.count("F") == instance.num_stages * 8


def test_dualpipe_placement_is_refused_clearly():
    instance = Instance(devices=4, microbatches=8, placement="dualpipe")
    if "dualpipe" not in families():
        pytest.skip("no dualpipe family registered")
    schedule = generate("dualpipe", instance)
    with pytest.raises(ZboptError, match="two model copies.*cannot be exported"):
        torch_rows(instance, schedule)
    with pytest.raises(ZboptError, match="two model copies"):
        parse_torch_csv("0F0\n", instance)


# ----- round trips ----------------------------------------------------------------------------


@pytest.mark.parametrize("name, p, m", family_cases())
def test_round_trip_gives_the_same_evaluation(name, p, m):
    instance, schedule = placed(name, p, m, t_f=3.5, comm=0.75)
    rows = torch_rows(instance, schedule)
    back = parse_torch_csv(csv_text(rows), instance)
    assert back.orders == schedule.orders
    before, after = evaluate(instance, schedule), evaluate(instance, back)
    assert (after.makespan, after.span, after.peak_memory) == \
        (before.makespan, before.span, before.peak_memory)
    assert after.start == before.start
    assert torch_rows(instance, back) == rows


def test_file_round_trip_and_sidecar(tmp_path):
    instance, schedule = placed("interleaved-1f1b", 4, 8)
    csv_path, side_path = write_torch_csv(tmp_path / "s.csv", instance, schedule)
    assert side_path == tmp_path / "s.csv.json"
    assert read_torch_csv(csv_path, instance).orders == schedule.orders
    side = json.loads(side_path.read_text())
    assert side["num_ranks"] == 4 and side["stages_per_rank"] == 2 and side["num_stages"] == 8
    assert side["n_microbatches"] == 8
    assert side["stage_to_rank"] == {str(s): s % 4 for s in range(8)}
    assert side["rank_stages"]["1"] == [1, 5]
    titan = side["torchtitan"]
    assert titan["parallelism.pipeline_parallel_schedule_csv"] == str(csv_path)
    assert titan["parallelism.pipeline_parallel_degree"] == 4
    assert titan["parallelism.pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert side["min_torch_version"] == "2.6"
    assert side["notes"] == []
    with pytest.raises(ZboptError, match="--force"):
        write_torch_csv(tmp_path / "s.csv", instance, schedule)


def test_sidecar_of_v_and_overlap():
    if "dualpipev" not in families():
        pytest.skip("no dualpipev family registered")
    instance, schedule = placed("dualpipev", 4, 8)
    side = sidecar(instance, schedule, "v.csv")
    assert side["rank_stages"]["0"] == [0, 7]
    assert side["torchtitan"]["parallelism.pipeline_parallel_schedule"] == "ZBVZeroBubble"
    assert side["min_torch_version"] == "2.9"  # OVERLAP_F_B cells
    assert any("OVERLAP_F_B" in note for note in side["notes"])


# ----- torch's own checks (no processes) -------------------------------------------------------


@pytest.mark.torch
@pytest.mark.parametrize("name, p, m", family_cases(ps=(4, 8)))
def test_torch_accepts_every_family(name, p, m):
    pytest.importorskip("torch")
    instance, schedule = placed(name, p, m)
    torch_check(torch_rows(instance, schedule), instance.num_stages, instance.microbatches)


@pytest.mark.torch
def test_torch_rejects_a_deadlock_our_evaluator_also_rejects():
    pytest.importorskip("torch")
    instance = Instance(devices=2, microbatches=2)
    # rank 1 waits for 0F1, which rank 0 runs only after 0B0, which needs rank 1's 1B0 first
    rows = [["0F0", "0B0", "0F1", "0B1"], ["1F1", "1B1", "1F0", "1B0"]]
    with pytest.raises(ZboptError, match="torch rejects the schedule"):
        torch_check(rows, 2, 2)
    with pytest.raises(ZboptError, match="deadlocks"):
        evaluate(instance, parse_torch_csv(csv_text(rows), instance))


@pytest.mark.torch
def test_torch_rejects_missing_work():
    pytest.importorskip("torch")
    with pytest.raises(ZboptError, match="torch rejects"):
        torch_check([["0F0", "0B0"], ["1F0", "1B0", "1F1", "1B1"]], 2, 2)


# ----- importing torch's own schedules ---------------------------------------------------------


class _MockStage:
    """Just what torch's schedule classes read to compute their orders (no processes)."""

    def __init__(self, index: int, stages: int, ranks: int, rank: int):
        import torch
        self.stage_index, self.num_stages = index, stages
        self.group_size, self.group_rank = ranks, rank
        self.is_first, self.is_last = index == 0, index == stages - 1
        self.submod = torch.nn.Linear(1, 1)


@pytest.mark.torch
@pytest.mark.parametrize("cls_name, placement", [
    ("ScheduleInterleaved1F1B", "interleaved"), ("ScheduleLoopedBFS", "interleaved"),
    ("ScheduleInterleavedZeroBubble", "interleaved"), ("ScheduleZBVZeroBubble", "v"),
    ("ScheduleDualPipeV", "v")])
def test_torch_builtin_orders_import_and_round_trip(tmp_path, cls_name, placement):
    ts = pytest.importorskip("torch.distributed.pipelining.schedules")
    p, m = 4, 8
    instance = Instance(devices=p, microbatches=m, placement=placement, t_f=2, t_b=2, t_w=1,
                        comm=0.5)
    stages = [_MockStage(s, instance.num_stages, p, 0) for s in instance.stages_of(0)]
    torch_schedule = getattr(ts, cls_name)(stages, n_microbatches=m)
    path = tmp_path / "torch.csv"
    if isinstance(torch_schedule, ts._PipelineScheduleRuntime):
        torch_schedule._dump_csv(str(path), format="compute_only")
    else:
        torch_schedule._dump_csv(str(path))
    schedule = read_torch_csv(path, instance)
    timeline = evaluate(instance, schedule)  # valid, and it runs without deadlock
    assert timeline.span > 0
    torch_cells = [[str(a) for a in acts if a is not None]
                   for _, acts in sorted(torch_schedule.pipeline_order.items())]
    assert torch_rows(instance, schedule) == torch_cells  # torch -> ours -> torch: identical


@pytest.mark.torch
def test_compute_comms_dump_imports_ignoring_comms(tmp_path):
    ts = pytest.importorskip("torch.distributed.pipelining.schedules")
    instance = Instance(devices=2, microbatches=4, placement="v")
    stages = [_MockStage(s, 4, 2, 0) for s in instance.stages_of(0)]
    torch_schedule = ts.ScheduleZBVZeroBubble(stages, n_microbatches=4)
    path = tmp_path / "comms.csv"
    torch_schedule._dump_csv(str(path), format="compute_comms")
    assert "SEND_F" in path.read_text() and "UNSHARD" in path.read_text()
    schedule = read_torch_csv(path, instance)
    compute = [[str(a) for a in acts if a is not None]
               for _, acts in sorted(torch_schedule.pipeline_order.items())]
    assert torch_rows(instance, schedule) == compute


# ----- malformed CSVs --------------------------------------------------------------------------


GOOD = "0F0,0F1,0I0,0W0,0I1,0W1\n1F0,1B0,1F1,1B1\n"


@pytest.mark.parametrize("text, message", [
    (GOOD.replace("0W0", "0X0"), "rank 0, column 4: bad cell '0X0'"),
    (GOOD.replace("0W0", "F0"), "bad cell 'F0'"),
    (GOOD.replace("1B1", "(1F1)OVERLAP_F_B"), "needs two actions"),
    (GOOD.replace("1F1,1B1", "5F1,5B1"), "unknown stage 5"),
    (GOOD.replace("0I1,0W1", ""), "missing: 0B1, 0W1"),
    (GOOD.replace("1F1,1B1", "1F1,1B1,1F2,1B2"), "pass 1F2 is not in the instance"),
    (GOOD.replace("0F0,0F1", "0F0,0F1,0F9"), "pass 0F9 is not in the instance"),
    (GOOD + "2F0\n", "3 rows but the instance has 2 devices"),
    ("0F0\n", "1 row but the instance has 2 devices"),
    (GOOD.replace("1F0,1B0,1F1,1B1", "1F0,1B0,1F1,1B1,0F1"), "on rank 1 in the CSV"),
])
def test_malformed_csv_fails_in_one_line(tmp_path, text, message):
    instance = Instance(devices=2, microbatches=2)
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ZboptError) as err:
        read_torch_csv(path, instance)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_good_csv_parses_with_blank_cells_and_trailing_lines(tmp_path):
    instance = Instance(devices=2, microbatches=2)
    schedule = parse_torch_csv(GOOD.replace("0F1,", "0F1,,") + "\n\n", instance)
    assert schedule.orders[1][1] == fused(1, 0)
    assert schedule.orders[0][2] == ((0, 0, "B"),)


# ----- CLI ------------------------------------------------------------------------------------


def test_cli_evaluate_torch_csv(tmp_path, capsys):
    inst_path = tmp_path / "p2.toml"
    inst_path.write_text("devices = 2\nmicrobatches = 2\nt_f = 1\nt_b = 2\nt_w = 1\ncomm = 1\n")
    csv_path = tmp_path / "s.csv"
    csv_path.write_text(GOOD)
    assert main(["evaluate", str(inst_path), "--torch-csv", str(csv_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    instance = Instance(devices=2, microbatches=2, t_f=1, t_b=2, t_w=1, comm=1)
    expected = evaluate(instance, parse_torch_csv(GOOD, instance))
    assert data["span"] == expected.span and data["makespan"] == expected.makespan
    # and --out makes it a schedule file whose round trip holds
    out = tmp_path / "s.json"
    assert main(["evaluate", str(inst_path), "--torch-csv", str(csv_path), "--out",
                 str(out)]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(out), "--check"]) == 0
    csv_path.write_text(GOOD.replace("0W0", "0Q0"))
    capsys.readouterr()
    assert main(["evaluate", str(inst_path), "--torch-csv", str(csv_path)]) == 2
    err = capsys.readouterr().err
    assert "bad cell '0Q0'" in err and err.count("\n") == 1
