"""Text -> declarations, and located syntax errors."""
import pytest
import sympy

from engine.errors import FormulaSyntaxError, UnknownNameError
from engine.lang.parser import parse_text, parse_value
from engine.lang.rules import BYTE, InputDecl, OptionDecl, RuleDecl


def test_input_with_domain_default_and_doc():
    (d,) = parse_text('input dp : count >= 1 = 1 "data-parallel ranks"')
    assert isinstance(d, InputDecl)
    assert (d.name, d.unit, d.lower, d.lower_strict, d.default, d.doc) == ("dp", "count", 1, False, 1, "data-parallel ranks")


def test_ratio_input_between():
    (d,) = parse_text('input m : ratio in [0, 1] = 0.1 "margin"')
    assert (d.lower, d.upper, d.default) == (0, 1, sympy.Rational(1, 10))


@pytest.mark.parametrize("text, value", [
    ("80 GB", 80 * 10**9), ("80 GiB", 80 * 2**30), ("1.5 TB", 15 * 10**11), ("81559 MiB", 81559 * 2**20),
    ("0.375 B", sympy.Rational(3, 8)), ("70e9", 70 * 10**9), ("4 * 1024", 4096), ("2 ^ 10", 1024),
])
def test_quantities_are_exact(text, value):
    assert parse_value(text).xreplace({BYTE: 1}) == value


def test_rule_spans_lines_with_source_and_text():
    (r,) = parse_text('rule w : bytes =\n    n * 2 B\n  "weights" source "ZeRO sec. 3"')
    assert isinstance(r, RuleDecl)
    assert (r.name, r.unit, r.doc, r.source, r.text) == ("w", "bytes", "weights", "ZeRO sec. 3", "n * 2 B")
    assert r.expr == sympy.Symbol("n") * 2 * BYTE


def test_numeric_option():
    (o,) = parse_text('option zero_stage in {0, 1, 2, 3} = 0 "ZeRO stage"')
    assert isinstance(o, OptionDecl) and o.numeric and o.code("3") == 3


def test_piecewise_and_functions():
    (r,) = parse_text('rule x : count = if a >= 3 then ceil(b / 2) else max(a, b, 1) "x"')
    a, b = sympy.symbols("a b")
    assert r.expr.subs({a: 4, b: 5}) == 3
    assert r.expr.subs({a: 2, b: 5}) == 5


@pytest.mark.parametrize("text, message, line, column", [
    ('rule x : bytes = 2 * "doc"', "unexpected '\"doc\"'", 1, 22),
    ('rule x : bytes = 2 *\n  (3 + ) "doc"', "unexpected ')'", 2, 8),
    ('input x : count >= 1', "unexpected end of input", 1, 21),
    ('rule x : bytes = 2 $ 3 "d"', "unexpected character '$'", 1, 20),
    ('rule if : count = 1 "d"', "'if' is a keyword and cannot be a name", 1, 6),
    ('option o in {a, b} = c "d"', "default 'c' is not a choice of option 'o'", 1, 22),
])
def test_syntax_errors_are_located(text, message, line, column):
    with pytest.raises((FormulaSyntaxError, UnknownNameError)) as info:
        parse_text(text, "bad.mem")
    err = info.value
    assert (err.message, err.span.file, err.span.line, err.span.column) == (message, "bad.mem", line, column)


def test_unknown_function_has_hint():
    with pytest.raises(UnknownNameError) as info:
        parse_text('rule x : count = cel(2) "d"', "f.mem")
    assert info.value.message == "unknown function 'cel'"
    assert info.value.hint == "did you mean 'ceil'?"
    assert (info.value.span.line, info.value.span.column) == (1, 18)


@pytest.mark.parametrize("text", ["__import__('os').system('true')", "lambda: 1", "x.__class__",
                                  "S(\"1\")", "exec('1')", "1; 2"])
def test_python_payloads_are_syntax_errors(text):
    with pytest.raises(Exception) as info:
        value = parse_value(text)
        # a lone name parses (it is a choice name) but is never called or evaluated
        assert isinstance(value, sympy.Symbol)
        raise FormulaSyntaxError("name only")
    assert isinstance(info.value, (FormulaSyntaxError, UnknownNameError))


@pytest.mark.parametrize("choices", ["{1e3, 2}", "{01, 2}", "{1.0, 2}", "{" + "9" * 19 + ", 2}"])
def test_numeric_choices_are_plain_whole_numbers(choices):
    with pytest.raises(FormulaSyntaxError) as info:
        parse_text(f'option o in {choices} = 2 "d"', "o.mem")
    assert info.value.message == "numeric choices must be whole numbers"


@pytest.mark.parametrize("text, value", [
    ("if 1 == 1 then 3 else 4", 3), ("if 1 != 1 then 3 else 4", 4), ("if 1 < 2 then 3 else 4", 3),
    ("if 2 > 1 and not 1 >= 2 then 3 else 4", 3), ("if 1 == 1 then 1 B / 2 else 2 B", BYTE / 2),
])
def test_constant_comparisons_are_decided_when_parsed(text, value):
    (r,) = parse_text(f'rule x : bytes = {text} "x"')
    assert r.expr == value
