"""PyTorch pipelining CSV (compute-only), both ways, plus the sidecar that says how to load it.

torch.distributed.pipelining's `_PipelineScheduleRuntime._load_csv` reads one row per rank, no
header, one action per cell, `{stage}{type}{microbatch}` with global stage indices. The row index
is the rank, and torch infers the stage-to-rank map from where each stage's actions appear.

Mapping (ours -> torch):
- a single F / B / W pass          -> `F` / `I` (backward input) / `W` (backward weight)
- a fused (B, W) block of one pass -> `B` (full backward)
- an overlapped block (an F with the backward of another pass) -> `(0F3;3B1)OVERLAP_F_B`, its
  sub-actions mapped as above (torch >= 2.9 parses this form; 2.13 runs the sub-actions in order)
Separate B and W items stay `I` and `W` even when adjacent: merging them into `B` would make the
input gradient leave only after W, which is a different (slower) schedule than the one evaluated.

Import maps back (torch `B` -> fused block) and ignores communication and FSDP actions
(SEND_*, RECV_*, UNSHARD, RESHARD, REDUCE_GRAD), so a compute+comms dump from torch's own
schedules can be evaluated too.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from ..dag import Pass
from ..errors import ZboptError, reason
from ..instance import Instance, require_instance, shown, too_long_integer
from ..report.numbers import counted
from ..schedule import Item, Schedule, format_item, require_schedule, structure_problems

# Lowest torch whose CSV runtime reads I (input grad) and B (full backward) unambiguously: the IR
# change is pytorch/pytorch#138886 (Oct 2024, in 2.6). The OVERLAP_F_B block form needs 2.9.
# Only VERIFIED_TORCH is actually run by the tests; the minimums come from torch's history.
MIN_TORCH = "2.6"
MIN_TORCH_OVERLAP = "2.9"
VERIFIED_TORCH = "2.13.0"

SIDECAR_FORMAT = "zbopt.torch-csv-sidecar/1"

_OURS_TO_TORCH = {"F": "F", "B": "I", "W": "W"}
_TORCH_TO_OURS = {"F": "F", "I": "B", "W": "W"}
_CELL_RE = re.compile(r"^(\d+)(F|I|B|W)(\d+)$")
_OVERLAP_RE = re.compile(r"^\((.*)\)OVERLAP_F_B$")
# Non-compute actions a compute+comms CSV may hold; they carry no cost in our model.
_SKIPPED_RE = re.compile(r"^\d+(SEND_F|RECV_F|SEND_B|RECV_B|UNSHARD|RESHARD|REDUCE_GRAD)\d*$")


def _require_pair(instance: Instance, schedule: Schedule, where: str) -> None:
    """ZboptError unless `instance` is an Instance and `schedule` a Schedule, naming a swap."""
    if isinstance(instance, Schedule) and isinstance(schedule, Instance):
        raise ZboptError(f"{where}: the instance and the schedule are swapped: give the "
                         f"instance first, then the schedule")
    require_instance(instance, where)
    require_schedule(schedule, where)


def _check_exportable(instance: Instance) -> None:
    """A dualpipe schedule has no CSV form (a dualpipe *plan* is refused before this, with
    plan_parts.NO_RUNTIME_FORM: re-plan it)."""
    if instance.placement == "dualpipe":
        raise ZboptError(
            "placement 'dualpipe' runs two model copies in opposite directions; PyTorch's CSV "
            "runtime has one chain of stages 0..S-1, so this schedule cannot be exported: "
            "export a 'v' placement schedule (e.g. DualPipeV) instead")


def _sub_actions(item: Item) -> list[str]:
    """The item's passes as torch actions, a B directly followed by W of the same pass fused."""
    out: list[str] = []
    i = 0
    while i < len(item):
        s, j, k = item[i]
        if k == "B" and i + 1 < len(item) and item[i + 1] == (s, j, "W"):
            out.append(f"{s}B{j}")
            i += 2
            continue
        out.append(f"{s}{_OURS_TO_TORCH[k]}{j}")
        i += 1
    return out


