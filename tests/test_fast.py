"""The sympy-free estimate path (engine.answers.quick) answers exactly as the full path, or not at all."""
import io
import json
import os
import random
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.compile import compiler
from engine.lang import constants
from engine.compile.exact import evaluate_rules
from engine.answers import quick as fast
from engine.compile import trees
from engine.cli import main
from engine.errors import EngineError
from engine.compile.model import Scenario, parse_setting

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def compiled(lib):
    return compiler.compile_library(lib)


def _random_values(lib, rng: random.Random) -> dict:
    """Random option choices and workload sizes (some combinations are undefined: fine)."""
    values = {name: rng.choice(decl.choices) for name, decl in lib.options.items()}
    for name, choices in (("micro_batch", (1, 2, 3, 8, 32)), ("seq_len", (1, 511, 2048, 32768)),
                          ("dp", (1, 2, 8, 64)), ("tp", (1, 2, 8)), ("pp", (1, 2, 4)),
                          ("grad_accum", (1, 4)), ("pp_virtual", (1, 2))):
        if name in lib.inputs:
            values[name] = rng.choice(choices)
    return values


def _plain(values: dict) -> dict:
    return {n: v if isinstance(v, str) else Fraction(int(v.p), int(v.q)) for n, v in values.items()}


def test_every_rule_equals_the_exact_value(lib, compiled):
    """Every rule of the library, for every model preset on random scenarios: the Fraction
    value is the sympy value, and where the fast path declines, the full path has no number."""
    models = [name for kind, name in lib.presets if kind == "model"]
    assert len(models) >= 16
    for model in models:
        _compare_all_rules(lib, compiled, model)


def _compare_all_rules(lib, compiled, model):
    rng = random.Random(model)
    answered = declined = 0
    for _ in range(3):
        scenario = Scenario.create(lib, model, "h100-80g").with_values(**_random_values(lib, rng))
        values = _plain(scenario.values)
        for name in lib.rules:
            try:
                exact = scenario.evaluate(name)
            except EngineError:
                exact = None
            try:
                value = evaluate_rules(compiled, values, [name])[name]
            except constants.Unsupported:
                declined += 1
                assert exact is None, f"{name}: the fast path declined a value the full path has"
                continue
            assert exact is not None, f"{name}: the fast path gave a value the full path refuses"
            assert value == Fraction(int(exact.p), int(exact.q)), name
            answered += 1
    assert answered > 10 * declined  # the comparison is not vacuous


def test_the_formula_column_without_sympy_is_the_full_paths(lib, compiled):
    """The estimate's formula column as the path without sympy writes it (polynomials, from
    the compiled form, whose names may include a ceiling, Max or Min no value decides) is the
    text the full path derives with sympy, for every model preset on random scenarios; where
    it declines, the full path's formula needs what only sympy decides."""
    from engine.answers.estimate import column_text, formula
    from engine.compile.model import components
    from engine.compile.outline import TOTAL_OPAQUE
    models = [name for kind, name in lib.presets if kind == "model"]
    answered = declined = rounded = 0
    for model in models:
        rng = random.Random(f"column {model}")
        for i in range(3):  # the preset's own values, then random options and sizes
            scenario = Scenario.create(lib, model, "h100-80g")
            if i:
                scenario = scenario.with_values(**_random_values(lib, rng))
            parts = components(scenario.library)
            assert parts == list(compiled["components"])
            quick = fast._column(compiled, _plain(scenario.values), parts, atoms=True)
            if quick is None:
                declined += 1
                continue
            try:
                full = {n: column_text(formula(scenario, n)) for n in parts}
                full["total"] = column_text(formula(scenario, "total", opaque=TOTAL_OPAQUE))
            except EngineError:
                pytest.fail(f"{model}: a column without sympy where the full path has none")
            assert quick == full, model
            answered += 1
            rounded += any("ceiling(" in t or "Min(" in t or "Max(" in t for t in quick.values())
    assert answered > 10 * declined and rounded > 20  # the comparison is not vacuous


