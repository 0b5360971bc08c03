"""zbopt estimate on mixtures of experts (mixtral, qwen2_moe, qwen3_moe, deepseek_v3, glm4_moe,
gpt_oss, llama4_text): every
block's parameters as transformers builds it, dense and routed blocks apart, the experts shared
out by --expert-parallel, FLOPs of the active experts only."""

import json
from pathlib import Path

import pytest
from cli_checks import refused

from zbopt.cli import main
from zbopt.estimate import Accelerator, estimate_layers, shape_from_config
from zbopt.layers import load_model

SMALL = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 4,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
         "max_position_embeddings": 512}
LATENT = {"q_lora_rank": 64, "kv_lora_rank": 32, "qk_rope_head_dim": 16, "qk_nope_head_dim": 16,
          "v_head_dim": 32, "n_group": 1, "topk_group": 1}
CONFIGS = {
    "mixtral": {"model_type": "mixtral", **SMALL, "num_local_experts": 4,
                "num_experts_per_tok": 2},
    "qwen2_moe": {"model_type": "qwen2_moe", **SMALL, "num_experts": 4, "num_experts_per_tok": 2,
                  "moe_intermediate_size": 64, "shared_expert_intermediate_size": 96,
                  "mlp_only_layers": [0]},
    "qwen2_moe-no-shared": {"model_type": "qwen2_moe", **SMALL, "num_experts": 4,
                            "num_experts_per_tok": 1, "moe_intermediate_size": 64,
                            "shared_expert_intermediate_size": 0},
    "qwen3_moe": {"model_type": "qwen3_moe", **SMALL, "num_experts": 8, "num_experts_per_tok": 2,
                  "moe_intermediate_size": 64, "head_dim": 32, "decoder_sparse_step": 2},
    "deepseek_v3": {"model_type": "deepseek_v3", **SMALL, **LATENT, "n_routed_experts": 4,
                    "num_experts_per_tok": 2, "moe_intermediate_size": 64,
                    "n_shared_experts": 1, "first_k_dense_replace": 1},
    "glm4_moe": {"model_type": "glm4_moe", **SMALL, "n_routed_experts": 4, "n_group": 1,
                 "topk_group": 1, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
                 "n_shared_experts": 1, "first_k_dense_replace": 1},
    "glm4_moe-qk-norm": {"model_type": "glm4_moe", **SMALL, "n_routed_experts": 4, "n_group": 1,
                         "topk_group": 1, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
                         "n_shared_experts": 2, "first_k_dense_replace": 2, "use_qk_norm": True,
                         "attention_bias": True, "head_dim": 64},
    "gpt_oss": {"model_type": "gpt_oss", **SMALL, "num_local_experts": 4, "num_experts_per_tok": 2,
                "head_dim": 32},
    # llama4's text model: a shared expert as wide as the routed ones, dense blocks of their
    # own width between routed ones (interleave_moe_layer_step), chunked attention
    "llama4_text": {"model_type": "llama4_text", **SMALL, "intermediate_size": 64,
                    "intermediate_size_mlp": 256, "head_dim": 32, "num_local_experts": 4,
                    "num_experts_per_tok": 1, "interleave_moe_layer_step": 2,
                    "attention_chunk_size": 64},
    "deepseek_v3-biases": {"model_type": "deepseek_v3", **SMALL, **LATENT, "q_lora_rank": None,
                           "attention_bias": True, "n_routed_experts": 4,
                           "num_experts_per_tok": 2, "moe_intermediate_size": 64,
                           "n_shared_experts": 2, "first_k_dense_replace": 2},
}


def _write(tmp_path, data):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return path


