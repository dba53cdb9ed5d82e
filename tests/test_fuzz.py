"""Fuzzing in the test suite: bench/fuzz.py's inputs, a few hundred per surface, find nothing.

The inputs come from bench/fuzz.py's generators (``--set`` values and rule files derived
from the grammar, mutated config.json files, command lines over every subcommand), seeded
by hypothesis; each runs through ``engine.cli.main`` and must meet every invariant
bench/fuzz.py checks: only memform's own errors, no command over 10 s, exit status 0 / 1 / 2
as documented, strict JSON whose byte figures are whole, non-negative and add up, ``--set``
values equal to their arithmetic, and the fast path printing what the full path prints.
A failure prints the command line and its files.
"""
import importlib.util
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

import engine

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("memform_fuzz", ROOT / "bench" / "fuzz.py")
fuzz = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fuzz)

#: shrinking reruns a failing input hundreds of times; bench/fuzz.py keeps the shortest
FUZZ = dict(deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    """A fresh cache folder (so the fast path has its files, and the user's cache is not
    touched), an empty working folder and the fuzzer's library shortcuts."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
        shipped = engine.load()
        workdir = tmp_path_factory.mktemp("memform-fuzz-work")
        with fuzz.shortcuts(shipped):
            yield fuzz.Context(shipped), workdir


def _run(harness, surface, seed):
    ctx, workdir = harness
    case = fuzz.generate(surface, random.Random(seed), ctx)
    found = fuzz.run_case(case, workdir, limit=10)["findings"]
    assert not found, fuzz.describe(case) + "\n" + "\n".join(f"  {k}: {d}" for k, d in found)


@settings(max_examples=300, **FUZZ)
@given(seed=st.integers(0, 2**64))
def test_set_values(harness, seed):
    _run(harness, "set", seed)


@settings(max_examples=150, **FUZZ)
@given(seed=st.integers(0, 2**64))
def test_rule_files(harness, seed):
    _run(harness, "rules", seed)


@settings(max_examples=300, **FUZZ)
@given(seed=st.integers(0, 2**64))
def test_config_files(harness, seed):
    _run(harness, "config", seed)


@settings(max_examples=150, **FUZZ)
@given(seed=st.integers(0, 2**64))
def test_command_lines(harness, seed):
    _run(harness, "cli", seed)


def test_arithmetic_oracle():
    """The fuzzer's own arithmetic, by hand: what a --set value must come to, or that it
    must be refused."""
    g = fuzz.Grammar()

    def value(text):
        return fuzz.evaluate(g.parse(text)[0])

    assert value("if 1 == 1 then 3 else 4") == (3, 0)
    assert value("if 1 != 1 then 3 else 4") == (4, 0)
    assert value("if 1 < 2 and 2 < 1 then 1 else 2") == (2, 0)
    assert value("1/3 B") == (fuzz.Fraction(1, 3), -1)  # 1 / (3 B): a quantity binds its unit
    assert value("1/3 * 1 B") == (fuzz.Fraction(1, 3), 1)
    assert value("(2 + 2) * 1 GiB") == (4 * 2**30, 1)
    assert value("4^0.5") == (2, 0)
    assert value("max(1 GB, 2 GB)") == (2 * 10**9, 1)
    for text, reason in [("2^3 B", "a unit in an exponent"), ("max(1 B, 2)", "mixed units in min/max"),
                         ("80 GB - 1", "bytes added to a plain number"), ("1/0", "division by zero"),
                         ("sqrt(-4)", "a complex square root")]:
        with pytest.raises(fuzz.Reject, match=reason):
            value(text)
    # exact only where the rest cancels it (0 * sqrt(2), 0 TB + 1): the oracle does not decide
    for text in ("sqrt(2)", "log2(3)", "2^0.5", "0 TB + 1"):
        with pytest.raises(fuzz.Unknown):
            value(text)
    with pytest.raises(fuzz.Reject, match="non-ASCII"):
        fuzz.read_number("߃")


def test_json_invariants():
    """estimate --json documents that break the README's arithmetic are caught."""
    good = {"total_bytes": 10, "components": {"weights": 4, "overhead": 6}, "rules": {"weights": 4, "total": 10},
            "inputs": {}, "capacity_bytes": None, "fits": None}
    assert fuzz.estimate_problems(good) == []
    pinned = dict(good, total_bytes=3, rules={"weights": 4, "total": 3})
    assert {p for p, _ in fuzz.estimate_problems(pinned)} == {
        "component above the total (weights)", "components do not sum to the total"}
    negative = dict(good, components={"weights": -4, "overhead": 14})
    assert fuzz.estimate_problems(negative)[0][0] == "negative byte figure (components.weights)"
    with pytest.raises(ValueError):
        fuzz._strict('{"total_bytes": Infinity}')


def test_json_flag_after_double_dash_is_an_argument():
    """Seed 1252: 'memform names -- --json' searches for the text '--json' (exit 1, plain text);
    the fuzzer held it to the --json invariants, a finding of its own."""
    run = {"code": 1, "out": "", "err": "no name matches '--json'\n"}
    assert fuzz.output_problems({"argv": ["names", "--", "--json"]}, run) == []
    assert fuzz.output_problems({"argv": ["names", "--json", "zzz"]}, dict(run, out="no name\n"))
