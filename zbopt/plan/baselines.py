"""The splits people use today, as partitions of a layered model.

A model's first layer is its input module (the embedding) and its last its output module (norm,
output layer, loss) when each is written as a single layer and blocks lie between them; the
other layers are the blocks.
- even: equal block counts per stage (the first stages take the remainder), the input module
  with the first stage and the output module with the last (Megatron's and torchtitan's default).
- torchtitan: torchtitan's weighted rule, the input and output modules each counted as one
  block: the effective count (blocks + 1 + 1) is spread evenly, the first stages taking the
  remainder, and the first and last stages hold one block fewer for their module.
"""

from __future__ import annotations

from typing import Optional

from ..layers import LayeredModel


def ends(model: LayeredModel) -> tuple[int, int]:
    """(1 if the model has an input module else 0, same for an output module)."""
    written = model.layers
    if model.num_layers < 3:
        return 0, 0
    head = 1 if written[0].count == 1 else 0
    tail = 1 if written[-1].count == 1 and len(written) > 1 else 0
    return head, tail


def _sizes(blocks_per_stage: list[int], head: int, tail: int) -> Optional[tuple[int, ...]]:
    sizes = list(blocks_per_stage)
    sizes[0] += head
    sizes[-1] += tail
    return tuple(sizes) if all(n >= 1 for n in sizes) else None


def even_split(model: LayeredModel) -> Optional[tuple[int, ...]]:
    """Equal block counts, input module first, output module last (None: a stage would be empty)."""
    head, tail = ends(model)
    stages, blocks = model.num_parts, model.num_layers - head - tail
    base, extra = divmod(blocks, stages)
    return _sizes([base + (1 if k < extra else 0) for k in range(stages)], head, tail)


def torchtitan_split(model: LayeredModel, input_weight: int = 1,
                     output_weight: int = 1) -> Optional[tuple[int, ...]]:
    """torchtitan's weighted rule (None where torchtitan refuses the configuration)."""
    head, tail = ends(model)
    stages, blocks = model.num_parts, model.num_layers - head - tail
    if stages == 1:
        return (model.num_layers,)
    in_w, out_w = input_weight * head, output_weight * tail
    effective = blocks + in_w + out_w
    per, extra = divmod(effective, stages)
    if per == 0 or in_w > per or out_w > per:
        return None
    counts, left = [], blocks
    for k in range(stages):
        want = per + (1 if k < extra else 0)
        if k == 0:
            want -= in_w
        elif k == stages - 1:
            want -= out_w
        take = min(want, left)  # torchtitan stops adding blocks when they run out
        counts.append(take)
        left -= take
    if left:
        return None
    return _sizes(counts, head, tail)


BASELINES = {"even": even_split, "torchtitan": torchtitan_split}


def default_split(model: LayeredModel) -> tuple[tuple[int, ...], str]:
    """(sizes, how they were chosen): the split every command but `plan` evaluates a layered
    model on, the even split, else (a stage would hold a module alone) equal layer counts."""
    from ..layers import even_partition
    sizes = even_split(model)
    if sizes is not None:
        return sizes, ("the even split (equal block counts, input and output modules with the "
                       "first and last stages)")
    return even_partition(model), "equal layer counts per stage"
