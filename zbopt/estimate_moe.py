"""What the estimate (zbopt.estimate) needs beyond a dense decoder block: a mixture-of-experts
MLP and DeepSeek's multi-head latent attention, read from a transformers config.

A routed MLP (Experts) has a router (h x E), E gated experts of width f (gate, up and down
matrices; gpt_oss's with biases, as its router), k of them active per token, and optionally
shared experts (width f_s in all; llama4's one as wide as a routed expert) that every token goes
through. Per token its forward FLOPs
are 2 x (hE + 3hfk + 3hf_s); its parameters are all E experts', of which an expert-parallel
group of N devices holds E / N on each device (the rest of the block is whole on each). With
N > 1 each pass of F and B waits for two all-to-alls (dispatch and combine): per token, the k
bf16 copies of the token that go to experts on the other N - 1 devices ((N - 1) / N of them),
at the all-to-all bandwidth; routing is taken as balanced and the exchange as not overlapped
with compute.

Activations follow the Zero Bubble paper's accounting of a block (bf16 tensors a pass keeps for
the backward), with its MLP part (19h from F to B, 20h from B to W of the paper's 34h and 32h)
replaced by the routed MLP's: from F to B the MLP's input (2h) and the router's fp32
probabilities (4E), per active expert its copy of the token (2h), the gate and up outputs and
their product (6f) and its output (2h, for the routing weight's gradient), and the shared
experts' 6f_s; from B to W, each matrix's input and output gradient: 2h + 4E for the router,
4h + 6f per active expert, 6f_s + 2h for the shared experts.

Latent attention (LatentAttention) compresses q (rank q_r, when set) and k, v (rank kv_r) and
splits each head's q and k into a rotary part r and the rest n; v has width v. Its matrices are
h x q_r + q_r x a(n + r) (or h x a(n + r)), h x (kv_r + r), kv_r x a(n + v) and av x h; its
attention FLOPs per token 2sa(n + r) + 2sav.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from .errors import ZboptError

# model types whose routed MLP the estimate models, with the config key of each's expert count
MOE_TYPES = {"mixtral": "num_local_experts", "qwen2_moe": "num_experts",
             "qwen3_moe": "num_experts", "deepseek_v3": "n_routed_experts",
             "glm4_moe": "n_routed_experts", "gpt_oss": "num_local_experts",
             "llama4_text": "num_local_experts"}


@dataclass(frozen=True)
class Experts:
    routed: int  # E
    active: int  # k: routed experts per token
    width: int  # f: each routed expert's width
    shared: int = 0  # f_s: the shared experts' width in all (0: none)
    shared_gate: bool = False  # qwen2_moe's gate on the shared expert (h -> 1, built always)
    sparse: tuple[bool, ...] = ()  # per block: a routed MLP (True) or the dense one
    parallel: int = 1  # expert-parallel devices sharing each stage's routed experts
    biases: bool = False  # gpt_oss: the router and every expert's matrices have biases

    def routed_params(self, hidden: int) -> int:
        per_expert = 3 * hidden * self.width + self.biases * (2 * self.width + hidden)
        return self.routed * per_expert

    def mlp_params(self, hidden: int) -> int:
        """The router's, every expert's and the shared experts' parameters."""
        router = (hidden + self.biases) * self.routed
        return (router + self.routed_params(hidden) + 3 * hidden * self.shared
                + hidden * self.shared_gate)

    def active_params(self, hidden: int) -> int:
        """The parameters one token's forward multiplies by (2 FLOPs each)."""
        return (hidden * self.routed + 3 * hidden * self.width * self.active
                + 3 * hidden * self.shared + hidden * self.shared_gate)

    def exchanged_bytes(self, hidden: int, element: int) -> float:
        """Bytes one device sends per token in one all-to-all: its copies for the k active
        experts, all but the share of them on the device itself."""
        return self.active * hidden * element * (1 - 1 / self.parallel)

    def activation_bytes(self, hidden: int) -> tuple[float, float]:
        """(from F to B, from B to W) per token of the routed MLP, in bytes (module doc)."""
        h, f, k, e = hidden, self.width, self.active, self.routed
        shared = 6.0 * self.shared
        # the router's input and probabilities (F to B), or input and output gradient (B to W),
        # and per active expert the same 4h + 6f both ways
        routed = 2.0 * h + 4.0 * e + k * (4.0 * h + 6.0 * f)
        return routed + shared, routed + (shared + 2.0 * h if shared else 0.0)


