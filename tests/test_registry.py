"""Library resolution: names, units, cycles, overrides, all located."""
import pickle

import pytest
import sympy

import engine
from engine.errors import (DependencyCycleError, DomainError, ErrorGroup, FormulaSyntaxError,
                           MissingInputError, RedefinitionError, UnitError, UnknownNameError)
from engine.compile.model import Scenario
from conftest import TINY


def library(*texts, user=None):
    lib = engine.Library()
    for i, text in enumerate(texts):
        lib.add_text(text, f"f{i}.mem")
    if user:
        lib.add_text(user, "mine.mem", user=True)
    return lib.resolve()


def error_of(*texts, user=None):
    with pytest.raises(engine.EngineError) as info:
        library(*texts, user=user)
    return info.value


def test_tiny_library_evaluates_exactly(tiny):
    s = Scenario.create(tiny, values={"width": 3, "n": 5})
    assert s.evaluate("total") == 30
    assert s.with_values(kind="big").evaluate("total") == 60


def test_missing_inputs_are_all_named(tiny):
    with pytest.raises(MissingInputError) as info:
        Scenario.create(tiny).evaluate("total")
    assert info.value.message == "'total' needs values for: width"


def test_redefinition_points_to_the_first():
    err = error_of(TINY, 'input width : count >= 1 "again"')
    assert isinstance(err, RedefinitionError)
    assert (err.message, err.span.file, err.span.line, err.span.column) == ("'width' is already defined", "f1.mem", 1, 7)
    assert err.hint == "first defined at f0.mem:4"


def test_unknown_name_with_hint():
    err = error_of(TINY, 'rule x : count = 2 * widht "x"')
    assert isinstance(err, UnknownNameError)
    assert (err.message, err.span.line, err.span.column) == ("unknown name 'widht' in rule 'x'", 1, 22)
    assert err.hint == "did you mean 'width'?"
    assert str(err) == (
        "f1.mem:1:22: unknown name 'widht' in rule 'x'\n"
        "    1 | rule x : count = 2 * widht \"x\"\n"
        "      |                      ^^^^^\n"
        "hint: did you mean 'width'?")


def test_cycle_is_spelled_out():
    err = error_of('rule a : count = b + 1 "a"\nrule b : count = c "b"\nrule c : count = a "c"')
    assert isinstance(err, DependencyCycleError)
    cycle = err.message.removeprefix("rules form a cycle: ").split(" -> ")
    assert cycle[0] == cycle[-1] and sorted(cycle[:-1]) == ["a", "b", "c"]


def test_adding_bytes_to_a_count_is_a_unit_error():
    err = error_of(TINY, 'rule x : bytes = per_thing + n "x"')
    assert isinstance(err, UnitError)
    assert err.message == "cannot combine bytes and a plain number in rule 'x'"
    assert (err.span.line, err.span.column) == (1, 18)


def test_declared_unit_must_match():
    err = error_of(TINY, 'rule x : bytes = n * width "x"')
    assert isinstance(err, UnitError)
    assert err.message == "rule 'x' is declared in bytes but its expression is in a plain number"
    assert err.hint == "multiply by a dtype size (e.g. 'bf16') or write a byte literal like '4 B'"


def test_byte_literals_and_dtypes_carry_bytes():
    lib = library(TINY, 'rule x : bytes = n * 80 GB + width * bf16 "x"')
    assert Scenario.create(lib, values={"width": 1}).evaluate("x") == 80 * 10**9 + 2


def test_every_problem_is_reported_at_once():
    err = error_of(TINY, 'rule x : count = nn "x"\nrule y : count = wdth "y"')
    assert isinstance(err, ErrorGroup)
    assert [e.message for e in err.errors] == ["unknown name 'nn' in rule 'x'", "unknown name 'wdth' in rule 'y'"]


def test_match_must_cover_every_choice():
    err = error_of(TINY, 'rule x : bytes = match kind { small => 1 B } "x"')
    assert err.message == "match on 'kind' in rule 'x' does not cover 'big'"


def test_unknown_choice_has_hint():
    err = error_of(TINY, 'rule x : count = if kind == bigg then 1 else 2 "x"')
    assert err.message == "'bigg' is not a choice of option 'kind' in rule 'x'"
    assert err.hint == "did you mean 'big'?"


def test_enum_options_have_no_order():
    err = error_of(TINY, 'rule x : count = if kind >= big then 1 else 2 "x"')
    assert err.message == "option 'kind' has no order; compare it with == or != in rule 'x'"


def test_user_file_overrides_explicitly():
    lib = library(TINY, user='override rule per_thing : bytes = 3 B "three bytes"')
    assert Scenario.create(lib, values={"width": 2}).evaluate("total") == 6


def test_user_file_needs_override_keyword():
    err = error_of(TINY, user='rule per_thing : bytes = 3 B "three bytes"')
    assert isinstance(err, RedefinitionError)
    assert err.hint == "first defined at f0.mem:6; write 'override rule' to replace it"


def test_library_files_cannot_override():
    err = error_of(TINY, 'override rule per_thing : bytes = 3 B "x"')
    assert isinstance(err, FormulaSyntaxError)


