"""zbopt estimate: layered models from a transformers config, without hardware."""

import json
from pathlib import Path

import pytest

from zbopt.cli import main
from zbopt.errors import ZboptError
from zbopt.estimate import Accelerator, estimate_layers, estimate_model, shape_from_config
from zbopt.instance import load_instance
from zbopt.layers import load_model

PAPER = Path(__file__).resolve().parents[1] / "instances" / "paper"


def _config(tmp_path, name="config.json", **data) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("hidden, heads, layers, instance", [
    (2304, 24, 22, "zb-1.5b-p8-m24.toml"),
    (4096, 32, 30, "zb-6.2b-p8-m24.toml"),
])
def test_paper_configs_reproduce_the_paper_activations(tmp_path, hidden, heads, layers, instance):
    """The paper's GPT models at sequence 1024: a block's m_b and m_w in units of s*b bytes are
    the paper instances' per-layer values."""
    config = _config(tmp_path, model_type="gpt2", n_embd=hidden, n_head=heads, n_layer=layers,
                     n_positions=1024, vocab_size=50257)
    sequence, microbatch = 1024, 2
    block = estimate_layers(shape_from_config(config), microbatch, sequence, Accelerator())[1]
    paper = load_instance(PAPER / instance)
    assert block.count == layers
    assert block.m_b / (sequence * microbatch) == paper.m_b[0]
    assert block.m_w / (sequence * microbatch) == paper.m_w[0]


def test_llama2_7b_parameter_count_gives_static_memory(tmp_path):
    """Llama-2-7B has 6,738,415,616 parameters; static memory is 16 bytes for each."""
    config = _config(tmp_path, model_type="llama", hidden_size=4096, num_attention_heads=32,
                     num_hidden_layers=32, intermediate_size=11008, vocab_size=32000,
                     hidden_act="silu")
    shape = shape_from_config(config)
    layers = estimate_layers(shape, 1, 4096, Accelerator())
    total = sum(x.static * x.count for x in layers)
    assert total == 16 * 6_738_415_616
    eight = estimate_layers(shape, 1, 4096, Accelerator(), optimizer_bytes=8)
    assert sum(x.static * x.count for x in eight) == 8 * 6_738_415_616


CONFIG_DIR = Path(__file__).resolve().parents[1] / "instances" / "configs"


@pytest.mark.parametrize("name, parameters", [("llama-3.1-8b", 8_030_261_248),
                                              ("llama-3.1-70b", 70_553_706_496)])
def test_shipped_llama_configs_hold_their_published_parameters(name, parameters):
    shape = shape_from_config(CONFIG_DIR / f"{name}.json")
    layers = estimate_layers(shape, 1, 8192, Accelerator())
    assert sum(x.static * x.count for x in layers) == 16 * parameters


def test_llama_70b_on_eight_80gb_devices_fits_only_with_sharded_states(tmp_path, capsys):
    """At 16 bytes a parameter no split fits (estimate says why, plan refuses naming the flag);
    at 4 bytes (FSDP over 4 ranks) the plan is feasible."""
    from cli_checks import refused
    config = CONFIG_DIR / "llama-3.1-70b.json"
    args = ["--devices", "8", "--microbatches", "16", "--seq-len", "8192", "--flash-attention",
            "--mem", "80GB"]
    whole, sharded = tmp_path / "whole.toml", tmp_path / "sharded.toml"
    assert main(["estimate", str(config), *args, "--out", str(whole)]) == 0
    assert "--optimizer-bytes 16/N with FSDP over N ranks" in capsys.readouterr().err
    line = refused(capsys, "plan", whole, "--time-limit", "5")
    assert "cannot hold any split" in line and "`zbopt estimate --optimizer-bytes`" in line
    assert main(["estimate", str(config), *args, "--optimizer-bytes", "4", "--out",
                 str(sharded)]) == 0
    assert "no split fits" not in capsys.readouterr().err
    assert main(["plan", str(sharded), "--time-limit", "5", "--json", "--quiet",
                 "--placements", "contiguous"]) == 0
    assert json.loads(capsys.readouterr().out)["partition"]["sizes"]


def test_times_follow_flops_and_the_accelerator(tmp_path):
    config = _config(tmp_path, model_type="llama", hidden_size=1024, num_attention_heads=16,
                     num_hidden_layers=4, intermediate_size=4096, vocab_size=32000,
                     hidden_act="silu")
    shape = shape_from_config(config)
    slow = estimate_layers(shape, 1, 512, Accelerator(peak_flops=1e14, efficiency=0.5))
    fast = estimate_layers(shape, 1, 512, Accelerator(peak_flops=2e14, efficiency=0.5))
    two = estimate_layers(shape, 2, 512, Accelerator(peak_flops=1e14, efficiency=0.5))
    block, head = slow[1], slow[2]
    assert fast[1].t_f == pytest.approx(block.t_f / 2, rel=1e-3)
    assert two[1].t_f == pytest.approx(2 * block.t_f, rel=1e-3)
    assert block.t_b > block.t_f > block.t_w > 0  # attention has no weights: B carries twice it
    # the output layer: 2 h V FLOPs per token and pass
    assert head.t_f == pytest.approx(2 * 1024 * 32000 * 512 / (0.5e14) * 1e6, rel=1e-3)
    assert slow[0].t_f == 0 and slow[0].t_b == 0


