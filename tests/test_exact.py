"""engine.compile.exact: the specialised exact evaluator gives what the folded one (engine.compile.exact.evaluate_rules,
every value fixed) and the sympy path (Scenario.evaluate) give, for every rule of every model
preset."""
import random
import tracemalloc
from fractions import Fraction

import pytest

from engine.compile import compiler
from engine.lang import constants
from engine.compile import exact
from engine.errors import DomainError, EngineError, UnknownNameError
from engine.compile.model import Scenario
from engine.compile.outline import EXTRA_RULES, TOP_LEVEL

#: what varies between calls: workload, layout, and options that switch whole rule families
VARYING = ("micro_batch", "seq_len", "dp", "tp", "zero_stage", "recompute", "precision", "optimizer")
GPU = "h100-80g"


@pytest.fixture(scope="module")
def compiled(lib):
    return compiler.compile_library(lib)


def _models(lib) -> list[str]:
    return sorted(name for kind, name in lib.presets if kind == "model")


def _sample(rng: random.Random, compiled: dict) -> dict:
    out = {"micro_batch": rng.choice([1, 2, 3, 8]), "seq_len": rng.choice([1, 17, 2048, 4096, 32768]),
           "dp": rng.choice([1, 2, 8, 64]), "tp": rng.choice([1, 2, 4, 8])}
    for name in VARYING:
        if name in compiled["options"]:
            out[name] = rng.choice(compiled["options"][name][0])
    return out


def _walked(compiled: dict, model: str, values: dict, rule: str):
    """The folded value (every value fixed: engine.compile.exact.evaluate_rules), or "fails", for the same values."""
    env = dict(compiled["defaults"])
    env.update(compiled["presets"][("model", model)])
    env.update(compiled["presets"][("gpu", GPU)])
    env.update({n: (v if isinstance(v, str) else Fraction(v)) for n, v in values.items()})
    try:
        return exact.evaluate_rules(compiled, env, [rule])[rule]
    except (constants.Unsupported, ArithmeticError):
        return "fails"


def _specialised(ev_all, model, rules, values, lib):
    """Every rule's value from one program, or rule by rule where one of them fails."""
    try:
        return ev_all(**values)
    except EngineError:
        out = {}
        for rule in rules:
            try:
                out[rule] = exact.Evaluator(model, rule, gpu=GPU, varying=VARYING, library=lib)(**values)
            except EngineError:
                out[rule] = "fails"
        return out


def test_every_rule_of_every_model_equals_the_folded_evaluation(lib, compiled):
    rng = random.Random(11)
    rules = tuple(compiled["rules"])
    checked = differ = 0
    for model in _models(lib):
        ev = exact.Evaluator(model, rules, gpu=GPU, varying=VARYING, library=lib)
        for _ in range(2):
            values = _sample(rng, compiled)
            got = _specialised(ev, model, rules, values, lib)
            for rule in rules:
                want = _walked(compiled, model, values, rule)
                checked += 1
                if got[rule] != want:
                    differ += 1
                    assert got[rule] == want, (model, rule, values)
    assert checked >= 50 * len(rules) and differ == 0


@pytest.mark.parametrize("model, gpu", [("llama2-7b", "h100-80g"), ("deepseek-v3", "h100-80g"),
                                        ("mixtral-8x7b", "a100-80g"), ("gpt3-175b", None)])
def test_top_level_rules_equal_the_sympy_path(lib, model, gpu):
    rng = random.Random(5)
    rules = [r for r in TOP_LEVEL + EXTRA_RULES if r in lib.rules]
    ev = exact.Evaluator(model, rules, gpu=gpu, varying=VARYING, library=lib)
    options = {n: d.choices for n, d in lib.options.items()}
    for _ in range(3):
        values = {"micro_batch": rng.choice([1, 2, 4]), "seq_len": rng.choice([512, 4096]),
                  "dp": rng.choice([1, 8]), "tp": rng.choice([1, 2, 8])}
        values.update({n: rng.choice(options[n]) for n in VARYING if n in options})
        scenario = Scenario.create(lib, model, gpu).with_values(**values)
        got = ev(**values)
        for rule in rules:
            assert got[rule] == scenario.evaluate(rule), (rule, values)


