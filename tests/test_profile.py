"""zbopt profile: per-layer F/B/W times split as torch's pipelining runtime splits them, saved-tensor
memory, static memory, the layered file it writes, and the refusals."""

import json
import textwrap

import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from zbopt.cli import main  # noqa: E402
from zbopt.errors import ZboptError  # noqa: E402
from zbopt.layers import load_model  # noqa: E402
from zbopt.profile import to_layers  # noqa: E402
from zbopt.profile.measure import LayerTimes, measure_layer, median, memory  # noqa: E402

CPU = torch.device("cpu")

MODULE = textwrap.dedent("""
    import torch
    from torch import nn

    class Loss(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(32, 8)

        def forward(self, hidden):
            return self.proj(hidden).pow(2).mean()

    def layers(microbatch_size, seq_len):
        torch.manual_seed(0)
        blocks = [("embed", nn.Linear(16, 32))]
        blocks += [(f"blocks.{i}", nn.Sequential(nn.Linear(32, 32), nn.GELU()), "blocks") for i in range(3)]
        blocks.append(("head+loss", Loss()))
        return blocks, lambda: torch.randn(microbatch_size, seq_len, 16)

    def not_layers():
        return 42
""")


@pytest.fixture
def user_module(tmp_path):
    path = tmp_path / "mymodel.py"
    path.write_text(MODULE)
    return path


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_linear_saved_bytes_are_its_input_and_w_keeps_the_output_gradient():
    # nn.Linear saves its input (for dW) and its weight (a parameter: static, not counted); after B
    # the runtime still holds the input and the output gradient it stored for W
    layer = torch.nn.Linear(64, 32)
    x = torch.randn(3, 5, 64)
    m_b, m_w = memory(layer, x)
    assert m_b == 3 * 5 * 64 * 4
    assert m_w == 3 * 5 * 64 * 4 + 3 * 5 * 32 * 4


def test_saved_bytes_follow_the_dtype_and_count_a_shared_storage_once():
    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(8, 8, bias=False), torch.nn.Linear(8, 8, bias=False)

        def forward(self, x):  # both matmuls save the same input
            return self.a(x) + self.b(x)

    x = torch.randn(4, 8, dtype=torch.bfloat16)
    m_b, _ = memory(Twice().to(torch.bfloat16), x)
    assert m_b == 4 * 8 * 2


def test_times_are_positive_and_b_plus_w_is_close_to_a_full_backward():
    mlp = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.GELU(), torch.nn.Linear(512, 128))
    x = torch.randn(2, 64, 128)
    # CPU time of this thread: other processes on a shared machine do not inflate it
    t = measure_layer("mlp", "", mlp, x, warmup=2, repeat=7, device=CPU, clock="cpu")
    assert len(t.t_f) == 14 and len(t.t_b) == len(t.t_w) == len(t.t_full) == 7
    assert min(t.t_f) > 0 and min(t.t_b) > 0 and min(t.t_w) > 0 and min(t.t_full) > 0
    # the split runs the same kernels as the full backward, plus graph bookkeeping
    ratio = (median(t.t_b) + median(t.t_w)) / median(t.t_full)
    assert 0.5 < ratio < 3.0
    assert all(p.grad is None for p in mlp.parameters())  # cleared after measuring
    assert t.parameters == 128 * 512 + 512 + 512 * 128 + 128
    wall = measure_layer("mlp", "", mlp, x, warmup=0, repeat=2, device=CPU, clock="wall")
    assert min(wall.t_f) > 0 and min(wall.t_b) > 0 and min(wall.t_w) > 0


def test_a_layer_whose_input_needs_no_gradient_has_no_b_as_on_the_first_stage():
    embedding = torch.nn.Embedding(50, 16)
    ids = torch.randint(0, 50, (2, 7))
    t = measure_layer("emb", "", embedding, ids, warmup=0, repeat=3, device=CPU)
    assert t.t_b == (0.0, 0.0, 0.0)
    assert min(t.t_w) > 0
    assert t.m_b == t.m_w == 2 * 7 * 8  # the saved int64 ids, held until the full backward in W


def _times(name, group, t_f, m_b=100, m_w=50, parameters=10):
    return LayerTimes(name=name, group=group, t_f=t_f, t_b=(1.0,), t_w=(2.0,), t_full=(3.0,),
                      m_b=m_b, m_w=m_w, parameters=parameters)


