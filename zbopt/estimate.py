"""Estimate a layered model without hardware: from a transformers decoder config, the micro-batch
size, the sequence length and the accelerator's figures, the cost of every layer.

Per token and layer (h hidden, a heads, d head width (head_dim, else h / a), kv key/value heads,
f MLP width, V vocabulary, s sequence):
- time: FLOPs / (peak FLOP/s x efficiency). A block's forward is its matmuls M = 2 x (its weight
  count: q and o of h x ad each, k and v of h x kv d) plus attention A = 4s ad (scores and
  weighted sum); B (input gradient) is M + 2A (M + 2.5A with flash attention, which recomputes
  the scores), W (weight gradient) is M. The output layer (norm, projection to V, loss) is 2hV
  each pass; the embedding is a lookup (no FLOPs forward, no input gradient) and a scatter-add
  for W. With flash attention a block with a sliding window or attention chunk w < s
  (sliding_windows) has A = 4 w ad; eager attention computes and masks the whole s x s
  scores, so without the flag its A stays 4s ad.
- activations: a block holds the Zero Bubble paper's m_b = 34h + 5as bytes from F to B (34h +
  4a with flash attention: no score matrix, a log-sum-exp per head) and m_w = 32h from B to W.
  The output layer holds its input, the normed input and the fp32 logits for the loss (2h + 2h
  + 4V bytes) and keeps the normed input (2h) for W; the embedding keeps the token ids (8
  bytes).
- static: parameters x optimizer bytes per parameter (16: mixed-precision Adam).
A block's parameters are those transformers builds for the config's model type (BLOCKS: its MLP
gated, with gate_proj, up_proj and down_proj, or not, whatever the activation; its biases and
norms); a model type not in BLOCKS is refused rather than guessed.
Everything is multiplied by s x b tokens; times are in microseconds, memory in bytes.
Layer names follow the module names of torchtitan's decoder models (the pinned release):
"tok_embeddings", "layers.<i>", "norm+lm_head". The routed MLPs of the mixtures of experts in
zbopt.estimate_moe.MOE_TYPES (and deepseek_v3's latent attention) are costed by that module; a
config with experts of another model type is refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .errors import ZboptError
from .estimate_moe import MOE_TYPES, Experts, LatentAttention, experts_from_config, latent_from_config
from .hf_config import EXPERT_KEYS, read_config
from .instance import TooLarge
from .layers import MAX_LAYERS, Layer, LayeredModel

OPTIMIZER_BYTES = 16
# what to make smaller when the estimated totals pass zbopt's limit (TooLarge's kinds)
TOO_LARGE_FLAGS = {"time": "--microbatch-size, --seq-len or --microbatches, or a larger "
                           "--peak-flops",
                   "memory": "--microbatch-size, --seq-len, --microbatches or --optimizer-bytes"}
ACTIVATION_BYTES = 2  # bf16 activations crossing a stage boundary


@dataclass(frozen=True)
class BlockKind:
    """A model type's decoder block beyond its q, k, v, o and MLP matrices. A bias or q/k norm
    given as a string is the config key that switches it (absent: off)."""

    gated: bool  # gate_proj, up_proj and down_proj (three MLP matrices) rather than two
    norms: int = 2  # norms of width h per block
    norm_bias: bool = False  # LayerNorm (weight and bias) rather than RMSNorm (weight)
    qkv_bias: bool | str = "attention_bias"
    out_bias: bool | str = "attention_bias"
    mlp_bias: bool | str = False
    qk_norm: bool | str = False  # a norm on q and one on k
    qk_norm_full: bool = False  # those norms span all heads (q's and k's widths), not one head
    grouped_kv: bool = True  # k and v have num_key_value_heads heads
    head_bias: bool = False  # the output projection has a bias
    sinks: bool = False  # an attention sink (a learned logit) per head


# the decoder blocks of transformers' model types, as its modelling code builds them
_LLAMA = BlockKind(gated=True, mlp_bias="mlp_bias")
_LEARNED = BlockKind(gated=False, norm_bias=True, qkv_bias=True, out_bias=True, mlp_bias=True,
                     grouped_kv=False)
BLOCKS = {
    "llama": _LLAMA, "granite": _LLAMA,
    "mistral": BlockKind(gated=True),
    "qwen2": BlockKind(gated=True, qkv_bias=True, out_bias=False),
    "qwen3": BlockKind(gated=True, qk_norm=True),
    "gemma": BlockKind(gated=True),
    "gemma2": BlockKind(gated=True, norms=4),
    "gemma3_text": BlockKind(gated=True, norms=4, qk_norm=True),
    "phi3": BlockKind(gated=True, qkv_bias=False, out_bias=False),  # q, k, v and gate, up fused
    "olmo2": BlockKind(gated=True, qk_norm=True, qk_norm_full=True),
    "cohere": BlockKind(gated=True, norms=1, qk_norm="use_qk_norm", qk_norm_full=True),
    "starcoder2": BlockKind(gated=False, norm_bias=True, qkv_bias="use_bias", out_bias="use_bias",
                            mlp_bias="use_bias"),
    # mixtures of experts (zbopt.estimate_moe): their attention and dense MLP here
    "mixtral": BlockKind(gated=True),
    "qwen2_moe": BlockKind(gated=True, qkv_bias=True, out_bias=False),
    "qwen3_moe": BlockKind(gated=True, qk_norm=True),
    "deepseek_v3": BlockKind(gated=True, qkv_bias=False, out_bias=False),  # latent attention
    "glm4_moe": BlockKind(gated=True, out_bias=False, qk_norm="use_qk_norm"),
    "gpt_oss": BlockKind(gated=True, sinks=True),  # q, k, v, o biases on attention_bias
    # its q, k norm (use_qk_norm) is an L2 norm without weights
    "llama4_text": BlockKind(gated=True, out_bias="attention_bias"),
    "gpt2": _LEARNED,
    "gpt_neox": BlockKind(gated=False, norm_bias=True, mlp_bias=True, grouped_kv=False),
    "phi": BlockKind(gated=False, norms=1, norm_bias=True, qkv_bias=True, out_bias=True,
                     mlp_bias=True, qk_norm="qk_layernorm", head_bias=True),
}


@dataclass(frozen=True)
class Accelerator:
    """What the estimate needs to know of a device."""

    peak_flops: float = 312e12  # FLOP/s (A100 bf16 dense)
    efficiency: float = 0.5  # fraction of the peak the kernels reach
    hbm_bytes: float | None = None  # memory per device: the plan's cap
    link_bandwidth: float = 100e9  # bytes/s between neighbouring stages
    expert_bandwidth: float | None = None  # bytes/s of a device's all-to-all (None: the link's)

    def __post_init__(self) -> None:
        for key in ("peak_flops", "efficiency", "link_bandwidth", "expert_bandwidth"):
            value = getattr(self, key)
            if key == "expert_bandwidth" and value is None:
                continue
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ZboptError(f"{key.replace('_', '-')} must be a positive number, got {value!r}")
        if self.efficiency > 1:
            raise ZboptError(f"efficiency is a fraction in (0, 1], got {self.efficiency}")
        if self.hbm_bytes is not None and (not math.isfinite(self.hbm_bytes) or self.hbm_bytes <= 0):
            raise ZboptError(f"hbm-bytes must be a positive number, got {self.hbm_bytes!r}")


@dataclass(frozen=True)
class DecoderShape:
    """The shape of a decoder-only transformer, as the estimate needs it."""

    hidden: int
    heads: int
    kv_heads: int
    layers: int
    ffn: int
    vocab: int
    gated_mlp: bool  # three MLP matrices (LLaMA) rather than two (GPT-2)
    positions: int = 0  # learned position embeddings (GPT-2), 0 for rotary
    model_type: str = ""
    head_dim: int = 0  # the config's head_dim, 0: hidden / heads
    block_vectors: int = -1  # a block's bias and norm parameters; -1: two RMSNorms (2h)
    head_vectors: int = -1  # the final norm's and output bias's parameters; -1: an RMSNorm (h)
    experts: Optional[Experts] = None  # a mixture of experts' routed MLP
    latent: Optional[LatentAttention] = None  # DeepSeek's attention instead of q, k, v, o
    # per block the keys a query attends to under a sliding window or attention chunk, 0 for
    # full attention (sliding_windows); () for full attention everywhere
    windows: tuple[int, ...] = ()

    def head_width(self) -> int:
        return self.head_dim or self.hidden // self.heads

    def attention_params(self) -> int:
        """The weights of a block's attention matmuls."""
        if self.latent is not None:
            return self.latent.matrix_params(self.hidden, self.heads)
        q = self.head_width() * self.heads
        kv = self.head_width() * self.kv_heads
        return self.hidden * (q + 2 * kv) + q * self.hidden

    def block_matrix_params(self) -> int:
        """The weights of a dense block's matmuls: the attention's and the MLP."""
        return self.attention_params() + (3 if self.gated_mlp else 2) * self.hidden * self.ffn

    def block_params(self, routed: bool = False) -> int:
        """A block's parameters: a dense block, or (`routed`) one with the routed MLP."""
        vectors = 2 * self.hidden if self.block_vectors < 0 else self.block_vectors
        if not routed:
            return self.block_matrix_params() + vectors
        return self.attention_params() + self.experts.mlp_params(self.hidden) + vectors

    def block_static_params(self, routed: bool = False) -> float:
        """What one device holds of a block: a routed block's experts are shared out between
        the expert-parallel devices."""
        params = self.block_params(routed)
        if routed:
            experts = self.experts
            params -= experts.routed_params(self.hidden) * (1 - 1 / experts.parallel)
        return params

    def attention_flops(self, sequence: int) -> float:
        """Forward FLOPs per token of the attention scores and weighted sum, each query
        meeting `sequence` keys."""
        if self.latent is not None:
            return self.latent.score_flops(self.heads, sequence)
        return 4.0 * sequence * self.head_width() * self.heads

    def head_params(self) -> int:
        """The final norm and the output layer."""
        vectors = self.hidden if self.head_vectors < 0 else self.head_vectors
        return self.vocab * self.hidden + vectors

    def block_matmul_flops(self, routed: bool = False) -> float:
        """Forward matmul FLOPs per token (2 per weight a token meets, biases and norms
        ignored): a routed block's active experts only."""
        if not routed:
            return 2.0 * self.block_matrix_params()
        return 2.0 * (self.attention_params() + self.experts.active_params(self.hidden))