def item_to_cell(item: Item) -> str:
    """One item as one torch CSV cell (see the module doc); ZboptError if torch has no form."""
    actions = _sub_actions(item)
    if len(actions) == 1:
        return actions[0]
    kinds = {k for _, _, k in item}
    if "F" in kinds and kinds & {"B", "W"}:
        return "(" + ";".join(actions) + ")OVERLAP_F_B"
    raise ZboptError(f"block {format_item(item)} has no PyTorch form: torch runs a block only "
                     f"as a full backward (B,W of one pass) or an F overlapped with a backward")


def torch_rows(instance: Instance, schedule: Schedule) -> list[list[str]]:
    """Per rank (device), its torch actions in order."""
    _check_exportable(instance)
    problems = structure_problems(instance, schedule)
    if problems:
        raise ZboptError("cannot export an invalid schedule: " + "; ".join(problems))
    return [[item_to_cell(item) for item in order] for order in schedule.orders]


def csv_text(rows: Sequence[Sequence[str]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for row in rows:
        writer.writerow(row)
    return buffer.getvalue()


def uses_overlap(rows: Sequence[Sequence[str]]) -> bool:
    return any(cell.endswith("OVERLAP_F_B") for row in rows for cell in row)


def torchtitan_schedule_name(instance: Instance) -> str:
    """A torchtitan schedule name whose stage-to-rank split matches the placement."""
    from .torchtitan import schedule_class
    return schedule_class(instance)


def check_csv_name(csv_path: str | Path) -> Path:
    """The CSV's name ends in .csv, so its sidecar (`sidecar_path`) ends in .csv.json: a name
    such as `keep` would give the sidecar `keep.json`, the name of a schedule or plan file."""
    path = Path(csv_path)
    if path.suffix.lower() != ".csv":
        name = f"{path.stem}.csv" if path.stem.strip(".") else "schedule.csv"
        raise ZboptError(f"{csv_path}: give the CSV a name ending in .csv, such as {name} "
                         f"(its sidecar is then {name}.json)")
    return path


def sidecar_path(csv_path: str | Path) -> Path:
    """The sidecar of `s.csv` is `s.csv.json`: named after the whole CSV name, so it never
    takes the name of the schedule file the CSV came from (`s.json`)."""
    path = check_csv_name(csv_path)
    return path.with_name(path.name + ".json")


def sidecar(instance: Instance, schedule: Schedule, csv_path: str | Path,
            rows: Sequence[Sequence[str]] | None = None, partition: dict | None = None,
            source: str | Path | None = None, microbatch_size: int = 1,
            expert_parallel: int = 1) -> dict[str, Any]:
    """What a runtime needs besides the CSV: placement, micro-batches, torch and torchtitan
    settings (micro-batches of `microbatch_size` rows; the expert-parallel degree the plan's
    costs were estimated at); for a plan's CSV its `partition` (layers per stage: the split the
    CSV's stage costs come from, which `evaluate --torch-csv` checks) and the `source` file's
    name."""
    rows = rows if rows is not None else torch_rows(instance, schedule)
    p, v = instance.devices, instance.chunks
    notes = []
    if schedule.release is not None and any(schedule.release):
        notes.append("the schedule's per-device start offsets (release) have no CSV form: "
                     "torch starts every rank's next action as soon as its inputs arrive")
    if uses_overlap(rows):
        notes.append("torch's runtime runs an OVERLAP_F_B block's actions one after the other "
                     "unless a custom OVERLAP_F_B function is registered "
                     "(_PipelineScheduleRuntime.register_custom_function)")
    return {
        "format": SIDECAR_FORMAT,
        "csv": Path(csv_path).name,
        "method": schedule.method,
        "csv_format": "compute_only",
        "num_ranks": p,
        "num_stages": instance.num_stages,
        "stages_per_rank": v,
        "placement": instance.placement,
        "stage_to_rank": {str(s): instance.device_of(s) for s in range(instance.num_stages)},
        "rank_stages": {str(d): list(instance.stages_of(d)) for d in range(p)},
        "n_microbatches": instance.microbatches,
        "action_mapping": {"F": "forward", "I": "backward input (our B)",
                           "W": "backward weight (our W)", "B": "full backward (our fused B,W)",
                           "OVERLAP_F_B": "an F and a backward run as one block"},
        "min_torch_version": MIN_TORCH_OVERLAP if uses_overlap(rows) else MIN_TORCH,
        "verified_with_torch": VERIFIED_TORCH,
        "torch_runtime": ("torch.distributed.pipelining.schedules._PipelineScheduleRuntime("
                          f"stages, n_microbatches={instance.microbatches}, loss_fn=...)"
                          f"._load_csv(\"{Path(csv_path).name}\")"),
        "torchtitan": torchtitan_keys(instance, csv_path, microbatch_size, expert_parallel),
        "notes": notes,
        **_origin(partition, source),
    }


def _origin(partition: dict | None, source: str | Path | None) -> dict[str, Any]:
    """The sidecar's record of where the CSV came from: the schedule or plan file's name and a
    plan's split ({"sizes": layers per stage}); {} when neither is known."""
    out: dict[str, Any] = {}
    if source is not None:
        out["exported_from"] = Path(source).name
    sizes = partition.get("sizes") if isinstance(partition, dict) else None
    if isinstance(sizes, list):
        out["partition"] = {"sizes": list(sizes)}
    return out


def sidecar_split(csv_path: str | Path) -> tuple[list[int] | None, str]:
    """The plan split (layers per stage) and source file name the CSV's sidecar records;
    (None, "") when there is no sidecar or it records no split (a hand-made or foreign CSV,
    an export of a plain schedule file, or a sidecar from before zbopt recorded it). A sidecar
    that is there but does not read as one (not UTF-8, not JSON, another format, a split that
    is not layer counts) is refused in one line naming it: it may record a split, and the CSV
    judged on another would be judged on the wrong stage costs."""
    path = Path(csv_path)
    doc = sidecar_document(path)
    partition = doc.get("partition") if doc is not None else None
    if partition is None:
        return None, ""
    side = sidecar_path(path)
    sizes = partition.get("sizes") if isinstance(partition, dict) else None
    if not (isinstance(sizes, list) and sizes):
        raise _bad_sidecar(side, path, "records a partition that is not {\"sizes\": [layers "
                                       "per stage]}")
    for n in sizes:
        if not (isinstance(n, int) and not isinstance(n, bool) and 0 < n < 10**21):
            raise _bad_sidecar(side, path, f"records a split with {_brief(shown(n), 40)} "
                                           f"layers in a stage (a count of at least 1 is "
                                           f"needed)")
    source = doc.get("exported_from")
    return sizes, source if isinstance(source, str) else ""


def sidecar_document(csv_path: str | Path) -> dict | None:
    """The sidecar of the CSV at `csv_path` as its JSON object; None when there is none (or the
    name does not end in .csv); ZboptError (one line, naming it) when it does not read as one."""
    path = Path(csv_path)
    if path.suffix.lower() != ".csv":
        return None
    side = sidecar_path(path)  # after the suffix check: it refuses a name not ending in .csv
    return _read_sidecar(side, path) if side.is_file() else None


def sidecar_shape(csv_path: str | Path, instance: Instance) -> tuple[str, str]:
    """What the CSV's sidecar says the CSV was made for ("the v placement, 8 stages on 4 ranks,
    8 micro-batches") when that is not `instance`'s shape, and the name of the file it was
    exported from ("" when not recorded); ("", "") when there is no sidecar, or it agrees, or
    does not say."""
    doc = sidecar_document(csv_path) or {}
    source = doc.get("exported_from") if isinstance(doc.get("exported_from"), str) else ""
    shape = (doc.get("placement"), doc.get("num_stages"), doc.get("num_ranks"),
             doc.get("n_microbatches"))
    placement, stages, ranks, microbatches = shape
    if not (isinstance(placement, str) and all(isinstance(n, int) and not isinstance(n, bool)
                                               for n in shape[1:])):
        return "", ""
    if shape == (instance.placement, instance.num_stages, instance.devices,
                 instance.microbatches):
        return "", ""
    return shape_text(placement, stages, ranks, microbatches), source


def shape_text(placement: str, stages: int, ranks: int, microbatches: int) -> str:
    """"the v placement, 8 stages on 4 ranks, 8 micro-batches": a CSV's shape (as its sidecar
    records it, or an instance's) in a message."""
    return (f"the {_brief(placement)} placement, {shown(stages)} stages on {shown(ranks)} "
            f"ranks, {shown(microbatches)} micro-batches")


def _bad_sidecar(side: Path, csv_path: Path, what: str) -> ZboptError:
    return ZboptError(f"{side}: the sidecar of {csv_path.name} {what}: fix it, or remove it to "
                      f"evaluate the CSV as given")


def _read_sidecar(side: Path, csv_path: Path) -> dict:
    """The sidecar `side` of `csv_path` as its JSON object; ZboptError (one line, naming it)
    when it is not one."""
    try:
        doc = json.loads(side.read_bytes().decode("utf-8-sig"))
    except UnicodeDecodeError as err:
        raise _bad_sidecar(side, csv_path, f"is not text (byte {err.start} is not "
                                           f"UTF-8)") from None
    except OSError as err:
        raise _bad_sidecar(side, csv_path, f"cannot be read ({err.strerror})") from None
    except json.JSONDecodeError as err:
        raise _bad_sidecar(side, csv_path, f"is not valid JSON ({err.msg} at line "
                                           f"{err.lineno} column {err.colno})") from None
    except ValueError as err:  # Python refuses to read an integer of more than 4,300 digits
        raise too_long_integer(side, err) from None
    except RecursionError:
        raise _bad_sidecar(side, csv_path, "is nested too deeply to read") from None
    kind = doc.get("format") if isinstance(doc, dict) else None
    if kind != SIDECAR_FORMAT:
        got = f"it holds a JSON {type(doc).__name__}, not an object" \
            if not isinstance(doc, dict) else "it has no 'format' key" if kind is None \
            else f"its format is {_brief(shown(kind), 40)}"
        raise _bad_sidecar(side, csv_path, f"is not a {SIDECAR_FORMAT} file ({got})")
    return doc


def torchtitan_keys(instance: Instance, csv_path: str | Path, microbatch_size: int = 1,
                    expert_parallel: int = 1) -> dict[str, Any]:
    """The torchtitan job-config keys (command-line form) that run this CSV; on one rank only a
    note, as torchtitan does not pipeline there (zbopt.export.torchtitan.check_pipelined)."""
    from .torchtitan import NOT_PIPELINED, PIPELINED_FROM, expert_note, settings_for
    if instance.devices < PIPELINED_FROM:
        return {"note": f"{NOT_PIPELINED}: no keys run this CSV there"}
    settings = settings_for(instance, csv_path, stage_layers=None,
                            microbatch_size=microbatch_size)
    keys: dict[str, Any] = replace(settings, expert_parallel=expert_parallel).dotted()
    keys["note"] = (f"the model must be split into {instance.num_stages} stages "
                    f"({instance.chunks} per rank, parallelism.module_fqns_per_model_part; "
                    f"`zbopt export PLAN --torchtitan DIR` writes it for a plan); "
                    f"local_batch_size / pipeline_parallel_microbatch_size must equal "
                    f"{instance.microbatches} micro-batches"
                    + (f"; {expert_note(expert_parallel, instance.devices)}"
                       if expert_parallel > 1 else ""))
    return keys


def torch_csv_texts(path: str | Path, instance: Instance, schedule: Schedule,
                    with_sidecar: bool = True, partition: dict | None = None,
                    source: str | Path | None = None, microbatch_size: int = 1,
                    expert_parallel: int = 1) -> dict[Path, str]:
    """{path: text} of the CSV and (by default) its sidecar, nothing written; a plan's
    `partition`, the `source` file's name, the micro-batch size (rows) and the expert-parallel
    degree go into the sidecar (see `sidecar`)."""
    from .outputs import require_path
    path = require_path(path, "the torch CSV's path")
    _require_pair(instance, schedule, "write_torch_csv()")
    rows = torch_rows(instance, schedule)
    texts = {path: csv_text(rows)}
    if with_sidecar:
        doc = sidecar(instance, schedule, path, rows, partition, source, microbatch_size,
                      expert_parallel)
        texts[sidecar_path(path)] = json.dumps(doc, indent=1) + "\n"
    return texts


def write_torch_csv(path: str | Path, instance: Instance, schedule: Schedule,
                    force: bool = False, with_sidecar: bool = True,
                    partition: dict | None = None, source: str | Path | None = None
                    ) -> tuple[Path, Path | None]:
    """Write the CSV and (by default) its sidecar `sidecar_path(path)`, both or neither."""
    from .outputs import write_all
    texts = torch_csv_texts(path, instance, schedule, with_sidecar, partition, source)
    paths = write_all(texts, force=force)
    return paths[0], paths[1] if with_sidecar else None


# ----- import --------------------------------------------------------------------------------


def _parse_action(text: str, where: str) -> list[Pass]:
    match = _CELL_RE.match(text)
    if not match:
        raise ZboptError(f"{where}: bad cell {text!r}: write {{stage}}{{F|I|B|W}}{{microbatch}}, "
                         f"e.g. 0F1, or (0F3;3B1)OVERLAP_F_B")
    try:
        stage, kind, mb = int(match.group(1)), match.group(2), int(match.group(3))
    except ValueError as err:  # a stage or micro-batch of more than 4,300 digits
        raise too_long_integer(where, err) from None
    if kind == "B":  # torch's full backward is our fused block
        return [(stage, mb, "B"), (stage, mb, "W")]
    return [(stage, mb, _TORCH_TO_OURS[kind])]


def cell_to_item(text: str, where: str = "cell") -> Item | None:
    """One torch cell as our item; None for an empty or non-compute cell."""
    text = text.strip()
    if not text or _SKIPPED_RE.match(text):
        return None
    overlap = _OVERLAP_RE.match(text)
    if overlap:
        parts = [t.strip() for t in overlap.group(1).split(";") if t.strip()]
        if len(parts) < 2:
            raise ZboptError(f"{where}: bad cell {text!r}: an OVERLAP_F_B block needs two "
                             f"actions, e.g. (0F3;3B1)OVERLAP_F_B")
        return tuple(p for part in parts for p in _parse_action(part, where))
    return tuple(_parse_action(text, where))


def parse_torch_csv(text: str, instance: Instance, source: str = "CSV",
                    method: str = "") -> Schedule:
    """A torch compute-only (or compute+comms) CSV as a Schedule of `instance`, checked."""
    require_instance(instance, "parse_torch_csv()")
    _check_exportable(instance)
    text = text.removeprefix("\ufeff")  # a byte-order mark some editors write
    rows = [row for row in csv.reader(io.StringIO(text))]
    while rows and not any(c.strip() for c in rows[-1]):
        rows.pop()  # trailing blank lines
    if rows and _is_header(rows[0], len(rows) == instance.devices + 1):
        first = next(c.strip() for c in rows[0] if c.strip())
        raise ZboptError(f"{source}: line 1 (starting {_brief(first)!r}) is not a row of "
                         f"actions: remove the header; the CSV has one row per rank and no "
                         f"header")
    if len(rows) != instance.devices:
        raise ZboptError(f"{source}: {counted(len(rows), 'row')} but the instance has "
                         f"{instance.devices} devices: one row per rank is needed")
    orders: list[list[Item]] = []
    for rank, row in enumerate(rows):
        order: list[Item] = []
        for col, cell in enumerate(row):
            where = f"{source}: rank {rank}, column {col + 1}"
            item = cell_to_item(cell, where)
            if item is None:
                continue
            for stage, _, _ in item:
                if stage >= instance.num_stages:
                    raise ZboptError(f"{where}: unknown stage {stage} in {cell.strip()!r}, the "
                                     f"instance has stages 0..{instance.num_stages - 1}")
                if instance.device_of(stage) != rank:
                    raise ZboptError(
                        f"{where}: stage {stage} is on rank {rank} in the CSV but the instance "
                        f"({instance.placement} placement) puts it on device "
                        f"{instance.device_of(stage)}: use an instance with the CSV's placement")
            order.append(item)
        orders.append(order)
    schedule = Schedule.build(orders, method)
    problems = structure_problems(instance, schedule)
    if problems:
        raise ZboptError(f"{source}: " + "; ".join(problems))
    return schedule


def _is_header(row: Sequence[str], one_row_too_many: bool) -> bool:
    """A first line none of whose cells is an action (e.g. `rank,step0,step1`) is a header when
    the file has one row more than the ranks or no cell starts with a digit (as every action
    does); otherwise it is a row of mistyped actions, which the cell check names."""
    cells = [c.strip() for c in row if c.strip()]
    if not cells or not (one_row_too_many or not any(c[0].isdigit() for c in cells)):
        return False
    for cell in cells:
        try:
            cell_to_item(cell)
        except ZboptError:
            continue
        return False
    return True


def _brief(text: str, limit: int = 20) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _refuse_json(path: Path, text: str) -> None:
    """A JSON file given where the CSV belongs (its sidecar, a schedule file): say which file
    to give instead."""
    if not text.lstrip().startswith("{"):
        return
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return  # not JSON after all: the CSV reader says what is wrong
    except (ValueError, RecursionError):  # an integer of more than 4,300 digits, or nested
        doc = None  # deeper than the parser goes: JSON-like, and not a CSV either
    kind = doc.get("format") if isinstance(doc, dict) else None
    if kind == SIDECAR_FORMAT:
        name = doc.get("csv") if isinstance(doc.get("csv"), str) else ""
        csv_path = path.with_name(name) if name and Path(name).name == name else \
            path.with_name(path.name.removesuffix(".json"))
        raise ZboptError(f"{path}: this is the sidecar ({SIDECAR_FORMAT}), not the CSV: give "
                         f"{csv_path}")
    if isinstance(kind, str) and kind.startswith("zbopt.schedule/"):
        raise ZboptError(f"{path}: this is a schedule file, not a CSV: evaluate it as "
                         f"`zbopt evaluate {path}` (or export its CSV with `zbopt export "
                         f"{path} --torch-csv OUT.csv`)")
    raise ZboptError(f"{path}: this is a JSON file, not a PyTorch CSV: give the .csv file "
                     f"(one row of actions per rank)")


def read_torch_csv(path: str | Path, instance: Instance) -> Schedule:
    """The CSV at `path` as a Schedule of `instance`, checked (parse_torch_csv)."""
    if isinstance(path, Instance) and isinstance(instance, (str, Path)):
        raise ZboptError("read_torch_csv(): the path and the instance are swapped: give the "
                         "path first, then the instance")
    from .outputs import require_path
    path = require_path(path, "the torch CSV's path")
    require_instance(instance, "read_torch_csv()")
    text = torch_csv_text(path)
    return parse_torch_csv(text, instance, source=str(path), method=f"torch-csv:{path.name}")


def torch_csv_text(path: str | Path) -> str:
    """The text of the CSV at `path`, read once (a named pipe, /dev/stdin, reads as a file
    does); a directory, a missing file, bytes that are not UTF-8 or a JSON file given for the
    CSV (its sidecar, a schedule file) are refused in one line."""
    from .outputs import require_path
    path = require_path(path, "the torch CSV's path")
    if path.is_dir():
        raise ZboptError(f"{path} is a directory: give the torch CSV itself")
    if not path.exists():
        hint = " (to read standard input, give /dev/stdin)" if str(path) == "-" else ""
        raise ZboptError(f"torch CSV {path} not found{hint}")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ZboptError(f"{path}: cannot read it: {err.strerror}") from None
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark is not part of a cell
    except UnicodeDecodeError as err:
        raise ZboptError(f"{path}: not a text file (byte {err.start} is not UTF-8): give a "
                         f"PyTorch CSV") from None
    _refuse_json(path, text)
    return text


# ----- torch's own checks --------------------------------------------------------------------


def torch_check(rows: Sequence[Sequence[str]], num_stages: int, microbatches: int) -> None:
    """Run torch's `_validate_schedule` and `_add_send_recv` (which raises on a deadlocking
    order) over the rows; ZboptError with torch's first line if either rejects them.

    Needs torch (imported here, not at module import: torch is an optional extra).
    """
    try:
        from torch.distributed.pipelining import schedules as ts
    except ImportError as err:  # pragma: no cover - exercised only without torch
        raise ZboptError(f"this check needs torch (pip install 'zbopt[torch]'): {err}") from None
    actions = {rank: [ts._Action.from_str(c) for c in row] for rank, row in enumerate(rows)}
    ranks = len(rows)
    try:
        stage_to_rank = ts._validate_schedule(actions, ranks, num_stages, microbatches)
        compute = {rank: [a for a in acts if a is not None] for rank, acts in actions.items()}
        ts._add_send_recv(compute, stage_to_rank=lambda s: stage_to_rank[s],
                          num_stages=num_stages)
    except (AssertionError, RuntimeError, KeyError) as err:
        raise ZboptError(f"torch rejects the schedule: {reason(err)}") from None
