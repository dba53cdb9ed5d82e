"""Pathological input is stopped with a clear error in bounded time."""
import time

import pytest

import engine
from engine.errors import DomainError, ResourceLimitError
from engine.compile.model import Scenario


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
    # every rule multiplies two uses of the previous one: a40 would have degree 2^40
    chain = "\n".join(['input a0 : count >= 1 = 2 "a"'] +
                      [f'rule a{i + 1} : count = (a{i} + 1) * (a{i} + 2) "r"' for i in range(40)])
    lib = resolve(chain)
    start = time.monotonic()
    with pytest.raises(ResourceLimitError) as info:  # with a0 = 2 the values explode
        Scenario.create(lib).evaluate("a40")
    assert "has a value of more than 100,000 bits" in info.value.message
    with pytest.raises(ResourceLimitError) as info:  # symbolic, the degree does: a10 has 2^10
        lib.compose("a40")
    assert "rule 'a10' has a polynomial degree of 1,024" in info.value.message
    assert info.value.span.line == 11
    assert time.monotonic() - start < 30


def chain_of(body: str, depth: int = 40):
    return resolve("\n".join(['input a0 : count >= 1 = 2 "a"'] +
                             [f'rule a{i + 1} : count = {body.format(a=f"a{i}")} "r"' for i in range(depth)]))


def test_a_rule_chain_that_doubles_its_size_is_refused_before_it_is_built():
    # every rule uses the previous one twice without raising its degree: a40 would have 2^40
    # leaves; a19 is the first past eight million nodes (the limit, past the built-in peak's 2.6
    # million)
    lib = chain_of("log2({a}) + log2({a} + 1)")
    start = time.monotonic()
    with pytest.raises(ResourceLimitError) as info:
        lib.compose("a40")
    assert "rule 'a19' expands to" in info.value.message and "the limit is 8,000,000" in info.value.message
    assert info.value.span.line == 20
    assert time.monotonic() - start < 30


def test_the_size_limit_does_not_depend_on_what_was_composed_before():
    # the composed rules are shared between calls: a rule composed by an earlier call once
    # counted as one node in a later call's measure, and the chain got 18 steps further
    lib = chain_of("log2({a}) + log2({a} + 1)")
    lib.compose("a18")  # below the limit
    with pytest.raises(ResourceLimitError) as info:
        lib.compose("a40")
    assert "rule 'a19' expands to" in info.value.message


def test_deeply_nested_min_and_max_are_refused():
    # sympy compares a max's arguments as it builds it: the work doubles with every level
    lib = chain_of("max({a}, 1) + max({a}, 2)")
    with pytest.raises(ResourceLimitError) as info:
        lib.compose("a40")
    assert "rule 'a9' nests min/max 9 deep" in info.value.message


def test_composition_has_a_cpu_budget():
    # below every structural limit (16 levels: 2^18 nodes, no min/max) sympy's simplification
    # of each ceil and floor over the growing argument still runs for minutes (constants no
    # other test uses: sympy's cache would remember the work)
    lib = chain_of("ceil({a} / 7) + floor({a} / 11)", depth=16)
    start = time.monotonic()
    with pytest.raises(ResourceLimitError) as info:
        lib.compose("a16")
    assert "took more than 5 s of CPU time" in info.value.message and info.value.span.file == "bad.mem"
    assert time.monotonic() - start < 60


def test_absurd_plan_is_refused(lib):
    from engine.errors import UsageError
    from engine.answers.plan import plan
    with pytest.raises(UsageError):
        plan(Scenario.create(lib, "llama2-7b", "h100-80g"), 10**9)


def test_a_check_over_conditions_of_composed_rules_has_a_cpu_budget(tmp_path):
    # fuzzer rules seed 1211: a condition over rules that hold conditions of their own, with the
    # serving engine's concurrency in one branch; sympy folds the conditions into one another
    # for minutes.  The check is refused, located, within its budget: over its CPU time, or, where
    # sympy's folding meets a branch that is not a real number first, as not comparable.
    from engine.answers.checks import run_checks
    path = tmp_path / "fold.mem"
    path.write_text('check "fold": if not block_size >= sliding_window_layers / stage_share then '
                    "( tokens_per_block ) else if 3 + zero_group <= qk_nope_head_dim then "
                    "sglang_max_concurrency else 1e9 * sp_shards == 1000000000000000000000000000000 / 1.5\n")
    lib = engine.load(extra=[path])
    lib.lowered_checks = [item for item in lib.lowered_checks if item[0].name == "fold"]
    start = time.process_time()
    with pytest.raises((ResourceLimitError, DomainError)) as info:
        run_checks(lib, samples=1)
    assert ("check 'fold' took more than 5 s of CPU time" in info.value.message
            or "check 'fold' compares a value that is not a real number" in info.value.message)
    assert info.value.span.file.endswith("fold.mem") and info.value.span.line == 1
    assert time.process_time() - start < 15


