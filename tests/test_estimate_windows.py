"""zbopt estimate and sliding-window attention: the blocks transformers gives a window, and, with
--flash-attention, attention FLOPs counted over the window (eager attention computes the whole
score matrix and masks it, so without the flag a window changes nothing)."""

import json

import pytest

from zbopt.cli import main
from zbopt.estimate import Accelerator, estimate_layers, shape_from_config

SMALL = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 6,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
         "max_position_embeddings": 4096}
# model types whose configs give some or all blocks a sliding window, each as the hub's files
# set it: by layer_types (default or written) or for every block
WINDOWED = {
    "gemma2": {"model_type": "gemma2", **SMALL, "head_dim": 32, "sliding_window": 64},
    "gemma3_text": {"model_type": "gemma3_text", **SMALL, "head_dim": 32, "sliding_window": 64},
    "gpt_oss": {"model_type": "gpt_oss", **SMALL, "head_dim": 32, "sliding_window": 64,
                "num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen2": {"model_type": "qwen2", **SMALL, "use_sliding_window": True, "sliding_window": 64,
              "max_window_layers": 2},
    "qwen3-layer-types": {"model_type": "qwen3", **SMALL, "head_dim": 32, "sliding_window": 64,
                          "use_sliding_window": True,
                          "layer_types": ["sliding_attention", "full_attention"] * 3},
    "mistral": {"model_type": "mistral", **SMALL, "sliding_window": 64},
    "phi3": {"model_type": "phi3", **SMALL, "sliding_window": 64, "pad_token_id": 0},
    "starcoder2": {"model_type": "starcoder2", **SMALL, "sliding_window": 64},
    "qwen3_moe": {"model_type": "qwen3_moe", **SMALL, "head_dim": 32, "use_sliding_window": True,
                  "sliding_window": 64, "num_experts": 4, "num_experts_per_tok": 2,
                  "moe_intermediate_size": 64},
    # configs that set no window, or turn it off
    "mistral-none": {"model_type": "mistral", **SMALL, "sliding_window": None},
    "qwen2-off": {"model_type": "qwen2", **SMALL, "sliding_window": 64},
    "qwen3-layer-types-off": {"model_type": "qwen3", **SMALL, "head_dim": 32,
                              "sliding_window": 64,
                              "layer_types": ["sliding_attention", "full_attention"] * 3},
    "llama": {"model_type": "llama", **SMALL},
}
ACCELERATOR = Accelerator(peak_flops=1e12, efficiency=1.0)  # 1e6 FLOPs a microsecond


def _write(tmp_path, data):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return path


def _built_windows(path):
    """Per block the window transformers' attention gets, from the model it builds (shapes
    only): the attention module's own sliding_window where it keeps one, else the config's,
    which those model types pass to every block."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import AutoModelForCausalLM

    from zbopt.hf_config import read_config
    config = read_config(path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    windows = []
    for block in model.base_model.layers:
        window = getattr(block.self_attn, "sliding_window",
                         getattr(config, "sliding_window", None))
        windows.append(window or 0)
    return tuple(windows)


@pytest.mark.parametrize("family", sorted(WINDOWED))
def test_the_windowed_blocks_are_those_transformers_builds(tmp_path, family):
    path = _write(tmp_path, WINDOWED[family])
    shape = shape_from_config(path)
    built = _built_windows(path)
    assert (shape.windows or (0,) * shape.layers) == built
    if family in ("mistral-none", "qwen2-off", "qwen3-layer-types-off", "llama"):
        assert shape.windows == ()
    else:
        assert any(built)


@pytest.mark.parametrize("family", ["gemma3_text", "mistral"])
def test_flash_attention_counts_a_windowed_blocks_scores_over_its_window(tmp_path, family):
    shape = shape_from_config(_write(tmp_path, WINDOWED[family]))
    s, w, a, d = 1024, 64, 4, 32
    flash = estimate_layers(shape, 1, s, ACCELERATOR, flash=True)
    full = estimate_layers(shape_from_config(_write(tmp_path, {**WINDOWED[family],
                                                               "sliding_window": None})),
                           1, s, ACCELERATOR, flash=True)
    blocks = [layer for layer in flash if layer.name.startswith("layers")]
    full_block = next(layer for layer in full if layer.name.startswith("layers"))
    saved = 4 * (s - w) * a * d * s / 1e6  # A = 4 keys a d FLOPs a token, s tokens
    windows = shape.windows
    expanded = blocks if len(blocks) == shape.layers else blocks * shape.layers
    for block, window in zip(expanded, windows):
        if window:
            assert full_block.t_f - block.t_f == pytest.approx(saved, abs=2e-3)
            assert full_block.t_b - block.t_b == pytest.approx(2.5 * saved, abs=2e-3)
        else:
            assert (block.t_f, block.t_b) == (full_block.t_f, full_block.t_b)
        assert (block.t_w, block.m_b, block.m_w, block.static) == \
            (full_block.t_w, full_block.m_b, full_block.m_w, full_block.static)
    # a model whose blocks all have the window stays one counted layer; a mixed one is
    # written block by block, named as the model's modules
    if all(windows):
        assert len(blocks) == 1 and blocks[0].count == shape.layers
    else:
        assert [b.name for b in blocks] == [f"layers.{i}" for i in range(shape.layers)]


def test_llama4s_chunked_blocks_are_those_its_model_masks_by_chunk(tmp_path):
    """llama4's text model takes each block's mask from config.layer_types, which transformers
    derives from no_rope_layers: "chunked_attention" blocks see only their chunk."""
    pytest.importorskip("transformers")
    from zbopt.hf_config import read_config
    data = {"model_type": "llama4_text", **SMALL, "num_hidden_layers": 8, "head_dim": 32,
            "intermediate_size_mlp": 256, "num_local_experts": 4, "num_experts_per_tok": 1,
            "attention_chunk_size": 64, "no_rope_layer_interval": 4}
    path = _write(tmp_path, data)
    types = read_config(path).layer_types
    assert set(types) == {"chunked_attention", "full_attention"}
    assert shape_from_config(path).windows == tuple(64 if kind == "chunked_attention" else 0
                                                    for kind in types)


def test_without_flash_attention_or_past_the_sequence_a_window_changes_nothing(tmp_path):
    shape = shape_from_config(_write(tmp_path, WINDOWED["gemma3_text"]))
    plain = shape_from_config(_write(tmp_path, {**WINDOWED["gemma3_text"],
                                                "sliding_window": None}))
    for sequence, flash in ((1024, False), (64, True), (32, True)):
        assert estimate_layers(shape, 1, sequence, ACCELERATOR, flash=flash) == \
            estimate_layers(plain, 1, sequence, ACCELERATOR, flash=flash)


def test_the_written_file_says_how_the_window_was_costed(tmp_path, capsys):
    path = _write(tmp_path, WINDOWED["gemma3_text"])
    for flag, said in (((), "costed as full attention"),
                       (("--flash-attention",), "its FLOPs counted over the window")):
        out = tmp_path / f"m{len(flag)}.toml"
        assert main(["estimate", str(path), "--seq-len", "1024", "--devices", "2",
                     "--out", str(out), *flag]) == 0
        comments = [line for line in out.read_text().splitlines() if line.startswith("#")]
        assert any(f"windowed attention (sliding or chunked, 64 tokens) on 5 of 6 blocks: "
                   f"{said}" in line
                   for line in comments)
