"""Fuzz every zbopt command that reads a file; write the counts to results/fuzz.md.

Usage: python benchmarks/fuzz_cli.py [--cases N] [--seed S] [--timeout S] [--commands a,b]

Each case feeds one command either random bytes or a valid file (an instance in TOML or
JSON, a schedule file, a PyTorch CSV, a sweep spec, a sweep's results.jsonl, a layered model,
a transformers config) mutated at random: bytes flipped, spans deleted or repeated, tokens
such as "nan", "-1", "1e309", "[", "\\x00" or "é" (in Latin-1) inserted, numbers replaced,
the file truncated. The command runs in this process through zbopt.cli.main with stdout and
stderr captured. An outcome is one of: exit 0; exit 2 with one line on stderr (a refusal);
another exit status; exit 2 with more than one line; a traceback (an exception out of main);
a timeout (the case ran past --timeout; the solver commands get 2 s limits, so a timeout is
a command that does not keep to them). Every traceback is listed with its reproducer's
mutation so it can be replayed.

The results go to the section of results/fuzz.md between `<!-- cli -->` and `<!-- /cli -->`;
the rest of the file is kept as it is.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import re
import shutil
import signal
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "fuzz.md"
BEGIN, END = "<!-- cli -->", "<!-- /cli -->"
TOKENS = [b"nan", b"-1", b"0", b"1e309", b"99999999", b"inf", b"-inf", b"[", b"]", b"{", b"}",
          b'"', b"=", b",", b"\n", b"\x00", b"true", b"0p", b"-0.5p", b"\xe9", b"[[layers]]",
          b"null", b"1.5", b"2", b"\"1p\"", b"\"v\"", b"\"dualpipe\"", b"\"interleaved\""]
OUTCOMES = ("exit 0", "refused (exit 2, one line)", "other exit", "exit 2, several lines",
            "traceback", "timeout")


class Timeout(BaseException):
    """Raised in the case by the alarm; a BaseException so the command cannot swallow it."""


@dataclass(frozen=True)
class Target:
    """One command line; {in} is the fuzzed file, {out}/{dir} fresh output paths, and the
    other fields name the valid files the command also needs."""

    name: str
    seed: str  # which valid file is mutated
    argv: tuple[str, ...]
    mine: bool = True  # the CLI engineer's command (others are reported, not fixed here)
    weight: float = 1.0  # share of the cases (heavy commands get fewer)


TARGETS = [
    Target("compare", "instance.toml", ("compare", "{in}")),
    Target("compare (json)", "instance.json", ("compare", "{in}", "--json")),
    Target("simulate", "instance.toml", ("simulate", "{in}", "-s", "zb-h1", "--out", "{out}.json")),
    Target("solve", "instance.toml", ("solve", "{in}", "--time-limit", "2", "--threads", "1"),
           weight=0.5),
    Target("frontier", "instance.toml", ("frontier", "{in}", "--caps", "1p,2p", "--time-limit",
                                         "2"), weight=0.3),
    Target("report", "instance.toml", ("report", "{in}", "-o", "{out}.html", "--methods",
                                       "1f1b,zb-h1"), weight=0.3),
    Target("evaluate", "schedule.json", ("evaluate", "{in}")),
    Target("evaluate --torch-csv (csv)", "torch.csv",
           ("evaluate", "{instance.toml}", "--torch-csv", "{in}")),
    Target("evaluate --torch-csv (instance)", "instance.toml",
           ("evaluate", "{in}", "--torch-csv", "{torch.csv}")),
    Target("plot", "schedule.json", ("plot", "{in}", "-o", "{out}.png"), weight=0.3),
    Target("export", "schedule.json", ("export", "{in}", "--torch-csv", "{out}.csv",
                                       "--chrome-trace", "{out}.trace.json"), mine=False),
    Target("verify-torch", "schedule.json", ("verify-torch", "{in}", "--timeout", "30"),
           mine=False, weight=0.1),
    Target("sweep", "spec.toml", ("sweep", "{in}", "--out", "{dir}", "--jobs", "1", "--quiet"),
           mine=False, weight=0.5),
    Target("sweep-report", "results.jsonl", ("sweep-report", "{indir}"), mine=False),
    Target("plan", "model.toml", ("plan", "{in}", "--time-limit", "2", "--quiet"), mine=False,
           weight=0.5),
    Target("estimate", "config.json", ("estimate", "{in}"), mine=False),
    Target("profile --hf-config", "tiny.json", ("profile", "--hf-config", "{in}", "--seq-len", "8",
                                                "--devices", "2", "--microbatches", "2", "--warmup",
                                                "0", "--repeat", "1", "--out", "{out}.toml"),
           mine=False, weight=0.3),
]


def make_seeds(folder: Path) -> dict[str, Path]:
    """Valid input files, made with zbopt itself where it writes them."""
    from zbopt.cli import main
    from zbopt.instance import load_instance
    folder.mkdir(parents=True, exist_ok=True)
    seeds = {}
    unit = ROOT / "instances" / "unit" / "unit-p4-m8.toml"
    seeds["instance.toml"] = folder / "instance.toml"
    shutil.copy(unit, seeds["instance.toml"])
    seeds["instance.json"] = folder / "instance.json"
    seeds["instance.json"].write_text(json.dumps(load_instance(unit).to_dict(), indent=1))
    seeds["schedule.json"] = folder / "schedule.json"
    quiet(lambda: main(["simulate", str(unit), "-s", "zb-h1", "--out", str(seeds["schedule.json"])]))
    seeds["torch.csv"] = folder / "torch.csv"
    quiet(lambda: main(["export", str(seeds["schedule.json"]), "--torch-csv", str(seeds["torch.csv"])]))
    seeds["spec.toml"] = folder / "spec.toml"
    seeds["spec.toml"].write_text(
        'name = "fuzz"\nmethods = ["1f1b", "zb-h1"]\n\n[base]\nname = "fuzz"\ndevices = 2\n'
        "microbatches = 4\nt_f = 1\nt_b = 1\nt_w = 1\nm_b = 2\nm_w = 1\n\n[axes]\n"
        'memory_cap = ["1p", "2p"]\n')
    sweep_dir = folder / "sweep"
    quiet(lambda: main(["sweep", str(seeds["spec.toml"]), "--out", str(sweep_dir), "--jobs", "1",
                        "--quiet"]))
    seeds["results.jsonl"] = sweep_dir / "results.jsonl"
    seeds["model.toml"] = folder / "model.toml"
    shutil.copy(ROOT / "instances" / "models" / "blocks16-p4.toml", seeds["model.toml"])
    seeds["config.json"] = folder / "config.json"
    seeds["config.json"].write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 256,
        "intermediate_size": 688, "num_attention_heads": 8, "num_key_value_heads": 8,
        "num_hidden_layers": 8, "vocab_size": 1000, "max_position_embeddings": 512,
        "torch_dtype": "bfloat16"}, indent=1))
    seeds["tiny.json"] = folder / "tiny.json"  # small enough to profile in a second
    seeds["tiny.json"].write_text(json.dumps({
        "model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
        "num_attention_heads": 2, "num_key_value_heads": 2, "num_hidden_layers": 2,
        "vocab_size": 64, "max_position_embeddings": 64}, indent=1))
    return {k: v for k, v in seeds.items() if v.exists()}


def quiet(fn):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return fn()


def mutate(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """One to four random edits of `data`, and a description of them."""
    done = []
    for _ in range(rng.randint(1, 4)):
        n = len(data)
        op = rng.choice(("flip", "delete", "repeat", "insert", "number", "truncate"))
        at = rng.randrange(n + 1) if n else 0
        if op == "flip" and n:
            at = min(at, n - 1)
            data = data[:at] + bytes([data[at] ^ (1 << rng.randrange(8))]) + data[at + 1:]
        elif op == "delete" and n:
            size = rng.randint(1, 16)
            data = data[:at] + data[at + size:]
        elif op == "repeat" and n:
            size = rng.randint(1, 32)
            data = data[:at] + data[at:at + size] * 2 + data[at + size:]
        elif op == "insert":
            data = data[:at] + rng.choice(TOKENS) + data[at:]
        elif op == "number":
            numbers = list(re.finditer(rb"-?\d+(\.\d+)?", data))
            if numbers:
                m = rng.choice(numbers)
                data = data[:m.start()] + rng.choice(TOKENS[:8] + [b"3", b"7", b"64"]) + data[m.end():]
        elif op == "truncate" and n:
            data = data[:at]
        done.append(f"{op}@{at}")
    return data, " ".join(done)


def run_case(argv: list[str], timeout: float) -> tuple[str, str]:
    """(outcome, detail) of one command line run in this process."""
    from zbopt.cli import main
    out, err = io.StringIO(), io.StringIO()

    def alarm(signum, frame):
        raise Timeout()
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    except Timeout:
        return "timeout", ""
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 2
    except Exception as exc:  # a traceback the user would see
        frames = traceback.extract_tb(exc.__traceback__)
        # the last frame in zbopt: where the package let the exception through
        ours = [f for f in frames if "/zbopt/" in f.filename] or frames
        frame = ours[-1]
        where = f"{frame.filename.split('/zbopt/')[-1]}:{frame.lineno} ({frame.name})"
        message = " ".join(str(exc).split())[:160]
        return "traceback", f"{type(exc).__name__}: {message} at zbopt/{where}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    lines = err.getvalue().strip().splitlines()
    if code == 0:
        return "exit 0", ""
    if code == 2:
        if len(lines) == 1:
            return "refused (exit 2, one line)", lines[0][:200]
        return "exit 2, several lines", " / ".join(lines)[:300]
    return "other exit", f"exit {code}: {' / '.join(lines)[:200]}"


def fill(target: Target, path: Path, seeds: dict[str, Path], work: Path, index: int) -> list[str]:
    out = work / f"out{index}"
    indir = work / f"in{index}"
    if target.seed == "results.jsonl":
        indir.mkdir()
        for f in seeds["results.jsonl"].parent.iterdir():
            if f.is_file() and f.name != "results.jsonl":
                shutil.copy(f, indir / f.name)
        shutil.copy(path, indir / "results.jsonl")
    values = {"in": str(path), "out": str(out), "dir": str(work / f"dir{index}"),
              "indir": str(indir), **{k: str(v) for k, v in seeds.items()}}
    return [re.sub(r"\{([^}]+)\}", lambda m: values[m.group(1)], a) for a in target.argv]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=60, help="cases per command of weight 1")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    parser.add_argument("--commands", default=None, help="comma list of target names")
    parser.add_argument("--no-write", action="store_true", help="print, do not write results")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    chosen = [t for t in TARGETS if args.commands is None or t.name in args.commands.split(",")]
    counts: dict[str, Counter] = defaultdict(Counter)
    seconds: dict[str, float] = defaultdict(float)
    problems: list[tuple[str, str, str, str]] = []
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        seeds = make_seeds(work / "seeds")
        index = 0
        for target in chosen:
            if target.seed not in seeds:
                counts[target.name]["no valid seed file"] += 1
                continue
            valid = seeds[target.seed].read_bytes()
            for case in range(max(1, round(args.cases * target.weight))):
                index += 1
                if case % 4 == 0:
                    data, how = rng.randbytes(rng.randint(0, 600)), "random bytes"
                else:
                    data, how = mutate(valid, rng)
                    how = f"mutated {target.seed}: {how}"
                suffix = Path(target.seed).suffix
                path = work / f"case{index}{suffix}"
                path.write_bytes(data)
                argv = fill(target, path, seeds, work, index)
                t0 = time.perf_counter()
                outcome, detail = run_case(argv, args.timeout)
                seconds[target.name] += time.perf_counter() - t0
                counts[target.name][outcome] += 1
                if outcome in ("traceback", "exit 2, several lines", "other exit", "timeout"):
                    keep = work.parent / f"zbopt-fuzz-{target.name.split()[0]}-{index}{suffix}"
                    shutil.copy(path, keep)
                    problems.append((target.name, outcome, " ".join(detail.split()),
                                     f"case {index}, {how} (kept as {keep})"))
                print(f"{target.name:<34} {case:>4} {outcome:<28} {detail[:90]}", flush=True)
    total = time.perf_counter() - began
    text = render(chosen, counts, seconds, problems, args, total)
    print(text)
    if not args.no_write:
        write_section(text)
        print(f"wrote the cli section of {RESULTS}")


def render(chosen, counts, seconds, problems, args, total) -> str:
    lines = [BEGIN, "## CLI fuzzing: every command that reads a file", "",
             f"`python benchmarks/fuzz_cli.py --cases {args.cases} --seed {args.seed} "
             f"--timeout {args.timeout:g}`: {sum(sum(c.values()) for c in counts.values())} cases "
             f"in {total:.0f} s on a shared 2-core machine (other work ran at the same time). "
             "A quarter of each command's cases are random bytes, the rest a valid file "
             "mutated (see the script's docstring). Wanted: only exit 0 and one-line refusals.",
             "", "| command | owner | cases | " + " | ".join(OUTCOMES) + " | seconds |",
             "|---|---|---|" + "---|" * len(OUTCOMES) + "---|"]
    for target in chosen:
        c = counts[target.name]
        lines.append(f"| {target.name} | {'cli' if target.mine else 'other'} | "
                     f"{sum(c.values())} | " + " | ".join(str(c[o]) for o in OUTCOMES)
                     + f" | {seconds[target.name]:.0f} |")
    lines.append("")
    if problems:
        lines += ["### Cases that were not exit 0 or a one-line refusal", ""]
        lines += [f"- {name}: {outcome}: {detail} -- {how}" for name, outcome, detail, how in problems]
    else:
        lines.append("Every case ended in exit 0 or a one-line refusal with exit status 2.")
    lines += ["", END]
    return "\n".join(lines)


def write_section(section: str) -> None:
    """Replace only the cli section of results/fuzz.md; keep everything else."""
    text = RESULTS.read_text() if RESULTS.exists() else "# Fuzzing\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(text)


if __name__ == "__main__":
    main()
