"""The runtime proof: exported CSVs run in real torch processes (CPU, gloo) and train correctly.

Starting torch processes dominates the cost, so the 2-rank schedules share one launch
(verify_many) in a module fixture; each case is then its own test.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from zbopt.cli import main  # noqa: E402
from zbopt.errors import ZboptError  # noqa: E402
from zbopt.export.schedule_file import write_schedule_file  # noqa: E402
from zbopt.export.torch_runtime import (  # noqa: E402
    DEFAULT_ATOL,
    ModelSpec,
    compare_outputs,
    reference,
    verify_many,
)
from zbopt.families import families, generate, prepare  # noqa: E402
from zbopt.instance import Instance  # noqa: E402
from zbopt.schedule import Schedule, evaluate, fused  # noqa: E402

COSTS = dict(t_f=2, t_b=2, t_w=1, comm=1, m_b=2, m_w=1)


def family_case(name: str, m: int) -> tuple[Instance, Schedule]:
    instance = prepare(families()[name], Instance(devices=2, microbatches=m, **COSTS))
    return instance, generate(name, instance)


def handmade_v() -> tuple[Instance, Schedule]:
    """A V order (device 0: stages 0 and 3, device 1: stages 1 and 2) with split B and W."""
    m = 3
    instance = Instance(devices=2, microbatches=m, placement="v", **COSTS)
    d0 = [(0, j, "F") for j in range(m)]
    for j in range(m):
        d0 += [(3, j, "F"), (3, j, "B"), (3, j, "W")]
    d0 += [p for j in range(m) for p in ((0, j, "B"), (0, j, "W"))]
    d1 = [(1, j, "F") for j in range(m)] + [(2, j, "F") for j in range(m)]
    d1 += [fused(2, j) for j in range(m)] + [fused(1, j) for j in range(m)]
    schedule = Schedule.build([d0, d1], method="handmade-v")
    evaluate(instance, schedule)  # the evaluator accepts it: a valid V schedule
    return instance, schedule


def cpsat_case():
    try:
        import zbopt.solvers.api  # noqa: F401  (solve() imports it lazily)
        from zbopt.solvers import solve
    except ImportError as err:
        return None, f"zbopt.solvers (CP-SAT) cannot be imported: {err}"
    instance = Instance(devices=2, microbatches=3, memory_cap="1p", **COSTS)
    result = solve(instance, solver="cpsat", time_limit=600)
    assert result.status == "optimal", result.message
    return (instance, result.schedule), ""


CASES = ["zb-h1", "cpsat", "zb-v", "handmade-v", "dualpipev", "interleaved-1f1b"]


@pytest.fixture(scope="module")
def proofs():
    runs, skipped = {}, {}
    runs["zb-h1"] = family_case("zb-h1", 4)
    runs["interleaved-1f1b"] = family_case("interleaved-1f1b", 4)
    runs["handmade-v"] = handmade_v()
    for name in ("zb-v", "dualpipev"):
        if name in families():
            runs[name] = family_case(name, 4)
        else:
            skipped[name] = f"family {name} is not registered"
    case, why = cpsat_case()
    if case is None:
        skipped["cpsat"] = why
    else:
        runs["cpsat"] = case
    names = list(runs)
    results = verify_many([runs[n] for n in names], timeout=120)
    return {n: (runs[n], r) for n, r in zip(names, results)}, skipped


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_exported_schedule_trains_like_the_reference(proofs, name):
    done, skipped = proofs
    if name in skipped:
        pytest.skip(skipped[name])
    (instance, schedule), result = done[name]
    assert result.ok, result.message
    assert result.ranks == 2 and result.num_stages == instance.num_stages
    assert result.parameters == 2 * instance.num_stages  # weight and bias of every stage
    assert result.max_grad_error <= DEFAULT_ATOL and result.max_loss_error <= DEFAULT_ATOL
    assert result.loss == pytest.approx(result.reference_loss, abs=DEFAULT_ATOL)


@pytest.mark.slow
def test_the_cases_cover_what_the_issue_asks(proofs):
    done, skipped = proofs
    placements = {name: inst.placement for name, ((inst, _), _) in done.items()}
    assert placements["handmade-v"] == "v"
    assert done["handmade-v"][0][0].num_stages == 4
    assert placements["interleaved-1f1b"] == "interleaved"
    if "dualpipev" in done:  # an overlapped F&B block really ran as torch's OVERLAP_F_B
        from zbopt.export.torch_csv import torch_rows
        (inst, sched), _ = done["dualpipev"]
        assert any("OVERLAP_F_B" in c for row in torch_rows(inst, sched) for c in row)


@pytest.mark.slow
def test_cli_verify_torch(tmp_path, capsys):
    instance, schedule = family_case("zb-h1", 2)
    path = write_schedule_file(tmp_path / "s.json", evaluate(instance, schedule))
    assert main(["verify-torch", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True and data["max_grad_error"] <= 1e-6 and data["parameters"] == 4
    # says it ran a stand-in, not the plan's model
    assert any(note.startswith("the model is zbopt's float64 stand-in (2 stages")
               for note in data["notes"])


# ----- without processes -----------------------------------------------------------------------


def _reference_outputs(spec: ModelSpec):
    losses, grads = reference(spec)
    return [{"losses": losses, "grads": dict(grads)}]


def test_compare_detects_a_wrong_gradient():
    spec = ModelSpec(num_stages=3, microbatches=2)
    outputs = _reference_outputs(spec)
    assert compare_outputs(spec, outputs, DEFAULT_ATOL).ok
    outputs[0]["grads"]["1.0.weight"] = outputs[0]["grads"]["1.0.weight"] + 1e-5
    found = compare_outputs(spec, outputs, DEFAULT_ATOL)
    assert not found.ok and found.worst_parameter == "1.0.weight"
    assert "1.0.weight differs" in found.message
    assert found.max_grad_error == pytest.approx(1e-5)
    outputs = _reference_outputs(spec)
    outputs[0]["grads"]["2.0.bias"] = outputs[0]["grads"]["2.0.bias"] + 1e-9  # within atol
    assert compare_outputs(spec, outputs, DEFAULT_ATOL).ok


def test_compare_detects_missing_gradients_and_losses():
    spec = ModelSpec(num_stages=2, microbatches=3)
    outputs = _reference_outputs(spec)
    del outputs[0]["grads"]["0.0.bias"]
    found = compare_outputs(spec, outputs, DEFAULT_ATOL)
    assert not found.ok and "no gradient for 0.0.bias" in found.message
    outputs = _reference_outputs(spec)
    outputs[0]["losses"] = outputs[0]["losses"][:2]
    found = compare_outputs(spec, outputs, DEFAULT_ATOL)
    assert not found.ok and "expected 3 micro-batch losses" in found.message
    outputs = _reference_outputs(spec)
    outputs[0]["losses"][1] += 1e-3
    found = compare_outputs(spec, outputs, DEFAULT_ATOL)
    assert not found.ok and found.max_loss_error == pytest.approx(1e-3)


def test_reference_is_the_mean_loss_gradient():
    """The reference differentiates the mean of the micro-batch losses (torch's scale_grads)."""
    spec = ModelSpec(num_stages=2, microbatches=4, hidden=3)
    losses, grads = reference(spec)
    from zbopt.export.torch_runtime import build_batch, build_model
    stages = build_model(spec)
    x, y = build_batch(spec)
    loss = torch.nn.functional.mse_loss(stages[1](stages[0](x)), y)  # equal micro-batches
    loss.backward()
    assert sum(losses) / len(losses) == pytest.approx(loss.item(), abs=1e-12)
    assert torch.allclose(grads["0.0.weight"], stages[0][0].weight.grad, atol=1e-12)


def test_verify_refuses_what_torch_cannot_run():
    instance = Instance(devices=2, microbatches=2)
    deadlock = Schedule.build([["0F0", "0B0", "0W0", "0F1", "0B1", "0W1"],
                               ["1F1", "1B1", "1W1", "1F0", "1B0", "1W0"]])
    with pytest.raises(ZboptError, match="torch rejects"):
        verify_many([(instance, deadlock)])
    with pytest.raises(ZboptError, match="one number of devices"):
        verify_many([family_case("zb-h1", 2),
                     (Instance(devices=3, microbatches=3),
                      generate("zb-h1", Instance(devices=3, microbatches=3)))])


def test_cli_verify_torch_refuses_dualpipe(tmp_path, capsys):
    if "dualpipe" not in families():
        pytest.skip("no dualpipe family registered")
    instance = Instance(devices=2, microbatches=4, placement="dualpipe")
    path = write_schedule_file(tmp_path / "d.json",
                               evaluate(instance, generate("dualpipe", instance)))
    assert main(["verify-torch", str(path)]) == 2
    err = capsys.readouterr().err
    assert "cannot be exported" in err and err.count("\n") == 1
