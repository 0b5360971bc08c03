"""Bad input is refused in one line with exit status 2 before any work, nothing is written, and
the output says what to use: one test per case a new user met."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from zbopt.cli import build_parser, main
from zbopt.errors import ZboptError
from zbopt.instance import Instance, default_instance_path, load_instance, shipped_instances
from zbopt.progress import Progress

# every command module imported now: one imported first while a test patches registry.run
# would keep the patch (`from ..registry import run`) for the rest of the session
build_parser()

ROOT = Path(__file__).resolve().parents[1]
UNIT = ROOT / "instances" / "unit" / "unit-p4-m8.toml"
COSTS = "t_f = 1\nt_b = 2\nt_w = 1\n"


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys, *argv) -> str:
    """Run, expect exit 2 with one line on stderr and no traceback; return that line."""
    code, _, err = run(capsys, *argv)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("zbopt: error: ")
    return err


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if any method runs: the refusal must come before the work."""
    import zbopt.compare
    import zbopt.registry

    def boom(*args, **kwargs):
        pytest.fail("a method ran before the bad input was refused")
    monkeypatch.setattr(zbopt.registry, "run", boom)
    monkeypatch.setattr(zbopt.compare, "run", boom)


# ----- files that are not instances ------------------------------------------------------------

@pytest.mark.parametrize("suffix", [".toml", ".json", ""])
def test_random_bytes_are_one_line(capsys, tmp_path, suffix):
    path = tmp_path / f"noise{suffix}"
    path.write_bytes(random.Random(300).randbytes(300))
    err = refused(capsys, "compare", path)
    assert str(path) in err


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_non_utf8_text_is_named(capsys, tmp_path, suffix):
    text = 'name = "café"\ndevices = 2\nmicrobatches = 2\n' + COSTS if suffix == ".toml" else \
        json.dumps({"name": "café", "devices": 2, "microbatches": 2, "t_f": 1, "t_b": 1, "t_w": 1},
                   ensure_ascii=False)
    path = tmp_path / f"latin1{suffix}"
    path.write_bytes(text.encode("latin-1"))
    err = refused(capsys, "compare", path)
    assert "not UTF-8" in err


@pytest.mark.parametrize("argv", [["compare", "{dir}"], ["solve", "{dir}"],
                                  ["simulate", "{dir}", "-s", "1f1b"], ["evaluate", "{dir}.json"],
                                  ["plot", "{dir}.json", "-o", "{tmp}/x.png"],
                                  ["evaluate", "{inst}", "--torch-csv", "{dir}"]])
def test_a_directory_where_a_file_is_expected_says_so(capsys, tmp_path, argv):
    folder = tmp_path / "adir"
    folder.mkdir()
    (tmp_path / "adir.json").mkdir()
    args = [a.format(dir=folder, tmp=tmp_path, inst=UNIT) for a in argv]
    err = refused(capsys, *args)
    assert "is a directory" in err and "not found" not in err


def test_a_missing_file_is_not_found_and_points_to_the_shipped_list(capsys):
    err = refused(capsys, "compare", "no-such-instance")
    assert "not found" in err and "zbopt instances" in err


@pytest.mark.parametrize("key", ["t_f", "t_b", "t_w"])
def test_every_cost_key_is_required(capsys, tmp_path, key):
    path = tmp_path / "costless.toml"
    path.write_text("devices = 2\nmicrobatches = 4\n" + "".join(
        line + "\n" for line in COSTS.splitlines() if not line.startswith(key)))
    err = refused(capsys, "compare", path)
    assert f"missing cost key(s) {key}" in err
    with pytest.raises(Exception, match=key):
        load_instance(path)


def test_a_typo_is_named_before_the_missing_key(capsys, tmp_path):
    path = tmp_path / "typo.toml"
    path.write_text("devices = 2\nmicrobatches = 4\nt_ff = 1\nt_b = 1\nt_w = 1\n")
    assert "unknown key(s) t_ff" in refused(capsys, "compare", path)


def test_chunks_zero_in_a_file_is_refused(capsys, tmp_path):
    path = tmp_path / "inter.toml"
    path.write_text('devices = 2\nmicrobatches = 4\nplacement = "interleaved"\nchunks = 0\n' + COSTS)
    assert "chunks = 0" in refused(capsys, "compare", path)
    # what the file does not say is still implied: 2 chunks for interleaved
    path.write_text('devices = 2\nmicrobatches = 4\nplacement = "interleaved"\nchunks = 3\n' + COSTS)
    assert load_instance(path).chunks == 3


