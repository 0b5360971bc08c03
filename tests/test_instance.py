"""Instance: construction, broadcasting, caps, placements, files and every error a user can cause."""

import json

import pytest

from zbopt.dag import build_dag, critical_path, dependencies
from zbopt.errors import ZboptError
from zbopt.instance import Instance, default_instance_path, load_instance
from zbopt.registry import generate
from zbopt.schedule import evaluate


def test_scalars_broadcast_and_caps_resolve():
    inst = Instance(devices=4, microbatches=8, placement="interleaved", chunks=2,
                    t_f=[1, 2, 3, 4, 5, 6, 7, 8], m_b=3, m_w=1, memory_cap="1.5p")
    assert inst.num_stages == 8 and inst.t_b == (1,) * 8
    assert inst.stages_of(1) == (1, 5)
    assert inst.activation_unit == 6  # two chunks of 3 on device 0
    assert inst.cap == (36,) * 4  # 1.5 * p * 6
    assert Instance(devices=2, microbatches=2, memory_cap=[5, 7]).cap == (5, 7)
    assert Instance(devices=2, microbatches=2).cap is None


def test_v_and_dualpipe_placements():
    v = Instance(devices=3, microbatches=4, placement="v")
    assert [v.device_of(s) for s in range(6)] == [0, 1, 2, 2, 1, 0]
    assert v.chains == (((0, 1, 2, 3, 4, 5), (0, 1, 2, 3)),)
    dual = Instance(devices=4, microbatches=8, placement="dualpipe", t_f=[1, 2, 3, 4])
    assert dual.t_f == (1, 2, 3, 4, 1, 2, 3, 4)  # one value per model part, both copies
    assert [dual.device_of(s) for s in range(8)] == [0, 1, 2, 3, 3, 2, 1, 0]
    (up, first), (down, second) = dual.chains
    assert first == (0, 1, 2, 3) and second == (4, 5, 6, 7)
    assert dual.num_passes == 3 * 8 * 4


def test_dependencies_and_dag():
    inst = Instance(devices=2, microbatches=2, placement="v", t_f=1, t_b=2, t_w=1, comm=5)
    assert dependencies(inst, (0, 0, "F")) == []
    assert dependencies(inst, (2, 1, "F")) == [(1, 1, "F")]
    assert dependencies(inst, (3, 0, "B")) == [(3, 0, "F")]  # last stage: its own F
    assert dependencies(inst, (1, 0, "B")) == [(2, 0, "B")]
    assert dependencies(inst, (1, 0, "W")) == [(1, 0, "B")]
    graph = build_dag(inst)
    assert graph.number_of_nodes() == 3 * 4 * 2
    assert graph.edges[(0, 0, "F"), (1, 0, "F")]["lag"] == 5  # device 0 -> 1
    assert graph.edges[(1, 0, "F"), (2, 0, "F")]["lag"] == 0  # both on device 1
    length, path = critical_path(inst)
    # F through 4 stages, B back through 4, the last W: 4*1 + 4*2 + 1, plus comm 0->1, 2->3 twice
    assert length == 4 + 8 + 1 + 4 * 5
    assert path[0] == (0, path[0][1], "F") and path[-1][2] == "W"


@pytest.mark.parametrize("kwargs,message", [
    (dict(devices=0, microbatches=4), "devices must be >= 1"),
    (dict(devices=2, microbatches=0), "microbatches must be >= 1"),
    (dict(devices=2, microbatches=2, t_f=-1), "t_f must be finite and >= 0"),
    (dict(devices=2, microbatches=2, t_b=[1, 2, 3]), "t_b has 3 values but the instance has 2"),
    (dict(devices=2, microbatches=2, placement="ring"), "unknown placement 'ring'"),
    (dict(devices=2, microbatches=2, placement="v", chunks=3), "takes chunks = 2"),
    (dict(devices=2, microbatches=2, placement="interleaved", chunks=1), "chunks >= 2"),
    (dict(devices=2, microbatches=3, placement="dualpipe"), "must be even"),
    (dict(devices=2, microbatches=2, m_b=1, memory_cap=0.5), "below one activation"),
    (dict(devices=2, microbatches=2, memory_cap="lots"), "multiple of p"),
    (dict(devices=2, microbatches=2, memory_cap=[1, 2, 3]), "one per device"),
    (dict(devices=2, microbatches=2, m_b=1, m_w=2), "m_w"),
    (dict(devices=2, microbatches=2, comm=-1), "comm"),
    (dict(devices=2, microbatches=2, overlap=2), "overlap"),
    (dict(devices=2, microbatches=2, t_f=0, t_b=0, t_w=0), "all pass costs are zero"),
    (dict(devices=2.5, microbatches=2), "devices must be an integer"),
])
def test_bad_instances_raise_one_error(kwargs, message):
    with pytest.raises(ZboptError, match=message):
        Instance(**kwargs)