def _built(path):
    """(each block's parameters, the model's distinct parameters), as transformers builds the
    model from the config on the meta device (nothing downloaded, nothing allocated)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import AutoModelForCausalLM

    from zbopt.hf_config import read_config
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(read_config(path))
    base = model.base_model if hasattr(model.base_model, "layers") else model.model  # llama4
    blocks = [sum(p.numel() for p in block.parameters()) for block in base.layers]
    return blocks, sum({id(p): p.numel() for p in model.parameters()}.values())


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")  # no shared expert
@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_every_block_has_the_parameters_transformers_builds(tmp_path, family):
    path = _write(tmp_path, CONFIGS[family])
    blocks, total = _built(path)
    shape = shape_from_config(path)
    routed = shape.experts.sparse
    assert [shape.block_params(r) for r in routed] == blocks
    layers = estimate_layers(shape, 1, 64, Accelerator(), optimizer_bytes=1)
    assert sum(layer.static * layer.count for layer in layers) == total


def test_dense_and_routed_blocks_are_layers_of_their_own_named_as_in_the_model(tmp_path):
    shape = shape_from_config(_write(tmp_path, CONFIGS["qwen3_moe"]))  # every second block routed
    layers = estimate_layers(shape, 1, 64, Accelerator())
    blocks = layers[1:-1]
    assert [layer.name for layer in blocks] == ["layers.0", "layers.1", "layers.2", "layers.3"]
    dense, routed = blocks[0], blocks[1]
    assert blocks[2] == dense.__class__(**{**dense.__dict__, "name": "layers.2"})
    assert routed.static > dense.static and routed.t_f != dense.t_f
    mixtral = estimate_layers(shape_from_config(_write(tmp_path, CONFIGS["mixtral"])), 1, 64,
                              Accelerator())
    assert [(layer.name, layer.count) for layer in mixtral[1:-1]] == [("layers", 4)]


def test_time_follows_the_active_experts_and_memory_all_of_them(tmp_path):
    """Twice the experts at the same top-k: twice the experts' parameters held, the same
    expert FLOPs (only the router's grow); twice the top-k: the experts' FLOPs double."""
    base = {**CONFIGS["mixtral"], "num_hidden_layers": 1}
    one = shape_from_config(_write(tmp_path, base))
    more = shape_from_config(_write(tmp_path, {**base, "num_local_experts": 8}))
    wider = shape_from_config(_write(tmp_path, {**base, "num_experts_per_tok": 4}))
    h, f = one.hidden, one.experts.width
    assert more.block_params(True) - one.block_params(True) == 4 * (3 * h * f + h)
    assert more.block_matmul_flops(True) - one.block_matmul_flops(True) == 2 * 4 * h  # router
    assert wider.block_matmul_flops(True) - one.block_matmul_flops(True) == 2 * 2 * 3 * h * f
    assert wider.block_params(True) == one.block_params(True)


def test_expert_parallel_devices_share_out_the_routed_experts_and_wait_for_all_to_alls(tmp_path):
    path = _write(tmp_path, CONFIGS["deepseek_v3"])
    accelerator = Accelerator(expert_bandwidth=50e9)
    whole = estimate_layers(shape_from_config(path), 1, 64, accelerator, optimizer_bytes=1)
    shared = estimate_layers(shape_from_config(path, expert_parallel=4), 1, 64, accelerator,
                             optimizer_bytes=1)
    shape = shape_from_config(path)
    routed = shape.experts.routed_params(shape.hidden)
    # F and B: dispatch and combine, each the 2 active experts' bf16 copies of 64 tokens of
    # width 128, the 3/4 of them bound for the other devices, at 50 GB/s
    exchange = 2 * (2 * 128 * 2 * 3 / 4) * 64 / 50e9 * 1e6
    assert shared[1] == whole[1]  # layers.0: dense
    for a, b in zip(whole[2:-1], shared[2:-1]):
        assert a.static - b.static == routed * 3 / 4
        assert b.t_f - a.t_f == pytest.approx(exchange, abs=2e-3)
        assert b.t_b - a.t_b == pytest.approx(exchange, abs=2e-3)
        assert (a.t_w, a.m_b, a.m_w) == (b.t_w, b.m_b, b.m_w)


def test_a_routed_blocks_activations_replace_the_papers_mlp_part(tmp_path):
    shape = shape_from_config(_write(tmp_path, CONFIGS["qwen2_moe"]))
    s, h, a = 64, shape.hidden, shape.heads
    layers = estimate_layers(shape, 1, s, Accelerator())
    dense, routed = layers[1], layers[2]
    assert (dense.m_b, dense.m_w) == ((34 * h + 5 * a * s) * s, 32 * h * s)
    e, k, f, f_s = 4, 2, 64, 96
    assert routed.m_b == (15 * h + 5 * a * s + 2 * h + 4 * e + k * (4 * h + 6 * f) + 6 * f_s) * s
    assert routed.m_w == (12 * h + 2 * h + 4 * e + k * (4 * h + 6 * f) + 6 * f_s + 2 * h) * s


def test_estimate_writes_a_routed_model_that_plans(tmp_path, capsys):
    path = _write(tmp_path, CONFIGS["qwen3_moe"])
    out = tmp_path / "m.toml"
    assert main(["estimate", str(path), "--devices", "2", "--microbatches", "4",
                 "--expert-parallel", "2", "--out", str(out)]) == 0
    model = load_model(out)
    assert [layer.name for layer in model.layers][1:-1] == [f"layers.{i}" for i in range(4)]
    assert model.expert_parallel == 2  # for export --torchtitan (tests/test_torchtitan.py)
    comments = [line for line in out.read_text().splitlines() if line.startswith("#")]
    assert any("mixture of experts: 8 experts, 2 a token, 2 routed blocks, expert-parallel 2, "
               "all-to-all 1e+11 B/s" in line for line in comments)
    assert any("the Zero Bubble paper's 34h + 5as" in line for line in comments)
    capsys.readouterr()
    assert main(["plan", str(out), "--time-limit", "5", "--json", "--quiet"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["partition"]["sizes"] and sum(plan["partition"]["sizes"]) == 6


@pytest.mark.parametrize("config, flag, fragment", [
    ("mixtral", "3", "--expert-parallel 3 does not divide the 4 routed experts"),
    ("mixtral", "8", "--expert-parallel 8 does not divide the 4 routed experts"),
    ("dense", "2", "is a dense llama model, without experts to share out"),
])
def test_an_expert_parallel_degree_that_cannot_apply_is_refused(tmp_path, capsys, config, flag,
                                                                fragment):
    data = CONFIGS.get(config, {"model_type": "llama", **SMALL})
    out = tmp_path / "m.toml"
    line = refused(capsys, "estimate", _write(tmp_path, data), "--expert-parallel", flag,
                   "--out", out)
    assert fragment in line and not out.exists()


# instances/configs: published configs' sizes (the keys estimate reads), with their models'
# published totals (parameters, active per token: the embedding counted in the active parameters
# except for gpt-oss, whose card leaves it out)
CONFIG_DIR = Path(__file__).resolve().parents[1] / "instances" / "configs"
PUBLISHED = {"deepseek-v3": (671e9, 37e9), "mixtral-8x7b": (46.7e9, 12.9e9),
             "qwen3-30b-a3b": (30.5e9, 3.3e9), "gpt-oss-20b": (20.9e9, 3.6e9),
             "llama-4-maverick": (400e9, 17e9)}  # its text model (the 400B the card gives)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_models_come_to_their_published_sizes(name):
    total, active = PUBLISHED[name]
    shape = shape_from_config(CONFIG_DIR / f"{name}.json")
    routed = shape.experts.sparse
    counted = sum(shape.block_params(r) for r in routed) + shape.head_params() \
        + shape.vocab * shape.hidden
    used = sum(shape.block_matmul_flops(r) for r in routed) / 2 + shape.head_params() \
        + shape.vocab * shape.hidden * (name != "gpt-oss-20b")
    assert counted == pytest.approx(total, rel=0.003)
    assert used == pytest.approx(active, rel=0.03)


def test_an_expert_bandwidth_without_expert_parallel_is_refused(tmp_path, capsys):
    line = refused(capsys, "estimate", _write(tmp_path, CONFIGS["mixtral"]),
                   "--expert-bandwidth", "50e9")
    assert "give --expert-parallel N too" in line
    line = refused(capsys, "estimate", _write(tmp_path, CONFIGS["mixtral"]),
                   "--expert-parallel", "2", "--expert-bandwidth", "-1")
    assert "expert-bandwidth must be a positive number" in line


@pytest.mark.parametrize("family", ["qwen3_moe", "deepseek_v3"])
def test_profile_measures_the_static_memory_estimate_counts(tmp_path, capsys, family):
    """The same config profiled (parameters of the built model x 16 bytes) and estimated: the
    blocks, dense and routed, hold the same static memory."""
    pytest.importorskip("torch")
    path = _write(tmp_path, {**CONFIGS[family], "num_hidden_layers": 3})
    assert main(["profile", "--hf-config", str(path), "--seq-len", "8", "--warmup", "0",
                 "--repeat", "1", "--json"]) == 0
    measured = json.loads(capsys.readouterr().out)["model"]["layers"]
    assert main(["estimate", str(path), "--devices", "2", "--json"]) == 0
    estimated = json.loads(capsys.readouterr().out)["layers"]

    def blocks(layers):
        return sorted(s for layer in layers if ".layers" in f".{layer['name']}"
                      for s in [layer["static"]] * layer.get("count", 1))

    assert len(blocks(measured)) == 3
    assert blocks(measured) == blocks(estimated)