@pytest.mark.parametrize("command", [["compare"], ["report", "-o", "{tmp}/r.html"],
                                     ["simulate", "-s", "interleaved-1f1b"]])
@pytest.mark.parametrize("chunks", ["0", "1", "-2", "two"])
def test_chunks_option_needs_two_or_more(capsys, tmp_path, no_work, command, chunks):
    args = [a.format(tmp=tmp_path) for a in command]
    err = refused(capsys, *args[:1], UNIT, *args[1:], "--chunks", chunks)
    assert "--chunks" in err and "2 or more" in err
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("command", ["compare", "solve", "simulate"])
@pytest.mark.parametrize("mem", ["nan", "-inf", "0", "-1", "0p", "lots"])
def test_mem_that_is_not_a_cap_is_refused(capsys, no_work, command, mem):
    extra = ["-s", "1f1b"] if command == "simulate" else []
    err = refused(capsys, command, UNIT, "--mem", mem, *extra)
    assert "--mem" in err or "memory_cap" in err


def test_a_cap_with_a_byte_unit_is_converted_to_the_files_memory_unit():
    from zbopt.commands._common import parse_cap
    assert parse_cap("80GB", "B") == 80 * 10**9
    assert parse_cap("80 gb", "bytes") == 80 * 10**9
    assert parse_cap("16GiB", "bytes") == 16 * 2**30
    assert parse_cap("24GB", "MB") == 24000
    assert parse_cap("1GiB", "MiB") == 1024
    assert parse_cap("1.5e3MB", "GB") == 1.5
    assert parse_cap("512", "MB") == 512  # a plain number is in the file's unit
    assert parse_cap("2p", "B") == "2p"
    for unit in ("sb", ""):  # a unit that is no byte size, or none named
        with pytest.raises(ZboptError, match="is in bytes but the memory unit"):
            parse_cap("80GB", unit)


def test_mem_in_bytes_on_a_command_line(capsys, tmp_path):
    """A per-stage instance in bytes takes --mem 11GB as 11e9; one in another unit refuses it."""
    bytes_unit = tmp_path / "b.toml"
    bytes_unit.write_text('devices = 2\nmicrobatches = 4\nt_f = 1\nt_b = 1\nt_w = 1\n'
                          'memory_unit = "bytes"\nm_b = 1e9\nm_w = 2e8\n')
    code, out, _ = run(capsys, "simulate", str(bytes_unit), "-s", "1f1b", "--mem", "2.5GB", "--json")
    assert code == 0 and json.loads(out)["memory_cap"] == [25 * 10**8] * 2
    err = refused(capsys, "simulate", UNIT, "-s", "1f1b", "--mem", "80GB")
    assert "is in bytes but the memory unit is not named" in err


def test_mem_none_and_inf_mean_unlimited(capsys):
    for word in ("none", "inf"):
        code, out, _ = run(capsys, "simulate", UNIT, "-s", "gpipe", "--mem", word, "--json")
        assert code == 0 and json.loads(out)["memory_cap"] is None


@pytest.mark.parametrize("option,value", [("--time-limit", "0"), ("--time-limit", "nan"),
                                          ("--time-limit", "-5"), ("--threads", "0")])
def test_solver_numbers_are_checked(capsys, no_work, option, value):
    err = refused(capsys, "solve", UNIT, option, value)
    assert option in err


def test_an_instance_too_large_to_hold_is_refused_at_once(capsys, tmp_path):
    path = tmp_path / "huge.toml"
    path.write_text("devices = 100000\nmicrobatches = 100000\n" + COSTS)
    assert "beyond zbopt's limit" in refused(capsys, "compare", path)


def test_a_cost_too_large_for_a_float_is_refused(capsys, tmp_path):
    path = tmp_path / "big.toml"
    path.write_text("devices = 2\nmicrobatches = 2\nt_f = 1" + "0" * 400 + "\nt_b = 1\nt_w = 1\n")
    assert "t_f must be finite" in refused(capsys, "compare", path)


# ----- output paths: checked before any work, nothing overwritten -------------------------------

