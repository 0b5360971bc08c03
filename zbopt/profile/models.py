"""The models `zbopt profile` measures, as ordered layers: a Hugging Face decoder config, a
shipped preset, or a user's `pkg.module:function`.

The `--module` contract: `function(microbatch_size=..., seq_len=...)` (it receives those of the
two keywords its signature names, or both if it takes **kwargs) returns a `ModelSpec`, or a pair
`(layers, make_input)` where `layers` is a sequence of `(name, nn.Module)` (or `LayerSpec`) in
model order and `make_input()` returns the first layer's input for one micro-batch. Each layer is
called with the previous layer's output and returns one tensor; the last one returns the loss (a
scalar) or a tensor whose gradient is taken as random, as a next stage would send it. Floating
parameters and a floating input are cast to --dtype and moved to the device. Layer names (and
groups) are printable text: a name becomes a module FQN downstream. Whatever the user's code
raises (SystemExit included) is reported in one line naming what raised it.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import ZboptError, described, escaped
from ..hf_config import innermost_reason, read_config, require_transformers

PRESETS = {
    "llama-tiny": "torchtitan",  # preset -> the layer naming it uses by default
    "gpt2-tiny": "hf",
}
NAMINGS = ("hf", "torchtitan")
# blocks a config may have (the largest public decoders have under 200): each is built and timed
MAX_BLOCKS = 1_000
# what user code may raise and profile reports in one line (SystemExit too: `sys.exit()` in a
# model file must not end zbopt silently with the model's status); KeyboardInterrupt stays Ctrl-C
USER_ERRORS = (Exception, SystemExit)
# torchtitan's llama3 module names (torchtitan >= 0.3 calls the output layer lm_head; 0.2.x output)
TORCHTITAN_NAMES = {"embedding": "tok_embeddings", "blocks": "layers", "head": "norm+lm_head"}


@dataclass(frozen=True)
class LayerSpec:
    """One layer to measure: its module FQN(s) and the module that runs it. Consecutive layers
    sharing a `group` may be written as one layer named `group` with a count."""

    name: str
    module: Any  # torch.nn.Module
    group: str = ""


@dataclass(frozen=True)
class ModelSpec:
    layers: tuple[LayerSpec, ...]
    make_input: Callable[[], Any]
    name: str = ""
    naming: str = ""  # how the layer names were chosen: "hf", "torchtitan" or "module"
    settings: dict = field(default_factory=dict)  # micro-batch size, sequence length, dtype


def preset_path(name: str) -> Path:
    if name not in PRESETS:
        raise ZboptError(f"unknown preset {name!r}: choose one of {', '.join(PRESETS)}")
    return Path(__file__).resolve().parents[1] / "data" / "models" / f"{name}.toml"


def _available_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def hf_model(config, microbatch_size: int, seq_len: int, dtype, device, naming: str = "hf",
             name: str = "", source: str = "config") -> ModelSpec:
    """The embedding, every decoder block and the final norm + output layer + loss of a
    transformers causal LM with random weights."""
    require_transformers()
    import torch
    from transformers import AutoModelForCausalLM

    from .wrappers import Block, Head, PositionalEmbedding

    if naming not in NAMINGS:
        raise ZboptError(f"unknown naming {naming!r}: choose {' or '.join(NAMINGS)}")
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    # a config built by hand (not by read_config) may lack a size: what it lacks counts as 0
    blocks = getattr(config, "num_hidden_layers", None) or 0
    hidden = getattr(config, "hidden_size", None) or 0
    if blocks > MAX_BLOCKS:  # checked before building: a huge count took minutes even unweighted
        raise ZboptError(f"{source}: {blocks:,} blocks; zbopt profile builds and times every "
                         f"block, at most {MAX_BLOCKS:,}: profile fewer (the blocks of a model "
                         f"are alike) or use zbopt estimate")
    element = torch.tensor([], dtype=dtype).element_size()
    # the embedding and a norm per block at least: a config far too big is refused unbuilt
    _refuse_if_too_big(((getattr(config, "vocab_size", None) or 0) + blocks) * hidden,
                       element, device, source, "at least ")
    with torch.device("meta"):  # shapes only: refuse a model that cannot fit before building it
        skeleton = _build(AutoModelForCausalLM, config, source)
    _refuse_if_too_big(sum(p.numel() for p in skeleton.parameters()), element, device, source)
    shape = _shape(skeleton.base_model)
    if shape is None:
        kids = ", ".join(n for n, _ in skeleton.base_model.named_children())
        raise ZboptError(f"{source}: {config.model_type!r} has modules {kids}; zbopt profile "
                         f"knows decoders shaped like llama (embed_tokens, layers, norm, "
                         f"rotary_emb) or gpt2 (wte, wpe, h, ln_f): use --module for others")
    if shape == "learned" and limit and seq_len > limit:
        raise ZboptError(f"--seq-len {seq_len} exceeds the model's {limit} positions")
    if naming == "torchtitan" and shape != "rotary":
        raise ZboptError(f"{source}: torchtitan naming is for llama-shaped models; use --naming hf")
    del skeleton
    torch.manual_seed(0)
    model = _build(AutoModelForCausalLM, config, source).to(device=device, dtype=dtype)
    model.train()
    base = model.base_model
    prefix = model.base_model_prefix
    fqn = {id(m): n for n, m in model.named_modules()}
    generator = torch.Generator().manual_seed(0)
    vocab = config.vocab_size
    ids = torch.randint(0, vocab, (microbatch_size, seq_len), generator=generator).to(device)
    labels = torch.randint(0, vocab, (microbatch_size, seq_len), generator=generator).to(device)
    head_module = model.get_output_embeddings()
    if shape == "rotary":
        positions = torch.arange(seq_len, device=device).unsqueeze(0)
        rope = _rotary_tables(base, config, seq_len, positions, dtype, device, source)
        embedding, embedding_names = base.embed_tokens, [f"{prefix}.embed_tokens"]
        blocks, block_group = base.layers, f"{prefix}.layers"
        norm = base.norm
        kwargs = [{"position_embeddings": rope(i), "position_ids": positions}
                  for i in range(len(blocks))]
    else:
        positions = torch.arange(seq_len, device=device).unsqueeze(0)
        embedding = PositionalEmbedding(base.wte, base.wpe, base.drop, positions)
        embedding_names = [f"{prefix}.wte", f"{prefix}.wpe"]
        blocks, block_group = base.h, f"{prefix}.h"
        norm = base.ln_f
        kwargs = [{} for _ in base.h]
    head_names = [fqn[id(norm)], fqn[id(head_module)]]
    names = {"embedding": "+".join(embedding_names), "blocks": block_group, "head": "+".join(head_names)}
    if naming == "torchtitan":
        names = dict(TORCHTITAN_NAMES)
    layers = [LayerSpec(names["embedding"], embedding)]
    layers += [LayerSpec(f"{names['blocks']}.{i}", Block(block, kwargs[i]), names["blocks"])
               for i, block in enumerate(blocks)]
    layers.append(LayerSpec(names["head"], Head(norm, head_module, labels)))
    return ModelSpec(layers=tuple(layers), make_input=lambda: ids, name=name or config.model_type,
                     naming=naming, settings=_settings(microbatch_size, seq_len, dtype))


def _rotary_tables(base, config, seq_len: int, positions, dtype, device, source: str):
    """block index -> the rotary tables its block takes, computed once as the model's forward
    does: one table, or one per layer type (gemma3's sliding and full attention layers)."""
    import torch
    probe = torch.zeros(1, seq_len, config.hidden_size, device=device, dtype=dtype)
    types = getattr(config, "layer_types", None)
    try:
        with torch.no_grad():
            if "layer_type" not in inspect.signature(base.rotary_emb.forward).parameters:
                rope = base.rotary_emb(probe, position_ids=positions)
                return lambda i: rope
            tables = {kind: base.rotary_emb(probe, positions, kind) for kind in set(types)}
            return lambda i: tables[types[i]]
    except USER_ERRORS as err:  # a rotary embedding called in a way zbopt does not know
        raise ZboptError(f"{source}: {config.model_type!r}: its rotary embedding cannot be "
                         f"computed as zbopt profile computes llama's ({described(err)}): use "
                         f"--module for this model") from None


def _refuse_if_too_big(count: int, element: int, device, source: str, least: str = "") -> None:
    """ZboptError when `count` parameters with their gradients would not fit in the memory
    available on the CPU."""
    need = count * element * 2  # weights and gradients
    free = _available_bytes()
    if device.type == "cpu" and free is not None and need > 0.8 * free:
        raise ZboptError(f"{source}: {least}{count:,} parameters need {need / 2**30:.1f} GiB with "
                         f"their gradients; {free / 2**30:.1f} GiB is available: profile a "
                         f"smaller config")


def _build(auto, config, source: str):
    """The model of `config`; a config transformers cannot build a model from is the user's to
    fix (one line naming its cause)."""
    try:
        return auto.from_config(config, attn_implementation="sdpa")
    except MemoryError:
        raise
    except Exception:  # noqa: BLE001  a model without an SDPA path, or a config it rejects
        pass
    try:  # eager attention (gemma2, whose SDPA path transformers refuses): the same matmuls
        return auto.from_config(config, attn_implementation="eager")
    except MemoryError:
        raise
    except Exception as err:  # noqa: BLE001  transformers fails on bad values in many ways
        raise ZboptError(f"{source}: transformers cannot build a {config.model_type!r} model "
                         f"from this config: {innermost_reason(err)}") from None


def _shape(base) -> str | None:
    kids = {n for n, _ in base.named_children()}
    if {"embed_tokens", "layers", "norm", "rotary_emb"} <= kids:
        return "rotary"
    if {"wte", "wpe", "h", "ln_f"} <= kids:
        return "learned"
    return None


def preset_model(name: str, microbatch_size: int, seq_len: int, dtype, device,
                 naming: str | None = None) -> ModelSpec:
    path = preset_path(name)
    config = read_config(path)
    return hf_model(config, microbatch_size, seq_len, dtype, device,
                    naming=naming or PRESETS[name], name=name, source=f"preset {name}")


def function_model(spec: str, microbatch_size: int, seq_len: int, dtype, device) -> ModelSpec:
    """The layers returned by `pkg.module:function` (or `path/file.py:function`)."""
    target, _, func_name = spec.rpartition(":")
    if not target or not func_name:
        raise ZboptError(f"--module {spec!r}: write pkg.module:function (or file.py:function)")
    try:
        module = _import(target)
    except USER_ERRORS as err:  # any import failure is the user's to fix
        raise ZboptError(f"--module {spec}: cannot import {target} ({described(err)})") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise ZboptError(f"--module {spec}: {target} has no function {func_name!r}")
    wanted = {"microbatch_size": microbatch_size, "seq_len": seq_len}
    try:
        params = inspect.signature(func).parameters
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            wanted = {k: v for k, v in wanted.items() if k in params}
        result = func(**wanted)
    except USER_ERRORS as err:  # the user's function failed
        raise ZboptError(f"--module {spec}: {func_name}() raised {described(err)}") from None
    model = _as_model_spec(result, spec)
    settings = _settings(microbatch_size, seq_len, dtype)
    for layer in model.layers:
        try:
            layer.module.to(device=device, dtype=dtype).train()
        except USER_ERRORS as err:
            raise ZboptError(f"--module {spec}: layer {layer.name!r} cannot be moved to {device} as "
                             f"{settings['dtype']} ({described(err)})") from None
    make_input = model.make_input

    def make_cast_input():
        try:
            x = make_input()
        except USER_ERRORS as err:
            raise ZboptError(f"--module {spec}: make_input() raised {described(err)}") from None
        try:
            if hasattr(x, "is_floating_point") and x.is_floating_point():
                return x.to(device=device, dtype=dtype)
            return x.to(device) if hasattr(x, "to") else x
        except USER_ERRORS as err:
            raise ZboptError(f"--module {spec}: make_input() returned a {type(x).__name__} that "
                             f"cannot be moved to {device} as {settings['dtype']} "
                             f"({described(err)})") from None

    # the model's name is a label (the file's `name`, a header comment): escaped, not refused
    return ModelSpec(model.layers, make_cast_input, name=escaped(model.name or spec), naming="module",
                     settings=settings)


def _settings(microbatch_size: int, seq_len: int, dtype) -> dict:
    return {"microbatch_size": microbatch_size, "seq_len": seq_len, "dtype": str(dtype).removeprefix("torch.")}


def _import(target: str):
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise FileNotFoundError(f"no file {target}")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    if os.getcwd() not in sys.path:  # as `python -m` would: the user's package in the cwd
        sys.path.insert(0, os.getcwd())
    return importlib.import_module(target)


def _as_model_spec(result: Any, spec: str) -> ModelSpec:
    from torch import nn
    if isinstance(result, ModelSpec):
        layers, make_input, name = result.layers, result.make_input, result.name
    elif isinstance(result, (tuple, list)) and len(result) == 2:
        (layers, make_input), name = result, ""
    else:
        raise ZboptError(f"--module {spec}: the function must return a ModelSpec or a pair "
                         f"(layers, make_input), got {type(result).__name__}")
    if not callable(make_input):
        raise ZboptError(f"--module {spec}: make_input must be callable")
    out: list[LayerSpec] = []
    for item in layers if isinstance(layers, Sequence) else ():
        layer = item if isinstance(item, LayerSpec) else (
            LayerSpec(*item) if isinstance(item, (tuple, list)) and len(item) in (2, 3) else None)
        if layer is None or not isinstance(layer.name, str) or not layer.name \
                or not isinstance(layer.module, nn.Module):
            raise ZboptError(f"--module {spec}: each layer is (name, nn.Module) with a non-empty "
                             f"name, got {item!r:.80}")
        if not isinstance(layer.group, str):
            raise ZboptError(f"--module {spec}: layer {layer.name!r}: its group (the name of the "
                             f"pooled layer) must be a string, got {type(layer.group).__name__}")
        for what, text in (("name", layer.name), ("group", layer.group)):
            if not text.isprintable():  # it becomes a module FQN, and a line of the file's header
                raise ZboptError(f"--module {spec}: layer {what} {text!r} has a control character "
                                 f"or line break: a layer's name is a module FQN, give a printable "
                                 f"{what}")
        out.append(layer)
    if not out:
        raise ZboptError(f"--module {spec}: no layers (give a non-empty list of (name, module))")
    names = [layer.name for layer in out]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ZboptError(f"--module {spec}: layer names must be unique; repeated: {', '.join(duplicates)}")
    if not isinstance(name, str):
        raise ZboptError(f"--module {spec}: the ModelSpec's name must be a string, got "
                         f"{type(name).__name__}")
    return ModelSpec(tuple(out), make_input, name=name)
