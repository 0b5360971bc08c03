"""Transformers configs read from local files: one reader for `zbopt estimate` and `zbopt profile`.

A config is a config.json, a directory holding one, or a TOML file with the same keys; nothing
is downloaded. Only decoder-only language models pass (a causal-LM class in transformers, no
masked-LM class, not encoder-decoder) with positive sizes.
Every rejection is one ZboptError line naming the file and what to change; transformers' own
validation errors are reduced to their innermost cause's first line.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, Callable, Optional

from .errors import ZboptError, reason
from .instance import too_long_integer

# sizes every decoder config has (gpt2's n_embd, n_head, n_layer answer to these names too)
POSITIVE = ("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size")
# sizes some configs leave unset (None: derived from the others)
OPTIONAL = ("intermediate_size", "n_inner", "num_key_value_heads", "head_dim")
# the same sizes under gpt2's own names, as a config.json may spell them
ALIASES = ("n_embd", "n_head", "n_layer", "n_positions")
# the sizes that shape every decoder's layers
SIZES = (*POSITIVE, "intermediate_size")
# the expert count of a mixture-of-experts config, as model types name it (mixtral, gpt-oss;
# qwen2-moe; deepseek)
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
# sizes a file that leaves them out gets from transformers' defaults for its model_type (a
# llama config without them describes LLaMA-7B), which `note` names; a mixture of experts'
# sizes are absent from a dense model type's config, so never named for it
DEFAULTED = (*SIZES, *EXPERT_KEYS, "num_experts_per_tok", "moe_intermediate_size")


def require_transformers() -> None:
    try:
        import transformers
    except ImportError:
        raise ZboptError("transformers configs need transformers: pip install 'zbopt[hf]'") from None
    transformers.logging.set_verbosity_error()


def innermost_reason(err: BaseException) -> str:
    """zbopt.errors.reason of the innermost cause of `err` (transformers wraps its validators'
    errors)."""
    while err.__cause__ is not None:
        err = err.__cause__
    return reason(err)


def read_config(path: str | Path, note: Optional[Callable[[str], None]] = None) -> Any:
    """The transformers config of a decoder-only model (see the module doc). `note`, when
    given, is called with one line naming the sizes of DEFAULTED the file leaves to
    transformers' defaults, if any."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ZboptError(f"config file {path} not found: give a transformers config.json")
    try:
        text = path.read_text(encoding="utf-8-sig")  # a leading byte-order mark is skipped
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, tomllib.TOMLDecodeError) as err:
        raise ZboptError(f"{path}: not a readable config ({reason(err)})") from None
    except ValueError as err:  # Python's limit on the digits of an integer it reads
        raise too_long_integer(path, err) from None
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise ZboptError(f"{path}: no model_type: give a transformers config of a decoder-only "
                         f"model")
    require_transformers()
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )
    kind = data["model_type"]
    if kind not in CONFIG_MAPPING_NAMES:
        raise ZboptError(f"{path}: transformers does not know model_type {kind!r}: check its "
                         f"spelling (llama, gpt2, mistral, qwen2, ...)")
    if kind not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or kind in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        raise ZboptError(f"{path}: model_type {kind!r} is not a decoder-only language model: give "
                         f"the config of a causal LM (llama, gpt2, mistral, qwen2, ...)")
    settings = {k: v for k, v in data.items() if k != "model_type"}
    for key in (*POSITIVE, *OPTIONAL, *ALIASES):  # before transformers divides by them
        value = settings.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 1:
            raise ZboptError(f"{path}: {key} must be a positive integer, got {value!r}")
    try:
        config = AutoConfig.for_model(kind, **settings)
    except Exception as err:  # noqa: BLE001  transformers validates with many exception types
        raise ZboptError(f"{path}: transformers rejects this config: {innermost_reason(err)}") from None
    if getattr(config, "is_encoder_decoder", False):
        raise ZboptError(f"{path}: {kind!r} is an encoder-decoder model: give a decoder-only config")
    _refuse_wrapped(config, path, kind)
    for key in (*POSITIVE, *(k for k in OPTIONAL if getattr(config, k, None) is not None)):
        value = getattr(config, key, None)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ZboptError(f"{path}: {key} must be a positive integer, got {value!r}")
    if note is not None:
        unset = defaulted_sizes(settings, config)
        if unset:
            note(f"zbopt: note: {path} sets no " + ", ".join(f"{k} (so {v:,})" for k, v in unset)
                 + f": transformers' {kind} defaults; set them if the model differs")
    return config


def defaulted_sizes(settings: dict, config: Any) -> list[tuple[str, int]]:
    """The sizes of DEFAULTED that `settings` (a config file's keys) does not set, under
    either spelling (config.attribute_map: gpt2's n_embd for hidden_size), with the value
    transformers gave them; a size the model derives (None) is not listed."""
    aliases = getattr(config, "attribute_map", {}) or {}
    given = {aliases.get(key, key) for key in settings}  # the attributes the file sets
    named: dict[str, tuple[str, int]] = {}  # by the attribute stored: one size, one mention
    for key in DEFAULTED:
        stored = aliases.get(key, key)
        if stored not in given and stored not in named and getattr(config, key, None) is not None:
            # the common sizes under their usual names (gpt2's n_layer is num_hidden_layers),
            # an expert count under the model type's own (deepseek's n_routed_experts)
            shown = key if key in SIZES else stored
            named[stored] = (shown, getattr(config, key))
    return list(named.values())


def _refuse_wrapped(config, path: Path, kind: str) -> None:
    """A multimodal config (gemma3, mllama, llama4...) keeps its language model's sizes in a
    sub-config (text_config): refused naming that part, not for sizes the wrapper lacks."""
    text = getattr(config, "get_text_config", None)
    if text is None:  # transformers before get_text_config: the size checks below speak
        return
    try:
        text = text()
    except ValueError:  # several text parts (an encoder and a decoder)
        text = None
    if text is config:
        return
    inner = getattr(text, "model_type", None)
    part = f"its language model's config alone (the keys of its text_config, with model_type " \
           f"{inner!r})" if inner else "the config of a decoder-only language model"
    raise ZboptError(f"{path}: {kind!r} wraps its language model in a sub-config (a multimodal "
                     f"model): give {part}")
