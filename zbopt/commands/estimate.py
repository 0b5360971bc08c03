"""zbopt estimate CONFIG: a layered model from a transformers config and accelerator figures."""

from __future__ import annotations

from pathlib import Path

from ._common import byte_count, check_output, defer_note, nonempty, positive_int, print_json


def register(sub) -> None:
    parser = sub.add_parser("estimate", help="estimate a layered model from a transformers "
                                             "config.json (no hardware, nothing downloaded)")
    parser.add_argument("config", nargs="?",
                        help="a transformers config.json, its directory, or a .toml with the same keys")
    parser.add_argument("--hf-config", metavar="FILE",
                        help="the same config given as `zbopt profile` takes it (instead of CONFIG)")
    parser.add_argument("--microbatch-size", type=positive_int, default=1, metavar="B",
                        help="sequences per micro-batch (default 1)")
    parser.add_argument("--seq-len", type=positive_int, default=4096, metavar="S",
                        help="sequence length in tokens (default 4096)")
    parser.add_argument("--devices", type=positive_int, default=8, metavar="P", help="pipeline devices (default 8)")
    parser.add_argument("--microbatches", type=positive_int, default=32, metavar="M",
                        help="micro-batches per iteration (default 32)")
    parser.add_argument("--peak-flops", type=float, default=312e12,
                        help="peak FLOP/s of one device (default 312e12, A100 bf16)")
    parser.add_argument("--efficiency", type=float, default=0.5,
                        help="fraction of the peak reached (default 0.5)")
    parser.add_argument("--hbm-bytes", "--mem", dest="hbm_bytes", type=cap_bytes, default=None,
                        metavar="CAP",
                        help="memory of one device in bytes (80e9, 80GB, 16GiB): the cap written "
                             "into the model, as profile's and plan's --mem (default none)")
    parser.add_argument("--link-bandwidth", type=float, default=100e9,
                        help="bytes/s between neighbouring stages (default 100e9)")
    parser.add_argument("--optimizer-bytes", type=float, default=16,
                        help="static bytes per parameter: weights, gradients, optimizer state "
                             "(default 16, mixed-precision Adam)")
    parser.add_argument("--flash-attention", action="store_true",
                        help="the attention kernel keeps no score matrix and recomputes it in "
                             "the backward (activations 34h + 4a a token instead of the paper's "
                             "34h + 5as)")
    parser.add_argument("--expert-parallel", type=positive_int, default=1, metavar="N",
                        help="a mixture of experts: N devices share each stage's routed experts, "
                             "each holding 1/N of them (default 1)")
    parser.add_argument("--expert-bandwidth", type=float, default=None,
                        help="with --expert-parallel, bytes/s of a device's all-to-all "
                             "(default: --link-bandwidth)")
    parser.add_argument("--name", default="", help="model name in the file")
    parser.add_argument("--out", metavar="FILE", help="write the layered model (.toml or .json)")
    parser.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    parser.add_argument("--json", action="store_true", help="print the layered model as JSON")
    parser.set_defaults(func=run)


# the provenance comment on a block's activations (plan reads it back to advise on a refusal)
PAPER_ACTIVATIONS = "activations: the Zero Bubble paper's 34h + 5as bytes a token a block"
FLASH_ACTIVATIONS = "activations: flash attention, 34h + 4a bytes a token a block"
STATIC_BYTES = "static: parameters x "  # then the bytes per parameter (--optimizer-bytes)


def cap_bytes(text: str) -> float | None:
    """An argparse type: a byte count (byte_count), or none for no cap."""
    return None if text.strip().lower() in ("none", "unlimited", "inf") else byte_count(text)