def test_static_is_parameters_times_the_factor_and_blocks_pool_into_one_counted_layer():
    times = [_times("emb", "", (5.0,), parameters=7),
             _times("layers.0", "layers", (1.0, 2.0), m_w=300, parameters=11),
             _times("layers.1", "layers", (9.0, 3.0), m_w=300, parameters=11),
             _times("out", "", (4.0,), parameters=3)]
    pooled = to_layers(times, bytes_per_param=16)
    assert [(x.name, x.count) for x in pooled] == [("emb", 1), ("layers", 2), ("out", 1)]
    assert [x.static for x in pooled] == [7 * 16, 11 * 16, 3 * 16]
    assert pooled[1].t_f == 2.5  # median of the pooled samples 1, 2, 3, 9
    assert pooled[1].m_w == 100  # measured 300 > m_b: written as m_b
    each = to_layers(times, bytes_per_param=12.5, pool=False)
    assert [x.name for x in each] == ["emb", "layers.0", "layers.1", "out"]
    assert [x.static for x in each] == [7 * 12.5, 11 * 12.5, 11 * 12.5, 3 * 12.5]
    assert each[2].t_f == 6.0
    # blocks that differ, or whose names would not expand back from a count, stay apart
    differ = times[:2] + [_times("layers.1", "layers", (9.0,), m_w=300, parameters=12)]
    assert [x.name for x in to_layers(differ, 16)] == ["emb", "layers.0", "layers.1"]
    shifted = [_times("layers.1", "layers", (1.0,)), _times("layers.2", "layers", (1.0,))]
    assert [x.name for x in to_layers(shifted, 16)] == ["layers.1", "layers.2"]


