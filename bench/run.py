"""memform benchmarks, each a ratio against a baseline measured in the same run.

    python bench/run.py [--configs 10000000]

1. sweep: the per-GPU training total of Llama-2-7B over N configurations (micro_batch,
   seq_len, dp, tp, pp, zero_stage, recompute) in one compiled call, against the same
   formula hand-written in numpy (here only, as the baseline) and against a per-configuration
   loop of sympy ``subs`` (the naive symbolic approach, timed on a sample); the results are
   checked against the exact evaluation on a random sample.
2. solve: a warm ``solve max micro_batch``, ``max seq_len`` and ``min dp``, against the
   first (cold) call that derives the closed form.
3. cold start: ``memform estimate llama2-7b --gpu h100-80g`` in a new process with the
   cache warm (checked not to import sympy), against ``python -c "import numpy"``.
4. library load: parsing, resolving and composing every top-level rule from scratch, in a
   new process, against ``python -c "import sympy"``; and the same from the cached snapshot.
5. exact evaluation from Python: ``engine.evaluate`` in a loop over distinct configurations
   (Llama-2-7B's total, micro_batch, seq_len and dp varying), against the same loop through
   ``Scenario.with_values(...).evaluate`` (timed on a sample), and the memory the loop adds.
6. interactive commands in a new process, the cache warm, against ``python -c "import numpy"``
   (issue 16's baseline): ``show``, ``solve``, ``plan`` and ``docs`` asked again, ``check``, and
   ``estimate``, ``show``, ``solve`` and ``plan`` with a value not seen before.
7. the first run ever: each command in a new process with an empty cache and the files built
   with the package (engine/_built, as ``pip install`` leaves them), against ``python -c
   "import sympy"`` (issue 16's baseline for a first run).
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import engine  # noqa: E402
from engine.compile.model import Scenario  # noqa: E402
from engine.answers.solve import solve  # noqa: E402

SWEPT = ("micro_batch", "seq_len", "dp", "tp", "pp", "zero_stage", "recompute")


def hand_numpy(b, s, dp, tp, pp, zero, rec):
    """Llama-2-7B's total under the default options, written out by hand (baseline only)."""
    P, L, h, V = 6_738_415_616, 32, 4096, 32000
    layer = 4 * h * h + 3 * h * 11008 + 2 * h
    lps = np.ceil(L / pp)
    stage = np.where(pp == 1, 1.0, (lps * layer + V * h + h) / P)  # the last stage: head + norm
    whole = (2 * L + 1) * h / P  # the norms, whole on every tp rank (in each stage's proportion)
    params = P * stage * ((1 - whole) / tp + whole)
    st1, st2, st3 = (np.where(zero >= k, dp, 1.0) for k in (1, 2, 3))
    steps = 4 * 291 * lps / L  # AdamW's fp32 step: 291 parameter tensors, the stage's share
    states = params * (2 / st3 + 4 / st1 + 2 / st2 + 8 / st1) + steps
    sbh = s * b * h
    full = rec == 2
    layer_act = sbh * (10 + 24 / tp)
    act = pp * lps * np.where(full, 2 * sbh, layer_act) + np.where(full, layer_act, 0)
    logits = s * b * V * 4 / tp + 4 * sbh
    tensors = states + act + logits
    comm = np.where((zero == 3) & (dp > 1), 2 * ((layer - 2 * h) / tp + 2 * h), 0)  # a gathered layer
    return tensors + 512 * 2**20 + comm + 0.1 * tensors