def shape_from_config(path: str | Path, note=None, expert_parallel: int = 1) -> DecoderShape:
    """The decoder shape of a transformers config (read locally, nothing downloaded); `note` as
    zbopt.hf_config.read_config's; `expert_parallel` devices share a stage's routed experts
    (a mixture of experts only)."""
    config = read_config(path, note)
    kind = config.model_type
    hidden, heads = config.hidden_size, config.num_attention_heads
    layers, vocab = config.num_hidden_layers, config.vocab_size
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    ffn = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * hidden
    if kind == "llama4_text":  # its dense blocks' MLP (intermediate_size is each expert's)
        ffn = getattr(config, "intermediate_size_mlp", None) or ffn
    positions = getattr(config, "n_positions", 0) if kind == "gpt2" else 0
    head_dim = getattr(config, "head_dim", None) or 0
    written = config.to_dict()  # the keys as the file has them (getattr also takes aliases)
    experts = {key: written.get(key, getattr(config, key, None)) for key in EXPERT_KEYS}
    experts = dict(sorted(experts.items(), key=lambda item: item[0] not in written))
    experts = {key: n for key, n in experts.items() if isinstance(n, int) and n > 1}
    if experts and kind not in MOE_TYPES:
        key, n = next(iter(experts.items()))
        raise ZboptError(f"{path}: {key} = {n}: estimate models the mixtures of experts of "
                         f"{', '.join(MOE_TYPES)}, not {kind!r}'s; write the layers' costs by "
                         f"hand (docs/formats.md) or profile them")
    block = BLOCKS.get(kind)
    if block is None:
        raise ZboptError(f"{path}: estimate knows the blocks of {', '.join(BLOCKS)}, not "
                         f"{kind!r}: write the layers' costs by hand (docs/formats.md) or "
                         f"profile them")
    if not block.grouped_kv:  # the model ignores num_key_value_heads
        kv_heads = heads
    if not head_dim and hidden % heads:
        raise ZboptError(f"{path}: hidden size {hidden} is not a multiple of the {heads} heads: "
                         f"fix the sizes or give head_dim")
    if layers + 2 > MAX_LAYERS:  # the embedding and the output layer come with the blocks
        raise ZboptError(f"{path}: num_hidden_layers {layers:,} makes more than zbopt's limit "
                         f"of {MAX_LAYERS:,} layers with the embedding and the output layer")
    if kv_heads > heads or heads % kv_heads:
        raise ZboptError(f"{path}: num_key_value_heads {kv_heads} must divide "
                         f"num_attention_heads {heads}")
    width = head_dim or hidden // heads
    block_vectors, head_vectors = _vectors(block, config, hidden, heads * width,
                                           int(kv_heads) * width, int(ffn), width, vocab)
    routed = experts_from_config(config, str(path), expert_parallel)
    if routed is None and expert_parallel > 1:
        raise ZboptError(f"--expert-parallel {expert_parallel}: {path} is a dense {kind} "
                         f"model, without experts to share out; leave the flag out")
    latent = latent_from_config(config, str(path))
    if latent is not None:
        block_vectors += latent.vector_params(hidden)
    windows = sliding_windows(config, layers)
    return DecoderShape(hidden=hidden, heads=heads, kv_heads=int(kv_heads), layers=layers,
                        ffn=int(ffn), vocab=vocab, gated_mlp=block.gated, positions=int(positions),
                        model_type=kind, head_dim=int(head_dim), block_vectors=block_vectors,
                        head_vectors=head_vectors, experts=routed, latent=latent,
                        windows=windows if any(windows) else ())


