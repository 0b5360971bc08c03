"""A transformers config that leaves out a model size gets transformers' default for its
model_type (a llama config without num_hidden_layers has 32 of them): estimate and profile say
so in one note on stderr, naming each size left out and the value it took."""

import json
from pathlib import Path

import pytest

from zbopt.cli import main
from zbopt.hf_config import read_config

pytest.importorskip("transformers")

FULL = {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4,
        "num_hidden_layers": 2, "intermediate_size": 64, "vocab_size": 64}


def _write(tmp_path, settings) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(settings))
    return str(path)


def _notes(err: str) -> list[str]:
    return [line for line in err.splitlines() if "note:" in line]


def test_estimate_names_each_size_left_to_the_defaults(tmp_path, capsys):
    settings = {k: v for k, v in FULL.items() if k not in ("num_hidden_layers", "vocab_size")}
    path = _write(tmp_path, settings)
    assert main(["estimate", path, "--devices", "2", "--microbatches", "4", "--json"]) == 0
    out, err = capsys.readouterr()
    layers = json.loads(out)["layers"]
    assert sum(layer.get("count", 1) for layer in layers) == 32 + 2  # as the note says
    notes = _notes(err)
    assert len(notes) == 1
    assert "num_hidden_layers (so 32)" in notes[0] and "vocab_size (so 32,000)" in notes[0]
    assert "llama" in notes[0] and path in notes[0]
    assert "hidden_size" not in notes[0] and "intermediate_size" not in notes[0]


def test_a_config_setting_every_size_gets_no_note(tmp_path, capsys):
    assert main(["estimate", _write(tmp_path, FULL), "--devices", "2", "--microbatches", "4"]) == 0
    assert _notes(capsys.readouterr().err) == []


def test_gpt2_names_count_as_set(tmp_path):
    said = []
    read_config(_write(tmp_path, {"model_type": "gpt2", "n_embd": 64, "n_head": 4,
                                  "vocab_size": 100}), said.append)
    assert len(said) == 1
    assert "num_hidden_layers (so 12)" in said[0]  # n_layer left out
    assert "hidden_size" not in said[0] and "num_attention_heads" not in said[0]


def test_profile_gives_the_note_too(tmp_path, capsys):
    settings = {k: v for k, v in FULL.items() if k != "intermediate_size"}
    path = _write(tmp_path, settings)
    assert main(["profile", "--hf-config", path, "--seq-len", "8", "--warmup", "0",
                 "--repeat", "1", "--json"]) == 0
    notes = _notes(capsys.readouterr().err)
    assert len(notes) == 1 and "intermediate_size (so 11,008)" in notes[0]


def test_a_mixture_of_experts_left_to_the_defaults_is_named_too(tmp_path, capsys):
    """A mixtral config without its expert counts gets transformers' (8 experts, 2 a token):
    the note names them; a file that sets them, or a dense model, gets no word of experts."""
    moe = {**FULL, "model_type": "mixtral", "num_key_value_heads": 4}
    path = _write(tmp_path, moe)
    assert main(["estimate", path, "--devices", "2", "--json"]) == 0
    notes = _notes(capsys.readouterr().err)
    assert len(notes) == 1
    assert "num_local_experts (so 8)" in notes[0] and "num_experts_per_tok (so 2)" in notes[0]
    assert "n_routed_experts" not in notes[0] and "moe_intermediate_size" not in notes[0]
    assert "num_experts (" not in notes[0]  # mixtral's alias of num_local_experts: one size
    path = _write(tmp_path, {**moe, "num_local_experts": 4, "num_experts_per_tok": 1})
    assert main(["estimate", path, "--devices", "2", "--json"]) == 0
    assert _notes(capsys.readouterr().err) == []
    assert main(["estimate", _write(tmp_path, FULL), "--devices", "2", "--json"]) == 0
    assert _notes(capsys.readouterr().err) == []


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "deepseek-v3", "mixtral-8x7b", "gpt-oss-20b"])
def test_a_size_the_file_sets_under_its_other_name_is_not_named(name, capsys):
    """qwen3_moe stores num_experts as num_local_experts (transformers' attribute_map): a file
    that sets num_experts has set the expert count."""
    path = Path(__file__).resolve().parents[1] / "instances" / "configs" / f"{name}.json"
    assert main(["estimate", str(path), "--devices", "2", "--json"]) == 0
    assert _notes(capsys.readouterr().err) == []
