"""The library's snapshot (engine/library/snapshot.py): rebuilt, it is the library the rule files build."""
import copy

import pytest
import sympy

from engine.library import registry, snapshot
from engine.paths import data_path


@pytest.fixture(scope="module")
def built():
    """The shipped library built from its rule files (no cache involved)."""
    return registry.build((), data_path("formulas"))


@pytest.fixture(scope="module")
def data(built):
    return snapshot.dump(built)


def _decl_fields(decl) -> tuple:
    """Every field of a declaration, those left out of its == (places) included, as srepr
    for sympy values: assumptions and argument order count, not only equality."""
    def shown(v):
        if isinstance(v, sympy.Basic):
            return sympy.srepr(v)
        if isinstance(v, (tuple, list)):
            return tuple(map(shown, v))
        if isinstance(v, dict):
            return tuple((k, shown(x)) for k, x in v.items())
        return v
    return type(decl), tuple((f, shown(getattr(decl, f))) for f in snapshot._FIELDS[type(decl).__name__])


def test_the_rebuilt_library_is_the_built_one(built, data):
    back = snapshot.load(data)
    assert list(back.decls) == list(built.decls)
    for name, decl in built.decls.items():
        assert _decl_fields(back.decls[name]) == _decl_fields(decl), name
    assert [_decl_fields(c) for c in back.checks] == [_decl_fields(c) for c in built.checks]
    assert list(back.presets) == list(built.presets)
    assert [_decl_fields(p) for p in back.presets.values()] == [_decl_fields(p) for p in built.presets.values()]
    assert list(back.lowered) == list(built.lowered)
    for name, expr in built.lowered.items():
        assert sympy.srepr(back.lowered[name]) == sympy.srepr(expr), name
        assert hash(back.lowered[name]) == hash(expr)
    assert back.deps == built.deps and back.order == built.order and back.files == built.files
    assert back._input_syms == built._input_syms and back._option_syms == built._option_syms
    for (c1, *sides1), (c2, *sides2) in zip(back.lowered_checks, built.lowered_checks, strict=True):
        assert c1 is back.checks[built.checks.index(c2)]
        assert list(map(sympy.srepr, sides1)) == list(map(sympy.srepr, sides2))
    assert back.resolved


def test_the_rebuilt_library_answers_as_the_built_one(built, data):
    """Composition, evaluation and errors, on a rebuilt library, against the built one."""
    from engine.errors import EngineError
    from engine.compile.model import Scenario
    back = snapshot.load(data)
    # the reserved peak is the largest composed rule: every kind of node takes part
    assert sympy.srepr(back.compose("peak_reserved")) == sympy.srepr(built.compose("peak_reserved"))
    for preset in ("llama2-70b", "deepseek-v3", "mixtral-8x7b"):
        values = {"zero_stage": 3, "dp": 8, "micro_batch": 2, "recompute": "selective"}
        got = Scenario.create(back, preset).with_values(**values)
        want = Scenario.create(built, preset).with_values(**values)
        for rule in ("total", "peak_allocated", "peak_reserved"):
            assert got.evaluate(rule) == want.evaluate(rule)
    messages = []
    for lib in (back, built):
        with pytest.raises(EngineError) as caught:
            lib.check_value("micro_batch", sympy.Integer(0), None)
        messages.append(str(caught.value))
    assert messages[0] == messages[1]


def test_a_snapshot_names_the_rule_files_of_the_checkout_that_reads_it(built, data, tmp_path, monkeypatch):
    """The cache is keyed by the sources' content, so two checkouts of the same sources in two
    folders share one snapshot: each must name its own rule files in places, not the writer's
    (CI in a fresh clone printed another checkout's absolute paths)."""
    assert not any(str(data_path("formulas")) in str(f) for f in data["library"]["files"])
    other = tmp_path / "clone" / "formulas"
    other.mkdir(parents=True)
    monkeypatch.setattr(snapshot, "data_path", lambda name: other)
    monkeypatch.chdir(tmp_path / "clone")
    back = snapshot.load(data)
    assert sorted(back.files) == sorted(f"formulas/{p.name}" for p in data_path("formulas").glob("*.mem"))
    span = back.decls["weights"].span
    assert span.file == "formulas/" + built.decls["weights"].span.file.rsplit("/", 1)[1]
    assert span.line == built.decls["weights"].span.line
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # a folder outside the checkout: its absolute path
    assert snapshot.load(data).decls["weights"].span.file == str(other / span.file.rsplit("/", 1)[1])


def _node_table_with(data, row):
    bad = copy.deepcopy(data)
    bad["nodes"].append(row)
    bad["library"]["lowered"]["weights"] = ("x", len(bad["nodes"]) - 1)
    return bad


@pytest.mark.parametrize("row", [
    ["Function", 0], ["exec", 0], ["Symbol", "x"], ["S", "x", ["nonzero"]], ["S", 1, []],
    ["I", "12"], ["I", 1.5], ["Q", 1, 1], ["Q", 1, 0], ["Add", 10**9], ["Add", -1], ["Add", 0],
    ["Piecewise", 0, 1], [], [7], "Add", ["ECP", 0],
])
def test_a_node_it_does_not_write_is_refused(data, row):
    with pytest.raises(snapshot.Refused):
        snapshot.load(_node_table_with(data, row))


@pytest.mark.parametrize("change", [
    lambda d: d["library"]["decls"].append(("D", "RuleDecl", ("x",))),  # fields missing
    lambda d: d["library"]["decls"].append(("D", "Library", ())),  # not a declaration
    lambda d: d["library"]["decls"].append(("P", "os", "system")),  # an unknown tag
    lambda d: d["library"]["lowered"].update(x=("x", -1)),  # an index out of the table
    lambda d: d["library"].pop("order"),
    lambda d: d.update(format=snapshot.FORMAT + 1),
    lambda d: d.update(nodes={"0": ["I", 1]}),
])
def test_a_snapshot_it_does_not_write_is_refused(data, change):
    bad = copy.deepcopy(data)
    change(bad)
    with pytest.raises(snapshot.Refused):
        snapshot.load(bad)


def test_what_a_snapshot_cannot_keep_is_not_written(built):
    lib = copy.copy(built)
    lib.lowered = dict(built.lowered, weights=sympy.Float(1.5))  # never built by the rules
    with pytest.raises(TypeError):
        snapshot.dump(lib)