def test_a_column_with_roundings_is_the_rules_value_at_other_workloads(lib, compiled):
    """Where the column keeps a ceiling, Max or Min of micro_batch and seq_len (serving's KV
    cache in whole blocks, a sliding window), each component's formula has the exact value of
    the rule at other values of them, computed anew: the whole terms taken out of a rounding,
    the arguments of a Max or Min dropped as exceeded, a rounding moved into a Min are the
    rules' own arithmetic.  Random model presets, serving and training."""
    from engine.compile.columns import Atom, Polynomials, value_at
    from engine.compile.exact import bindings
    from engine.compile.outline import OPAQUE_RULES, SHOWN_INPUTS
    models = sorted(name for kind, name in lib.presets if kind == "model")
    rng = random.Random("rounded columns")
    checked, kinds = 0, set()
    for _ in range(300):
        if checked == 16:
            break
        model = rng.choice(models)
        try:
            scenario = Scenario.create(lib, model, "h100-80g").with_values(**_random_values(lib, rng))
        except EngineError:
            continue
        values = _plain(scenario.values)
        walker = Polynomials(compiled, *bindings(compiled, values), SHOWN_INPUTS, OPAQUE_RULES, atoms=True)
        try:
            polys = {n: walker.rule(n) for n in compiled["components"]}
        except constants.Unsupported:
            continue
        rounded = {n: p for n, p in polys.items() if any(isinstance(a, Atom) for m in p for a, _ in m)}
        if not rounded:
            continue
        kinds |= {a.op for p in rounded.values() for m in p for a, _ in m if isinstance(a, Atom)}
        opaque = [n for n in OPAQUE_RULES if n in compiled["rules"]]
        for mb, seq in ((1, 1), (3, 17), (2, 4095), (2, 4097), (1, 70001), (5, 511)):
            at = dict(values, micro_batch=Fraction(mb), seq_len=Fraction(seq))
            exact = evaluate_rules(compiled, at, [*rounded, *opaque])
            point = {"micro_batch": mb, "seq_len": seq, **{n: exact[n] for n in opaque}}
            for name, poly in rounded.items():
                assert value_at(poly, point) == exact[name], (model, name, mb, seq)
        checked += 1
    assert checked == 16 and {"ceiling", "Min"} <= kinds


def test_a_column_sympy_writes_depends_only_on_what_it_read(lib, compiled):
    """columns.Reads: where the column is not a polynomial (sympy writes it), changing a value
    the expansion did not read leaves sympy's column as it was.  Random model presets and
    scenarios; the value changed is drawn from the inputs and options it did not read."""
    from engine.answers.estimate import column_text, formula
    from engine.compile.columns import Reads
    from engine.compile.exact import bindings
    from engine.compile.model import components
    from engine.compile.outline import OPAQUE_RULES, SHOWN_INPUTS, TOTAL_OPAQUE
    rng = random.Random("reads")
    models = sorted(name for kind, name in lib.presets if kind == "model")
    parts = components(lib)

    def column(scenario):
        try:
            out = {n: column_text(formula(scenario, n)) for n in parts}
            out["total"] = column_text(formula(scenario, "total", opaque=TOTAL_OPAQUE))
            return out
        except EngineError:
            return None

    checked = 0
    for _ in range(60):
        if checked == 8:
            break
        model = rng.choice(models)
        scenario = Scenario.create(lib, model, "h100-80g").with_values(
            mode=rng.choice(["infer", "train"]), **{n: v for n, v in _random_values(lib, rng).items()
                                                  if n in ("dp", "tp", "zero_stage", "recompute", "finetune")})
        values = _plain(scenario.values)
        if fast._column(compiled, values, parts) is not None:
            continue  # a polynomial: test_a_column_is_kept_under_the_values_it_read
        walker = Reads(compiled, *bindings(compiled, values), SHOWN_INPUTS, OPAQUE_RULES, then=TOTAL_OPAQUE)
        for name in parts:
            walker.walk(name)
        walker.then().walk("total")
        unread = [n for n in ("dp", "tp", "zero_stage", "recompute", "finetune", "optimizer", "grad_accum", "precision")
                  if n not in walker.read and (n in lib.inputs or n in lib.options)]
        if not unread:
            continue
        name = rng.choice(unread)
        other = ({"dp": 37, "tp": 4, "grad_accum": 3}.get(name) if name in lib.inputs
                 else rng.choice([c for c in lib.options[name].choices if c != values[name]]))
        before = column(scenario)
        if before is None:
            continue
        assert column(scenario.with_values(**{name: other})) == before, (model, name, other)
        checked += 1
    assert checked == 8


def test_show_without_sympy_is_the_full_paths(lib, compiled, monkeypatch, tmp_path):
    """``memform show RULE MODEL`` of a polynomial, written out from the compiled form, is what
    the full path prints (sympy's expansion, in graded order): every model preset, its own
    values and a random scenario, the top-level rules and a sample of the others."""
    from engine.cli import build_parser
    from engine.answers.estimate import show, show_text
    monkeypatch.setattr(fast, "_read", lambda kind, key: compiled if kind == "compiled" else None)
    monkeypatch.setattr(fast, "_key", lambda: "test")
    monkeypatch.chdir(tmp_path)  # no file named like a preset
    models = [name for kind, name in lib.presets if kind == "model"]
    answered = declined = 0
    for model in models:
        rng = random.Random(f"show {model}")
        names = ["total", "weights", "activations", "kv_cache", "overhead"] + rng.sample(sorted(lib.rules), 6)
        for i in range(2):
            sets = [] if i == 0 else [f"{n}={v}" for n, v in _random_values(lib, rng).items()]
            for name in names:
                argv = ["show", name, model] + [a for t in sets for a in ("--set", t)] + (["--keep", "hidden_size"] if i else [])
                quick = fast.show(build_parser().parse_args(argv))
                if quick is None:
                    declined += 1
                    continue
                scenario = Scenario.create(lib, model).with_values(**dict(parse_setting(lib, t) for t in sets))
                keep = tuple(n for n in ("micro_batch", "seq_len") if not any(t.startswith(n + "=") for t in sets))
                full = f"{name} = {show_text(show(scenario, name, keep=keep + (('hidden_size',) if i else ())))}\n"
                assert quick == full, (model, name, sets)
                answered += 1
    assert answered > declined  # the comparison is not vacuous


