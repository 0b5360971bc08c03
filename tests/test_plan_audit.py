"""What a user auditing plan, estimate and profile found: the split named as the model names its
layers, refusals that say which flag or key to change, and nothing written after one."""

from __future__ import annotations

import json

import pytest
from cli_checks import refused

from zbopt.cli import main
from zbopt.commands.plan import compact

MODEL = 'name = "m"\ndevices = 2\nmicrobatches = 4\n'
BLOCKS = ("emb", "blk.00", "blk.01", "blk.02", "blk.03", "head")


def _layers(names=BLOCKS) -> str:
    return "".join(f'\n[[layers]]\nname = "{n}"\nt_f = 1\nt_b = 1\nt_w = 1\n' for n in names)


def test_zero_padded_numbers_are_not_folded_into_names_no_layer_has():
    assert compact(["emb", "blk.00", "blk.01"]) == "emb, blk.00, blk.01"
    assert compact(["layers.0", "layers.1", "layers.2", "x.9", "x.10"]) == "layers.0-2, x.9-10"


def test_the_plan_table_names_zero_padded_layers_as_written(tmp_path, capsys):
    path = tmp_path / "pad.toml"
    path.write_text(MODEL + _layers())
    assert main(["plan", str(path), "--time-limit", "2", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "emb, blk.00, blk.01" in out and "blk.02, blk.03, head" in out
    assert "blk.0-1" not in out


@pytest.mark.parametrize("mem, bad", [("x", "x"), ("24000,abc,1,2", "abc"), ("1p,x,1,1", "x")])
def test_a_cap_plan_cannot_read_is_named_not_taken_for_a_multiple_of_p(capsys, mem, bad):
    err = refused(capsys, "plan", "blocks16-p4", "--mem", mem, "--quiet")
    assert f"{bad!r} is not a cap: give a number in the file's memory unit" in err
    assert "multiple of p" not in err
    err = refused(capsys, "plan", "blocks16-p4", "--mem", "1p", "--quiet")  # one that is
    assert "not a multiple of p" in err


@pytest.mark.parametrize("placement", ["contiguous", "interleaved", "v"])
@pytest.mark.parametrize("chunks", [0, -1])
def test_chunks_below_one_in_a_layered_file_is_refused_as_in_an_instance(tmp_path, capsys,
                                                                           placement, chunks):
    path = tmp_path / "m.toml"
    path.write_text(MODEL + f'placement = "{placement}"\nchunks = {chunks}\n' + _layers())
    out = tmp_path / "plan.json"
    err = refused(capsys, "plan", path, "--out", out, "--time-limit", "1", "--quiet")
    assert f"chunks = {chunks} is not a chunk count" in err
    assert not out.exists()


@pytest.mark.parametrize("name", ["a\\nb", "a\\tb"])
def test_a_layer_name_with_a_control_character_is_refused(tmp_path, capsys, name):
    path = tmp_path / "m.toml"
    path.write_text(MODEL + _layers(("emb", name, "head")))
    out = tmp_path / "plan.json"
    err = refused(capsys, "plan", path, "--out", out, "--quiet")
    assert "has a control character or line break" in err and "layers[1]" in err
    assert not out.exists()


CONFIG = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
          "num_hidden_layers": 4, "intermediate_size": 128, "vocab_size": 1000}


@pytest.fixture
def config(tmp_path):
    pytest.importorskip("transformers")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG))
    return path


def test_estimate_on_more_devices_than_layers_names_the_flag(config, tmp_path, capsys):
    out = tmp_path / "m.toml"
    err = refused(capsys, "estimate", config, "--out", out)  # --devices 8 by default
    assert err == ("zbopt: error: --devices 8: the model has 6 layers (4 blocks, the embedding "
                   "and the output layer) and every stage needs one: give --devices 6 or fewer")
    assert not out.exists()
    assert main(["estimate", str(config), "--devices", "6", "--out", str(out)]) == 0


@pytest.mark.parametrize("flag", ["--seq-len", "--microbatch-size", "--devices", "--microbatches"])
def test_estimate_counts_that_are_not_positive_are_refused_by_flag(config, capsys, flag):
    err = refused(capsys, "estimate", config, flag, "0")
    assert f"argument {flag}: '0' is not a positive integer" in err


MODULE = """
import torch
from torch import nn

def one():
    return [("only", nn.Linear(4, 4))], lambda: torch.randn(2, 4)
"""


def test_profile_on_more_devices_than_layers_names_the_flag(tmp_path, capsys):
    pytest.importorskip("torch")
    module = tmp_path / "one.py"
    module.write_text(MODULE)
    out = tmp_path / "m.toml"
    err = refused(capsys, "profile", "--module", f"{module}:one", "--repeat", "1", "--warmup",
                  "0", "--out", out)  # --devices 2 by default
    assert err.endswith("--devices 2: the model has 1 layer(s) and every stage needs one: give "
                        "--devices 1 or fewer")
    assert not out.exists()


def _known(kind: str) -> None:
    pytest.importorskip("transformers")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    if kind not in CONFIG_MAPPING_NAMES:
        pytest.skip(f"this transformers has no {kind}")


@pytest.mark.parametrize("config, inner", [
    ({"model_type": "gemma3", "text_config": {"hidden_size": 64}}, "gemma3_text"),
    ({"model_type": "mllama"}, "mllama_text_model"),
])
@pytest.mark.parametrize("command", [["estimate"], ["profile", "--hf-config"]])
def test_a_multimodal_config_is_refused_naming_its_language_part(tmp_path, capsys, config, inner,
                                                                 command):
    _known(config["model_type"])
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    out = tmp_path / "m.toml"
    err = refused(capsys, *command, path, "--out", out)
    assert f"{config['model_type']!r} wraps its language model in a sub-config" in err
    assert f"with model_type {inner!r}" in err and "hidden_size" not in err
    assert not out.exists()


TINY = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 1000}


@pytest.mark.parametrize("kind", ["gemma3_text", "gemma2"])
def test_profile_runs_decoders_with_rotary_per_layer_type_or_no_sdpa(tmp_path, capsys, kind):
    # gemma3's rotary embedding takes the layer type; gemma2 has no SDPA path in transformers
    pytest.importorskip("torch")
    _known(kind)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": kind, **TINY}))
    out = tmp_path / "m.toml"
    assert main(["profile", "--hf-config", str(path), "--repeat", "1", "--warmup", "0",
                 "--seq-len", "8", "--out", str(out), "--quiet"]) == 0, capsys.readouterr().err
    from zbopt.layers import load_model
    assert [x.name for x in load_model(out).expanded] == [
        "model.embed_tokens", "model.layers.0", "model.layers.1", "model.norm+lm_head"]


@pytest.mark.parametrize("mem", ["1e400", "0"])
def test_profile_says_an_infinite_cap_is_not_finite(tmp_path, capsys, mem):
    out = tmp_path / "m.toml"
    err = refused(capsys, "profile", "--preset", "gpt2-tiny", "--mem", mem, "--out", out)
    assert "the cap must be a positive finite number of bytes, or 'none' for no cap" in err
    assert not out.exists()