def test_the_llama2_7b_figures_it_gives():
    """Llama-2-7B's published parameter count (6,738,415,616) and its weights under ZeRO-3."""
    assert exact.evaluate("llama2-7b", "n_params") == 6_738_415_616
    assert exact.evaluate("llama2-7b", "weights", zero_stage=3, dp=8) == Fraction(6_738_415_616 * 2, 8)
    ev = exact.Evaluator("llama2-7b", "weights", values={"zero_stage": 3}, varying=("dp",))
    assert [ev(dp=d) for d in (1, 2, 4)] == [Fraction(6_738_415_616 * 2, d) for d in (1, 2, 4)]


def test_options_may_vary_too():
    ev = exact.Evaluator("llama2-7b", "grads", varying=("zero_stage", "dp"))
    assert ev(zero_stage=0, dp=8) == 2 * 6_738_415_616
    assert ev(zero_stage=2, dp=8) == Fraction(2 * 6_738_415_616, 8)
    assert ev(zero_stage="2", dp=8) == ev(zero_stage=2, dp=8)


@pytest.mark.parametrize("call, error, words", [
    (lambda: exact.Evaluator("llama2-7b", "totl"), UnknownNameError, "did you mean 'total'"),
    (lambda: exact.Evaluator("llama2-7bb", "total"), UnknownNameError, "llama2-7b"),
    (lambda: exact.Evaluator("llama2-7b", "total", varying=("micro_bach",)), UnknownNameError, "micro_batch"),
    (lambda: exact.evaluate("llama2-7b", "total", micro_batch=0), DomainError, ">= 1"),
    (lambda: exact.evaluate("llama2-7b", "total", micro_batch=1.5), DomainError, "exact number"),
    (lambda: exact.evaluate("llama2-7b", "total", micro_batch="2"), DomainError, "micro_batch"),
    (lambda: exact.evaluate("llama2-7b", "total", zero_stage=5), DomainError, "choices are 0, 1, 2, 3"),
    (lambda: exact.Evaluator("llama2-7b", "total", varying=("dp",))(), EngineError, "missing: dp"),
    (lambda: exact.Evaluator("llama2-7b", "total", varying=("dp",))(dp=1, tp=2), EngineError, "not varying"),
])
def test_bad_names_and_values_are_clear_errors(call, error, words):
    with pytest.raises(error) as caught:
        call()
    assert words in str(caught.value) + str(getattr(caught.value, "hint", "") or "")


def test_memory_stays_flat_over_many_configurations():
    def run(n, start):
        for i in range(start, start + n):
            exact.evaluate("llama2-7b", "total", micro_batch=1 + i % 64, seq_len=1 + i, dp=1 + i % 7)
    run(2_000, 0)  # the program built
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        run(20_000, 10_000)  # every configuration new
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024


def test_plan_lists_the_exact_totals_of_the_sympy_path(lib):
    """`memform plan` re-evaluates the rows it lists with the layout's exact evaluator; each
    equals the scenario's own exact total (and the micro-batch is the same)."""
    from engine.answers.plan import exact as exact_row, layout_evaluator, plan
    scenario = Scenario.create(lib, "llama2-70b", "h100-80g")
    rows = plan(scenario, 64)[:12]
    ev = layout_evaluator(scenario)
    assert ev is not None and len(rows) == 12
    for row in rows:
        assert exact_row(scenario, row, ev) == exact_row(scenario, row)


LAYOUT_VARYING = ("tp", "pp", "dp", "zero_stage", "recompute", "micro_batch")