def test_plan_without_sympy_is_the_full_paths(lib, compiled, monkeypatch, tmp_path):
    """``memform plan`` of a preset from the compiled form (quick.plan: the layouts' sizes, ZeRO
    stages and capacity from the compiled rules, the exact evaluator built from its values)
    lists what the full path's plan lists, layout for layout: every model preset on 16 H100s,
    and a sample with other GPU counts, settings, orders and without the divisibility check."""
    from engine.cli import build_parser
    from engine.answers import plan as planning
    from engine.library import layout
    monkeypatch.setattr(fast, "_read", lambda kind, key: compiled if kind == "compiled" else None)
    monkeypatch.setattr(fast, "_key", lambda: "test")
    monkeypatch.chdir(tmp_path)  # no file named like a preset
    rng = random.Random("plan")
    models = sorted(name for kind, name in lib.presets if kind == "model")
    cases = [(m, "16", []) for m in models]
    cases += [(rng.choice(models), str(rng.choice([6, 12, 24, 40, 96, 1000])),
               rng.choice([[], ["--sort", "memory"], ["--sort", "micro_batch", "--top", "3"], ["--no-divisibility"],
                           ["--set", "stack=fsdp2"], ["--set", "seq_len=8192", "--max-micro-batch", "64"],
                           ["--set", "finetune=lora"]]))
              for _ in range(12)]
    cases += [("mixtral-8x7b", "8", ["--set", "ep=3"]),  # an impossible pinned layout: the full path says so
              ("mixtral-8x7b", "8", ["--set", "ep=3", "--no-divisibility"])]
    answered = 0
    for model, gpus, extra in cases:
        args = build_parser().parse_args(["plan", model, "--gpu", "h100-80g", "--gpus", gpus, *extra])
        quick = fast.plan(args)
        sets = dict(parse_setting(lib, t) for t in args.sets)
        scenario = Scenario.create(lib, model, "h100-80g").with_values(**sets)
        try:
            if not args.no_divisibility:  # as the command line checks a pinned layout
                layout.check(scenario)
            rows = planning.plan(scenario, args.gpus, max_micro_batch=args.max_micro_batch, sort=args.sort,
                                 divisibility=not args.no_divisibility)
        except EngineError:
            assert quick is None, (model, gpus, extra)  # the full path reports it
            continue
        assert quick is not None, (model, gpus, extra)
        assert quick == (rows, rows[:args.top]), (model, gpus, extra)
        answered += bool(rows)
    assert answered > len(cases) // 2  # the comparison is not vacuous


