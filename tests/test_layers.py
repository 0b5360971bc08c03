"""Layered models: the [[layers]] format, partitions, static memory per device, absolute caps."""

import json
import math
from pathlib import Path

import pytest

from zbopt.cli import main
from zbopt.errors import ZboptError
from zbopt.layers import Layer, LayeredModel, even_partition, load_model

EXAMPLE = Path(__file__).resolve().parents[1] / "instances" / "models" / "blocks16-p4.toml"


def _model(**settings) -> LayeredModel:
    layers = (Layer("emb", t_f=1, t_b=0, t_w=1, m_b=1, m_w=1, static=10),
              Layer("layers", t_f=2, t_b=3, t_w=1, m_b=4, m_w=2, static=5, count=6),
              Layer("norm+output", t_f=6, t_b=6, t_w=6, m_b=8, m_w=1, static=20))
    return LayeredModel(layers=layers, **{"devices": 2, "microbatches": 4, **settings})


def test_example_loads_and_expands_counted_layers():
    model = load_model(EXAMPLE)
    names = [x.name for x in model.expanded]
    assert names[0] == "tok_embeddings" and names[-1] == "norm+lm_head"
    assert names[1:-1] == [f"layers.{i}" for i in range(16)]
    assert model.num_layers == 18 and model.memory_cap == 24000


def test_instance_sums_costs_per_stage_and_static_per_device():
    model = _model()
    inst = model.instance((3, 5))  # emb + 2 blocks | 4 blocks + output
    assert inst.t_f == (1 + 2 * 2, 4 * 2 + 6)
    assert inst.t_b == (2 * 3, 4 * 3 + 6)
    assert inst.m_b == (1 + 2 * 4, 4 * 4 + 8)
    assert inst.m_w == (1 + 2 * 2, 4 * 2 + 1)
    assert inst.static_memory == (10 + 2 * 5, 4 * 5 + 20)


def test_prefix_sums_give_every_segment_the_instance_sums():
    model = _model()
    static, t_b = model.prefix_sums("static"), model.prefix_sums("t_b")
    assert len(static) == model.num_layers + 1 and static[0] == 0
    for sizes in ((1, 7), (3, 5), (7, 1)):
        inst, cut = model.instance(sizes), sizes[0]
        assert static[cut] - static[0] == inst.static_memory[0]
        assert static[-1] - static[cut] == inst.static_memory[1]
        assert (t_b[cut], t_b[-1] - t_b[cut]) == inst.t_b


def test_v_and_interleaved_parts_land_on_their_devices():
    v = _model(placement="v")
    inst = v.instance((1, 2, 2, 3))  # device 0 holds parts 0 and 3, device 1 parts 1 and 2
    assert inst.static_memory == (10 + (2 * 5 + 20), 2 * 5 + 2 * 5)
    inter = _model(placement="interleaved", chunks=2)
    inst = inter.instance((1, 2, 2, 3))  # device 0: parts 0 and 2, device 1: parts 1 and 3
    assert inst.static_memory == (10 + 2 * 5, 2 * 5 + (2 * 5 + 20))
    assert inst.t_f == (1, 4, 4, 2 * 2 + 6)


def test_dualpipe_holds_two_copies_of_each_part():
    model = _model(placement="dualpipe")
    assert model.num_parts == 2
    inst = model.instance((3, 5))
    # device 0 runs part 0 (first direction) and part 1's copy (second direction)
    both = (10 + 2 * 5) + (4 * 5 + 20)
    assert inst.static_memory == (both, both)
    assert inst.t_f == (5, 14, 5, 14)


def test_cap_is_absolute_and_static_memory_counts_against_it():
    model = _model(memory_cap=70)
    inst = model.instance((3, 5))  # the second stage pins 40 and holds 24 per micro-batch
    assert inst.cap == (70, 70)
    # one block more: it pins 45 and needs 28 for one micro-batch: 73 > 70
    with pytest.raises(ZboptError, match="device 1"):
        model.instance((2, 6))
    per_device = _model(memory_cap=[30, 70])
    assert per_device.instance((3, 5)).cap == (30, 70)


