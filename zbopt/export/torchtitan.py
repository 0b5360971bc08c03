"""torchtitan settings for a plan: the job-config keys that make torchtitan run its schedule CSV.

torchtitan (the pinned release, `TORCHTITAN_PIN`) reads a pipeline schedule from a CSV when
`parallelism.pipeline_parallel_schedule_csv` is set; the schedule name still decides how stages
map to ranks ("loop": rank r holds stages r, r+p, ...; "v": rank r holds r and 2p-1-r), so it
must imply the plan's placement. The number of micro-batches is
`training.local_batch_size // parallelism.pipeline_parallel_microbatch_size`, and
`parallelism.module_fqns_per_model_part[k]` lists the modules of pipeline stage k.

The fragment is written as TOML with one table per section of torchtitan's trainer config
(`[parallelism]`, `[training]`); `installed_key_problems()` checks every key against the installed
release's config classes, so a renamed key is caught rather than silently ignored.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..errors import ZboptError
from ..instance import Instance
from ..report.numbers import counted

TORCHTITAN_PIN = "0.3.0"
# section -> (config class in torchtitan.config, keys zbopt writes)
SECTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "parallelism": ("ParallelismConfig", (
        "pipeline_parallel_degree", "pipeline_parallel_schedule", "pipeline_parallel_schedule_csv",
        "pipeline_parallel_microbatch_size", "module_fqns_per_model_part",
        "expert_parallel_degree")),
    "training": ("TrainingConfig", ("local_batch_size",)),
}
# torchtitan splits top-level modules and the items of a top-level ModuleDict/ModuleList only
_FQN_RE = re.compile(r"^[A-Za-z_]\w*(\.\w+)?$")
# the top-level modules of the pinned release's decoder (torchtitan.models.common.decoder.Decoder:
# its llama3, qwen3, deepseek_v3 ... models); 0.2.x called lm_head "output"
DECODER_MODULES = ("tok_embeddings", "layers", "norm", "lm_head")


def schedule_class(instance: Instance) -> str:
    """A torchtitan schedule name whose stage-to-rank map is the plan's placement."""
    if instance.placement == "v":
        return "ZBVZeroBubble"
    if instance.placement == "interleaved":
        return "Interleaved1F1B"
    if instance.placement == "dualpipe":
        raise ZboptError("placement 'dualpipe' has no torchtitan form (two model copies in "
                         "opposite directions): plan a 'v' placement instead")
    return "1F1B"


@dataclass(frozen=True)
class TitanSettings:
    """Everything torchtitan needs besides the model to run one plan."""

    degree: int
    schedule: str
    csv_path: str
    microbatch_size: int
    local_batch_size: int
    microbatches: int
    module_fqns: tuple[tuple[str, ...], ...] | None
    notes: tuple[str, ...] = ()
    expert_parallel: int = 1  # the layered model's (zbopt estimate --expert-parallel)

    def job_config(self) -> dict[str, dict[str, Any]]:
        """{section: {key: value}} in torchtitan's names (see SECTIONS)."""
        parallelism: dict[str, Any] = {
            "pipeline_parallel_degree": self.degree,
            "pipeline_parallel_schedule": self.schedule,
            "pipeline_parallel_schedule_csv": self.csv_path,
            "pipeline_parallel_microbatch_size": self.microbatch_size,
        }
        if self.module_fqns is not None:
            parallelism["module_fqns_per_model_part"] = [list(part) for part in self.module_fqns]
        if self.expert_parallel > 1:
            parallelism["expert_parallel_degree"] = self.expert_parallel
        return {"parallelism": parallelism, "training": {"local_batch_size": self.local_batch_size}}

    def dotted(self) -> dict[str, Any]:
        """The same keys as `section.key` (torchtitan's command-line form)."""
        return {f"{section}.{key}": value for section, keys in self.job_config().items()
                for key, value in keys.items()}


def expert_note(experts: int, degree: int) -> str:
    """What a run of a plan estimated with expert parallelism needs of its ranks."""
    return (f"expert_parallel_degree {experts}, as the plan's costs were estimated (zbopt "
            f"estimate --expert-parallel): torchtitan takes the expert-parallel ranks from the "
            f"data-parallel (and tensor-parallel) ones of each pipeline rank, so start a multiple "
            f"of {degree} x {experts} = {degree * experts} ranks, with data_parallel_shard_degree "
            f"x context_parallel_degree x tensor_parallel_degree a multiple of {experts}")


