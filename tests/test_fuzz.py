"""Hypothesis: random rule text and random --set values raise only memform's own errors."""
import io
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from engine.cli import main
from engine.errors import EngineError
from engine.parser import data_path, parse_text

LIBRARY_TOKENS = " ".join(p.read_text() for p in sorted(data_path("formulas").glob("*.mem"))).split()


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet='rule input option check preset=+-*/^(){}[],:"# xy12.\nBGi<>!', max_size=60))
def test_random_text_raises_only_engine_errors(text):
    try:
        parse_text(text, "fuzz.mem")
    except EngineError as exc:
        assert exc.span is None or exc.span.line >= 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(LIBRARY_TOKENS), min_size=1, max_size=25))
def test_shuffled_library_tokens_raise_only_engine_errors(tokens):
    try:
        parse_text(" ".join(tokens), "fuzz.mem")
    except EngineError:
        pass


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(["micro_batch", "seq_len", "dp", "zero_stage", "precision", "n_params",
                             "capacity", "alloc_margin", "bogus", ""]),
       value=st.one_of(st.text(max_size=12), st.sampled_from(["1e400", "nan", "-0", "inf", "1e-400",
                                                               "__import__('os')", "80 GiB", "2^64"])))
def test_random_set_values_exit_cleanly(name, value):
    out, err = io.StringIO(), io.StringIO()
    code = main(["estimate", "llama2-7b", "--json", "--set", f"{name}={value}"], out, err)
    assert code in (0, 2)
    assert "Traceback" not in err.getvalue()
    assert (code == 0) == (err.getvalue() == "")