def test_showing_a_logarithm_beside_a_huge_constant_exact_is_bounded(tmp_path):
    # fuzzer rules seed 1212: sympy's simplify of log2(12800) + 1e400 ran for minutes while the
    # value was checked to be exact; it is refused within simplify's CPU budget instead
    path = tmp_path / "log.mem"
    path.write_text("override rule autocast_output_params : params = megatron_moe_layer_params "
                    "+ log2(1E+2 * qk_nope_head_dim) + 1e400 \"x\"\n")
    lib = engine.load(extra=[path])
    start = time.process_time()
    with pytest.raises(DomainError) as info:
        Scenario.create(lib, "qwen2.5-7b").evaluate("autocast_output_params")
    assert "is not an exact number here" in info.value.message and "within 2 s of CPU time" in info.value.message
    assert info.value.span.file.endswith("log.mem")
    assert time.process_time() - start < 10


def test_a_budget_whose_first_signal_is_swallowed_still_stops_the_work():
    # CI hung for over an hour in the check above (not reproduced here, in the same test order).
    # One way a one-shot timer never stops the work: its signal is handled inside a finaliser
    # (a sympy generator closed by the garbage collector), which swallows the exception.  The
    # timer fires again until the block is left.
    from engine.library.registry import _cpu_budget, _OverBudget

    def spin(limit):
        end = time.process_time() + limit
        while time.process_time() < end:
            pass

    swallowed, start = 0, time.process_time()
    with pytest.raises(_OverBudget):
        with _cpu_budget(0.2):
            try:
                spin(5)  # the first signal lands here and is swallowed, as a finaliser would
            except _OverBudget:
                swallowed += 1
            spin(5)
    assert swallowed == 1 and time.process_time() - start < 3
    # and once the block is left nothing fires any more
    spin(0.5)


def test_a_signal_swallowed_by_a_finaliser_reaches_no_unraisable_hook(monkeypatch):
    # the full suite at bccdfab: a refire landed while pytest's unraisable hook formatted the
    # first signal, swallowed in a finaliser, and the hook failed the test.  The budget's own
    # signal never reaches the hook; another unraisable exception does, and no refire interrupts it
    import gc
    import sys

    from engine.library.registry import _cpu_budget, _OverBudget

    seen = []

    def slow_hook(info):  # as pytest's: formats the traceback, slowly
        end = time.process_time() + 0.3
        while time.process_time() < end:
            pass
        seen.append(type(info.exc_value).__name__)

    monkeypatch.setattr(sys, "unraisablehook", slow_hook)

    class Finaliser:
        def __init__(self, exc):
            self.exc = exc

        def __del__(self):
            if self.exc:
                raise self.exc("another finaliser's error")
            end = time.process_time() + 5
            while time.process_time() < end:  # the budget's signal lands here and is swallowed
                pass

    start = time.process_time()
    with pytest.raises(_OverBudget):
        with _cpu_budget(0.2):
            Finaliser(None)  # collected at once: its __del__ swallows the first signal
            Finaliser(ValueError)  # this one too, then raises an error of its own
            gc.collect()
            while True:
                pass
    assert seen == ["ValueError"] and time.process_time() - start < 5
    assert sys.unraisablehook is slow_hook


def test_a_budget_stops_work_that_spends_no_cpu():
    # the wall-clock backstop (4 x the budget): a blocked call or paging spends no CPU time
    import signal

    from engine.library.registry import _cpu_budget, _OverBudget
    before = signal.getsignal(signal.SIGPROF)
    start = time.monotonic()
    with pytest.raises(_OverBudget):
        with _cpu_budget(0.1):
            time.sleep(30)
    assert time.monotonic() - start < 5
    with _cpu_budget(5):  # left in time: nothing fires, then or later
        time.sleep(0.2)
    time.sleep(0.5)
    assert signal.getsignal(signal.SIGPROF) == before


def test_a_formula_too_deep_to_write_out_is_a_located_error(tmp_path):
    # a 0/1 rule comparing two of the serving rules, written out with every input symbolic (as
    # the reference writes each rule): sympy walks the condition recursively past Python's
    # limit, or folds it for longer than a user's rule may take (it ran for over 10 minutes)
    from engine.present.docs import closed_form
    path = tmp_path / "deep.mem"
    path.write_text('rule serves_one_request : count in [0, 1] =\n'
                    '    if kv_cache_memory > 0 and kv_cache_memory >= one_request_kv_bytes then 1 else 0 "one fits"\n')
    lib = engine.load([path])
    with pytest.raises(ResourceLimitError) as err:
        closed_form(Scenario.create(lib), "serves_one_request", keep=lib.inputs)
    assert "nests too deeply" in str(err.value) and "deep.mem:1:" in str(err.value)