def split_fqns(layer_names: Sequence[str]) -> tuple[str, ...]:
    """Module FQNs of a stage from its layer names ("norm+lm_head" is two modules)."""
    out = []
    for name in layer_names:
        for fqn in name.split("+"):
            fqn = fqn.strip()
            if not _FQN_RE.match(fqn):
                raise ZboptError(f"layer {name!r}: module name {fqn!r} cannot be split by "
                                 f"torchtitan, which keeps only top-level modules and the items "
                                 f"of a top-level ModuleDict/ModuleList (e.g. 'layers.3'): "
                                 f"{_what_to_do(fqn)}")
            out.append(fqn)
    return tuple(out)


# Hugging Face module names of the decoders zbopt profile knows: llama-shaped ones have a
# torchtitan naming (`zbopt profile --naming torchtitan`), gpt2-shaped ones do not
_HF_LLAMA = re.compile(r"^model\.(embed_tokens|layers\.\d+|norm)$")
_HF_GPT2 = re.compile(r"^transformer\.(wte|wpe|h\.\d+|ln_f)$")
_WITHOUT_TORCHTITAN = ("`zbopt export --torch-csv` (and verify-torch's default runtime), which "
                       "run the plan in PyTorch without torchtitan")


def _what_to_do(fqn: str) -> str:
    """What a plan whose module name torchtitan cannot split can do instead."""
    if _HF_LLAMA.match(fqn):
        return (f"these are Hugging Face names; profile the model again with --naming "
                f"torchtitan (tok_embeddings, layers.N, norm+lm_head) and re-plan, or use "
                f"{_WITHOUT_TORCHTITAN}")
    if _HF_GPT2.match(fqn):
        return (f"these are Hugging Face names of a gpt2-shaped model, for which zbopt has no "
                f"torchtitan naming (--naming torchtitan is for llama-shaped models): use "
                f"{_WITHOUT_TORCHTITAN}")
    return (f"name the layers after top-level modules (e.g. 'layers.3'), or use "
            f"{_WITHOUT_TORCHTITAN}")


# torchtitan pipelines only from this many ranks up (ParallelDims.pp_enabled is pp > 1)
PIPELINED_FROM = 2
NOT_PIPELINED = (f"torchtitan pipelines only from {PIPELINED_FROM} ranks up "
                 f"(pipeline_parallel_degree 1 turns pipelining off)")


def check_pipelined(devices: int, instead: str = "export --torch-csv") -> None:
    """ZboptError on one rank (NOT_PIPELINED: neither its schedule nor a CSV would run there).
    `instead`: the command that runs the schedule in PyTorch without torchtitan."""
    if devices < PIPELINED_FROM:
        raise ZboptError(f"the schedule runs on {counted(devices, 'device')}, and "
                         f"{NOT_PIPELINED}, so the schedule would not run: solve or plan for "
                         f"{PIPELINED_FROM} or more devices, or use `zbopt {instead}`")


def settings_for(instance: Instance, csv_path: str | Path,
                 stage_layers: Sequence[Sequence[str]] | None = None,
                 microbatch_size: int = 1) -> TitanSettings:
    """The settings of `instance`'s schedule in `csv_path`; stage_layers[k]: layer names of stage k."""
    check_pipelined(instance.devices)
    if microbatch_size < 1:
        raise ZboptError(f"--microbatch-size must be >= 1, got {microbatch_size}")
    name = schedule_class(instance)
    notes = []
    fqns = None
    if stage_layers is None:
        notes.append(
            f"the plan has no partition: set parallelism.module_fqns_per_model_part yourself "
            f"({counted(instance.num_stages, 'model part')}, "
            f"{instance.num_stages // instance.devices} per rank) or torchtitan splits the layers "
            f"evenly by its own rule")
    else:
        if len(stage_layers) != instance.num_stages:
            raise ZboptError(f"the plan's partition has {len(stage_layers)} stages but its "
                             f"schedule runs {instance.num_stages}: re-plan the model")
        fqns = tuple(split_fqns(names) for names in stage_layers)
        flat = [f for part in fqns for f in part]
        repeated = sorted({f for f in flat if flat.count(f) > 1})
        if repeated:
            raise ZboptError(f"module(s) {', '.join(repeated)} appear in more than one stage of "
                             f"the partition: each module belongs to one stage")
        foreign = sorted({f for f in flat if f.split(".")[0] not in DECODER_MODULES})
        if foreign:
            notes.append(
                f"module(s) {', '.join(foreign)} are not modules of torchtitan {TORCHTITAN_PIN}'s "
                f"decoder models ({', '.join(DECODER_MODULES)}): fine for a model of your own; "
                f"for torchtitan's models rename the layers (e.g. norm+lm_head)")
    return TitanSettings(degree=instance.devices, schedule=name, csv_path=str(csv_path),
                         microbatch_size=microbatch_size,
                         local_batch_size=instance.microbatches * microbatch_size,
                         microbatches=instance.microbatches, module_fqns=fqns,
                         notes=tuple(notes))