def run(args) -> int:
    from ..errors import ZboptError
    from ..estimate import Accelerator, estimate_model, shape_from_config
    if (args.config is None) == (args.hf_config is None):
        raise ZboptError("give the transformers config once: zbopt estimate config.json "
                         "(or --hf-config config.json)")
    config = args.config if args.config is not None else args.hf_config
    nonempty(config, "the config", "a transformers config.json or its directory")
    inputs = [config, Path(config) / "config.json"]  # a directory's config.json is read
    if args.out is not None:  # before any work, and never the config read
        check_output(args.out, args.force, (".toml", ".json"), "layered model", inputs)
    accelerator = Accelerator(peak_flops=args.peak_flops, efficiency=args.efficiency,
                              hbm_bytes=args.hbm_bytes, link_bandwidth=args.link_bandwidth,
                              expert_bandwidth=args.expert_bandwidth)
    if args.expert_bandwidth is not None and args.expert_parallel < 2:
        raise ZboptError("--expert-bandwidth times the all-to-all of --expert-parallel 2 or more: "
                         "give --expert-parallel N too, or leave it out")
    shape = shape_from_config(config, defer_note, args.expert_parallel)
    if args.devices > shape.layers + 2:  # the model's own message would not name the flag
        raise ZboptError(f"--devices {args.devices}: the model has {shape.layers + 2} layers "
                         f"({shape.layers} blocks, the embedding and the output layer) and every "
                         f"stage needs one: give --devices {shape.layers + 2} or fewer")

    def estimated(flash: bool):
        return estimate_model(shape, args.microbatch_size, args.seq_len, accelerator,
                              devices=args.devices, microbatches=args.microbatches,
                              optimizer_bytes=args.optimizer_bytes, name=args.name, flash=flash)

    model = estimated(args.flash_attention)
    if accelerator.hbm_bytes is not None:
        note_fit(model, None if args.flash_attention else lambda: estimated(True),
                 args.optimizer_bytes)
    if args.out:
        model.save(args.out, overwrite=args.force, inputs=inputs,
                   header=header(args, config, shape, accelerator))
    if args.json or not args.out:
        print_json(model.to_dict())
    else:
        print(f"wrote {args.out}: {model.num_layers} layers, p={model.devices} m={model.microbatches}")
    return 0


def header(args, config, shape, accelerator) -> str:
    """The provenance comments of a TOML file: what the estimate was made from and how."""
    import datetime

    from ..errors import escaped
    experts = shape.experts
    lines = [
        f"written by `zbopt estimate` on "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC from {config}",
        f"model_type {shape.model_type}: {shape.layers} blocks, hidden {shape.hidden:,}, "
        f"{shape.heads} heads, vocabulary {shape.vocab:,}",
        f"micro-batch {args.microbatch_size} x {args.seq_len} tokens; "
        f"{accelerator.peak_flops:g} FLOP/s x {accelerator.efficiency:g}, links "
        f"{accelerator.link_bandwidth:g} B/s",
        FLASH_ACTIVATIONS if args.flash_attention else PAPER_ACTIVATIONS,
        f"{STATIC_BYTES}{args.optimizer_bytes:g} bytes",
    ]
    if experts is not None:
        lines.append(
            f"mixture of experts: {experts.routed} experts, {experts.active} a token, "
            f"{sum(experts.sparse)} routed blocks, expert-parallel {experts.parallel}"
            + (f", all-to-all {accelerator.expert_bandwidth or accelerator.link_bandwidth:g} B/s"
               if experts.parallel > 1 else ""))
    if shape.windows:
        windows = sorted({w for w in shape.windows if w})
        lines.append(
            f"windowed attention (sliding or chunked, {' / '.join(f'{w:,}' for w in windows)} "
            f"tokens) on "
            f"{sum(1 for w in shape.windows if w)} of {shape.layers} blocks: "
            + ("its FLOPs counted over the window" if args.flash_attention else
               "costed as full attention (eager attention computes the whole score matrix; "
               "--flash-attention counts the window)"))
    lines.append("formulas: docs/planning.md, `zbopt estimate CONFIG`")
    return "".join(f"# {escaped(line)}\n" for line in lines) + "\n"


def note_fit(model, flash_model, optimizer_bytes: float) -> None:
    """A note when no split of `model` fits its cap, which plan would only refuse: when one of
    `flash_model()` (the same estimate with --flash-attention; None when it was given) does,
    the paper's s x s attention scores are what does not fit; else the note names the short
    device's static memory and the flags that lower it."""
    from ..plan.bound import least_excess_of
    from ..sizes import readable
    short, device, sizes = least_excess_of(model)
    if short <= 0:
        return
    unit = model.memory_unit
    cap = readable(model.memory_cap, unit)
    if flash_model is not None and least_excess_of(flash_model())[0] <= 0:
        defer_note(f"zbopt: note: no split fits --mem {cap} with the paper's activations, which "
                   f"keep the s x s attention scores (device {device} is "
                   f"{readable(short, unit)} short at best); with --flash-attention (a kernel "
                   f"that keeps no score matrix) splits fit")
        return
    static = model.with_settings(memory_cap=None).instance(sizes).static_memory[device]
    defer_note(f"zbopt: note: no split fits --mem {cap}, and plan would refuse the file: at best "
               f"device {device} is {readable(short, unit)} short, {readable(static, unit)} of "
               f"its memory static (parameters x --optimizer-bytes {optimizer_bytes:g}); give "
               f"more --devices, or the bytes a device keeps where data parallelism shards "
               f"them: --optimizer-bytes 16/N with FSDP over N ranks (not counting the "
               f"parameters it gathers), 4 + 12/N with the optimizer states alone sharded")