def test_module_profile_writes_a_layered_file_that_round_trips(tmp_path, user_module, capsys):
    out = tmp_path / "m.toml"
    args = ["profile", "--module", f"{user_module}:layers", "--microbatch-size", "2", "--seq-len", "8",
            "--warmup", "0", "--repeat", "2", "--devices", "2", "--microbatches", "4", "--mem", "1GiB",
            "--bytes-per-param", "12", "--comm", "7.5", "--out", str(out)]
    assert main(args) == 0
    model = load_model(out)
    assert [x.name for x in model.layers] == ["embed", "blocks", "head+loss"]
    assert [x.name for x in model.expanded] == ["embed", "blocks.0", "blocks.1", "blocks.2", "head+loss"]
    assert model.devices == 2 and model.microbatches == 4 and model.memory_cap == 2**30 and model.comm == 7.5
    assert model.time_unit == "us" and model.memory_unit == "bytes"
    assert model.layers[0].static == (16 * 32 + 32) * 12
    assert model.layers[0].m_b == 2 * 8 * 16 * 4  # the Linear's saved input
    assert all(x.t_f > 0 and x.t_w > 0 for x in model.layers)
    text = out.read_text()
    assert "1 torch thread(s)" in text and "wall clock" in text and "layer names use module" in text
    before = text
    capsys.readouterr()
    assert main(args) == 2  # no overwrite without --force, nothing measured
    assert "exists" in capsys.readouterr().err and out.read_text() == before
    json_out = tmp_path / "m.json"
    assert main(args[:-1] + [str(json_out), "--each-block", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [x["name"] for x in doc["model"]["layers"]] == ["embed", "blocks.0", "blocks.1", "blocks.2", "head+loss"]
    assert {row["name"] for row in doc["layers"]} >= {"blocks.1"} and doc["settings"]["threads"] == 1
    assert load_model(json_out).num_layers == 5


def test_progress_is_one_line_per_round_when_asked_and_none_when_quiet(user_module, capsys):
    args = ["profile", "--module", f"{user_module}:layers", "--warmup", "1", "--repeat", "2", "--json"]
    assert main(args + ["--progress"]) == 0
    captured = capsys.readouterr()
    json.loads(captured.out)  # stdout stays one JSON document
    lines = captured.err.splitlines()
    assert [line.split("  [")[0] for line in lines] == [
        "zbopt: profile: round 1 of 3 over 5 layers", "zbopt: profile: round 2 of 3 over 5 layers",
        "zbopt: profile: round 3 of 3 over 5 layers", "zbopt: profile: 3 rounds over 5 layers done"]
    for flags in (["--quiet", "--progress"], []):  # stderr is not a terminal here
        assert main(args + flags) == 0
        assert capsys.readouterr().err == ""


def test_llama_tiny_uses_torchtitan_names_and_shapes(tmp_path):
    out = tmp_path / "llama.toml"
    assert main(["profile", "--preset", "llama-tiny", "--seq-len", "16", "--warmup", "0", "--repeat", "1",
                 "--out", str(out)]) == 0
    model = load_model(out)
    assert [x.name for x in model.expanded] == ["tok_embeddings"] + [f"layers.{i}" for i in range(6)] + [
        "norm+lm_head"]
    embedding, blocks, head = model.layers
    assert embedding.static == 2048 * 256 * 16 and embedding.t_b == 0
    # a block: attention 4 * 256^2, SwiGLU 3 * 256 * 768, two RMSNorm weights
    assert blocks.static == (4 * 256 * 256 + 3 * 256 * 768 + 2 * 256) * 16
    assert head.static == (256 + 2048 * 256) * 16
    # every parameter of the model is in exactly one layer (no tied weights here)
    from transformers import AutoModelForCausalLM

    from zbopt.profile import read_config
    from zbopt.profile.models import preset_path
    with torch.device("meta"):  # shapes only
        whole = AutoModelForCausalLM.from_config(read_config(preset_path("llama-tiny")))
    assert sum(x.static for x in model.expanded) == sum(p.numel() for p in whole.parameters()) * 16
    assert blocks.m_b > 16 * 256 * 4  # more than its input alone


def test_gpt2_tiny_uses_hf_names_and_counts_a_tied_embedding_on_both_ends(tmp_path, capsys):
    assert main(["profile", "--preset", "gpt2-tiny", "--seq-len", "16", "--warmup", "0", "--repeat", "1",
                 "--each-block", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    names = [x["name"] for x in doc["model"]["layers"]]
    assert names == ["transformer.wte+transformer.wpe"] + [f"transformer.h.{i}" for i in range(6)] + [
        "transformer.ln_f+lm_head"]
    first, last = doc["model"]["layers"][0], doc["model"]["layers"][-1]
    assert first["static"] == (8192 + 1024) * 256 * 16
    assert last["static"] == (2 * 256 + 8192 * 256) * 16  # the tied weight is held by the last stage too


def test_hf_config_file_names_layers_by_hf_fqns(tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "vocab_size": 64, "hidden_size": 32,
                                  "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}))
    assert main(["profile", "--hf-config", str(config), "--seq-len", "8", "--warmup", "0", "--repeat", "1",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(x["name"], x.get("count", 1)) for x in doc["model"]["layers"]] == [
        ("model.embed_tokens", 1), ("model.layers", 2), ("model.norm+lm_head", 1)]
    assert doc["naming"] == "hf" and doc["out"] is None


@pytest.mark.parametrize("extra, message", [
    (["--repeat", "0"], "--repeat must be"),
    (["--seq-len", "0"], "--seq-len must be"),
    (["--warmup", "-1"], "--warmup must be"),
    (["--bytes-per-param", "-1"], "--bytes-per-param"),
    (["--bytes-per-param", "nan"], "--bytes-per-param"),
    (["--comm", "-1"], "--comm must be"),
    (["--mem", "1p"], "absolute"),
    (["--devices", "9"], "--devices 9: the model has 5 layer(s)"),
    (["--dtype", "int8"], "--dtype"),
    (["--out", "x.csv"], ".toml or .json"),
    (["--naming", "hf"], "--naming applies"),
    (["--clock", "cpu", "--threads", "2"], "--threads 1"),
])
def test_bad_numbers_exit_2(user_module, capsys, extra, message):
    assert main(["profile", "--module", f"{user_module}:layers", "--repeat", "1", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize("extra, flag", [
    (["--comm", "1e300"], "--comm"),
    (["--bytes-per-param", "1e300"], "--bytes-per-param"),
    (["--bytes-per-param", "1e20"], "--bytes-per-param"),
])
def test_totals_past_the_limit_name_the_flag_before_any_measuring(user_module, tmp_path, capsys,
                                                                  monkeypatch, extra, flag):
    """profile fixes the units (us, bytes): the advice is the flag, not a larger unit, and it
    comes before the measuring (which would take minutes on a real model)."""
    def never(*_args, **_kwargs):
        raise AssertionError("measured before refusing")
    monkeypatch.setattr("zbopt.commands.profile._measure", never)
    out = tmp_path / "model.toml"
    assert main(["profile", "--module", f"{user_module}:layers", "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.strip().endswith(f"give a smaller {flag}"), err
    assert "larger unit" not in err and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize("spec, message", [
    ("no_such_package_zb.mod:fn", "cannot import no_such_package_zb.mod"),
    ("nofunction", "pkg.module:function"),
    ("{module}:missing", "no function 'missing'"),
    ("{module}:not_layers", "must return a ModelSpec or a pair"),
    ("{dir}/absent.py:fn", "cannot import"),
])
def test_module_that_does_not_import_or_return_layers_exits_2(user_module, capsys, spec, message):
    spec = spec.format(module=user_module, dir=user_module.parent)
    assert main(["profile", "--module", spec]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize("config, message", [
    ({"model_type": "t5"}, "'t5' is not a decoder-only"),
    ({"model_type": "bert", "hidden_size": 64}, "'bert' is not a decoder-only"),
    ({"model_type": "gpt_neox", "hidden_size": 32, "num_attention_heads": 2, "num_hidden_layers": 1,
      "intermediate_size": 64, "vocab_size": 64}, "knows decoders shaped like llama"),
    ({"vocab_size": 10}, "no model_type"),
    ({"model_type": "no-such-model"}, "does not know model_type 'no-such-model'"),
    # transformers' own validation, reduced to its cause
    ({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 12},
     "rejects this config: The hidden size (64) is not a multiple"),
    ({"model_type": "llama", "hidden_size": -64}, "hidden_size must be a positive integer, got -64"),
    ({"model_type": "llama", "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": -64},
     "intermediate_size must be a positive integer"),
    # a config transformers accepts but cannot build a model from
    ({"model_type": "gpt2", "n_embd": 30, "n_head": 4, "n_layer": 1, "vocab_size": 64,
      "n_positions": 16}, "cannot build a 'gpt2' model from this config: `embed_dim` must be divisible"),
])
def test_non_decoder_config_exits_2(tmp_path, capsys, config, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert main(["profile", "--hf-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_other_bad_sources_exit_2(tmp_path, capsys):
    assert main(["profile", "--preset", "nope"]) == 2
    assert "unknown preset" in capsys.readouterr().err
    assert main(["profile", "--hf-config", str(tmp_path / "absent.json")]) == 2
    assert "not found" in capsys.readouterr().err
    assert main(["profile", "--preset", "gpt2-tiny", "--seq-len", "5000"]) == 2
    assert "1024 positions" in capsys.readouterr().err
    assert main(["profile", "--preset", "gpt2-tiny", "--naming", "torchtitan"]) == 2
    assert "llama-shaped" in capsys.readouterr().err


def test_configs_too_big_to_build_are_refused_unbuilt(tmp_path, monkeypatch, capsys):
    """A config with more blocks than profile builds, or whose embedding and norms alone would
    not fit, is refused before transformers builds anything (even shapes only, a huge config
    took minutes)."""
    import zbopt.profile.models as models

    def no_build(*args, **kwargs):
        raise AssertionError("built a model for a config refused by its numbers")

    monkeypatch.setattr(models, "_build", no_build)
    base = {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 2,
            "intermediate_size": 64, "vocab_size": 64}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**base, "num_hidden_layers": models.MAX_BLOCKS + 1}))
    assert main(["profile", "--hf-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{models.MAX_BLOCKS + 1:,} blocks" in err and err.count("\n") == 1
    # 1 GiB available; the embedding alone holds 2**27 float32 parameters (1 GiB with gradients)
    monkeypatch.setattr(models, "_available_bytes", lambda: 2**30)
    path.write_text(json.dumps({**base, "num_hidden_layers": 2, "vocab_size": 2**22}))
    assert main(["profile", "--hf-config", str(path), "--dtype", "float32"]) == 2
    err = capsys.readouterr().err
    assert "at least 134,217,792 parameters need 1.0 GiB" in err and err.count("\n") == 1


def test_library_refuses_bad_repeat():
    from zbopt.profile import profile
    from zbopt.profile.models import LayerSpec, ModelSpec
    spec = ModelSpec((LayerSpec("a", torch.nn.Linear(2, 2)),), lambda: torch.randn(1, 2))
    with pytest.raises(ZboptError, match="repeat"):
        profile(spec, warmup=0, repeat=0)


def test_repetitions_go_round_robin_over_the_layers():
    from zbopt.profile import profile
    from zbopt.profile.models import LayerSpec, ModelSpec
    spec = ModelSpec((LayerSpec("a", torch.nn.Linear(4, 4)), LayerSpec("b", torch.nn.Linear(4, 4))),
                     lambda: torch.randn(2, 4))
    seen = []
    result = profile(spec, warmup=1, repeat=2, progress=lambda name, done, total: seen.append((name, done, total)))
    assert seen == [("a", 1, 6), ("b", 2, 6), ("a", 3, 6), ("b", 4, 6), ("a", 5, 6), ("b", 6, 6)]
    assert result.settings["clock"] == "wall" and result.settings["threads"] == 1
    assert [len(t.t_b) for t in result.layers] == [2, 2]


def test_module_by_package_name_from_the_working_directory(tmp_path, monkeypatch, capsys):
    (tmp_path / "zb_profile_user_pkg.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", str(tmp_path))])
    assert main(["profile", "--module", "zb_profile_user_pkg:layers", "--seq-len", "4", "--warmup", "0",
                 "--repeat", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["naming"] == "module" and doc["model"]["name"].startswith("zb_profile_user_pkg:layers")


def test_hf_config_as_a_directory_or_toml(tmp_path, capsys):
    keys = {"model_type": "gpt2", "vocab_size": 64, "n_embd": 32, "n_layer": 1, "n_head": 2, "n_positions": 16}
    (tmp_path / "config.json").write_text(json.dumps(keys))
    (tmp_path / "small.toml").write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items()))
    for source in (tmp_path, tmp_path / "small.toml"):
        assert main(["profile", "--hf-config", str(source), "--seq-len", "8", "--warmup", "0", "--repeat", "1",
                     "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert [x["name"] for x in doc["model"]["layers"]] == [
            "transformer.wte+transformer.wpe", "transformer.h.0", "transformer.ln_f+lm_head"]


@pytest.mark.parametrize("source, message", [
    ("raise ImportError()\n", "mod_blank.py (ImportError)"),
    ("def layers():\n    raise ValueError('\\n\\nno GPU here\\ntrace')\n", "layers() raised ValueError: no GPU here"),
])
def test_a_module_failing_without_a_usable_first_line_is_one_line(tmp_path, capsys, source, message):
    path = tmp_path / "mod_blank.py"
    path.write_text(source)
    assert main(["profile", "--module", f"{path}:layers"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


USER_CODE = textwrap.dedent("""
    import sys
    import torch
    from torch import nn

    class Lin(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(8, 8)

        def forward(self, x):
            return self.l(x)

    class Loss(Lin):
        def forward(self, x):
            return self.l(x).pow(2).mean()

    def inp():
        return torch.randn(1, 4, 8)

    def model(middle, make_input=inp):
        return [("a", Lin()), ("b", middle), ("c", Loss())], make_input

    def input_raises():
        def make_input():
            raise RuntimeError("boom")
        return model(Lin(), make_input)

    def input_exits():
        return model(Lin(), lambda: sys.exit(6))

    def exits():
        raise SystemExit(3)

    class ExitForward(Lin):
        def forward(self, x):
            sys.exit(5)

    def forward_exits():
        return model(ExitForward())

    class GradOnly(Lin):  # passes the forward without gradients that finds every layer's input
        def forward(self, x):
            if torch.is_grad_enabled():
                raise KeyError("grad on")
            return self.l(x)

    def forward_raises_with_grad():
        return model(GradOnly())

    class ExitWithGrad(Lin):
        def forward(self, x):
            if torch.is_grad_enabled():
                sys.exit("bye")
            return self.l(x)

    def forward_exits_with_grad():
        return model(ExitWithGrad())

    class Fails(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            raise ValueError("backward boom")

    class Exits(Fails):
        @staticmethod
        def backward(ctx, grad):
            raise SystemExit(7)

    class Backward(Lin):
        def __init__(self, function):
            super().__init__()
            self.function = function

        def forward(self, x):
            return self.function.apply(self.l(x))

    def backward_raises():
        return model(Backward(Fails))

    def backward_exits():
        return model(Backward(Exits))

    def group_not_a_string():
        return [("g.0", Lin(), 5), ("g.1", Lin(), 5), ("c", Loss())], inp
""")


@pytest.mark.parametrize("function, message", [
    ("input_raises", "--module {spec}: make_input() raised RuntimeError: boom"),
    ("input_exits", "--module {spec}: make_input() raised SystemExit: 6"),
    ("exits", "--module {spec}: exits() raised SystemExit: 3"),
    ("forward_exits", "layer 'b' failed on its input (SystemExit: 5)"),
    ("forward_raises_with_grad", "layer 'b' cannot be measured (KeyError: 'grad on')"),
    ("forward_exits_with_grad", "layer 'b' cannot be measured (SystemExit: bye)"),
    # torch's stage_backward_input wraps it in "Failed to run stage backward input:": its cause is shown
    ("backward_raises", "layer 'b' cannot be measured (ValueError: backward boom)"),
    ("backward_exits", "layer 'b' cannot be measured (SystemExit: 7)"),
    ("group_not_a_string",
     "--module {spec}: layer 'g.0': its group (the name of the pooled layer) must be a string, got int"),
])
def test_whatever_the_users_code_raises_is_one_line_and_nothing_is_written(tmp_path, capsys, function,
                                                                           message):
    """make_input(), the function, a layer's forward or backward raising (sys.exit() too: it
    exited with the model's status and said nothing) is one line naming what raised, exit 2."""
    path = tmp_path / "user_code.py"
    path.write_text(USER_CODE)
    out = tmp_path / "out.toml"
    spec = f"{path}:{function}"
    assert main(["profile", "--module", spec, "--warmup", "0", "--repeat", "1", "--quiet",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"zbopt: error: {message.format(spec=spec)}\n"
    assert not out.exists()


def test_sys_exit_while_importing_the_module_is_one_line(tmp_path, capsys):
    path = tmp_path / "exits_on_import.py"
    path.write_text("import sys\nsys.exit(4)\n")
    assert main(["profile", "--module", f"{path}:layers"]) == 2
    err = capsys.readouterr().err
    assert err == f"zbopt: error: --module {path}:layers: cannot import {path} (SystemExit: 4)\n"


def test_library_make_input_raising_is_a_zbopt_error():
    from zbopt.profile import profile
    from zbopt.profile.models import LayerSpec, ModelSpec

    def make_input():
        raise SystemExit(9)

    spec = ModelSpec((LayerSpec("a", torch.nn.Linear(2, 2)),), make_input)
    with pytest.raises(ZboptError, match=r"^make_input\(\) raised SystemExit: 9$"):
        profile(spec, warmup=0, repeat=1)


@pytest.mark.parametrize("layer, shown", [
    ('("c\\nd", Loss())', "layer name 'c\\nd'"),
    ('("a\\tb", Loss())', "layer name 'a\\tb'"),
    ('("a\\u2028b", Loss())', "layer name 'a\\u2028b'"),
    ('("x\\x7f", Loss())', "layer name 'x\\x7f'"),
    ('("g\\nh.0", Loss(), "g\\nh")', "layer name 'g\\nh.0'"),
    ('("g.0", Loss(), "g\\rh")', "layer group 'g\\rh'"),
])
def test_layer_names_with_control_characters_are_refused(tmp_path, capsys, layer, shown):
    """A layer's name becomes a module FQN (and a comment line of the TOML header, which a newline
    would end, leaving a file zbopt cannot read): it must be printable."""
    path = tmp_path / "names.py"
    path.write_text(USER_CODE + f"\ndef layers():\n    return [(\"a\", Lin()), {layer}], inp\n")
    out = tmp_path / "out.toml"
    assert main(["profile", "--module", f"{path}:layers", "--warmup", "0", "--repeat", "1", "--quiet",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert shown in err and "has a control character or line break" in err and err.count("\n") == 1
    assert not out.exists()


def test_odd_printable_names_and_a_model_name_with_a_newline_read_back(tmp_path, capsys):
    """What profile writes reads back with zbopt's loader: quotes, `#` and non-ASCII in layer names
    are kept as given; a newline in the model's name (a label, from the user's ModelSpec) is
    written escaped in the name key and in the header comments."""
    path = tmp_path / "odd.py"
    path.write_text(USER_CODE + textwrap.dedent("""
        from zbopt.profile import LayerSpec, ModelSpec

        def layers():
            return ModelSpec((LayerSpec('a"b', Lin()), LayerSpec("x # ä\\\\y", Lin()),
                              LayerSpec("c", Loss())), inp, name="two\\nlines")
    """))
    for suffix in (".toml", ".json"):
        out = tmp_path / f"odd{suffix}"
        assert main(["profile", "--module", f"{path}:layers", "--warmup", "0", "--repeat", "1",
                     "--quiet", "--out", str(out)]) == 0
        model = load_model(out)
        assert [x.name for x in model.layers] == ['a"b', "x # ä\\y", "c"]
        assert model.name.startswith("two\\nlines b=1") and "\n" not in model.name
    header = [line for line in (tmp_path / "odd.toml").read_text().splitlines() if line.startswith("#")]
    assert "# model two\\nlines: layer names use module module names" in header
    assert any(line.startswith('#   a"b: ') for line in header)