def test_solve_without_sympy_is_the_full_paths(lib, compiled, monkeypatch, tmp_path):
    """``memform solve`` of a preset's micro_batch, seq_len, dp, tp, pp or ep from the compiled form
    (quick.solve: the shared search over the exact total, the closed form written out where the
    total is linear in the unknown, or one term over it) answers what the full path answers,
    field for field, or not at all: every model preset, the three unknowns, random settings,
    steps and multiples."""
    from engine.cli import build_parser
    from engine.answers import solve as solving
    from engine.library import layout
    monkeypatch.setattr(fast, "_read", lambda kind, key: compiled if kind == "compiled" else None)
    monkeypatch.setattr(fast, "_key", lambda: "test")
    monkeypatch.chdir(tmp_path)  # no file named like a preset
    rng = random.Random("solve")
    models = sorted(name for kind, name in lib.presets if kind == "model")
    extras = [[], ["--set", "zero_stage=3", "--set", "dp=13"], ["--set", "recompute=full", "--set", "dp=8"],
              ["--set", "seq_len=8192"], ["--set", "micro_batch=4"], ["--set", "finetune=lora"],
              ["--set", "stack=megatron", "--set", "tp=2"], ["--set", "stack=fsdp2", "--set", "dp=7"],
              ["--step", "pow2"], ["--multiple-of", "3"], ["--set", "mode=infer"], ["--set", "attention=eager"],
              ["--set", "tp=3"], ["--set", "tp=3", "--no-divisibility"], ["--target", "activations"]]
    cases = [(m, u, rng.choice(["max", "max", "min"]), rng.choice(["h100-80g", "h200-141g", "mi300x"]),
              rng.choice(extras)) for m in models for u in ("micro_batch", "seq_len")]
    # dp: the state ZeRO shards is c n_params / dp, the closed form a quotient (reciprocal_root)
    zero = [["--set", "zero_stage=1"], ["--set", "zero_stage=2", "--set", "seq_len=8192"],
            ["--set", "zero_stage=3"], ["--set", "zero_stage=3", "--set", "recompute=full"],
            ["--set", "zero_stage=3", "--set", "stack=fsdp2"], ["--set", "zero_stage=1", "--set", "stack=megatron"],
            ["--set", "zero_stage=3", "--set", "finetune=lora"], ["--set", "zero_stage=3", "--multiple-of", "8"],
            ["--set", "zero_stage=3", "--step", "pow2"], ["--set", "zero_stage=3", "--set", "offload=optimizer"]]
    cases += [(m, "dp", "min", rng.choice(["h100-80g", "h200-141g", "mi300x"]), rng.choice(zero)) for m in models]
    # tp, pp, ep: the degrees that divide a model size, each candidate evaluated; the closed form a
    # quotient of sums (tp shards weights, gradients and activations alike) or none (a stage's
    # layers are ceil(L / pp))
    layouts = [[], ["--set", "zero_stage=3", "--set", "dp=8"], ["--set", "mode=infer"],
               ["--set", "mode=infer", "--set", "seq_len=32768"], ["--no-divisibility"], ["--step", "pow2"],
               ["--multiple-of", "2"], ["--set", "recompute=full", "--set", "seq_len=8192"],
               ["--set", "stack=megatron"], ["--set", "finetune=lora"]]
    cases += [(m, u, rng.choice(["max", "min", "min"]), rng.choice(["h100-80g", "h200-141g", "mi300x"]),
               rng.choice(layouts)) for u, n in (("tp", 24), ("pp", 12), ("ep", 6)) for m in rng.sample(models, n)]
    answered = closed = feasible = 0
    by_dp, by_layout = [0], {"tp": 0, "pp": 0}
    for model, unknown, direction, gpu, extra in cases:
        argv = ["solve", direction, unknown, model, "--gpu", gpu, *extra]
        args = build_parser().parse_args(argv)
        quick = fast.solve(args)
        sets = dict(parse_setting(lib, t) for t in args.sets)
        scenario = Scenario.create(lib, model, gpu).with_values(**sets)
        try:
            if not args.no_divisibility:  # as the command line checks a pinned layout
                layout.check(scenario)
            full = solving.solve(scenario, direction, unknown, target=args.target, step=args.step,
                                 multiple_of=args.multiple_of, divisibility=not args.no_divisibility)
        except EngineError:
            assert quick is None, argv  # the full path reports it
            continue
        feasible += 1
        if quick is None:
            continue
        assert (quick.to_json(), quick.closed_value) == (full.to_json(), full.closed_value), argv
        answered += 1
        closed += quick.method == "closed-form"
        by_dp[0] += unknown == "dp" and quick.method == "closed-form"
        if unknown in by_layout and quick.closed_form.startswith((f"{unknown} ", "none")):
            by_layout[unknown] += 1
    assert answered > feasible // 2 and closed > feasible // 4  # the comparison is not vacuous
    assert by_dp[0] > len(models) // 3  # nor for dp's quotients
    assert min(by_layout.values()) >= 4, by_layout  # nor for the layouts


@given(st.dictionaries(st.tuples(*[st.integers(0, 3)] * 3),
                       st.fractions(max_denominator=50).filter(lambda c: c != 0), max_size=6))
@settings(max_examples=300, deadline=None)
def test_a_polynomial_is_printed_as_sympy_prints_it(terms):
    """columns.text of an expanded polynomial is sympy.sstr(..., order="grlex") of it: the
    column of a formula did not change when it stopped being printed by sympy."""
    from engine.compile import columns
    names = ("micro_batch", "n_params", "seq_len")
    symbols = [sympy.Symbol(n, positive=True) for n in names]
    poly = {tuple((n, e) for n, e in zip(names, exps) if e): c for exps, c in terms.items()}
    expr = sympy.Add(*(sympy.Rational(c.numerator, c.denominator) * sympy.Mul(*(s ** e for s, e in zip(symbols, exps)))
                       for exps, c in terms.items()))
    assert columns.text(poly) == sympy.sstr(expr, order="grlex")
    assert columns.from_sympy(expr) == poly


_COEFF = st.fractions(min_value=-10**12, max_value=10**12, max_denominator=1024).filter(lambda c: c != 0)


@given(st.sampled_from(["micro_batch", "seq_len"]), st.sampled_from([(), (("n_params", 1),), ((2,),)]),
       _COEFF.map(abs), _COEFF, _COEFF)
