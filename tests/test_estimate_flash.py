"""zbopt estimate --flash-attention: no s x s score matrix kept (34h + 4a bytes a token, not the
paper's 34h + 5as), the scores recomputed in B (2.5A instead of 2A); F, W and m_w unchanged."""

import json

import pytest

from zbopt.cli import main
from zbopt.estimate import Accelerator, estimate_layers, shape_from_config

CONFIG = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1376,
          "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8,
          "vocab_size": 1000}


def _shape(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG))
    return shape_from_config(path)


@pytest.mark.parametrize("sequence", [256, 4096])
def test_flash_attention_keeps_no_score_matrix_and_recomputes_it(tmp_path, sequence):
    shape = _shape(tmp_path)
    accelerator = Accelerator(peak_flops=1e12, efficiency=1.0)
    paper = estimate_layers(shape, 1, sequence, accelerator)[1]
    flash = estimate_layers(shape, 1, sequence, accelerator, flash=True)[1]
    h, a, s = 512, 8, sequence
    assert paper.m_b == (34 * h + 5 * a * s) * s and flash.m_b == (34 * h + 4 * a) * s
    assert flash.m_w == paper.m_w and flash.t_f == paper.t_f and flash.t_w == paper.t_w
    attention = 4 * s * 64 * 8 * s / 1e6  # A = 4sad FLOPs a token, s tokens, at 1e6 FLOPs/us
    assert flash.t_b - paper.t_b == pytest.approx(0.5 * attention, abs=2e-3)


def test_the_flag_reaches_the_written_model(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG))
    layers = {}
    for flag in ((), ("--flash-attention",)):
        assert main(["estimate", str(path), "--seq-len", "2048", "--devices", "2", "--json",
                     *flag]) == 0
        layers[flag] = json.loads(capsys.readouterr().out)["layers"][1]
    assert layers[("--flash-attention",)]["m_b"] == (34 * 512 + 4 * 8) * 2048
    assert layers[()]["m_b"] == (34 * 512 + 5 * 8 * 2048) * 2048


def test_the_written_file_says_which_activations_it_counts(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG))
    out = tmp_path / "m.toml"
    assert main(["estimate", str(path), "--devices", "2", "--flash-attention", "--out",
                 str(out)]) == 0
    comments = [line for line in out.read_text().splitlines() if line.startswith("#")]
    assert "# activations: flash attention, 34h + 4a bytes a token a block" in comments
    assert not any("mixture of experts" in line for line in comments)


@pytest.mark.parametrize("flags, mem, noted", [
    ((), "1GB", "flash"),  # the paper's scores do not fit, flash attention's activations do
    (("--flash-attention",), "1GB", None),  # already flash attention, and it fits
    ((), "10MB", "static"),  # nothing fits either way: the static memory is named
    (("--flash-attention",), "10MB", "static"),
    ((), "100GB", None),  # fits as it is
])
def test_a_cap_no_split_fits_is_noted(tmp_path, capsys, flags, mem, noted):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG))
    assert main(["estimate", str(path), "--seq-len", "4096", "--devices", "2", "--mem", mem,
                 "--json", *flags]) == 0
    err = capsys.readouterr().err
    assert ("with --flash-attention (a kernel that keeps no score matrix) splits fit" in err) \
        == (noted == "flash")
    assert ("--optimizer-bytes 16/N with FSDP over N ranks" in err) == (noted == "static")
    shown = "1,000,000,000 B (1 GB)" if mem == "1GB" else "10,000,000 B (10 MB)"
    if noted:
        assert err.count("\n") == 1 and f"no split fits --mem {shown}" in err
    if noted == "static":  # the short device's static memory, from the plan's own least excess
        from zbopt.layers import load_model
        from zbopt.plan.bound import least_excess_of
        out = tmp_path / "m.toml"
        assert main(["estimate", str(path), "--seq-len", "4096", "--devices", "2", "--mem", mem,
                     "--out", str(out), *flags]) == 0
        model = load_model(out)
        short, device, sizes = least_excess_of(model)
        static = model.with_settings(memory_cap=None).instance(sizes).static_memory[device]
        assert f"device {device} is" in err and f"({static / 1e6:.3g} MB) of its memory static" in err


def test_plan_refusing_a_paper_estimate_names_flash_attention(tmp_path, capsys):
    from cli_checks import refused
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG))
    paper, flash = tmp_path / "paper.toml", tmp_path / "flash.toml"
    for out, flags in ((paper, ()), (flash, ("--flash-attention",))):
        assert main(["estimate", str(path), "--seq-len", "4096", "--devices", "2", "--out",
                     str(out), *flags]) == 0
    capsys.readouterr()
    line = refused(capsys, "plan", paper, "--mem", "1GB", "--time-limit", "5")
    assert "cannot hold any split" in line and "`zbopt estimate --flash-attention` keeps none" in line
    line = refused(capsys, "plan", flash, "--mem", "10MB", "--time-limit", "5")
    assert "cannot hold any split" in line and "flash" not in line
    assert "estimated with 16 bytes of static memory a parameter: `zbopt estimate " \
        "--optimizer-bytes`" in line
    assert main(["plan", str(flash), "--mem", "1GB", "--time-limit", "5", "--json",
                 "--quiet"]) == 0  # what the advice leads to
