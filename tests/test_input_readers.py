"""What the readers of schedule files, torch CSVs (and their sidecars), instances and layered
models say about a file of the wrong kind, an integer too long for Python to read and a UTF-8
byte-order mark. Each refusal is one line on stderr, exit status 2, no traceback."""

from __future__ import annotations

import pytest
from cli_checks import refused

from zbopt.instance import Instance
from zbopt.layers import LayeredModel

UNIT = Instance(devices=2, microbatches=2, t_f=1, t_b=1, t_w=1, comm=0)
MODEL = {"name": "tiny", "devices": 2, "microbatches": 4, "layers": [
    {"name": "a", "t_f": 1, "t_b": 1, "t_w": 1}, {"name": "b", "t_f": 2, "t_b": 2, "t_w": 1}]}


def _commands(path, tmp_path):
    """Every command that reads a schedule file, given `path`."""
    return [("evaluate", path), ("export", path, "--torch-csv", tmp_path / "out.csv"),
            ("plot", path, "-o", tmp_path / "out.png"), ("verify-torch", path)]


# ----- an instance or model where a schedule file belongs ------------------------------------

@pytest.mark.parametrize("kind", ["instance", "model"])
@pytest.mark.parametrize("suffix", [".json", ".toml"])
def test_an_instance_or_model_file_is_named_as_one_where_a_schedule_belongs(
        tmp_path, capsys, kind, suffix):
    path = tmp_path / f"{kind}{suffix}"
    (UNIT if kind == "instance" else LayeredModel.from_dict(MODEL)).save(path)
    for argv in _commands(path, tmp_path):
        if suffix == ".toml" and argv[0] == "evaluate":
            continue  # evaluate asks for a .json name before reading (or --torch-csv)
        line = refused(capsys, *argv)
        assert line == (f"zbopt: error: {path}: this is an instance or model file; give a "
                        f"schedule or plan file (.json), which `zbopt solve`, `simulate` or "
                        f"`plan` write with --out"), argv
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # nothing written
