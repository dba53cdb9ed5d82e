"""Pathological input is stopped with a clear error in bounded time."""
import time

import pytest

import engine
from engine.errors import ResourceLimitError
from engine.model import Scenario


def resolve(text):
    lib = engine.Library()
    lib.add_text(text, "bad.mem")
    return lib.resolve()


@pytest.mark.parametrize("text", [
    'rule x : count = ' + '- ' * 20000 + '1 "deep"',
    'rule x : count = ' + ' + '.join(['1'] * 60000) + ' "long"',
    'rule x : count = 1 "' + 'x' * 1_100_000 + '"',
], ids=["deep", "long", "huge"])
def test_oversized_rule_files_are_refused(text):
    start = time.monotonic()
    with pytest.raises(ResourceLimitError) as info:
        resolve(text)
    assert info.value.span.file == "bad.mem"
    assert time.monotonic() - start < 30


def test_exponential_rule_chain_is_refused():
    # every rule uses the previous one twice: inlined, a40 would have 2^40 leaves
    chain = "\n".join(['input a0 : count >= 1 = 2 "a"'] +
                      [f'rule a{i + 1} : count = (a{i} + 1) * (a{i} + 2) "r"' for i in range(40)])
    lib = resolve(chain)
    start = time.monotonic()
    with pytest.raises(ResourceLimitError) as info:  # with a0 = 2 the values explode
        Scenario.create(lib).evaluate("a40")
    assert "has a value of more than 100,000 bits" in info.value.message
    with pytest.raises(ResourceLimitError) as info:  # symbolic, the expression does
        lib.compose("a40")
    assert "expands to more than 1,000,000 terms" in info.value.message
    assert info.value.span.line < 41
    assert time.monotonic() - start < 30


def test_absurd_plan_is_refused(lib):
    from engine.errors import UsageError
    from engine.plan import plan
    with pytest.raises(UsageError):
        plan(Scenario.create(lib, "llama2-7b", "h100-80g"), 10**9)
