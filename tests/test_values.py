"""Values (``--set``, constants in rules) stay inside the language's domain: units where they
make sense, finite real numbers of a sane size, constant comparisons decided, rule pins
inside the rule's declared domain.  Every case is a reproducer of issue 18; the expected
figures are hand arithmetic."""
import contextlib
import io
import json
import signal
from fractions import Fraction

import pytest
import sympy

import engine
from engine.compile import compiler
from engine.lang import constants
from engine.compile.exact import evaluate_rules
from engine.compile import trees
from engine.cli import main
from engine.errors import DomainError, ResourceLimitError, UnitError
from engine.compile.model import Scenario, parse_setting
from engine.lang.parser import parse_text, parse_value
from engine.lang.values import check_domain


@contextlib.contextmanager
def within(seconds: int):
    """Fail, instead of hanging, when the block spends more than ``seconds`` of CPU time (not
    wall time: a loaded machine does not fail it; memform's own budgets use ITIMER_PROF)."""
    def stop(signum, frame):
        raise AssertionError(f"still running after {seconds} s of CPU")
    old = signal.signal(signal.SIGVTALRM, stop)
    signal.setitimer(signal.ITIMER_VIRTUAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, old)


def run(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with within(60):
        code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def refused(setting: str, message: str, model: str = "gpt2") -> str:
    """``estimate MODEL --set SETTING`` exits 2 with ``message``, located with a caret."""
    code, out, err = run("estimate", model, "--set", setting)
    assert code == 2, out + err
    assert message in err
    assert err.startswith("--set:1:") and "^" in err, err
    return err


def tiny(text: str):
    lib = engine.Library()
    lib.add_text('input n : count >= 1 = 2 "things"\n' + text, "t.mem")
    return lib.resolve()


# ---------------------------------------------------------------- units
@pytest.mark.parametrize("setting, message", [
    ("cuda_context=2^3 B", "an exponent is a plain number, not bytes"),  # 2^(3 B)
    ("cuda_context=max(1 B, 2)", "cannot combine bytes and a plain number"),
    ("cuda_context=1 GB + 5", "cannot combine bytes and a plain number"),
    ("cuda_context=1/3 B", "'cuda_context' is in bytes but the value is in bytes^-1"),  # 1/(3 B)
    ("cuda_context=(2 MiB) ^ (1/3)", "the value is in bytes^1/3"),
    ("cuda_context=if 3 B < 0.5 then 4096 else 1", "cannot combine bytes and a plain number"),
    ("micro_batch=log2(8 B)", "log2 takes a plain number, not bytes"),
])
def test_units_only_where_they_make_sense(setting, message):
    refused(setting, message)


@pytest.mark.parametrize("setting, message", [
    # sympy's 0 * B is 0: these zeros keep their unit only in the text (fuzzer find, issue 18)
    ("capacity=16 MB ^ 0 GiB ^ 16", "an exponent is a plain number, not bytes"),
    ("micro_batch=0 GiB + 5", "cannot combine bytes and a plain number"),
    ("cuda_context=min(0 GiB, 5)", "cannot combine bytes and a plain number"),
    ("seq_per_gpu=70e9 KB * 0 GiB ^ 1000000000", "'seq_per_gpu' is in tokens but the value is in bytes^1000000001"),
    ("n_params=floor(4 + 1e9) ^ 0 KB", "an exponent is a plain number, not bytes"),
    ("zero_stage=0 TB", "option 'zero_stage' takes a choice, not a value in bytes"),
    ("micro_batch=0 TB", "'micro_batch' is in count but the value is in bytes"),
    ("micro_batch=(0 GiB) * 3", "'micro_batch' is in count but the value is in bytes"),
    # log2(1) is sympy's 0 at once, and takes the bytes it multiplies with it (seed 1220)
    ("weights=2 B * 0.1 TB * log2(1)", "'weights' is in bytes but the value is in bytes^2"),
    ("weights=sqrt(0 B)", "'weights' is in bytes but the value is in bytes^1/2"),
    # inside a constant condition's arm, taken or not (fuzzer seed 1251)
    ("capacity=if 2 != 0.5 then 1 * 8 MiB ^ 0 GB else 3", "an exponent is a plain number, not bytes"),
    ("capacity=if 2 < 1 or not 1 == 1 then 3 else 8 MiB ^ 0 GB", "an exponent is a plain number, not bytes"),
    ("micro_batch=if 1 < 2 then 0 GiB else 1", "cannot combine bytes and a plain number"),
])
def test_a_zero_keeps_its_unit(setting, message):
    refused(setting, message)


@pytest.mark.parametrize("setting", [
    # sympy looks for an exact 10^8-th root of the base: minutes (fuzzer finds, issue 18)
    "alloc_margin=1.5 PiB ^ 7e-1 ^ 8", "recompute=ceil(4 ^ 1e-308) ^ 0.1",
    "megatron_total=min(0 TiB, 100 B) ^ 1e-400",
])
def test_roots_of_huge_degree_are_refused_quickly(setting):
    with within(10):
        refused(setting, "takes a root of degree", model="llama2-7b")


@pytest.mark.parametrize("setting", [
    # min(if NAME ... then 1 else 1e400, 1) is sympy's 1 at once; times 1 B it is the byte unit's
    # Symbol, which passed for a name standing alone (fuzz seed 1221)
    "cuda_context=(min(if stack in {hf} then 1 else 1e400, 1, 64) ^ 2) * 1 B",
    "cuda_context=min(if stack in {hf} then 1 else 2, 1) * 1 B",
    "micro_batch=dp * 2 / dp",
])
def test_a_name_that_cancels_out_is_still_refused(setting):
    refused(setting, "a value is a constant: it cannot use")


def test_a_choice_may_stand_in_parentheses():
    assert parse_setting(engine.load(), "stack=(megatron)")[1] == "megatron"


def test_a_zero_in_bytes_is_a_byte_value():
    assert parse_setting(engine.load(), "cuda_context=0 GiB")[1] == 0


def test_a_unit_belongs_to_its_number():
    err = refused("cuda_context=1/3 B", "bytes^-1")
    assert "write 1 B / 3" in err
    lib = engine.load()
    # a third of a byte, a gigabyte plus 512 megabytes, the larger of two sizes: by hand
    assert parse_setting(lib, "cuda_context=1 B / 3")[1] == sympy.Rational(1, 3)
    assert parse_setting(lib, "cuda_context=1 GB + 512 MB")[1] == 1_512_000_000
    assert parse_setting(lib, "cuda_context=max(1 GB, 2 MiB)")[1] == 10**9
    assert parse_setting(lib, "cuda_context=ceil(1 B / 3)")[1] == 1
    # exact logarithms and roots keep exact units: log2(8) = 3, sqrt(4 B^2) = 2 B
    assert parse_setting(lib, "cuda_context=2 B * log2(8)")[1] == 6
    assert parse_setting(lib, "cuda_context=sqrt(4 B * 1 B)")[1] == 2
    assert parse_setting(lib, "dp=3 B / 1 B")[1] == 3


# ---------------------------------------------------------------- finite real numbers
@pytest.mark.parametrize("setting, message", [
    ("micro_batch=max(1/0, 1)", "'1/0' is not a finite number"),
    ("micro_batch=max(log2(0), 1)", "'log2(0)' is not a finite number"),
    ("micro_batch=min(sqrt(-1), 2)", "'sqrt(-1)' is not a real number"),
    ("micro_batch=if 1 < 1/0 then 1 else 2", "'1/0' is not a finite number"),
    ("micro_batch=if sqrt(-1) < 1 then 1 else 2", "'sqrt(-1)' is not a real number"),
    ("micro_batch=(-8)^(1/3)", "'(-8)^(1/3)' is not a real number"),
    ("micro_batch=log2(3)", "is not a rational number"),
])
def test_values_that_leave_the_reals_are_refused_where_they_do(setting, message):
    refused(setting, message)


def test_any_other_error_while_building_a_value_is_located(monkeypatch):
    import engine.lang.transform as transform

    def broken(x):
        raise TypeError("not for this argument")
    monkeypatch.setitem(transform.FUNCTIONS, "ceil", (broken, 1))
    with pytest.raises(DomainError) as info:
        parse_value("2 * ceil(3)")
    assert info.value.message == "cannot compute 'ceil(3)'"
    assert (info.value.span.column, info.value.span.length) == (5, 7)


# ---------------------------------------------------------------- constant comparisons
@pytest.mark.parametrize("value, expected", [
    ("if 1 == 1 then 3 else 4", 3), ("if 1 != 1 then 3 else 4", 4), ("if 1 < 2 then 3 else 4", 3),
    ("if 2 <= 1 then 3 else 4", 4), ("if not 1 > 2 and 2 >= 2 then 3 else 4", 3),
])
def test_constant_comparisons_in_values(value, expected):
    code, out, err = run("estimate", "gpt2", "--set", f"micro_batch={value}", "--json")
    assert code == 0, err
    assert json.loads(out)["inputs"]["micro_batch"] == expected


def test_constant_comparisons_in_rules_on_both_paths():
    lib = tiny('rule a : bytes = if 1 == 1 then 3 B else 4 B "a"\n'
               'rule b : count = if 1 != 1 then 3 else 4 "b"\n'
               'rule c : count = n * (if 1 < 2 then 3 else 4) "c"\n')
    scenario = Scenario.create(lib)
    assert [scenario.evaluate(r) for r in "abc"] == [3, 4, 6]
    compiled = compiler.compile_library(lib)
    assert evaluate_rules(compiled, {"n": Fraction(2)}, "abc") == {"a": 3, "b": 4, "c": 6}


# ---------------------------------------------------------------- digits
def test_only_ascii_digits_are_numbers():
    refused("micro_batch=߃", "unexpected character '߃'")  # N'Ko digit three
    refused("micro_batch=٣", "unexpected character '٣'")  # Arabic-Indic digit three
    with pytest.raises(engine.EngineError):
        parse_text('rule x : count = ３ "fullwidth three"')


# ---------------------------------------------------------------- sizes
@pytest.mark.parametrize("setting, message", [
    ("n_params=10^5000", "the value of 'n_params' is too large"),
    ("micro_batch=1e400", "the value of 'micro_batch' is too large"),
    ("zero_stage=10^5000", "is not a choice of option 'zero_stage'"),
    ("alloc_margin=1e-40", "too fine a fraction"),
    ("n_params=1e100000000", "the number 1e100000000 has more than 10,000 digits"),
    ("micro_batch=0.5^(10^9)", "(1/2)^1000000000 has more than 10,000 digits"),
    ("micro_batch=0.1^(-10^8)", "(1/10)^-100000000 has more than 10,000 digits"),
    ("cuda_context=(2 B)^1000000000", "(2 B)^1000000000 has more than 10,000 digits"),
    ("cuda_context=sqrt(10^4000 + 1)", "takes a root of a number of more than 100 digits"),
])
def test_huge_values_are_refused_quickly(setting, message):
    refused(setting, message)


@pytest.mark.parametrize("text, message, column", [
    ('input hidden_size : count >= 1 = 8 "h"\nrule x : count = hidden_size ^ 1000000000 "x"',
     "the exponent of 'hidden_size ^ 1000000000' is more than 10,000", 18),
    ('input dp : count >= 1 = 16 "dp"\nrule x : count = dp ^ dp ^ dp "x"',
     "the exponent of 'dp ^ dp' must be a constant number", 23),
    ('rule x : count = 1e100000000 "x"', "the number 1e100000000 has more than 10,000 digits", 18),
    ('rule x : count = ' + ' * '.join(['1e9999'] * 4) + ' "x"', "has more than 10,000 digits", 18),
])
def test_huge_powers_in_rule_files_are_refused_when_parsed(text, message, column):
    with within(10), pytest.raises(ResourceLimitError) as info:
        parse_text(text, "big.mem")
    assert message in info.value.message
    assert (info.value.span.file, info.value.span.line, info.value.span.column) == ("big.mem", text.count("\n") + 1, column)


def test_a_chain_of_squares_stops_at_the_degree_limit():
    """Each rule squares the one before: the 10th has degree 2^10.  sympy's automatic
    simplification of such a power ran for minutes (fuzzer find); the degree is bounded
    before anything is built."""
    text = 'input u : ratio in [0, 1] = 0.5 "u"\nrule sq0 : count = u * 2 "x"\n' + "".join(
        f'rule sq{i} : count = sq{i - 1} * sq{i - 1} + 1 "x"\n' for i in range(1, 21))
    lib = engine.Library()
    lib.add_text(text, "sq.mem")
    lib.resolve()
    with within(10), pytest.raises(ResourceLimitError) as info:
        lib.compose("sq20")
    assert "rule 'sq10' has a polynomial degree of 1,024" in info.value.message
    assert (info.value.span.file, info.value.span.line) == ("sq.mem", 12)
    assert lib.compose("sq8") == lib.compose("sq7") ** 2 + 1  # below the limit: composed


def test_the_built_in_library_is_far_below_the_degree_limit():
    lib = engine.load()
    for name in ("total", "peak", "max_concurrency"):
        lib.compose(name)  # raises past the limit


def test_fast_path_declines_huge_values_quickly():
    compiled = compiler.compile_library(engine.load())
    for text in ("n_params=1e100000000", "n_params=10^60", "micro_batch=" + " * ".join(["1e999"] * 40)):
        with within(10), pytest.raises(constants.Unsupported):
            trees._setting(compiled, text)


# ---------------------------------------------------------------- rule domains
def test_rule_domains_are_declared_in_the_language():
    (flag, stage, heads) = parse_text(
        'rule f : count in [0, 1] = 1 "a flag"\n'
        'rule s : count in [0, layers] # up to the layers\n = min(a, layers) "dense layers"\n'
        'rule h : count >= 1 = a "heads"')
    assert (flag.lower, flag.upper, flag.domain_text()) == (0, 1, ">= 0 and <= 1")
    assert (stage.lower, stage.upper, stage.text) == (0, "layers", "min(a, layers)")
    assert stage.expr_span.line == 3 and stage.expr_span.column == 4
    assert (heads.lower, heads.upper, heads.text) == (1, None, "a")  # not '1 = a': the '=' of '>='


def test_an_inputs_bounds_are_numbers():
    with pytest.raises(engine.EngineError) as info:
        parse_text('input x : count in [0, y] "x"', "f.mem")
    assert info.value.message == "an input's bounds are numbers, not names like 'y'"
    assert (info.value.span.line, info.value.span.column) == (1, 24)


@pytest.mark.parametrize("setting, message", [
    ("offloads_params=68825", "'offloads_params' must be >= 0 and <= 1, not 68825"),
    ("offloads_states=2", "'offloads_states' must be >= 0 and <= 1, not 2"),
    ("expert_share=2", "'expert_share' must be >= 0 and <= 1, not 2"),
    ("num_key_value_heads=0", "'num_key_value_heads' must be >= 1, not 0"),
    ("zero_state_shards=0", "'zero_state_shards' must be >= 1, not 0"),
    ("stage_dense_layers=-1", "'stage_dense_layers' must be >= 0 and <= layers_per_stage, not -1"),
])
def test_pins_outside_a_rules_domain_are_refused(setting, message):
    refused(setting, message)


def test_fast_path_refuses_what_the_full_path_refuses():
    lib = engine.load()
    compiled = compiler.compile_library(lib)
    assert trees._setting(compiled, "offloads_params=1") == ("offloads_params", 1)
    assert parse_setting(lib, "offloads_params=1") == ("offloads_params", 1)
    for text in ("offloads_params=68825", "expert_share=2", "num_key_value_heads=0"):
        with pytest.raises(constants.Unsupported):
            trees._setting(compiled, text)
    # a bound that names a rule is known only in a scenario: the full path answers
    with pytest.raises(constants.Unsupported):
        trees._setting(compiled, "stage_dense_layers=3")


def test_a_bound_that_names_a_rule_is_checked_with_its_value():
    lib = engine.load()
    decl = lib.rules["stage_dense_layers"]
    scenario = Scenario.create(lib, "gpt3-175b")
    bounds = {"layers_per_stage": scenario.evaluate("layers_per_stage")}  # 96 layers, pp = 1
    check_domain(decl, sympy.Integer(96), None, bounds)
    with pytest.raises(DomainError) as info:
        check_domain(decl, sympy.Integer(404873840162), None, bounds)
    assert info.value.message == ("'stage_dense_layers' must be >= 0 and <= layers_per_stage "
                                  "(layers_per_stage = 96), not 404873840162")
