"""Every error class a user can meet, rendered exactly as tests/golden/errors/CLASS.txt says.

The golden files are written by hand from the message format (file:line:col, the line,
a caret under the culprit, a hint); they are not regenerated from memform's output."""
from pathlib import Path

import pytest

import engine
from engine import errors
from engine.compile.model import Scenario, parse_setting
from conftest import TINY

GOLDEN = Path(__file__).parent / "golden" / "errors"


def tiny_with(text):
    lib = engine.Library()
    lib.add_text(TINY, "tiny.mem")
    lib.add_text(text, "bad.mem")
    return lib.resolve()


def solve_zero1(lib):
    from engine.answers.solve import solve
    s = Scenario.create(lib, "llama2-70b", values={"n_params": 70 * 10**9, "zero_stage": 1, "capacity": 80 * 10**9})
    solve(s, "min", "dp", target="model_states")


def usage(lib):
    import argparse
    from engine.cli import _scenario
    _scenario(lib, argparse.Namespace(sets=[], gpu="h100-80g", capacity="80GB"), "llama2-7b")


CASES = {
    "FormulaSyntaxError": lambda lib: tiny_with('rule x : bytes = 2 *\n  (3 + ) "doc"'),
    "UnknownNameError": lambda lib: tiny_with('rule x : count = 2 * widht "x"'),
    "RedefinitionError": lambda lib: tiny_with('input width : count >= 1 "again"'),
    "UnitError": lambda lib: tiny_with('rule x : bytes = per_thing + n "x"'),
    "DependencyCycleError": lambda lib: tiny_with('rule a : count = b + 1 "a"\nrule b : count = a "b"'),
    "DomainError": lambda lib: parse_setting(lib, "dp=0"),
    "MissingInputError": lambda lib: Scenario.create(tiny_with("")).evaluate("total"),
    "UsageError": usage,
    "InfeasibleError": solve_zero1,
    "ResourceLimitError": lambda lib: parse_setting(lib, "n_params=10^10^10"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rendered_error_matches_golden(lib, name):
    with pytest.raises(getattr(errors, name)) as info:
        CASES[name](lib)
    assert type(info.value).__name__ == name
    assert str(info.value) + "\n" == (GOLDEN / f"{name}.txt").read_text()


def test_every_user_error_class_is_in_the_catalogue():
    user_errors = {name for name, cls in vars(errors).items()
                   if isinstance(cls, type) and issubclass(cls, errors.EngineError)
                   and cls not in (errors.EngineError, errors.SourceError, errors.ErrorGroup)}
    assert user_errors == set(CASES) == {p.stem for p in GOLDEN.glob("*.txt")}
