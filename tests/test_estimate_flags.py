"""zbopt estimate takes the per-device memory cap as --mem, the flag profile and plan use for the
same cap, or by its older name --hbm-bytes."""

import json

import pytest
from cli_checks import refused

from zbopt.cli import main

pytest.importorskip("transformers")

CONFIG = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4,
          "num_hidden_layers": 8, "intermediate_size": 688, "vocab_size": 1000}


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG))
    return path


def _model(capsys, *argv):
    assert main(["estimate", *map(str, argv), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_mem_is_the_cap_as_hbm_bytes_is(config, capsys):
    mem = _model(capsys, config, "--devices", 8, "--mem", "80GB")
    assert mem["memory_cap"] == 80_000_000_000
    assert mem == _model(capsys, config, "--devices", 8, "--hbm-bytes", "80GB")
    assert "memory_cap" not in _model(capsys, config, "--mem", "none")


def test_a_bad_mem_is_refused_naming_the_flag(config, tmp_path, capsys):
    out = tmp_path / "m.toml"
    line = refused(capsys, "estimate", config, "--mem", "0", "--out", out)
    assert "--mem" in line and "'0' is not a positive number of bytes" in line
    assert not out.exists()