def toml_text(settings: TitanSettings, header: Sequence[str] = ()) -> str:
    """The job-config fragment as TOML (JSON strings and arrays of strings are valid TOML)."""
    lines = [f"# {line}" for line in header]
    lines += [f"# {note}" for note in settings.notes]
    for section, keys in settings.job_config().items():
        lines.append(f"\n[{section}]")
        for key, value in keys.items():
            if key == "module_fqns_per_model_part":
                parts = ",\n  ".join(json.dumps(part) for part in value)
                lines.append(f"{key} = [\n  {parts},\n]")
            else:
                lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines).lstrip("\n") + "\n"


def read_fragment(path: str | Path) -> dict[str, dict[str, Any]]:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise ZboptError(f"{path}: cannot read the torchtitan fragment: {err}") from None
    return data


# ----- the installed release -------------------------------------------------------------------


def installed_version() -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, version
        return version("torchtitan")
    except PackageNotFoundError:
        return None


def _trainer_sections() -> dict[str, str] | None:
    """{field: annotation} of torchtitan's Trainer.Config, read from its source (importing the
    trainer needs its data-loading dependencies, which the pipeline pieces do not)."""
    spec = importlib.util.find_spec("torchtitan.trainer")
    if spec is None or not spec.origin:
        return None
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Trainer":
            for inner in node.body:
                if isinstance(inner, ast.ClassDef) and inner.name == "Config":
                    return {item.target.id: ast.unparse(item.annotation) for item in inner.body
                            if isinstance(item, ast.AnnAssign)
                            and isinstance(item.target, ast.Name)}
    return None


def installed_key_problems() -> list[str]:
    """What the installed torchtitan lacks of the keys zbopt writes (empty: all present)."""
    try:
        import torchtitan.config as config
    except ImportError as err:
        return [f"torchtitan is not importable ({err})"]
    problems = []
    sections = _trainer_sections()
    for section, (class_name, keys) in SECTIONS.items():
        cls = getattr(config, class_name, None)
        if cls is None or not dataclasses.is_dataclass(cls):
            problems.append(f"torchtitan.config has no {class_name}")
            continue
        names = {f.name for f in dataclasses.fields(cls)}
        problems += [f"{section}.{key}" for key in keys if key not in names]
        if sections is not None and sections.get(section) != class_name:
            problems.append(f"[{section}] is not a {class_name} in torchtitan's Trainer.Config")
    return problems


def installed_decoder_modules() -> set[str] | None:
    """The modules the installed torchtitan's Decoder.__init__ assigns (`self.<name> = ...`),
    read from its source (importing it needs triton); None where torchtitan has no such class."""
    spec = importlib.util.find_spec("torchtitan")  # not the module's: its package imports it
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / "models" / "common" / "decoder.py"
    if not path.is_file():
        return None
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Decoder":
            for inner in node.body:
                if isinstance(inner, ast.FunctionDef) and inner.name == "__init__":
                    return {target.attr for item in ast.walk(inner)
                            if isinstance(item, ast.Assign) for target in item.targets
                            if isinstance(target, ast.Attribute)
                            and isinstance(target.value, ast.Name) and target.value.id == "self"}
    return None