def test_partitions_are_checked():
    model = _model()
    with pytest.raises(ZboptError, match="at least one layer"):
        model.instance((0, 8))
    with pytest.raises(ZboptError, match="covers 7 layers"):
        model.instance((3, 4))
    with pytest.raises(ZboptError, match="3 stages"):
        model.instance((3, 3, 2))
    assert even_partition(model) == (4, 4)


@pytest.mark.parametrize("change, fragment", [
    ({"t_f": 1}, "remove the per-stage key"),
    ({"static_memory": 1}, "remove the per-stage key"),
    ({"layers": [{"name": "a", "t_f": 1, "t_b": 1}]}, "has no t_w"),
    ({"layers": [{"name": "a", "t_f": -1, "t_b": 1, "t_w": 1}]}, ">= 0"),
    ({"layers": [{"name": "a", "t_f": math.nan, "t_b": 1, "t_w": 1}]}, "finite"),
    ({"layers": [{"name": "a", "t_f": 1, "t_b": 1, "t_w": 1, "count": 0}]}, "count must be"),
    ({"layers": [{"name": "a", "t_f": 1, "t_b": 1, "t_w": 1, "m_b": 1, "m_w": 2}]}, "exceeds m_b"),
    ({"layers": [{"name": "a", "t_f": 1, "t_b": 1, "t_w": 1}]}, "2 stages but only 1 layers"),
    ({"layers": [{"name": "a", "t_f": 0, "t_b": 0, "t_w": 0, "count": 3}]}, "are zero"),
    ({"layers": [{"name": "a", "t_f": 1, "t_b": 1, "t_w": 1}] * 2}, "two layers are named"),
    ({"layers": [{"t_f": 1, "t_b": 1, "t_w": 1}] * 2}, "needs a name"),
    ({"layers": [{"name": "a", "t_f": 1, "t_b": 1, "t_w": 1, "flops": 2, "count": 2}]}, "unknown key"),
    ({"memory_cap": "1p"}, "absolute per device"),
    ({"memory_cap": [10, 10, 10]}, "3 values but there are 2 devices"),
    ({"memory_cap": -5}, "positive"),
    ({"layers": []}, "non-empty"),
    ({"expert_parallel": 0}, "expert_parallel must be at least 1"),
    ({"expert_parallel": 2.0}, "write expert_parallel = 2"),
])
def test_bad_layered_files(change, fragment):
    data = {"devices": 2, "microbatches": 4,
            "layers": [{"name": "blocks", "t_f": 1, "t_b": 1, "t_w": 1, "count": 4}], **change}
    with pytest.raises(ZboptError, match=fragment):
        LayeredModel.from_dict(data)


def test_save_and_load_round_trip(tmp_path):
    model = _model(memory_cap=[50, 70], comm=0.5, name="m", time_unit="us", memory_unit="MB")
    for suffix in (".toml", ".json"):
        path = model.save(tmp_path / f"model{suffix}")
        assert load_model(path) == model
        with pytest.raises(ZboptError, match="exists"):
            model.save(path)
    assert json.loads((tmp_path / "model.json").read_text())["layers"][1]["count"] == 6


def test_expert_parallelism_is_kept_and_a_dense_model_writes_none(tmp_path):
    moe = _model(expert_parallel=8)
    assert load_model(moe.save(tmp_path / "moe.toml")).expert_parallel == 8
    assert "expert_parallel" not in _model().to_dict()
    assert "expert_parallel" not in _model().save(tmp_path / "dense.toml").read_text()


def test_per_stage_file_is_not_a_layered_model(tmp_path):
    path = tmp_path / "stage.toml"
    path.write_text("devices = 2\nmicrobatches = 4\nt_f = 1\nt_b = 1\nt_w = 1\n")
    with pytest.raises(ZboptError, match="no \\[\\[layers\\]\\]"):
        load_model(path)


def test_cli_refuses_a_bad_layered_file_in_one_line(tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_text('devices = 2\nmicrobatches = 4\n[[layers]]\nname = "a"\nt_f = 1\nt_b = 1\n'
                    't_w = 1\ncount = 0\n')
    assert main(["plan", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "count must be an integer >= 1" in err and "\n" not in err