def test_model_carries_comm_and_cap(tmp_path):
    config = _config(tmp_path, model_type="gpt2", n_embd=768, n_head=12, n_layer=12)
    model = estimate_model(shape_from_config(config), 4, 1024,
                           Accelerator(hbm_bytes=40e9, link_bandwidth=50e9), devices=4,
                           microbatches=8)
    assert model.memory_cap == 40_000_000_000
    assert model.comm == pytest.approx(2 * 768 * 4 * 1024 / 50e9 * 1e6, abs=1e-3)
    assert [x.name for x in model.expanded][:2] == ["tok_embeddings", "layers.0"]
    assert model.expanded[-1].name == "norm+lm_head"  # torchtitan's module names


@pytest.mark.parametrize("data, fragment", [
    ({"model_type": "bert", "hidden_size": 64, "num_attention_heads": 4}, "not a decoder-only"),
    ({"model_type": "t5"}, "not a decoder-only"),
    ({"hidden_size": 64}, "no model_type"),
    ({"model_type": "no-such-model"}, "does not know model_type"),
    ({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 12},
     "rejects this config: The hidden size"),
    ({"model_type": "llama", "hidden_size": 4096, "intermediate_size": -64},
     "intermediate_size must be a positive integer"),
    ({"model_type": "gpt2", "n_embd": 30, "n_head": 4}, "not a multiple of the 4 heads"),
    ({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 0},
     "num_attention_heads must be a positive integer, got 0"),
    ({"model_type": "gpt2", "n_embd": 64, "n_head": 0}, "n_head must be a positive integer"),
    ({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
      "num_key_value_heads": 3}, "num_key_value_heads 3 must divide num_attention_heads 4"),
    ({"model_type": "olmoe", "hidden_size": 64, "num_attention_heads": 4,
      "num_experts": 8}, "num_experts = 8: estimate models the mixtures of experts of mixtral, "
                         "qwen2_moe, qwen3_moe, deepseek_v3, glm4_moe, gpt_oss, llama4_text, not 'olmoe''s"),
    ({"model_type": "mixtral", "hidden_size": 64, "num_attention_heads": 4,
      "num_key_value_heads": 4, "num_local_experts": 4, "num_experts_per_tok": 6},
     "num_experts_per_tok 6 is more than the 4 experts"),
    ({"model_type": "qwen3_moe", "hidden_size": 64, "num_attention_heads": 4,
      "num_experts": 8, "moe_intermediate_size": 0}, "moe_intermediate_size must be a positive"),
    ({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
      "num_hidden_layers": 5000}, "num_hidden_layers 5,000 makes more than zbopt's limit"),
])
def test_bad_configs_say_what_to_change(tmp_path, data, fragment):
    with pytest.raises(ZboptError, match=fragment):
        shape_from_config(_config(tmp_path, **data))


def test_a_toml_config_gives_the_shape_of_its_json_twin(tmp_path):
    """estimate and profile share one config reader: the TOML form of a config is read too."""
    keys = {"model_type": "gpt2", "n_embd": 256, "n_head": 4, "n_layer": 6, "vocab_size": 8192}
    toml = tmp_path / "config.toml"
    toml.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items()))
    assert shape_from_config(toml) == shape_from_config(_config(tmp_path, **keys))
    assert shape_from_config(toml).hidden == 256


def test_bad_accelerator_figures():
    with pytest.raises(ZboptError, match="efficiency"):
        Accelerator(efficiency=1.5)
    with pytest.raises(ZboptError, match="peak-flops"):
        Accelerator(peak_flops=0)