def test_override_of_unknown_rule():
    err = error_of(TINY, user='override rule per_thng : bytes = 3 B "x"')
    assert err.message == "'override' of 'per_thng', which is not a rule"
    assert err.hint == "did you mean 'per_thing'?"


def test_bad_default_is_out_of_domain():
    err = error_of('input n : count >= 1 = 0 "n"')
    assert isinstance(err, DomainError)
    assert err.message == "'n' must be >= 1, not 0"


def test_rules_can_be_pinned(tiny):
    s = Scenario.create(tiny, values={"width": 3, "per_thing": sympy.Integer(7)})
    assert s.evaluate("total") == 21


def test_errors_pickle():
    err = error_of(TINY, 'rule x : count = 2 * widht "x"')
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err)


def test_a_comparison_of_a_side_that_is_never_real_is_located(tmp_path):
    # fuzzer rules seed 1212: sympy refused to order sqrt(0 - 8 x) (imaginary for every x > 0)
    # with a TypeError out of the resolver
    path = tmp_path / "unreal.mem"
    path.write_text('check "never real": hidden_size >= 1 where sqrt(0 - 8 * hidden_size) >= 1\n')
    with pytest.raises(DomainError) as info:
        engine.load(extra=[path])
    assert "a comparison in check \"never real\" has a side that is never a real number" in info.value.message
    assert info.value.span.file.endswith("unreal.mem") and info.value.span.line == 1


USER_FILES = [
    'override rule weights : bytes = 2 * base_weights + adapter_weights "twice the weights"',
    'input spare : bytes >= 0 = 1 GiB "set aside"\n'
    'override rule cuda_context : bytes = spare "the context is what is set aside"',
    'option room in {none, some} = none "room"\n'
    'rule roomy : bytes = if room == some then 1 GiB else 0 B "room kept"\n'
    'check "room is never negative": roomy >= 0 B',
    'override rule n_params : params = 7e9 "a nominal size"',
    'override rule norm_params : params = 3 * hidden_size "a norm with three vectors"',
    'override rule norm_params : bytes = 2 B "a unit that the rules using it refuse"',
    'override rule layer_norm_count : count = layer_norm_count + 1 "a cycle"',
    'dtype bf16 = 3 B "a dtype defined twice"',
    'override rule linear_attention_layers : count in [0, 1] = 0 "a domain the hybrid presets\' pins leave"',
]


@pytest.mark.parametrize("text", USER_FILES)
def test_a_user_file_resolves_beside_the_shipped_library_as_afresh(lib, tmp_path, text):
    """A user's rule file added to the shipped library taken as the base (its declarations,
    and the resolved expressions of the rules the file leaves unchanged: registry.build's
    base, what the cache does) resolves to what parsing and resolving everything afresh
    gives, expression for expression, or fails with the same errors."""
    from engine.library import registry
    path = tmp_path / "user.mem"
    path.write_text(text + "\n")
    built = []
    for base in (None, lib):
        try:
            built.append(registry.build([path], base=base))
        except engine.EngineError as exc:
            built.append(str(exc))
    fresh, reused = built
    if isinstance(fresh, str):
        assert reused == fresh
        return
    assert not isinstance(reused, str), reused
    assert reused.decls == fresh.decls and list(reused.decls) == list(fresh.decls)
    assert reused.lowered == fresh.lowered and reused.deps == fresh.deps
    place = {n: i for i, n in enumerate(reused.order)}  # a dependency order (sets order it per process)
    assert sorted(place) == sorted(fresh.order) and all(place[d] < place[n] for n in place for d in reused.deps[n])
    assert reused.lowered_checks == fresh.lowered_checks and reused.presets == fresh.presets
    taken = sum(reused.lowered[n] is lib.lowered.get(n) for n in reused.rules)
    assert taken > len(reused.rules) // 2  # the base was used, not bypassed



@pytest.mark.parametrize("override, model, says, where", [
    # composing the total: 1/0 (zoo) inside expert_dp's max
    ('override rule etp : count = 0 "no expert tensor parallelism"', "llama2-13b",
     "rule 'expert_dp' takes the min or max of a value that is not a real number", "parallel.mem:"),
    # substituting the scenario's values: nan inside a max; the exact evaluation names the rule
    ('override rule sp_shards : count = ds_grads_persist "a flag as a divisor"', "qwen2.5-vl-7b",
     "is not a real number here", "activations.mem:"),
])
def test_a_value_that_is_not_real_met_while_solving_is_a_located_error(tmp_path, override, model, says, where):
    """Found by the rule-file fuzzer (seed 1267): an override that makes a divisor 0 left a
    value that is not real inside a max when solve built the total, and sympy's ValueError
    escaped; it is the rule's located error, exit 2."""
    import io
    from engine.cli import main
    path = tmp_path / "mine.mem"
    path.write_text(override + "\n")
    err = io.StringIO()
    code = main(["solve", "max", "micro_batch", model, "--gpu", "h100-80g", "--rules", str(path)],
                out=io.StringIO(), err=err)
    assert code == 2, err.getvalue()
    assert says in err.getvalue() and where in err.getvalue()