def require_torchtitan() -> str:
    """The installed torchtitan's version; ZboptError if absent or without zbopt's keys."""
    found = installed_version()
    if found is None:
        raise ZboptError(f"this needs torchtitan: pip install 'zbopt[torchtitan]' "
                         f"(torchtitan=={TORCHTITAN_PIN})")
    problems = installed_key_problems()
    if problems:
        raise ZboptError(f"torchtitan {found} lacks {', '.join(problems)}: install "
                         f"torchtitan=={TORCHTITAN_PIN}")
    return found


# ----- the export ------------------------------------------------------------------------------

CSV_NAME = "schedule.csv"
TOML_NAME = "torchtitan.toml"


@dataclass(frozen=True)
class TitanExport:
    """The files of `zbopt export PLAN --torchtitan DIR`, not yet written."""

    directory: Path
    settings: TitanSettings
    texts: dict[Path, str]
    checked_against: str | None  # the torchtitan version whose config classes were checked


def titan_paths(directory: str | Path) -> list[Path]:
    """The files titan_export writes into `directory`: the CSV, its sidecar, the TOML."""
    from .torch_csv import sidecar_path
    csv_path = Path(directory) / CSV_NAME
    return [csv_path, sidecar_path(csv_path), Path(directory) / TOML_NAME]


def titan_export(loaded, directory: str | Path, microbatch_size: int | None = None,
                 stage_layers: Sequence[Sequence[str]] | None = None) -> TitanExport:
    """The CSV, its sidecar and the job-config fragment of a plan (or schedule) file; the
    plan's own partition unless `stage_layers` (layer names per stage) is given. The
    micro-batch size is the one the plan was profiled at unless `microbatch_size` is given
    (1 for a plan that records none)."""
    from .plan_parts import plan_experts, plan_model, stage_layer_names
    from .timing import profiled_microbatch_size
    from .torch_csv import torch_csv_texts

    directory = Path(directory)
    checked = installed_version()
    if checked is not None:
        problems = installed_key_problems()
        if problems:
            raise ZboptError(f"torchtitan {checked} lacks {', '.join(problems)}: install "
                             f"torchtitan=={TORCHTITAN_PIN}")
    instance, schedule = loaded.instance, loaded.schedule
    csv_path = directory / CSV_NAME
    if stage_layers is None:
        stage_layers = stage_layer_names(loaded)
    model = plan_model(loaded)
    profiled = profiled_microbatch_size(model)
    settings = settings_for(instance, csv_path, stage_layers, microbatch_size
                            if microbatch_size is not None else profiled or 1)
    experts = plan_experts(loaded)
    if experts > 1:
        settings = dataclasses.replace(settings, expert_parallel=experts, notes=settings.notes + (
            expert_note(experts, instance.devices),))
    if profiled is not None and microbatch_size is None:
        settings = dataclasses.replace(settings, notes=settings.notes + (
            f"micro-batches of {counted(profiled, 'row')}, the size the plan was profiled at "
            f"(--microbatch-size sets another)",))
    elif profiled is not None and microbatch_size != profiled:
        settings = dataclasses.replace(settings, notes=settings.notes + (
            f"micro-batches of {counted(microbatch_size, 'row')} (--microbatch-size), but the plan's costs "
            f"were profiled at {profiled}: its times and memory are not those of this run",))
    texts = torch_csv_texts(csv_path, instance, schedule, partition=loaded.meta.get("partition"),
                            source=loaded.meta.get("path"),
                            microbatch_size=settings.microbatch_size, expert_parallel=experts)
    header = [f"torchtitan job-config fragment for {schedule.method or 'a schedule'}: "
              f"{counted(instance.devices, 'rank')}, {counted(instance.num_stages, 'stage')}, "
              f"{counted(instance.microbatches, 'micro-batch')} (zbopt export --torchtitan)",
              f"keys of torchtitan {checked or TORCHTITAN_PIN}"
              + ("" if checked else " (not checked: torchtitan is not installed here)"),
              "the CSV path is relative to the directory torchtitan is started in"]
    texts[directory / TOML_NAME] = toml_text(settings, header)
    return TitanExport(directory, settings, texts, checked)


def write_titan_export(export: TitanExport, force: bool = False,
                       inputs: Sequence[str | Path] = ()) -> list[Path]:
    """Write the export's files (creating DIR if its parent exists), all or none."""
    from .outputs import write_all
    return write_all(export.texts, force, inputs, new_dirs=[export.directory])
