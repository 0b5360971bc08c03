"""zbopt estimate counts a block's parameters as transformers builds them for the config's model
type: a gated MLP (gate_proj, up_proj, down_proj) whatever the activation, biases and norms."""

import json

import pytest
from cli_checks import refused

from zbopt.estimate import Accelerator, estimate_layers, shape_from_config

# small copies of real configs of each family (sizes shrunk, keys as the hub's files give them)
SMALL = {"hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 2,
         "num_attention_heads": 4, "vocab_size": 1000, "max_position_embeddings": 512}
CONFIGS = {
    "llama": {"model_type": "llama", **SMALL, "intermediate_size": 344, "num_key_value_heads": 2,
              "hidden_act": "silu"},
    "llama-gelu": {"model_type": "llama", **SMALL, "intermediate_size": 344,
                   "num_key_value_heads": 2, "hidden_act": "gelu"},
    "llama-biases": {"model_type": "llama", **SMALL, "attention_bias": True, "mlp_bias": True},
    "gemma": {"model_type": "gemma", **SMALL, "num_key_value_heads": 1, "head_dim": 32,
              "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
              "tie_word_embeddings": True},
    "gemma2": {"model_type": "gemma2", **SMALL, "num_key_value_heads": 2, "head_dim": 64,
               "hidden_activation": "gelu_pytorch_tanh"},
    "mistral": {"model_type": "mistral", **SMALL, "intermediate_size": 352,
                "num_key_value_heads": 1, "hidden_act": "silu"},
    "qwen2": {"model_type": "qwen2", **SMALL, "intermediate_size": 352, "num_key_value_heads": 2,
              "hidden_act": "silu", "tie_word_embeddings": True},
    "qwen3": {"model_type": "qwen3", **SMALL, "num_key_value_heads": 2, "head_dim": 64},
    "granite": {"model_type": "granite", **SMALL, "num_key_value_heads": 2},
    "gpt2": {"model_type": "gpt2", "n_embd": 128, "n_layer": 2, "n_head": 4, "vocab_size": 1000,
             "n_positions": 256, "activation_function": "gelu_new"},
    "gpt_neox": {"model_type": "gpt_neox", **SMALL, "rotary_pct": 0.25, "hidden_act": "gelu",
                 "use_parallel_residual": True, "tie_word_embeddings": False},
    "phi": {"model_type": "phi", **SMALL, "partial_rotary_factor": 0.5, "hidden_act": "gelu_new"},
    "phi-qk-norm": {"model_type": "phi", **SMALL, "qk_layernorm": True},
    "phi3": {"model_type": "phi3", **SMALL, "num_key_value_heads": 2, "pad_token_id": 0},
    "gemma3_text": {"model_type": "gemma3_text", **SMALL, "num_key_value_heads": 2, "head_dim": 64,
                    "hidden_activation": "gelu_pytorch_tanh"},
    "olmo2": {"model_type": "olmo2", **SMALL, "num_key_value_heads": 2},
    "olmo2-biases": {"model_type": "olmo2", **SMALL, "attention_bias": True},
    "cohere": {"model_type": "cohere", **SMALL, "num_key_value_heads": 2, "use_qk_norm": True},
    "cohere-no-qk-norm": {"model_type": "cohere", **SMALL},
    "starcoder2": {"model_type": "starcoder2", **SMALL, "num_key_value_heads": 2},
    "starcoder2-no-bias": {"model_type": "starcoder2", **SMALL, "use_bias": False},
}


def _write(tmp_path, data):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return path


def _built(path):
    """(one block's parameters, the model's distinct parameters) as transformers builds the
    model from the config: shapes only (the meta device), nothing downloaded."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import AutoModelForCausalLM

    from zbopt.hf_config import read_config
    config = read_config(path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    base = model.base_model
    blocks = base.layers if hasattr(base, "layers") else base.h
    block = sum(p.numel() for p in blocks[0].parameters())
    total = sum({id(p): p.numel() for p in model.parameters()}.values())
    return block, total, bool(getattr(config, "tie_word_embeddings", False))


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_block_parameters_are_those_transformers_builds(tmp_path, family):
    path = _write(tmp_path, CONFIGS[family])
    block, total, tied = _built(path)
    shape = shape_from_config(path)
    assert shape.block_params() == block
    layers = estimate_layers(shape, 1, 64, Accelerator(), optimizer_bytes=1)
    estimated = sum(layer.static * layer.count for layer in layers)
    # a tied output layer is counted on both ends (each end stage holds a copy)
    assert estimated - tied * shape.vocab * shape.hidden == total


def test_a_llama_mlp_is_gated_whatever_its_activation(tmp_path):
    """LlamaMLP always has gate_proj: a gelu llama has the parameters and FLOPs of a silu one."""
    silu = shape_from_config(_write(tmp_path, CONFIGS["llama"]))
    gelu = shape_from_config(_write(tmp_path, CONFIGS["llama-gelu"]))
    assert gelu.gated_mlp and gelu.block_params() == silu.block_params() == 181_504
    assert gelu.block_matmul_flops() == silu.block_matmul_flops()


@pytest.mark.parametrize("kind", ["falcon", "olmo"])  # olmo: llama-shaped, profile takes it
def test_an_unknown_model_type_is_refused_not_guessed(tmp_path, capsys, kind):
    pytest.importorskip("transformers")
    path = _write(tmp_path, {"model_type": kind, **SMALL})
    out = tmp_path / "m.toml"
    line = refused(capsys, "estimate", path, "--out", out)
    assert f"'{kind}'" in line and "estimate knows the blocks of llama" in line
    assert "profile them" in line and not out.exists()