@settings(max_examples=200, deadline=None)
def test_a_root_is_printed_as_sympy_prints_it(unknown, extra, slope, per_param, constant):
    """columns.root_text of a total linear in the unknown (slope * unknown * the other workload
    name, + n_params and constant terms) is what the full solve prints, sympy.sstr of
    sympy.simplify of sympy.solve's root, whenever linear_root writes one."""
    from engine.compile import columns
    other = "seq_len" if unknown == "micro_batch" else "micro_batch"
    slope_monomial = tuple(sorted(((other, 2),) if extra == ((2,),) else (*extra, (other, 1))))
    poly = {tuple(sorted((*slope_monomial, (unknown, 1)))): slope, (("n_params", 1),): per_param, (): constant}
    try:
        got = columns.root_text(*columns.linear_root(poly, unknown, "usable_memory"))
    except constants.Unsupported:
        return  # the full path answers
    symbols = {"n_params": sympy.Symbol("n_params"), unknown: sympy.Symbol(unknown, nonnegative=True),
               other: sympy.Symbol(other, nonnegative=True)}
    cap, x = sympy.Symbol("usable_memory", positive=True), sympy.Dummy(unknown, positive=True)
    expr = sum(sympy.Rational(c.numerator, c.denominator) * sympy.Mul(*(symbols[n] ** e for n, e in m))
               for m, c in poly.items())
    root, = sympy.solve(sympy.Eq(expr.xreplace({symbols[unknown]: x}), cap), x)
    assert got == sympy.sstr(sympy.simplify(root))


SETTINGS = ["micro_batch=8", "seq_len=4096", "dp = 64", "zero_stage=3", "optimizer=adam8bit",
            "capacity=80GB", "capacity=81559 MiB", "capacity=80e9", "n_params=70e9",
            "alloc_margin=0.25", "seq_len=2^15", "capacity=(80 - 2) * 1GB", "micro_batch=-1",
            "micro_batch=0", "micro_batch=1.5", "zero_stage=5", "zero_stage=adam", "optimizer=3",
            "micro_btch=8", "bf16=3", "capacity=80", "micro_batch=80GB", "micro_batch=", "=4",
            "seq_len=4096 tokens", "seq_len=max(1, 2)", "seq_len=1e400", "n_params=-5",
            "n_params=0.5", "precision=bf16_mixed", "dp=2^0.5", "dp=4/2", "dp=0/1", "dp=1/0",
            "micro_batch=10^10^10", "capacity=80GB + 1", "capacity=2GB * 3", "dp=3 B / 1 B"]


#: valid settings outside the fast path's constant arithmetic (the full path answers them)
DECLINED = {"capacity=80GB + 1", "seq_len=max(1, 2)"}


@pytest.mark.parametrize("text", SETTINGS)
def test_settings_are_validated_as_the_full_path_does(lib, compiled, text):
    try:
        expected = parse_setting(lib, text)
    except EngineError:
        expected = None
    try:
        got = trees._setting(compiled, text)
    except constants.Unsupported:
        assert expected is None or text in DECLINED, "declined a valid setting"
        return
    assert expected is not None, "accepted a setting the full path refuses"
    name, value = expected
    assert got == (name, value if isinstance(value, str) else Fraction(int(value.p), int(value.q)))


COMMANDS = [
    ["estimate", "llama2-7b", "--gpu", "h100-80g"],
    ["estimate", "llama2-70b", "--set", "zero_stage=3", "--set", "dp=64", "--set", "micro_batch=2",
     "--set", "seq_len=4096", "--gpu", "h100-80g"],
    ["estimate", "llama2-70b", "--set", "n_params=70e9", "--capacity", "80GB", "--set", "zero_stage=2"],
    ["estimate", "mixtral-8x7b", "--set", "offload=optimizer", "--set", "zero_stage=2", "--set", "dp=8"],
    ["estimate", "llama2-7b", "--set", "convention=megatron", "--set", "recompute=full"],
    ["estimate", "llama2-13b", "--set", "mode=infer", "--set", "micro_batch=16", "--set", "seq_len=8192"],
    ["estimate", "deepseek-v3", "--set", "tp=8", "--set", "pp=8", "--set", "ep=8", "--set", "dp=32",
     "--set", "zero_stage=1", "--gpu", "h100-80g", "--no-divisibility"],  # 61 layers: an uneven pipeline
]