@pytest.mark.parametrize("argv", [
    ["solve", UNIT, "--out", "{existing}"],
    ["simulate", UNIT, "-s", "1f1b", "--out", "{existing}"],
    ["report", UNIT, "-o", "{existing_html}"],
    ["frontier", UNIT, "--caps", "1p,2p", "-o", "{tmp}"],
    ["compare", UNIT, "--plot", "{tmp}"],
])
def test_an_existing_output_is_refused_before_any_work(capsys, tmp_path, no_work, argv):
    existing = tmp_path / "s.json"
    existing_html = tmp_path / "r.html"
    for path in (existing, existing_html, tmp_path / "unit-p4-m8-frontier.md",
                 tmp_path / "1f1b.png"):
        path.write_text("precious")
    args = [str(a).format(existing=existing, existing_html=existing_html, tmp=tmp_path)
            for a in argv]
    assert "--force" in refused(capsys, *args)
    assert existing.read_text() == existing_html.read_text() == "precious"


@pytest.mark.parametrize("argv,fragment", [
    (["solve", UNIT, "--out", "{tmp}/missing/s.json"], "does not exist"),
    (["solve", UNIT, "--out", "{tmp}"], "is a directory"),
    (["solve", UNIT, "--out", "{tmp}/s.txt"], ".json"),
    (["simulate", UNIT, "-s", "1f1b", "--out", "{tmp}/missing/s.json"], "does not exist"),
    (["report", UNIT, "-o", "{tmp}/r.txt"], ".html"),
    (["report", UNIT, "-o", "{tmp}/missing/r.html"], "does not exist"),
    (["frontier", UNIT, "-o", "{tmp}/afile"], "not a directory"),
    (["compare", UNIT, "--plot", "{tmp}/afile"], "not a directory"),
])
def test_an_impossible_output_is_refused_before_any_work(capsys, tmp_path, no_work, argv,
                                                         fragment):
    (tmp_path / "afile").write_text("x")
    args = [str(a).format(tmp=tmp_path) for a in argv]
    assert fragment in refused(capsys, *args)


def test_unknown_methods_and_solvers_are_refused_before_any_work(capsys, no_work, tmp_path):
    assert "unknown method" in refused(capsys, "compare", UNIT, "--methods", "1f1b,nope")
    assert "unknown solver" in refused(capsys, "solve", UNIT, "--solver", "gurobi")
    assert "unknown solver" in refused(capsys, "compare", UNIT, "--solve", "--solver", "x")
    assert "unknown solver" in refused(capsys, "frontier", UNIT, "--solver", "x")
    assert "unknown method" in refused(capsys, "report", UNIT, "-o", tmp_path / "r.html",
                                       "--methods", "nope")
    assert not (tmp_path / "r.html").exists()


# ----- layered models ------------------------------------------------------------------------

LAYERED = """name = "tiny-model"
devices = 2
microbatches = 4
[[layers]]
name = "embed"
t_f = 1.0
t_b = 1.0
t_w = 0.5
m_b = 2.0
m_w = 1.0
static = 1.0
[[layers]]
name = "block"
t_f = 2.0
t_b = 2.0
t_w = 1.0
m_b = 3.0
m_w = 1.0
static = 2.0
count = 3
"""


def test_a_layered_model_is_evaluated_on_plans_even_split_and_says_so(capsys, tmp_path):
    from zbopt.layers import load_model
    from zbopt.plan import even_split
    path = tmp_path / "model.toml"
    path.write_text(LAYERED)
    code, out, err = run(capsys, "simulate", path, "-s", "1f1b", "--json")
    assert code == 0
    # plan's even baseline: the 3 blocks spread 2 + 1, the embedding with the first stage
    assert "layered model" in err and "the even split" in err and " 3+1 layers" in err \
        and "zbopt plan" in err
    model = load_model(path)
    assert even_split(model) == (3, 1)
    expected = model.instance(even_split(model))
    data = json.loads(out)
    from zbopt.registry import run as run_method
    assert data["span"] == run_method("1f1b", expected).span
    # the library's loader refuses it with the same pointer
    with pytest.raises(Exception, match="zbopt plan"):
        load_instance(path)


# ----- what a person can act on --------------------------------------------------------------

