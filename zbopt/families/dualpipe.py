"""DualPipe and DualPipeV (DeepSeek-V3): the per-rank 8-phase program of DeepSeek's step().

Both schedules give every device two *phases*, each one stage it runs every micro-batch of
that phase through:

- `dualpipe` (placement "dualpipe", p devices, two model copies): device r holds stage r of
  direction 0 (micro-batches 0..m/2-1, devices 0 -> p-1) and stage 2p-1-r of direction 1
  (micro-batches m/2..m-1, devices p-1 -> 0). Phase 0 is the direction in which the device sits
  nearer the start (direction 0 for r < p/2, direction 1 otherwise), at position
  h = min(r, p-1-r); phase 1 is the other one. Every phase carries m/2 micro-batches.
- `dualpipev` (placement "v", p devices, one copy cut in half): device r holds stage r (phase 0)
  and stage 2p-1-r (phase 1); all m micro-batches go down the V and back. It is DualPipe's
  program with p "half ranks", h = r and m micro-batches per phase.

The program of a device at position h among n half ranks, with M micro-batches per phase
(n = p/2, M = m/2 for dualpipe; n = p, M = m for dualpipev):

  1. 2(n-h-1) forwards of phase 0
  2. h+1 times: forward phase 0, forward phase 1
  3. n-h-1 times: B of phase 1 (W split out), that W, forward phase 1
  4. M-2n+h+1 times: overlapped [F phase 0 & full backward phase 1],
                     overlapped [F phase 1 & full backward phase 0]
  5. n-h-1 times: full backward phase 1, overlapped [F phase 1 & full backward phase 0]
  6. h+1 times: backward phase 1, backward phase 0; from the middle on these split W out
  7. n-h-1 times: the oldest pending W, B of phase 0 (W split out)
  8. h+1 times: the oldest pending W
Forwards and backwards of a phase take its micro-batches in order; split-out W passes run in
the order their B ran (DeepSeek's WeightGradStore is a FIFO queue). Step 4 needs M >= 2n, which
is DeepSeek's assertion m >= 2p (dualpipe, where p and m must be even too; dualpipev).

Overlap model: an overlapped pair is one item holding the F of one micro-batch and the full
backward (B then W) of another. As in the runtime, the block waits for the inputs of both,
then computes, and both results leave at its end; it lasts t_F + t_B + t_W less
`instance.overlap * min(t_F, t_B + t_W)` (overlap = 0, the default, runs the two back to back;
overlap = 1 hides the shorter one entirely).

The turning device (h = n-1: dualpipe's two middle ranks, dualpipev's last rank) is special in
DeepSeek's code: its first step-4 pair is not overlapped; it computes the F, then the full
backward, as two items (the default, `split_turn=True`, DeepSeek's order). `split_turn=False`
keeps that pair one overlapped block like the others instead (both results leave at its end
and the F waits for the backward's input): never better in our tests with comm = 0 (dualpipev
p=4, m=12, costs 3,4,2: span 240 split, 243 fused).

Bubble: with comm = 0 and `split_turn=False`, the seed table's DualPipe bubble
(n-1)(F&B + B - 3W) (B = the full backward t_B + t_W, F&B = the pair's duration) is
`span - ideal` of evaluate(): the longest device span less the busiest device's work
(e.g. p=8, m=20: 6 for unit costs, 21 for t_F, t_B, t_W = 2, 3, 1). It comes out exactly
whenever t_F <= t_B and t_W <= t_B (uniform per-stage costs, overlap 0); outside that regime
the formula, an estimate in DeepSeek's report, differs from what the order really leaves.
Every device does the same work when costs are uniform and all start at 0, so it is also
`makespan - ideal` and each device's `Timeline.idle`. Peak activation (m_w = 0, in units of
one stage's m_b): 2n + 1, i.e. p + 1 for dualpipe and 2p + 1 for dualpipev (the seed's PP + 1
with PP = 2p stages); dualpipe holds two copies of the parameters (2x), dualpipev one.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from ..errors import ZboptError
from ..instance import Instance
from ..registry import register
from ..schedule import Item, Schedule


@dataclass(frozen=True)
class Op:
    """One step of the 8-phase program, before micro-batches are assigned.

    kind: "F" (forward of `phase`), "B" (backward of `phase`; full unless `split`, then its W
    is queued), "W" (the oldest queued W), "FB" (overlapped F of `phase` and full backward of
    `other`).
    """

    kind: str
    phase: int = 0
    other: int = 0
    split: bool = False


def eight_phase_program(half_ranks: int, position: int, per_phase: int,
                        split_turn: bool = True) -> list[Op]:
    """The ops of the device at `position` (0..half_ranks-1) with `per_phase` micro-batches.

    split_turn: run the turning device's first step-4 pair as two items (see module doc).
    """
    n, h = half_ranks, position
    ops: list[Op] = []
    ops += [Op("F", 0)] * (2 * (n - h - 1))
    ops += [Op("F", 0), Op("F", 1)] * (h + 1)
    ops += [Op("B", 1, split=True), Op("W"), Op("F", 1)] * (n - h - 1)
    for i in range(per_phase - 2 * n + h + 1):
        if i == 0 and h == n - 1 and split_turn:
            ops += [Op("F", 0), Op("B", 1)]
        else:
            ops.append(Op("FB", 0, 1))
        ops.append(Op("FB", 1, 0))
    ops += [Op("B", 1), Op("FB", 1, 0)] * (n - h - 1)
    split = False
    for i in range(h + 1):
        # the second half of this phase splits W out, switching at the middle (odd h: before B1)
        if i == (h + 1) // 2 and h % 2 == 1:
            split = True
        ops.append(Op("B", 1, split=split))
        if i == (h + 1) // 2 and h % 2 == 0:
            split = True
        ops.append(Op("B", 0, split=split))
    ops += [Op("W"), Op("B", 0, split=True)] * (n - h - 1)
    ops += [Op("W")] * (h + 1)
    return ops


def realise(ops: list[Op], stages: tuple[int, int],
            microbatches: tuple[tuple[int, ...], tuple[int, ...]]) -> list[Item]:
    """Items from ops: phase k runs on stages[k] over microbatches[k], each kind in order."""
    next_f, next_b = [0, 0], [0, 0]
    pending_w: deque = deque()
    items: list[Item] = []

    def forward(phase: int):
        j = microbatches[phase][next_f[phase]]
        next_f[phase] += 1
        return (stages[phase], j, "F")

    def backward(phase: int):
        j = microbatches[phase][next_b[phase]]
        next_b[phase] += 1
        return (stages[phase], j, "B"), (stages[phase], j, "W")

    for op in ops:
        if op.kind == "F":
            items.append((forward(op.phase),))
        elif op.kind == "B":
            b, w = backward(op.phase)
            if op.split:
                items.append((b,))
                pending_w.append(w)
            else:
                items.append((b, w))
        elif op.kind == "W":
            items.append((pending_w.popleft(),))
        else:  # "FB": the F of one phase overlapped with the full backward of the other
            f = forward(op.phase)
            items.append((f, *backward(op.other)))
    if pending_w or next_f != next_b or any(n != len(mbs) for n, mbs in zip(next_f, microbatches)):
        # a bug here, not a user error: the program's step counts must use every micro-batch
        raise RuntimeError("the 8-phase program did not cover every pass")
    return items


def _check_split_turn(name: str, value: object) -> None:
    """split_turn must be a bool: a string such as "no" would otherwise count as true."""
    if not isinstance(value, bool):
        raise ZboptError(f"{name}: split_turn must be True or False, got {value!r}")


def _check_enough_microbatches(name: str, per_phase: int, half_ranks: int, need: str) -> None:
    if per_phase < 2 * half_ranks:
        raise ZboptError(f"{name} needs {need}: raise microbatches or lower devices")


@register("dualpipe", "dualpipe",
          "DualPipe (DeepSeek-V3): two directions, overlapped F&B pairs, 2x parameters",
          checks={"split_turn": _check_split_turn})
def dualpipe(instance: Instance, split_turn: bool = True) -> Schedule:
    _check_split_turn("dualpipe", split_turn)
    p, m = instance.devices, instance.microbatches
    if p % 2:
        raise ZboptError(f"dualpipe needs an even number of devices, got {p}: "
                         f"use an even devices count (or dualpipev)")
    if m % 2:
        raise ZboptError(f"dualpipe needs an even number of micro-batches, got {m}")
    _check_enough_microbatches("dualpipe", m // 2, p // 2,
                               f"microbatches >= 2 * devices = {2 * p}, got {m}")
    (down_stages, down_mbs), (up_stages, up_mbs) = instance.chains
    orders = []
    for r in range(p):
        # phase 0 is the direction in which device r is nearer the first stage
        down = (down_stages[r], down_mbs)
        up = (up_stages[p - 1 - r], up_mbs)
        first, second = (down, up) if r < p // 2 else (up, down)
        ops = eight_phase_program(p // 2, min(r, p - 1 - r), m // 2, split_turn)
        orders.append(tuple(realise(ops, (first[0], second[0]), (first[1], second[1]))))
    return Schedule(tuple(orders))  # realise() gives blocks of passes: nothing to convert


@register("dualpipev", "v",
          "DualPipeV: DualPipe cut in half on the V placement, one parameter copy",
          checks={"split_turn": _check_split_turn})
def dualpipev(instance: Instance, split_turn: bool = True) -> Schedule:
    _check_split_turn("dualpipev", split_turn)
    p, m = instance.devices, instance.microbatches
    _check_enough_microbatches("dualpipev", m, p,
                               f"microbatches >= 2 * devices = {2 * p}, got {m}")
    mbs = tuple(range(m))
    orders = [tuple(realise(eight_phase_program(p, r, m, split_turn), (r, 2 * p - 1 - r), (mbs, mbs)))
              for r in range(p)]
    return Schedule(tuple(orders))  # realise() gives blocks of passes: nothing to convert