def _run(argv, monkeypatch, use_fast: bool) -> str:
    if not use_fast:
        monkeypatch.setattr(fast, "report", lambda args: None)
    out = io.StringIO()
    assert main(argv, out=out) == 0
    monkeypatch.undo()
    return out.getvalue()


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a[1:4]))
@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_cli_output_is_the_full_paths(argv, as_json, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("MEMFORM_NO_CACHE", raising=False)
    argv = argv + (["--json"] if as_json else [])
    full = _run(argv, monkeypatch, use_fast=False)  # also warms the cache
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("MEMFORM_NO_CACHE", raising=False)
    answered = []
    real = fast.report
    monkeypatch.setattr(fast, "report", lambda args: answered.append(real(args)) or answered[-1])
    quick = _run(argv, monkeypatch, use_fast=True)
    assert answered and answered[0] is not None, "the fast path did not answer"
    assert quick == full
    if as_json:
        assert json.loads(quick)["total_bytes"] > 0


def test_a_column_is_kept_under_the_values_it_read(tmp_path, monkeypatch):
    """A formula column written out without sympy is kept under the values its expansion read:
    an estimate with another value of a name it never read (dp without ZeRO) prints it without
    writing it out again, one with another value of a name it read (dp under ZeRO-3) writes it
    anew, and every table is the full path's."""
    monkeypatch.chdir(tmp_path)  # no file named like a preset
    written = []
    real = fast._column
    base = ["estimate", "llama2-7b", "--gpu", "h100-80g"]

    def table(*sets, use_fast=True):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
        monkeypatch.delenv("MEMFORM_NO_CACHE", raising=False)
        if use_fast:
            monkeypatch.setattr(fast, "_column", lambda *a, **k: written.append(sets) or real(*a, **k))
        return _run(base + [a for t in sets for a in ("--set", t)], monkeypatch, use_fast)

    table("dp=3", use_fast=False)  # the cache warm (and this column kept by the full path)
    quick = {sets: table(*sets) for sets in [("recompute=full", "dp=5"), ("recompute=full", "dp=7"),
                                             ("zero_stage=3", "dp=5"), ("zero_stage=3", "dp=7")]}
    assert written == [("recompute=full", "dp=5"), ("zero_stage=3", "dp=5"), ("zero_stage=3", "dp=7")]
    # a column that read a number the command line gives (dp under ZeRO-3) is not kept; the
    # full path's (dp=3) is kept under what it read too, and answers dp=4
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("MEMFORM_NO_CACHE", raising=False)
    kept = fast._read("columns", fast._key())["columns"]
    assert not any("dp" in names for names in kept)
    assert sum(len(columns) for columns in kept.values()) == 2  # dp=3's (sympy's) and recompute=full's
    quick[("dp=4",)] = table("dp=4")
    assert len(written) == 3
    for sets, text in quick.items():
        assert text == table(*sets, use_fast=False), sets


def test_a_column_sympy_wrote_is_kept_under_the_values_it_read(tmp_path, monkeypatch):
    """A formula column the compiled trees do not give (here: the walker made to decline, as
    it does for a Max it cannot order) is written by sympy, and kept under the values its
    expansion read (columns.Reads): an estimate with another value of a name it never read
    (dp: nothing is sharded over dp when serving) prints it without sympy, one with another
    value of a name it read (tp) is derived anew; every table is the full path's."""
    monkeypatch.chdir(tmp_path)
    base = ["estimate", "deepseek-v3", "--gpu", "h100-80g", "--set", "mode=infer"]

    def setup():
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
        monkeypatch.delenv("MEMFORM_NO_CACHE", raising=False)
        monkeypatch.setattr(fast, "_column", lambda *args, **kw: None)

    def table(*sets, use_fast=True):
        setup()
        return _run(base + [a for t in sets for a in ("--set", t)], monkeypatch, use_fast)

    def answers(*sets) -> bool:
        setup()
        from engine.cli import build_parser
        args = build_parser().parse_args(base + [a for t in sets for a in ("--set", t)])
        try:
            return fast.report(args) is not None
        finally:
            monkeypatch.undo()

    full = table("dp=3", use_fast=False)
    assert not answers("dp=3", "tp=2")  # no column without sympy
    assert answers("dp=5") and table("dp=5") == table("dp=5", use_fast=False) != full
    assert not answers("tp=2")  # tp was read: sympy writes that one
    # and without the walker made to decline, the column at tp=2 is written out from the trees
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert _run(base + ["--set", "tp=2"], monkeypatch, True) == table("tp=2", use_fast=False)


def test_estimate_does_not_import_sympy_with_a_warm_cache(tmp_path):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path), PYTHONPATH=str(ROOT))
    env.pop("MEMFORM_NO_CACHE", None)
    probe = ("import sys, io; from engine.cli import main; out = io.StringIO(); "
             "rc = main(sys.argv[1:], out=out); print(rc, 'sympy.core' in sys.modules, out.getvalue().count('\\n'))")
    argv = ["estimate", "llama2-7b", "--gpu", "h100-80g", "--set", "zero_stage=3", "--set", "dp=8"]

    def run(*extra):
        done = subprocess.run([sys.executable, "-c", probe, *argv, *extra], env=env, cwd=tmp_path,
                              capture_output=True, text=True, check=True)
        return done.stdout.split()

    assert run()[:2] == ["0", "True"]  # cold: the library is built (with sympy) and cached
    rc, imported, lines = run()
    assert (rc, imported) == ("0", "False") and int(lines) > 10
    # another workload with the same options reuses the formula column; JSON needs none
    assert run("--set", "micro_batch=4", "--set", "seq_len=8192")[:2] == ["0", "False"]
    assert run("--set", "zero_stage=1", "--json")[:2] == ["0", "False"]
    # serving at a tp never asked before: its KV cache in whole blocks (a ceiling of seq_len)
    # and a sliding window (a Min) are written out from the compiled trees too
    assert run("--set", "mode=infer", "--set", "tp=4")[:2] == ["0", "False"]
    assert run("--set", "mode=infer", "--set", "tp=2", "--set", "dp=1")[:2] == ["0", "False"]
    # a layout that breaks a divisibility constraint: the full path's error, without sympy
    argv[1] = "gemma2-9b"
    assert run("--set", "mode=infer", "--set", "tp=2")[:2] == ["0", "False"]
    broken = [sys.executable, "-c", probe, *argv, "--set", "tp=3"]
    fast_run = subprocess.run(broken, env=env, cwd=tmp_path, capture_output=True, text=True, check=True)
    full_run = subprocess.run(broken, env=dict(env, MEMFORM_NO_CACHE="1"), cwd=tmp_path, capture_output=True,
                              text=True, check=True)
    assert fast_run.stdout.split()[:2] == ["2", "False"] and full_run.stdout.split()[:2] == ["2", "True"]
    assert "impossible layout: tp=3 does not divide" in fast_run.stderr and fast_run.stderr == full_run.stderr