@dataclass(frozen=True)
class LatentAttention:
    q_rank: int  # 0: q is projected from h directly
    kv_rank: int
    rope: int  # r: the rotary part of a head's q and k
    nope: int  # n: the rest of a head's q and k
    value: int  # v: a head's value width
    bias: bool = False  # attention_bias: on the q and kv down-projections and o

    def matrix_params(self, hidden: int, heads: int) -> int:
        qk = heads * (self.nope + self.rope)
        q = hidden * self.q_rank + self.q_rank * qk if self.q_rank else hidden * qk
        kv = hidden * (self.kv_rank + self.rope) + self.kv_rank * heads * (self.nope + self.value)
        return q + kv + heads * self.value * hidden

    def vector_params(self, hidden: int) -> int:
        """The q and kv norms, and the biases when set."""
        norms = self.q_rank + self.kv_rank
        return norms + self.bias * (self.q_rank + self.kv_rank + self.rope + hidden)

    def score_flops(self, heads: int, sequence: int) -> float:
        """Forward attention FLOPs per token: the scores and the weighted sum."""
        return 2.0 * sequence * heads * (self.nope + self.rope + self.value)


def _positive(config: Any, key: str, path: str) -> int:
    value = getattr(config, key, None)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ZboptError(f"{path}: {key} must be a positive integer, got {value!r}")
    return value


def experts_from_config(config: Any, path: str, parallel: int = 1) -> Optional[Experts]:
    """The routed MLP of a MOE_TYPES config (None for a dense config); `parallel` devices hold
    each stage's routed experts between them."""
    kind = config.model_type
    if kind not in MOE_TYPES:
        return None
    layers = config.num_hidden_layers
    if kind in ("qwen2_moe", "qwen3_moe") and getattr(config, "num_experts", None) == 0:
        return None  # transformers builds every block dense
    count = _positive(config, MOE_TYPES[kind], path)
    active = _positive(config, "num_experts_per_tok", path)
    if active > count:
        raise ZboptError(f"{path}: num_experts_per_tok {active} is more than the {count} experts")
    if kind in ("mixtral", "gpt_oss"):
        width, shared, sparse = _positive(config, "intermediate_size", path), 0, [True] * layers
    elif kind == "llama4_text":  # a shared expert as wide as each routed one
        width = shared = _positive(config, "intermediate_size", path)
        routed = set(getattr(config, "moe_layers", None) or ())
        sparse = [i in routed for i in range(layers)]
    else:
        width = _positive(config, "moe_intermediate_size", path)
    if kind in ("qwen2_moe", "qwen3_moe"):
        step = _positive(config, "decoder_sparse_step", path)
        dense = set(getattr(config, "mlp_only_layers", None) or ())
        sparse = [i not in dense and (i + 1) % step == 0 for i in range(layers)]
        shared = (getattr(config, "shared_expert_intermediate_size", 0) or 0) \
            if kind == "qwen2_moe" else 0
    elif kind in ("deepseek_v3", "glm4_moe"):
        first = getattr(config, "first_k_dense_replace", 0) or 0
        sparse = [i >= first for i in range(layers)]
        shared = (getattr(config, "n_shared_experts", 0) or 0) * width
    if parallel > count or count % parallel:
        raise ZboptError(f"--expert-parallel {parallel} does not divide the {count} routed "
                         f"experts of {path}: give a divisor of {count}")
    return Experts(routed=count, active=active, width=width, shared=int(shared),
                   shared_gate=kind == "qwen2_moe", sparse=tuple(sparse),
                   parallel=parallel, biases=kind == "gpt_oss")


def latent_from_config(config: Any, path: str) -> Optional[LatentAttention]:
    """DeepSeek's latent attention (None for other model types)."""
    if config.model_type != "deepseek_v3":
        return None
    q_rank = getattr(config, "q_lora_rank", None) or 0
    return LatentAttention(q_rank=int(q_rank), kv_rank=_positive(config, "kv_lora_rank", path),
                           rope=_positive(config, "qk_rope_head_dim", path),
                           nope=_positive(config, "qk_nope_head_dim", path),
                           value=_positive(config, "v_head_dim", path),
                           bias=bool(getattr(config, "attention_bias", False)))
