"""Nightly-style fuzzing: only memform's own errors may escape, each located, never a hang.

    python bench/fuzz.py [--inputs 100000] [--seed 0]

Feeds random and mutated rule files (tokens of the real library dropped, swapped,
duplicated), random ``--set`` values, random Hugging Face config.json documents and random
command lines to memform, and counts escapes: any exception that is not an EngineError,
an EngineError without a message, or an input that took longer than the per-input limit.
Exits 1 if anything escaped.
"""
from __future__ import annotations

import argparse
import io
import json
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine  # noqa: E402
from engine import fast  # noqa: E402
from engine.cli import main as cli_main  # noqa: E402
from engine.errors import EngineError  # noqa: E402
from engine.hfconfig import read_config  # noqa: E402
from engine.model import parse_setting  # noqa: E402
from engine.parser import data_path, parse_text  # noqa: E402

PER_INPUT_SECONDS = 10
LIBRARY = [(p.name, p.read_text()) for p in sorted(data_path("formulas").glob("*.mem"))]
TOKENS = " ".join(text for _, text in LIBRARY).split()
NAMES = sorted({t for t in TOKENS if t.isidentifier()})
WEIRD = ["1e400", "nan", "inf", "-0", "1e-400", "__import__('os').system('true')", "lambda: 1",
         "80 GiB", "2^64", "10^10^10", "0x10", "１２", "∞", "", " ", "=", "true", "None", "S(\"1\")",
         "micro_batch", "(1", "1)", "9" * 400, "-1", "0.5", "1/0", "0/0", "ceil(1.5)", "max(1)",
         "2GB * 3", "80 GB - 1 GB", "4/2", "-(2)", "2^-1", "0^-1", "3 B / 1 B", "adamw", "bf16",
         "2^0.5", "1 GB / 0", "(((((1)))))", "1e9 B", "GB", "8 8", "3 + adamw"]


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout()


def mutate(text: str, rng: random.Random) -> str:
    toks = text.split(" ")
    for _ in range(rng.randint(1, 6)):
        i = rng.randrange(len(toks))
        op = rng.random()
        if op < 0.3:
            del toks[i]
        elif op < 0.6:
            j = rng.randrange(len(toks))
            toks[i], toks[j] = toks[j], toks[i]
        elif op < 0.8:
            toks.insert(i, toks[i])
        else:
            toks[i] = rng.choice(TOKENS + WEIRD)
        if not toks:
            toks = [""]
    return " ".join(toks)


def random_text(rng: random.Random) -> str:
    alphabet = 'rule input option check preset dtype if then else match=+-*/^(){}[],:"#_ xyz12.\nBGi<>!'
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))


def random_config(rng: random.Random) -> str:
    base = json.loads((Path(__file__).resolve().parents[1] / "tests/configs/llama-2-7b.json").read_text())
    keys = list(base) + ["num_local_experts", "n_routed_experts", "q_lora_rank", "n_embd", "bogus"]
    for _ in range(rng.randint(1, 5)):
        key = rng.choice(keys)
        op = rng.random()
        if op < 0.3:
            base.pop(key, None)
        else:
            base[key] = rng.choice([0, -1, 1, 2**70, 1.5, "x", None, True, [], {}, "llama", "gpt2",
                                    "deepseek_v3", "mixtral", 4096])
    text = json.dumps(base)
    if rng.random() < 0.1:
        text = text[: rng.randrange(len(text) + 1)]
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    lib = engine.load()
    compiled = fast.compile_library(lib)
    signal.signal(signal.SIGALRM, _alarm)
    counts = {"random rule text": 0, "mutated library files": 0, "resolved mutations": 0,
              "--set values": 0, "config.json documents": 0, "command lines": 0}
    escapes: list[str] = []
    tmp = Path(tempfile.mkdtemp())
    n = args.inputs
    plan = [("mutated library files", int(n * 0.25)), ("resolved mutations", max(1, n // 500)),
            ("--set values", int(n * 0.15)), ("config.json documents", max(1, n // 50)),
            ("command lines", max(1, n // 500))]
    plan.insert(0, ("random rule text", max(0, n - sum(c for _, c in plan))))  # the rest: n in all
    start = time.monotonic()
    for kind, count in plan:
        for i in range(count):
            signal.alarm(PER_INPUT_SECONDS)
            sample = ""
            try:
                if kind == "random rule text":
                    sample = random_text(rng)
                    parse_text(sample, "fuzz.mem")
                elif kind == "mutated library files":
                    name, text = rng.choice(LIBRARY)
                    sample = mutate(text, rng)
                    parse_text(sample, name)
                elif kind == "resolved mutations":
                    victim = rng.randrange(len(LIBRARY))
                    trial = engine.Library()
                    for j, (name, text) in enumerate(LIBRARY):
                        trial.add_text(mutate(text, rng) if j == victim else text, name)
                    trial.resolve()
                elif kind == "--set values":
                    sample = f"{rng.choice(NAMES + ['bogus', ''])}={rng.choice(WEIRD + [str(rng.randint(-5, 10**6))])}"
                    try:  # the sympy-free path must agree with the full one, or decline
                        quick = fast._setting(compiled, sample)
                    except fast.Unsupported:
                        quick = None
                    try:
                        full = parse_setting(lib, sample)
                    except EngineError:
                        full = None
                    if quick is not None and (full is None or quick != (full[0], fast._plain(full[1]))):
                        escapes.append(f"fast path: {quick} but full path {full} for {sample!r}")
                    if full is None:
                        parse_setting(lib, sample)  # the error, checked below
                elif kind == "config.json documents":
                    sample = random_config(rng)
                    path = tmp / "config.json"
                    path.write_text(sample)
                    read_config(path, lib)
                else:
                    argv = [rng.choice(["estimate", "solve", "show", "plan", "presets", "x"]),
                            *rng.sample(["llama2-7b", "max", "min", "micro_batch", "dp", "--gpu", "h100-80g",
                                         "--set", "zero_stage=3", "--json", "--gpus", "8", "--target",
                                         "total", "--latex", "1e400", "--capacity", "80GB"], rng.randint(0, 6))]
                    sample = " ".join(argv)
                    code = cli_main(argv, io.StringIO(), io.StringIO())
                    if code not in (0, 1, 2):
                        escapes.append(f"{kind}: exit code {code} for {sample!r}")
            except EngineError as exc:
                if not exc.message:
                    escapes.append(f"{kind}: error without a message for {sample[:200]!r}")
            except Timeout:
                escapes.append(f"{kind}: no answer within {PER_INPUT_SECONDS} s for {sample[:200]!r}")
            except Exception as exc:  # an escape: a traceback a user would see
                escapes.append(f"{kind}: {type(exc).__name__}: {exc} for {sample[:200]!r}")
            finally:
                signal.alarm(0)
            counts[kind] += 1
    total = sum(counts.values())
    for kind, count in counts.items():
        print(f"{kind:24} {count:8,}")
    print(f"{'total':24} {total:8,} inputs in {time.monotonic() - start:.0f} s, {len(escapes)} escapes")
    for line in escapes[:20]:
        print("  " + line)
    return 1 if escapes else 0


if __name__ == "__main__":
    raise SystemExit(main())