def best(fn, repeat=3):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def wall(cmd, repeat=5, env=None):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT, env={**os.environ, **(env or {})})
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", type=int, default=10_000_000)
    args = ap.parse_args()
    n = args.configs
    rows = []
    lib = engine.load()
    scenario = Scenario.create(lib, "llama2-7b", "h100-80g")
    rng = np.random.default_rng(0)
    arrays = {"micro_batch": rng.integers(1, 65, n), "seq_len": rng.integers(128, 32769, n),
              "dp": 2 ** rng.integers(0, 8, n), "tp": 2 ** rng.integers(0, 4, n), "pp": 2 ** rng.integers(0, 3, n),
              "zero_stage": rng.integers(0, 4, n), "recompute": rng.integers(0, 3, n)}
    arrays = {k: v.astype(float) for k, v in arrays.items()}

    # 1. sweep
    scenario.sweep("total", **{k: v[:8] for k, v in arrays.items()})  # compile once, outside the timing
    t_sweep = best(lambda: scenario.sweep("total", **arrays))
    out = scenario.sweep("total", **arrays)
    t_hand = best(lambda: hand_numpy(*arrays.values()))
    assert np.allclose(hand_numpy(*arrays.values()), out, rtol=1e-12), "hand-written baseline disagrees"
    expr = scenario.expr("total", keep=SWEPT)
    symbols = [lib._input_syms[k] if k in lib.inputs else lib._option_syms[k] for k in SWEPT]
    sample = rng.integers(0, n, 100)
    t = time.perf_counter()
    for i in sample:
        expr.subs({sym: int(arrays[k][i]) for sym, k in zip(symbols, SWEPT)})
    t_subs = (time.perf_counter() - t) / len(sample)
    for i in sample[:20]:  # the compiled path equals the exact one
        values = {k: (lib.options[k].choice_of(int(arrays[k][i])) if k in lib.options else int(arrays[k][i]))
                  for k in SWEPT}
        exact = scenario.with_values(**values).evaluate("total")
        assert math.isclose(float(exact), out[i], rel_tol=1e-12), (values, exact, out[i])
    rate = n / t_sweep
    rows.append(("sweep: configurations / s (one core)", f"{rate:,.0f}", f"{n / t_hand:,.0f} (hand numpy)",
                 f"{t_hand / t_sweep:.2f}x", "python bench/run.py"))
    rows.append(("sweep vs per-configuration sympy subs", f"{rate:,.0f}", f"{1 / t_subs:,.0f} (subs loop)",
                 f"{rate * t_subs:,.0f}x", "python bench/run.py"))

    # 2. solve
    queries = [("max", "micro_batch", {"zero_stage": 3, "dp": 8, "seq_len": 4096}),
               ("max", "seq_len", {"zero_stage": 3, "dp": 8, "micro_batch": 1, "attention": "eager"}),
               ("min", "dp", {"zero_stage": 3, "micro_batch": 1, "seq_len": 4096})]
    for direction, unknown, values in queries:
        s = scenario.with_values(**values)
        t = time.perf_counter()
        solve(s, direction, unknown)
        cold = time.perf_counter() - t
        warm = best(lambda: solve(s, direction, unknown), repeat=20)
        rows.append((f"solve {direction} {unknown} (warm)", f"{warm * 1e3:.2f} ms", f"{cold * 1e3:.0f} ms (cold)",
                     f"{cold / warm:,.0f}x", "python bench/run.py"))

    # 3. cold start: a new process each time, the cache warm (one run first fills it)
    memform = [sys.executable, "-m", "engine", "estimate", "llama2-7b", "--gpu", "h100-80g"]
    probe = [sys.executable, "-c", "import sys, io; from engine.cli import main; main(sys.argv[1:], io.StringIO()); "
             "sys.exit('sympy.core' in sys.modules)", *memform[3:]]
    subprocess.run(probe, cwd=ROOT)  # warm
    assert subprocess.run(probe, cwd=ROOT).returncode == 0, "estimate imported sympy with a warm cache"
    t_cli = wall(memform)
    t_numpy = wall([sys.executable, "-c", "import numpy"])
    rows.append(("cold start: memform estimate llama2-7b --gpu h100-80g", f"{t_cli:.2f} s",
                 f"{t_numpy:.2f} s (import numpy)", f"{t_cli / t_numpy:.1f}x", " ".join(memform[1:])))

    # 4. library load
    # a new process: interpreter start, imports, parse, resolve, compose; it leaves with
    # os._exit, so the interpreter's teardown (freeing every object) is not counted
    load = [sys.executable, "-c", "import os, engine; lib = engine.load(); "
            "[lib.compose(r) for r in ('total', 'model_states', 'activations', 'kv_cache')]; os._exit(0)"]
    t_load = wall(load, repeat=3, env={"MEMFORM_NO_CACHE": "1"})  # from scratch: no cached library
    t_sympy = wall([sys.executable, "-c", "import os, sympy; os._exit(0)"], repeat=3)
    rows.append(("library load, cache cold: parse, resolve, compose", f"{t_load:.2f} s",
                 f"{t_sympy:.2f} s (import sympy)", f"{t_load / t_sympy:.1f}x", "python bench/run.py"))

    t_snap = wall(load, repeat=3)  # the snapshot this process's engine.load() left in the cache
    rows.append(("library load, cache warm: snapshot, compose", f"{t_snap:.2f} s",
                 f"{t_sympy:.2f} s (import sympy)", f"{t_snap / t_sympy:.1f}x", "python bench/run.py"))

    # 5. exact evaluation from Python, in a loop
    import tracemalloc
    configs = [(1 + i % 64, 128 + 17 * i, 1 << (i % 8)) for i in range(100_000)]  # issue 16: flat after 100,000
    engine.evaluate("llama2-7b", "total", micro_batch=1, seq_len=1, dp=1)  # the program, built once
    t = time.perf_counter()
    for b, sl, d in configs:
        engine.evaluate("llama2-7b", "total", micro_batch=b, seq_len=sl, dp=d)
    t_exact = (time.perf_counter() - t) / len(configs)
    tracemalloc.start()  # the memory, in a second loop over new configurations (tracing slows it)
    before = tracemalloc.get_traced_memory()[0]
    for b, sl, d in configs:
        engine.evaluate("llama2-7b", "total", micro_batch=b, seq_len=sl + 1, dp=d)
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    t = time.perf_counter()
    base = Scenario.create(lib, "llama2-7b")
    for b, sl, d in configs[:100]:
        want = base.with_values(micro_batch=b, seq_len=sl, dp=d).evaluate("total")
        assert engine.evaluate("llama2-7b", "total", micro_batch=b, seq_len=sl, dp=d) == want
    t_scenario = (time.perf_counter() - t) / 100
    rows.append(("exact evaluation from Python: configurations / s", f"{1 / t_exact:,.0f}",
                 f"{1 / t_scenario:,.0f} (Scenario.evaluate)", f"{t_scenario / t_exact:,.0f}x",
                 "python bench/run.py"))
    rows.append(("memory added by 100,000 distinct configurations", f"{grown / 1024:,.0f} KiB", "-", "-",
                 "python bench/run.py"))

    # 6. interactive commands, cache warm, against the baseline (import numpy): asked
    # again (show, solve and plan print the answer kept from their first run, docs the kept
    # reference), and with a value not seen before (derived anew). Each run of a command is
    # paired with a run of the baseline just before it, and the ratio is of the two medians, so
    # that the load of this shared machine drifting during the benchmark moves both alike.
    import random
    fresh = iter(random.sample(range(2, 2049), 60))  # values no cache has seen (x 8: 16 to 16,384)
    commands = [(["show", "total", "llama2-70b"], None),
                (["solve", "max", "micro_batch", "llama2-7b", "--gpu", "h100-80g", "--set", "zero_stage=3",
                  "--set", "dp=8", "--set", "seq_len=4096"], None),
                (["plan", "llama2-70b", "--gpu", "h100-80g", "--gpus", "64"], None),
                (["docs", "--out", "/tmp/memform-bench-docs"], None),
                (["check"], None),
                (["estimate", "llama2-7b", "--gpu", "h100-80g", "--set", "dp=N"], "dp=N"),
                (["estimate", "llama2-7b", "--gpu", "h100-80g", "--set", "zero_stage=3", "--set", "dp=N"], "dp=N"),
                (["show", "total", "llama2-70b", "--set", "dp=N"], "dp=N"),
                (["solve", "max", "micro_batch", "llama2-7b", "--gpu", "h100-80g", "--set", "zero_stage=3",
                  "--set", "dp=N", "--set", "seq_len=4096"], "dp=N"),
                (["solve", "min", "dp", "llama2-70b", "--gpu", "h100-80g", "--set", "zero_stage=3", "--set",
                  "recompute=full", "--set", "seq_len=N"], "seq_len=N"),
                (["solve", "min", "tp", "llama2-70b", "--gpu", "h100-80g", "--set", "zero_stage=3", "--set",
                  "dp=N"], "dp=N"),
                (["plan", "llama2-70b", "--gpu", "h100-80g", "--gpus", "N"], "N")]
    numpy_cmd = [sys.executable, "-c", "import numpy"]

    def timed(cmd) -> float:
        t = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, capture_output=True, check=True)
        return time.perf_counter() - t

    for argv, new in commands:
        if new is None:
            cmd = [sys.executable, "-m", "engine", *argv]
            subprocess.run(cmd, cwd=ROOT, capture_output=True)  # warm
            runs = 1 if argv[0] == "check" else 5
            what = "check: 30 checks" if argv[0] == "check" else f"{' '.join(argv[:2])}, asked again"
        else:
            runs = 5
            what = f"{' '.join(argv[:3 if argv[0] == 'solve' else 2])}, {new.split('=')[0] if '=' in new else '--gpus'} not seen before"
            if "zero_stage=3" in argv and argv[0] == "estimate":
                what = f"{' '.join(argv[:2])} ZeRO-3, dp not seen before (its column written anew)"
        base, mine = [], []
        for _ in range(runs):
            if new is not None:
                cmd = [sys.executable, "-m", "engine", *[a.replace("N", str(8 * next(fresh))) if a == new else a
                                                         for a in argv]]
            base.append(timed(numpy_cmd))
            mine.append(timed(cmd))
        t_cmd, t_base = statistics.median(mine), statistics.median(base)
        rows.append((f"memform {what} (cache warm)", f"{t_cmd:.3f} s", f"{t_base:.3f} s (import numpy)",
                     f"{t_cmd / t_base:.2f}x", " ".join(argv)))

    # 7. the first run ever: an empty cache, the files built with the package (engine/_built,
    # what `pip install` leaves there; rebuilt here first when the sources changed since)
    import tempfile
    from engine import _build_hook, store
    from engine.answers import quick
    from engine.lang import grammar
    if (store.read_built("compiled", store.source_key()) is None or store.read_built("docs", quick._docs_key("md")) is None
            or not (store.BUILT / grammar.standalone_name()).is_file()):
        subprocess.run([sys.executable, "-c", _build_hook.BUILD, str(store.BUILT)], cwd=ROOT, check=True)
    first = [["estimate", "llama2-7b", "--gpu", "h100-80g"], ["estimate", "llama2-7b", "--gpu", "h100-80g", "--set", "dp=3"],
             ["show", "total", "llama2-70b"],
             ["solve", "max", "micro_batch", "llama2-7b", "--gpu", "h100-80g", "--set", "zero_stage=3", "--set", "dp=8",
              "--set", "seq_len=4096"],
             ["plan", "llama2-70b", "--gpu", "h100-80g", "--gpus", "64"], ["check"], ["docs", "--out", "/tmp/memform-bench-docs"]]
    for argv in first:
        times = []
        for _ in range(1 if argv[0] in ("docs", "check") else 3):
            with tempfile.TemporaryDirectory() as empty:
                t = time.perf_counter()
                subprocess.run([sys.executable, "-m", "engine", *argv], cwd=ROOT, capture_output=True, check=True,
                               env={**os.environ, "XDG_CACHE_HOME": empty})
                times.append(time.perf_counter() - t)
        t_first = statistics.median(times)
        rows.append((f"memform {' '.join(argv[:2])}{' --set ' + argv[-1] if argv[-2:-1] == ['--set'] and argv[0] == 'estimate' else ''}, first run ever",
                     f"{t_first:.2f} s", f"{t_sympy:.2f} s (import sympy)", f"{t_first / t_sympy:.2f}x", " ".join(argv)))

    widths = [max(len(r[i]) for r in rows + [HEAD]) for i in range(5)]
    for r in [HEAD, tuple("-" * w for w in widths)] + rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
    return 0


HEAD = ("benchmark", "memform", "baseline", "ratio", "command")

if __name__ == "__main__":
    raise SystemExit(main())