ANSWERED = [
    ["show", "total", "llama2-70b"],
    ["show", "weights", "llama2-7b", "--set", "zero_stage=3", "--set", "dp=8", "--latex"],
    ["solve", "max", "micro_batch", "llama2-7b", "--gpu", "h100-80g", "--set", "zero_stage=3", "--set", "dp=8"],
    ["solve", "min", "dp", "llama2-70b", "--gpu", "h100-80g", "--set", "zero_stage=3", "--json"],
    ["plan", "llama2-70b", "--gpu", "h100-80g", "--gpus", "64", "--top", "5"],
    ["docs"],
]


def test_show_solve_plan_and_docs_answer_again_without_sympy(tmp_path):
    """Asked again with the same arguments, these commands print the text kept from their
    first answer, without importing sympy; it is what the full path prints with the cache off."""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    env.pop("MEMFORM_NO_CACHE", None)
    probe = ("import sys, io, json; from engine.cli import main; out = io.StringIO(); "
             "rc = main(sys.argv[1:], out=out); print(json.dumps([rc, 'sympy.core' in sys.modules, out.getvalue()]))")

    def run(argv, **extra):
        done = subprocess.run([sys.executable, "-c", probe, *argv], env=dict(env, **extra), cwd=tmp_path,
                              capture_output=True, text=True, check=True)
        return json.loads(done.stdout)

    for argv in ANSWERED:
        rc, imported, full = run(argv, MEMFORM_NO_CACHE="1")
        assert rc == 0 and imported and full.strip()
        # derived, and kept; plan of a preset lists its layouts, and solve finds its micro_batch,
        # from the compiled form (which the commands before built) without sympy
        compiled_form = argv[0] == "plan" or argv[:3] in (["solve", "max", "micro_batch"], ["solve", "min", "dp"])
        assert run(argv) == [0, not compiled_form, full], argv
        assert run(argv) == [0, False, full], argv  # the kept text
    # another value is derived anew (and kept in its turn); show of a polynomial is written out
    # from the compiled form, with sympy nowhere, and so are solve's closed forms: linear in
    # micro_batch, one term over dp
    assert run(ANSWERED[1] + ["--set", "seq_len=2048"])[:2] == [0, True]  # LaTeX: sympy's printer
    assert run(ANSWERED[0] + ["--set", "tp=2"])[:2] == [0, False]
    for new_value in (ANSWERED[2] + ["--set", "seq_len=8192"], ANSWERED[3] + ["--set", "seq_len=2048"]):
        assert run(new_value) == [0, False, run(new_value, MEMFORM_NO_CACHE="1")[2]]
    # plan of a preset with a new GPU count: its layouts from the compiled form, as the full path
    # lists them
    new_count = ANSWERED[4][:5] + ["48", "--top", "5"]
    assert run(new_count) == [0, False, run(new_count, MEMFORM_NO_CACHE="1")[2]]
    # a file named like the preset: the full path says which it reads
    (tmp_path / "llama2-70b").write_text("{}")
    assert run(ANSWERED[0])[1] is True