def test_a_total_that_is_a_line_in_the_micro_batch_is_one_call(lib):
    """Evaluator.line: where the program shows the total is a line in the micro-batch, one
    call gives its value and slope at any point; the value at any other micro-batch is on the
    line, as the program itself computes it.  Every model preset, under three stacks: the
    line for most, and none where the micro-batch reaches a condition or a min (a MoE token
    count, LoRA's frozen inputs)."""
    rng = random.Random(3)
    lines = others = 0
    for model in _models(lib):
        for values in ({}, {"stack": "megatron"}, {"stack": "fsdp2", "finetune": "lora"}):
            ev = exact.Evaluator(model, "total", gpu=GPU, values=values, varying=LAYOUT_VARYING, library=lib)
            line = ev.line("micro_batch")
            if line is None:
                others += 1
                continue
            lines += 1
            for _ in range(2):
                at = dict(tp=rng.choice([1, 2, 4]), pp=rng.choice([1, 2]), dp=rng.choice([1, 3, 8]),
                          zero_stage=rng.randrange(4), recompute=rng.choice(["none", "selective", "full"]))
                try:
                    one = line(**at, micro_batch=1)
                except EngineError:
                    with pytest.raises(EngineError):
                        ev(**at, micro_batch=1)
                    continue
                value, slope = one["total"], one["d total/d micro_batch"]
                assert value == ev(**at, micro_batch=1)
                for mb in (2, 3, 64):
                    assert value + slope * (mb - 1) == ev(**at, micro_batch=mb), (model, values, at, mb)
    assert lines > others > 0


def test_a_staged_program_computes_what_the_program_computes(lib):
    """Evaluator.staged: the part only the slow names reach is kept from one call to the next
    while they keep their values; calls in any order (the slow values changing at random) give
    what the program gives."""
    rng = random.Random(4)
    for model, values in (("llama2-70b", {}), ("mixtral-8x7b", {"stack": "megatron"}), ("deepseek-v3", {})):
        ev = exact.Evaluator(model, "total", gpu=GPU, values=values, varying=LAYOUT_VARYING, library=lib)
        staged = ev.staged(LAYOUT_VARYING[:4])
        at = {}
        for _ in range(60):
            if not at or rng.random() < 0.3:
                at = dict(tp=rng.choice([1, 2, 8]), pp=rng.choice([1, 4]), dp=rng.choice([1, 8]), zero_stage=rng.randrange(4))
            call = dict(at, recompute=rng.choice(["none", "full"]), micro_batch=rng.choice([1, 2, 5]))
            try:
                want = ev(**call)
            except EngineError:
                with pytest.raises(EngineError):
                    staged(**call)
                continue
            assert staged(**call) == want, (model, call)


@pytest.mark.parametrize("model, gpu, values, gpus", [
    ("llama2-70b", "h100-80g", {}, 96), ("mixtral-8x7b", "a100-80g", {"stack": "megatron"}, 32),
    ("qwen3-next-80b-a3b", "h200-141g", {}, 24), ("llama2-7b", "a100-40g", {"seq_len": 8192}, 12)])
def test_plan_gives_each_layout_its_largest_micro_batch(lib, model, gpu, values, gpus):
    """Every layout plan lists carries the largest micro-batch whose total fits (the next one
    does not, or it is the limit) and that total, and every layout it leaves out does not fit
    one sample: checked call by call with the program, against what plan derives from a line
    or a bisection."""
    from engine.answers.plan import MAX_TP, SIZE_RULES, candidates, plan
    from engine.answers.report import whole_bytes
    from engine.compile.model import fit_capacity
    scenario = Scenario.create(lib, model, gpu).with_values(**values)
    most = 48
    rows = plan(scenario, gpus, max_micro_batch=most)
    capacity = fit_capacity(scenario)
    ev = exact.Evaluator(model, "total", gpu=gpu, values=values, varying=LAYOUT_VARYING, library=lib)
    listed = {(r.tp, r.pp, r.dp, r.zero_stage, r.recompute): r for r in rows}
    assert listed
    for r in rows:
        layout = dict(tp=r.tp, pp=r.pp, dp=r.dp, zero_stage=r.zero_stage, recompute=r.recompute)
        at = ev(**layout, micro_batch=r.micro_batch)
        assert at <= capacity and r.total == whole_bytes(at), r
        assert r.micro_batch == most or ev(**layout, micro_batch=r.micro_batch + 1) > capacity, r
    layouts = candidates(gpus, MAX_TP, True, {n: scenario.evaluate(n) for n in SIZE_RULES},
                         lambda z: scenario.with_values(zero_stage=z).evaluate("shard_level"),
                         lib.options["recompute"].choices)
    left_out = [x for x in layouts if x not in listed]
    assert len(layouts) == len(listed) + len(left_out)
    for tp, pp, dp, zero, rec in left_out:
        assert ev(tp=tp, pp=pp, dp=dp, zero_stage=zero, recompute=rec, micro_batch=1) > capacity