def test_cli_writes_a_layered_file_and_refuses_to_overwrite(tmp_path, capsys):
    config = _config(tmp_path, model_type="gpt2", n_embd=256, n_head=4, n_layer=6)
    out = tmp_path / "model.toml"
    assert main(["estimate", str(config), "--seq-len", "256", "--devices", "2",
                 "--microbatches", "4", "--out", str(out)]) == 0
    model = load_model(out)
    assert model.num_layers == 8 and model.devices == 2
    assert main(["estimate", str(config), "--out", str(out)]) == 2
    assert "exists" in capsys.readouterr().err
    bad = _config(tmp_path, "bert.json", model_type="bert")
    assert main(["estimate", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "not a decoder-only" in err and "\n" not in err


def test_hbm_bytes_takes_a_unit(tmp_path, capsys):
    config = _config(tmp_path, model_type="gpt2", n_embd=256, n_head=4, n_layer=6)
    assert main(["estimate", str(config), "--hbm-bytes", "16GiB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["memory_cap"] == 16 * 2**30
    assert main(["estimate", str(config), "--hbm-bytes", "80e9", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["memory_cap"] == 80 * 10**9
    for bad in ("0GB", "-1", "lots"):
        assert main(["estimate", str(config), "--hbm-bytes", bad]) == 2
        err = capsys.readouterr().err.strip()
        assert "--hbm-bytes" in err and "positive number of bytes" in err and "\n" not in err


def test_cli_takes_the_config_as_profile_does_and_once(tmp_path, capsys):
    """`--hf-config FILE` (profile's flag) gives the same file as the positional CONFIG; neither
    or both is one line and exit 2, and nothing is written."""
    config = _config(tmp_path, model_type="gpt2", n_embd=256, n_head=4, n_layer=6)
    by_flag, by_position = tmp_path / "flag.toml", tmp_path / "position.toml"
    assert main(["estimate", "--hf-config", str(config), "--devices", "2", "--out",
                 str(by_flag)]) == 0
    assert main(["estimate", str(config), "--devices", "2", "--out", str(by_position)]) == 0
    assert load_model(by_flag) == load_model(by_position)
    capsys.readouterr()
    for argv in (["estimate"], ["estimate", str(config), "--hf-config", str(config)]):
        out = tmp_path / "none.toml"
        assert main([*argv, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert "--hf-config" in err and "\n" not in err and not out.exists()


@pytest.mark.parametrize("extra", [{"torch_dtype": "bfloatnan"}, {"num_attention_heads": 3}])
def test_a_config_transformers_rejects_is_one_line(tmp_path, capsys, extra):
    config = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
              "num_hidden_layers": 2, "vocab_size": 128, **extra}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert main(["estimate", str(path), "--out", str(tmp_path / "m.toml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("zbopt: error:")
    assert not (tmp_path / "m.toml").exists()


def test_head_dim_and_grouped_heads_count_the_parameters_transformers_builds(tmp_path):
    """A block's parameters with head_dim != hidden / heads and grouped key/value heads are
    those of the model transformers builds from the same config."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    data = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 96,
            "num_hidden_layers": 2, "vocab_size": 100, "hidden_act": "silu"}
    shape = shape_from_config(_config(tmp_path, **data))
    config = transformers.AutoConfig.for_model(**data)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    block = sum(p.numel() for p in model.model.layers[0].parameters())
    assert shape.block_params() == block
    assert shape.block_params() != shape_from_config(_config(
        tmp_path, name="plain.json", **{k: v for k, v in data.items() if k != "head_dim"})
    ).block_params()  # head_dim is read, not ignored


@pytest.mark.parametrize("flag, value, fragment", [
    ("--peak-flops", "1e-300", "overflows: give realistic --peak-flops"),
    ("--optimizer-bytes", "1e308", "overflows: give realistic --optimizer-bytes"),
    ("--peak-flops", "1e30", "rounds to 0 us"),
    # finite, but past zbopt's limit on totals: the flags to change, not "a larger unit"
    ("--seq-len", "999999999999", "give smaller --microbatch-size, --seq-len or --microbatches"),
    ("--optimizer-bytes", "1e300", "give smaller --microbatch-size, --seq-len, --microbatches or "
                                   "--optimizer-bytes"),
])
def test_figures_a_float_cannot_hold_are_refused_and_nothing_written(tmp_path, capsys, flag,
                                                                     value, fragment):
    config = _config(tmp_path, model_type="llama", hidden_size=64, num_attention_heads=4,
                     num_hidden_layers=2, vocab_size=100, intermediate_size=128,
                     hidden_act="silu")
    out = tmp_path / "model.toml"
    assert main(["estimate", str(config), "--seq-len", "16", "--devices", "2", flag, value,
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert fragment in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_a_config_with_a_byte_order_mark_reads_and_one_of_4400_digits_is_one_line(tmp_path,
                                                                                   capsys):
    data = dict(model_type="llama", hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                vocab_size=100, intermediate_size=128, hidden_act="silu")
    marked = tmp_path / "marked.json"
    marked.write_text(json.dumps(data), encoding="utf-8-sig")
    assert main(["estimate", str(marked), "--devices", "2", "--seq-len", "16"]) == 0
    assert json.loads(capsys.readouterr().out)["layers"][0]["name"] == "tok_embeddings"
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps(data).replace('"vocab_size": 100', '"vocab_size": ' + "9" * 4400))
    out = tmp_path / "model.toml"
    assert main(["estimate", str(huge), "--devices", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"zbopt: error: {huge}: an integer of 4400 digits cannot be read: give every " \
                  f"value as a finite number of sensible size\n"
    assert not out.exists()


def test_estimate_writes_its_file_without_torch(tmp_path):
    """estimate needs transformers' configs, not torch (an optional extra): with torch blocked
    from importing, it still writes the layered file, provenance comments included."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "m.toml"
    code = ("import sys; sys.modules['torch'] = None; from zbopt.cli import main; "
            f"sys.exit(main(['estimate', {str(root / 'instances/configs/qwen3-30b-a3b.json')!r}, "
            f"'--devices', '4', '--expert-parallel', '8', '--out', {str(out)!r}]))")
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and out.read_text().startswith("# written by")