def test_stale_or_corrupt_compiled_form_is_not_trusted(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("MEMFORM_NO_CACHE", raising=False)
    argv = ["estimate", "llama2-7b", "--json"]
    good = _run(argv, monkeypatch, use_fast=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (path,) = (tmp_path / "memform").glob("compiled-*.json")
    path.write_bytes(b"garbage")
    assert fast.report(_args(argv)) is None  # ignored, not trusted
    stored = {"format": trees.FORMAT, "key": "another", "rules": {}}
    import pickle
    path.write_bytes(pickle.dumps(stored))
    assert fast.report(_args(argv)) is None
    assert _run(argv, monkeypatch, use_fast=True) == good  # the full path answers and rewrites it
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert fast.report(_args(argv)) is not None


def _args(argv):
    from engine.cli import build_parser
    return build_parser().parse_args(argv)


def test_unsupported_expressions_are_declined_not_approximated(lib):
    lib2 = type(lib)()
    lib2.add_text('input x : count >= 1 = 2 "x"\nrule r : count = log2(x) "r"\nrule q : count = x * 2 "q"',
                  "t.mem")
    lib2.resolve()
    compiled = compiler.compile_library(lib2)
    assert evaluate_rules(compiled, {"x": Fraction(4)}, ["q"]) == {"q": Fraction(8)}
    with pytest.raises(constants.Unsupported):
        evaluate_rules(compiled, {"x": Fraction(4)}, ["r"])
    assert sympy.simplify(Scenario.create(lib2, values={"x": 4}).evaluate("r")) == 2


def _option_settings(lib):
    from hypothesis import strategies as st
    names = sorted(lib.options)
    return st.lists(st.sampled_from(names), max_size=6, unique=True).flatmap(
        lambda chosen: st.tuples(*(st.sampled_from(lib.options[n].choices).map(lambda c, n=n: f"{n}={c}")
                                   for n in chosen)))


def test_random_command_lines_give_the_full_paths_json(lib, tmp_path_factory):
    """Random presets, options and sizes on the command line: the fast path's JSON is the full
    path's, byte for byte, whenever both answer (and the fast path answers most of them)."""
    from hypothesis import HealthCheck, given, settings, strategies as st
    models = sorted(name for kind, name in lib.presets if kind == "model")
    cache = tmp_path_factory.mktemp("cache")
    answered = []

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(model=st.sampled_from(models), options=_option_settings(lib),
           sizes=st.lists(st.sampled_from(["micro_batch=4", "seq_len=8192", "dp=16", "tp=2", "pp=2",
                                           "ep=2", "cp=2", "capacity=80GB", "n_params=7e9",
                                           "alloc_margin=0.05", "seq_len=2^12"]), max_size=4))
    def check(model, options, sizes):
        argv = ["estimate", model, "--json"]
        for text in (*options, *sizes):
            argv += ["--set", text]
        env = {"XDG_CACHE_HOME": str(cache)}
        with pytest.MonkeyPatch.context() as mp:
            for k, v in env.items():
                mp.setenv(k, v)
            mp.delenv("MEMFORM_NO_CACHE", raising=False)
            args = _args(argv)
            try:
                quick = fast.report(args)
            except EngineError as exc:  # an impossible layout, found without sympy
                quick = exc
            mp.setattr(fast, "report", lambda args: None)
            out, err = io.StringIO(), io.StringIO()
            code = main(argv, out=out, err=err)
        if quick is None:
            return
        answered.append(argv)
        if isinstance(quick, EngineError):  # the full path's error, the same words
            assert (code, json.loads(out.getvalue())["error"]["message"]) == (quick.exit_code, quick.message)
            return
        assert code == 0, err.getvalue()
        assert json.dumps(quick.to_json(), indent=2) + "\n" == out.getvalue()

    check()
    assert len(answered) >= 20


def test_a_branch_not_taken_may_hold_what_has_no_value(lib):
    """fuzzer (seed 1242): kv_layer_token_bytes pinned to 0 divides by zero only in vLLM's block
    size for hybrid models (attention_state_block), a branch Qwen3 never takes; the full path
    refused the estimate (sympy builds Max(16, zoo) before choosing the branch) where the path
    without sympy answered.  Training keeps no KV cache, so the total is the unpinned one."""
    plain = Scenario.create(lib, "qwen3-32b")
    pinned = plain.with_values(kv_layer_token_bytes=0)
    assert pinned.evaluate("vllm_block_size") == 16
    assert pinned.evaluate("total") == plain.evaluate("total")
    out = io.StringIO()
    assert main(["estimate", "qwen3-32b", "--json", "--set", "kv_layer_token_bytes=(1 - 100 / 100) * 1 KiB"], out=out) == 0
    from engine.answers.report import whole_bytes
    assert json.loads(out.getvalue())["total_bytes"] == whole_bytes(plain.evaluate("total"))