def test_a_direction_the_program_shows_holds_on_the_grid(lib):
    """Evaluator.direction: where the program's shape shows how the total moves with
    micro_batch, seq_len or dp, its values on the grid the full path checks
    (engine.answers.search.grid) never move the other way.  Every model preset under seven
    settings; the direction shows for most, and not for all (solve then checks the grid)."""
    from engine.answers import search
    shown = hidden = 0
    settings = ({}, {"zero_stage": 3}, {"stack": "megatron"}, {"finetune": "lora", "stack": "fsdp2"},
                {"zero_stage": 2, "recompute": "full", "tp": 2}, {"mode": "infer"}, {"finetune": "qlora"})
    for model in _models(lib):
        for values in settings:
            for unknown in ("micro_batch", "seq_len", "dp"):
                ev = exact.Evaluator(model, "total", gpu=GPU, values=values, varying=(unknown,), library=lib)
                d, junctions = ev.direction(unknown)
                if d is None:
                    hidden += 1
                    continue
                shown += 1
                xs = search.grid(1, 1 << (16 if unknown == "dp" else 20))
                xs = sorted(set(xs) | {j for b in junctions for j in (b - 1, b)})
                ys = [ev(**{unknown: x}) for x in xs]
                # between junctions the direction holds; across one, as the values there say
                moves = [(b - a) * d >= 0 if d else b == a for a, b in zip(ys, ys[1:])]
                across = {i for i, x in enumerate(xs[:-1]) if any(x < b <= xs[i + 1] for b in junctions)}
                assert all(ok or i in across for i, ok in enumerate(moves)), (model, values, unknown, d, junctions)
                junctions_hold = all((ev(**{unknown: b}) - ev(**{unknown: b - 1})) * d >= 0 for b in junctions)
                if junctions_hold:
                    assert all(moves), (model, values, unknown, d, junctions)
    assert shown > 2 * hidden > 0


@pytest.mark.parametrize("tree, direction, junctions", [
    (("+", ("s", 0), ("c", 3)), 1, []),
    (("*", ("c", -2), ("s", 0)), -1, []),
    (("^", ("s", 0), -1), -1, []),
    (("*", ("c", 5), ("^", ("+", ("s", 0), ("c", -1)), -1)), None, []),  # 1 / (x - 1): zero at 1
    # a threshold on the parameter itself: decided on each side, the junction left to the caller
    (("if", ((">", ("s", 0), ("c", 1)), ("c", 7)), (None, ("c", 0))), 0, [2]),
    (("if", ((">", ("s", 0), ("c", 4)), ("c", 0)), (None, ("s", 0))), 1, [5]),  # up, then down to 0 at 5
    (("if", (("<=", ("c", Fraction(7, 2)), ("s", 0)), ("s", 0)), (None, ("c", 9))), 1, [4]),
    # a threshold on something else: a jump between two numbers
    (("if", ((">", ("ceil", ("*", ("s", 0), ("c", Fraction(1, 8)))), ("c", 3)), ("c", 7)), (None, ("c", 0))), 1, []),
    (("if", ((">", ("ceil", ("*", ("s", 0), ("c", Fraction(1, 8)))), ("c", 3)), ("c", 0)), (None, ("c", 7))), -1, []),
    (("if", ((">", ("ceil", ("*", ("s", 0), ("c", Fraction(1, 8)))), ("c", 3)), ("c", 0)), (None, ("s", 0))), None, []),
    (("max", ("s", 0), ("c", 8)), 1, []),
    (("*", ("s", 0), ("+", ("s", 0), ("c", -10))), None, []),  # x (x - 10): down, then up
    (("^", ("+", ("s", 0), ("c", -10)), 2), None, []),
    (("^", ("+", ("s", 0), ("c", -10)), 3), 1, []),
    (("ceil", ("*", ("s", 0), ("c", Fraction(1, 3)))), 1, []),
])
def test_directions_of_small_programs(tree, direction, junctions):
    """engine.compile.codegen.monotone on programs whose direction is known by hand, and on
    ones that turn or divide by zero somewhere (no direction)."""
    from engine.compile import codegen
    assert codegen.monotone([(1, tree)], [("s", 1)], 0) == [(direction, junctions)]
