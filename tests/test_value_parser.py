"""The stand-alone parser of ``--set`` values (lark's generator, built with the package:
engine/lang/grammar.py) parses exactly as lark's parser of the rule language does."""
from fractions import Fraction

import lark
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import store
from engine.lang import constants, grammar


@pytest.fixture(scope="module")
def parsers(tmp_path_factory):
    folder = tmp_path_factory.mktemp("built")
    grammar.write_standalone(folder)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(store, "BUILT", folder)
        mp.delenv("MEMFORM_NO_CACHE", raising=False)
        runtime, standalone = grammar.value_parser()
    assert not isinstance(standalone, lark.Lark)  # the built one, not lark's
    return (runtime, standalone), (grammar._lark_runtime(), grammar.lark_parser())


def _plain(tree):
    """A parse tree of either runtime as plain tuples (token types and text kept)."""
    if tree is None or isinstance(tree, str):
        return None if tree is None else (tree.type, str(tree), tree.line, tree.column)
    return (tree.data, tuple(_plain(c) for c in tree.children))


def _parse(pair, text):
    runtime, parser = pair
    try:
        return _plain(parser.parse(text, start="expr"))
    except runtime.LarkError as exc:
        return ("error", type(exc).__name__)


def _value(pair, text, monkeypatch):
    monkeypatch.setattr(constants, "_PARSER", pair)
    try:
        return constants.parse_value(text, units=True)
    except constants.Unsupported as exc:
        return ("unsupported", type(exc).__name__)


SAMPLES = ["8", "4096", "80 GiB", "1.5e3", "0.25", "2**10", "2^10", "-3", "(1 + 2) * 3 / 4", "fp8",
           "bf16_mixed", "min(4, 8 GB)", "max(1, 2, 3)", "ceil(7 / 2)", "floor(7/2) MiB", "log2(64)",
           "sqrt(16)", "if 1 < 2 then 3 else 4", "8 +", "", "'", "1 GiB GiB", "3 MB * 2", "1e400",
           "10 ** 40", "not a value", "x == y", "8 GiB / 0", "((((1))))", "5 %", "1_000", "0x10"]


@pytest.mark.parametrize("text", SAMPLES)
def test_the_built_parser_gives_lark_trees_and_values(parsers, text, monkeypatch):
    built, larks = parsers
    _alike(_parse(built, text), _parse(larks, text))
    assert _value(built, text, monkeypatch) == _value(larks, text, monkeypatch)


def _alike(ours, theirs):
    if theirs[0] == "error":
        assert ours[0] == "error"  # both refuse it (the full path then reports lark's error)
    else:
        assert ours == theirs


TOKENS = st.sampled_from(["1", "8", "0.5", "2e3", "GiB", "MB", "B", "+", "-", "*", "/", "^", "**", "(", ")",
                          ",", "min", "max", "ceil", "if", "then", "else", "<", "==", "and", "or", "not",
                          "fp8", "dp", " ", "'", "@", "1_0", "#"])


@settings(max_examples=400, deadline=None)
@given(st.lists(TOKENS, max_size=12).map(" ".join))
def test_any_text_parses_alike(parsers, text):
    built, larks = parsers
    _alike(_parse(built, text), _parse(larks, text))


def test_the_built_parser_has_no_pickle(tmp_path):
    """Lark's runtime saves, loads and caches parsers with pickle; the module the package is
    built with has that code cut out (a planted file could otherwise run code when loaded)."""
    grammar.write_standalone(tmp_path)
    text = (tmp_path / grammar.standalone_name()).read_text(encoding="utf-8")
    assert "pickle" not in text and "marshal" not in text
    assert "Mozilla Public License" in text  # lark's notice for the generated code is kept
    # a silent logger in place of logging's (lark's is at CRITICAL: nothing it logs is printed)
    assert "import logging" not in text and "logger = _Silent()" in text


def test_values_are_exact(parsers, monkeypatch):
    built, _ = parsers
    assert _value(built, "80 GiB", monkeypatch) == (Fraction(80 * 2**30), 1)
    assert _value(built, "3 / 4", monkeypatch) == (Fraction(3, 4), 0)
    assert _value(built, "fp8", monkeypatch) == "fp8"