def test_version(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith("zbopt ")


def test_shipped_instances_by_name(capsys):
    names = set(shipped_instances())
    sources = {p.stem: p for p in (ROOT / "instances").glob("*/*.toml")
               if p.parent.name in ("paper", "unit", "models")}
    assert names == set(sources)
    for name, path in shipped_instances().items():
        # the installed copies are the repository's instances, byte for byte
        assert path.read_bytes() == sources[name].read_bytes(), name
    assert default_instance_path().stem in names
    code, out, _ = run(capsys, "compare", "zb-6.2b-p8-m32", "--json", "--methods", "zb-h1")
    assert code == 0
    row, = json.loads(out)
    assert row["span"] == run_method_span("zb-h1", load_instance(sources["zb-6.2b-p8-m32"]))
    code, out, _ = run(capsys, "instances", "--json")
    listed = {r["name"]: r for r in json.loads(out)}
    assert set(listed) == names
    # the layered model is listed with its layer count (embedding, 16 blocks, output), the
    # per-stage instances without one
    assert (listed["blocks16-p4"]["group"], listed["blocks16-p4"]["layers"]) == ("models", 18)
    assert listed["zb-6.2b-p8-m32"]["layers"] is None
    code, out, _ = run(capsys, "instances")
    assert code == 0 and "zb-6.2b-p8-m32" in out and "(default)" in out


def run_method_span(name: str, instance: Instance) -> float:
    from zbopt.registry import run as run_method
    return run_method(name, instance).span


def test_methods_lists_the_registry(capsys):
    from zbopt.registry import methods
    code, out, _ = run(capsys, "methods", "--json")
    listed = {r["name"]: r for r in json.loads(out)}
    assert set(listed) == set(methods())
    for name, method in methods().items():
        assert listed[name]["kind"] == method.kind
        assert listed[name]["description"] == method.description
    assert listed["zb-v"]["placements"] == ["v"]
    code, out, _ = run(capsys, "methods", "--kind", "solver", "--json")
    assert {r["name"] for r in json.loads(out)} == set(methods("solver"))


def test_compare_ends_with_a_verdict_with_units_and_a_legend(capsys, tmp_path):
    path = tmp_path / "paper.toml"
    path.write_text(default_instance_path().read_text())
    code, out, _ = run(capsys, "compare", path, "--methods", "1f1b,zb-h1,zb-v,gpipe")
    assert code == 0
    from zbopt.compare import best_of, compare
    rows = compare(load_instance(path), ["1f1b", "zb-h1", "zb-v", "gpipe"])
    best = best_of(rows)
    own = best_of(rows, placement="contiguous")
    assert best.method == "zb-v" and own.method == "zb-h1"  # so both lines must show
    lines = out.strip().splitlines()
    assert f"verdict: use zb-v (v placement): span {best.span:,.1f} us" in out \
        or f"verdict: use zb-v (v placement): span {int(best.span):,} us" in out
    assert f"on the instance's own placement (contiguous): zb-h1, span {int(own.span):,} us" in out
    assert "span (us)" in out and "peak memory (sb)" in out
    assert any(line.startswith("span: ") and "bubble rate" in line for line in lines)
    assert lines[-2].startswith("verdict:")


def test_compare_verdict_when_nothing_fits(capsys, tmp_path):
    path = tmp_path / "tight.toml"
    path.write_text("devices = 2\nmicrobatches = 4\nm_b = 2\nm_w = 1\nmemory_cap = 2\n" + COSTS)
    code, out, _ = run(capsys, "compare", path, "--methods", "gpipe")
    assert code == 0 and "verdict: no schedule fits the memory cap" in out


@pytest.mark.slow
def test_compare_solve_names_the_scope_of_optimality(capsys, tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text("devices = 2\nmicrobatches = 3\nm_b = 2\nm_w = 1\nmemory_cap = \"2p\"\n"
                    + COSTS)
    code, out, _ = run(capsys, "compare", path, "--methods", "1f1b", "--solve",
                       "--time-limit", "10")
    assert code == 0
    assert "cpsat: span" in out and "optimal among contiguous schedules" in out


# ----- progress on stderr --------------------------------------------------------------------

class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_quiet_when_piped_unless_asked(capsys):
    code, out, err = run(capsys, "solve", UNIT, "--time-limit", "5", "--json")
    assert code == 0 and err == ""
    json.loads(out)  # stdout stays a clean document
    code, out, err = run(capsys, "solve", UNIT, "--time-limit", "5", "--json", "--progress")
    assert code == 0
    lines = err.strip().splitlines()
    assert lines and all(line.startswith("zbopt: cpsat: ") for line in lines)
    assert any("bounds" in line for line in lines) and any("warm start" in line for line in lines)
    assert "incumbent" in lines[-1] and "bound" in lines[-1]
    json.loads(out)
    code, out, err = run(capsys, "solve", UNIT, "--time-limit", "5", "--progress", "--quiet")
    assert code == 0 and err == ""


def test_compare_progress_names_each_method(capsys):
    code, _, err = run(capsys, "compare", UNIT, "--methods", "1f1b,zb-h1", "--progress")
    assert code == 0
    assert "compare: 1f1b (1/2)" in err and "compare: zb-h1 (2/2)" in err


def test_progress_on_a_terminal_rewrites_one_line_and_clears_it():
    stream = FakeTTY()
    report = Progress(True, stream, tick=60)
    report.update("phase one")
    callback = report.solver("cpsat", "us")
    callback({"phase": "search", "incumbent": 120.0, "bound": 100.0, "gap": 1 / 6})
    report.done()
    text = stream.getvalue()
    assert "\n" not in text and text.count("\r\x1b[K") == 3
    assert "zbopt: cpsat: search  incumbent 120 us  bound 100 us  gap 16.67%" in text
    assert text.endswith("\r\x1b[K")


def test_progress_from_args():
    class Args:
        progress = False
        quiet = False
    assert Progress.from_args(Args(), FakeTTY()).enabled
    assert not Progress.from_args(Args(), io.StringIO()).enabled
    Args.progress = True
    assert Progress.from_args(Args(), io.StringIO()).enabled
    Args.quiet = True
    assert not Progress.from_args(Args(), FakeTTY()).enabled


def test_console_script_reports_bad_bytes_without_a_traceback(tmp_path):
    path = tmp_path / "noise.json"
    path.write_bytes(bytes(range(256)))
    proc = subprocess.run([sys.executable, "-m", "zbopt", "compare", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1


@pytest.mark.slow
def test_report_progress_names_each_chart(capsys, tmp_path):
    code, out, err = run(capsys, "report", UNIT, "-o", tmp_path / "r.html", "--methods",
                         "1f1b,zb-h1", "--progress")
    assert code == 0 and "wrote" in out
    assert "report: chart 1/3: all methods stacked" in err
    assert "chart 2/3: " in err and "chart 3/3: " in err


@pytest.mark.parametrize("err, line, why, shown", [
    (RuntimeError(), "", "RuntimeError", "RuntimeError"),
    (RuntimeError("  \n\n  disk full  \nmore"), "disk full", "disk full", "RuntimeError: disk full"),
    (KeyError("x"), "'x'", "'x'", "KeyError: 'x'"),
    (ValueError(" \n "), "", "ValueError", "ValueError"),
])
def test_another_librarys_exception_is_shown_by_its_first_non_blank_line(err, line, why, shown):
    from zbopt.errors import described, first_line, reason
    assert (first_line(err), reason(err), described(err)) == (line, why, shown)


def test_a_wrapped_config_error_is_shown_by_its_innermost_cause():
    from zbopt.hf_config import innermost_reason
    try:
        try:
            raise ValueError("\nhead_dim must divide hidden_size")
        except ValueError as inner:
            raise RuntimeError("validation failed") from inner
    except RuntimeError as outer:
        assert innermost_reason(outer) == "head_dim must divide hidden_size"


def test_sizes_in_messages_read_in_the_files_unit_and_in_bytes():
    from zbopt.sizes import readable
    assert readable(60600090624, "B") == "60,600,090,624 B (60.6 GB)"
    assert readable(7200, "MB") == "7,200 MB (7.2 GB)"
    assert readable(500, "MB") == "500 MB"  # already in its own unit
    assert readable(1200.2, "MB", at_least=True) == "1,201 MB (1.2 GB)"  # a cap never rounds down
    assert readable(12.5, "") == "12.5" and readable(6000, "sb") == "6,000 sb"
    assert readable(2.6666667, "") == "2.66667" and readable(2.6666667, "", at_least=True) == "2.66667"
    assert readable(2.6666641, "", at_least=True) == "2.66667" and readable(3.0, "", True) == "3"