def sliding_windows(config, layers: int) -> tuple[int, ...]:
    """Per block the keys a query may attend to in transformers, 0 for the whole sequence:
    the blocks `layer_types` marks "sliding_attention" (gemma2, gemma3, gpt-oss, qwen2, qwen3,
    qwen2-moe) have `sliding_window`, those it marks "chunked_attention" (llama4's, a query
    seeing only its chunk) `attention_chunk_size`; every block of a model type without
    layer_types whose config sets `sliding_window` (mistral, mixtral, phi3, starcoder2,
    qwen3-moe) has that. Model types whose attention has no window have no such key."""
    def positive(key: str) -> int:
        value = getattr(config, key, None)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
            else 0

    sliding, chunk = positive("sliding_window"), positive("attention_chunk_size")
    types = getattr(config, "layer_types", None)
    if types is None:
        return (sliding,) * layers
    keys = {"sliding_attention": sliding, "chunked_attention": chunk}
    return tuple(keys.get(kind, 0) for kind in types)


def _vectors(block: BlockKind, config, hidden: int, q: int, kv: int, ffn: int, width: int,
             vocab: int) -> tuple[int, int]:
    """(a block's bias and norm parameters, the final norm's and output bias's)."""
    on = lambda flag: bool(getattr(config, flag, False)) if isinstance(flag, str) else flag  # noqa: E731
    norm = 2 if block.norm_bias else 1  # parameters per normed element
    vectors = block.norms * norm * hidden
    vectors += (q + 2 * kv) * on(block.qkv_bias) + hidden * on(block.out_bias)
    vectors += ((2 if block.gated else 1) * ffn + hidden) * on(block.mlp_bias)
    vectors += norm * (q + kv if block.qk_norm_full else 2 * width) * on(block.qk_norm)
    vectors += (q // width) * block.sinks  # one per head
    return vectors, norm * hidden + vocab * block.head_bias


def block_activation_bytes(hidden: int, heads: int, sequence: int,
                           flash: bool = False) -> tuple[float, float]:
    """(m_b, m_w) per token of one transformer block, in bytes: the Zero Bubble paper's
    34h + 5as and 32h; with a flash-attention kernel, which keeps no s x s score matrix (the
    5as: softmax output, dropout mask and output) but one fp32 log-sum-exp per head, 34h + 4a."""
    attention = 4.0 * heads if flash else 5.0 * heads * sequence
    return 34.0 * hidden + attention, 32.0 * hidden


def estimate_layers(shape: DecoderShape, microbatch: int, sequence: int, accelerator: Accelerator,
                    optimizer_bytes: float = OPTIMIZER_BYTES,
                    flash: bool = False) -> tuple[Layer, ...]:
    """The layers (embedding, the blocks, norm + output) with their costs: alike blocks as one
    counted layer, a mixture of experts' dense and routed blocks each as its own. `flash`: the
    attention kernel recomputes the scores in the backward instead of keeping them (activations
    as block_activation_bytes says, B's attention FLOPs 2.5A instead of 2A)."""
    if not isinstance(microbatch, int) or microbatch < 1:
        raise ZboptError(f"micro-batch size must be a positive integer, got {microbatch!r}")
    if not isinstance(sequence, int) or sequence < 1:
        raise ZboptError(f"sequence length must be a positive integer, got {sequence!r}")
    if not math.isfinite(optimizer_bytes) or optimizer_bytes < 0:
        raise ZboptError(f"optimizer bytes per parameter must be >= 0, got {optimizer_bytes!r}")
    tokens = microbatch * sequence
    h, vocab = shape.hidden, shape.vocab
    rate = accelerator.peak_flops * accelerator.efficiency / 1e6  # FLOPs per microsecond

    def us(flops_per_token: float) -> float:
        return _round(flops_per_token * tokens / rate)

    backward = 2.5 if flash else 2.0  # B's attention FLOPs per forward's A
    dense_b, dense_w = block_activation_bytes(h, shape.heads, sequence, flash)
    all_to_all = 0.0  # us per pass of a routed block: dispatch and combine, F and B alike
    if shape.experts is not None and shape.experts.parallel > 1:
        bandwidth = accelerator.expert_bandwidth or accelerator.link_bandwidth
        all_to_all = _round(2 * shape.experts.exchanged_bytes(h, ACTIVATION_BYTES) * tokens
                            / bandwidth * 1e6)

    def block(routed: bool, keys: int) -> dict:
        matmul = shape.block_matmul_flops(routed)
        attention = shape.attention_flops(keys)
        m_b, m_w = dense_b, dense_w
        exchange = 0.0
        if routed:  # the paper's MLP part (19h, 20h) replaced by the routed MLP's
            moe_b, moe_w = shape.experts.activation_bytes(h)
            m_b, m_w = m_b - 19.0 * h + moe_b, m_w - 20.0 * h + moe_w
            exchange = all_to_all
        return dict(t_f=_round(us(matmul + attention) + exchange),
                    t_b=_round(us(matmul + backward * attention) + exchange), t_w=us(matmul),
                    m_b=m_b * tokens, m_w=m_w * tokens,
                    static=float(shape.block_static_params(routed) * optimizer_bytes))

    routed = shape.experts.sparse if shape.experts is not None else (False,) * shape.layers
    kinds = tuple(zip(routed, attended_keys(shape, sequence, flash)))
    if len(set(kinds)) < 2:  # alike: one counted layer (expanded to layers.0, layers.1, ...)
        blocks = [("layers", shape.layers, block(*kinds[0]))]
    else:  # dense and routed, or windowed and full, blocks: each its own layer, as named
        per_kind = {kind: block(*kind) for kind in set(kinds)}
        blocks = [(f"layers.{i}", 1, per_kind[kind]) for i, kind in enumerate(kinds)]
    embedding_params = (vocab + shape.positions) * h
    output_params = shape.head_params()
    figures = (
        ("tok_embeddings", 1, dict(t_f=0.0, t_b=0.0, t_w=us(2.0 * h), m_b=8.0 * tokens,
                                   m_w=8.0 * tokens,
                                   static=float(embedding_params * optimizer_bytes))),
        *blocks,
        ("norm+lm_head", 1, dict(t_f=us(2.0 * h * vocab), t_b=us(2.0 * h * vocab),
                                 t_w=us(2.0 * h * vocab), m_b=(4.0 * h + 4.0 * vocab) * tokens,
                                 m_w=2.0 * h * tokens,
                                 static=float(output_params * optimizer_bytes))),
    )
    for name, _, values in figures:
        _check_finite(name, values)
    return tuple(Layer(name, count=count, **values) for name, count, values in figures)


def attended_keys(shape: DecoderShape, sequence: int, flash: bool) -> tuple[int, ...]:
    """Per block the keys each query's attention FLOPs count: the sliding window where a
    block has one shorter than the sequence and the kernel skips what it masks (flash
    attention); else the whole sequence (eager attention computes the whole score matrix and
    masks it)."""
    windows = shape.windows or (0,) * shape.layers
    return tuple(min(window, sequence) if flash and window else sequence for window in windows)


def _check_finite(name: str, values: dict) -> None:
    """Refuse figures beyond what a float holds: the flags that produced them are what to
    change (before Layer, which would only say the value is not finite)."""
    for key, value in values.items():
        if not math.isfinite(value):
            flags = ("--optimizer-bytes" if key == "static" else
                     "--peak-flops and --efficiency" if key.startswith("t_") else
                     "--microbatch-size and --seq-len")
            raise ZboptError(f"the estimate of {name}'s {key} overflows: give realistic {flags}")


def _check_figures(layers: tuple[Layer, ...], comm: float) -> None:
    """Refuse a comm time beyond what a float holds, or times so small every one rounds
    away."""
    if not math.isfinite(comm):
        raise ZboptError("the estimate of comm overflows: give a realistic --link-bandwidth")
    if all(getattr(layer, key) == 0 for layer in layers for key in ("t_f", "t_b", "t_w")):
        raise ZboptError("every estimated time rounds to 0 us: give realistic --peak-flops "
                         "and --efficiency")


def _round(x: float) -> float:
    # a microsecond to three decimals: exact solvers scale by a power of ten, keep it small
    return round(x, 3)


def estimate_model(shape: DecoderShape, microbatch: int, sequence: int, accelerator: Accelerator,
                   devices: int, microbatches: int, optimizer_bytes: float = OPTIMIZER_BYTES,
                   placement: str = "contiguous", name: str = "",
                   flash: bool = False) -> LayeredModel:
    """A layered model ready for `plan`: the layers, the comm time of one activation between
    stages, and the accelerator's memory as the cap."""
    layers = estimate_layers(shape, microbatch, sequence, accelerator, optimizer_bytes, flash)
    comm = _round(ACTIVATION_BYTES * shape.hidden * microbatch * sequence
                  / accelerator.link_bandwidth * 1e6)
    _check_figures(layers, comm)
    cap = accelerator.hbm_bytes
    if cap is not None:
        cap = int(cap) if float(cap).is_integer() else cap
    try:
        return LayeredModel(layers=layers, devices=devices, microbatches=microbatches,
                            placement=placement, comm=comm, memory_cap=cap,
                            name=name or f"{shape.model_type or 'decoder'}-{shape.layers}L",
                            time_unit="us", memory_unit="B",
                            expert_parallel=shape.experts.parallel if shape.experts else 1)
    except TooLarge as err:  # its advice, a larger unit, is not the user's to take here
        flags = TOO_LARGE_FLAGS[err.kind]
        raise ZboptError(f"the estimate is too large: {err.reason}: give smaller {flags}") \
            from None