def test_files_round_trip(tmp_path):
    inst = Instance(devices=3, microbatches=6, t_f=[1, 2, 3], t_b=2.5, comm=1, m_b=4, m_w=1,
                    memory_cap="2p", static_memory=[1, 0, 0], name="x", time_unit="us")
    for suffix in (".toml", ".json"):
        path = inst.save(tmp_path / f"inst{suffix}")
        assert load_instance(path) == inst
        with pytest.raises(ZboptError, match="exists"):
            inst.save(path)  # never overwrite silently


def test_file_errors(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("devices = 2\nmicrobatches = 2\nt_ff = 3\n")
    with pytest.raises(ZboptError, match="unknown key.*t_ff"):
        load_instance(bad)
    bad.write_text("devices = 2\nmicrobatches = [\n")
    with pytest.raises(ZboptError, match="not valid TOML"):
        load_instance(bad)
    bad.write_text("microbatches = 2\n")
    with pytest.raises(ZboptError, match="missing required key 'devices'"):
        load_instance(bad)
    js = tmp_path / "bad.json"
    js.write_text(json.dumps([1, 2]))
    with pytest.raises(ZboptError, match="expected a table"):
        load_instance(js)
    with pytest.raises(ZboptError, match="not found"):
        load_instance(tmp_path / "missing.toml")


def test_shipped_instances_load():
    from pathlib import Path

    from zbopt.layers import load_model
    default = load_instance(default_instance_path())
    assert (default.devices, default.microbatches, default.t_f[0]) == (8, 24, 18522)
    root = Path(__file__).resolve().parents[1] / "instances"
    files = sorted(root.rglob("*.toml"))
    assert len(files) >= 8
    for path in files:
        if path.parent.name == "models":
            load_model(path)  # layered models: `zbopt plan` partitions them
        else:
            load_instance(path)


def test_kp_cap_unit_is_one_microbatch_over_device_0():
    contiguous = Instance(devices=4, microbatches=8, m_b=[5, 1, 1, 1], memory_cap="1p")
    assert contiguous.cap == (20,) * 4
    # dualpipe: a micro-batch passes one copy only, so "1p" equals 1F1B's device-0 peak
    dual = contiguous.with_placement("dualpipe").with_cap("1p")
    assert dual.activation_unit == 5 and dual.cap == (20,) * 4
    v = contiguous.with_placement("v").with_cap("1p")  # both chunks hold device 0's layers
    assert v.activation_unit == 5 and v.cap == (20,) * 4


def test_kp_cap_sits_on_top_of_each_devices_static_memory_as_1f1b_does():
    inst = Instance(devices=3, microbatches=6, m_b=[4, 2, 2], static_memory=[10, 0, 7],
                    memory_cap="1p")
    assert inst.cap == (22, 12, 19)  # 3 * 4 above 10, 0 and 7
    assert inst.cap_in_p() == 1
    assert evaluate(inst, generate("1f1b", inst)).peak_memory[0] == inst.cap[0]  # 1F1B's peak, exactly
    assert Instance(devices=3, microbatches=6, m_b=[4, 2, 2], static_memory=[10, 0, 7],
                    memory_cap=["1p", 30, "0.5p"]).cap == (22, 30, 13)
    assert Instance(devices=3, microbatches=6, m_b=4, memory_cap=[24, 6, 12]).cap_in_p() == 2
