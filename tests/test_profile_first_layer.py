"""The model's first layer has no B, whatever its input's dtype: torch's pipelining runtime never
runs B (`stage_backward_input`) on the first stage and does its whole backward in W."""

import json
import textwrap

import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from zbopt.cli import main  # noqa: E402
from zbopt.profile import profile  # noqa: E402
from zbopt.profile.measure import measure_layer  # noqa: E402
from zbopt.profile.models import LayerSpec, ModelSpec  # noqa: E402

CPU = torch.device("cpu")

# the docs/profile.md example: its first layer takes a floating point input
MODULE = textwrap.dedent("""
    import torch
    from torch import nn

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(64, 10)

        def forward(self, hidden):
            return self.proj(hidden).logsumexp(-1).mean()

    def layers(microbatch_size, seq_len):
        blocks = [("embed", nn.Linear(16, 64))]
        blocks += [(f"blocks.{i}", nn.Sequential(nn.Linear(64, 64), nn.GELU()), "blocks")
                   for i in range(4)]
        blocks.append(("head", Head()))
        return blocks, lambda: torch.randn(microbatch_size, seq_len, 16)
""")


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_a_floating_first_layer_of_a_module_has_no_b(tmp_path, capsys):
    path = tmp_path / "model.py"
    path.write_text(MODULE)
    assert main(["profile", "--module", f"{path}:layers", "--seq-len", "16", "--warmup", "0",
                 "--repeat", "2", "--clock", "cpu", "--json", "--quiet"]) == 0
    doc = json.loads(capsys.readouterr().out)
    embed, blocks = doc["model"]["layers"][0], doc["model"]["layers"][1]
    assert embed["name"] == "embed" and embed["t_b"] == 0 and embed["t_w"] > 0
    assert blocks["t_b"] > 0  # later layers receive an activation that needs its gradient
    # nothing is held from B to W on the first stage: no measured m_w above m_b
    assert "embed" not in doc["m_w_clamped"]
    first = doc["layers"][0]
    assert first["t_b"] == 0 and first["m_w_measured"] == embed["m_b"]


def test_profile_measures_only_the_first_layer_without_b():
    spec = ModelSpec((LayerSpec("a", torch.nn.Linear(4, 4)), LayerSpec("b", torch.nn.Linear(4, 4))),
                     lambda: torch.randn(2, 4))
    a, b = profile(spec, warmup=0, repeat=2, clock="cpu").layers
    assert a.t_b == (0.0, 0.0) and min(a.t_w) > 0
    assert min(b.t_b) > 0


def test_measure_layer_first_skips_b_for_a_floating_input():
    linear = torch.nn.Linear(8, 8)
    x = torch.randn(3, 8)
    alone = measure_layer("l", "", linear, x, warmup=0, repeat=2, device=CPU, clock="cpu")
    first = measure_layer("l", "", linear, x, warmup=0, repeat=2, device=CPU, clock="cpu",
                          first=True)
    assert min(alone.t_b) > 0
    assert first.t_b == (0.0, 0.0) and min(first.t_w) > 0 and first.m_w == first.m_b
