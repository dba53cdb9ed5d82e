"""``memform estimate`` without sympy: a compiled form of the library, kept in the cache.

Importing sympy takes longer than an interactive answer should, so the common path of
``memform estimate`` does not.  When the library is resolved (with sympy) its rules are
also written out as a compiled form: plain data that this module evaluates with exact
:class:`fractions.Fraction` arithmetic, rule by rule, as :meth:`engine.model.Scenario._value`
does with sympy.  The formula column of the table is written out from the same trees where
every formula in it is a polynomial (:mod:`engine.columns`: most scenarios); otherwise it is
rendered with sympy the first time a combination of options and sizes is estimated and kept
beside it; ``micro_batch`` and ``seq_len`` stay symbolic in it, so other workloads reuse it.

``show``, ``solve`` and ``plan`` of a preset (``engine.cli.ANSWERED``) and the reference of
``memform docs`` are kept here too, as the text they printed, under a key of the sources and
the command's arguments: asked again, they print it without sympy.  ``show`` of a rule that is
a polynomial is written out from the compiled trees even the first time (:func:`show`).

Both files are kept by :mod:`engine.cache`: plain JSON (never a pickle: nothing in them
is code), named for the hash of the rule files, the grammar and the engine's source
(:func:`engine.cache.fingerprint`), which they also carry inside, and checked against an
HMAC before they are parsed; anything stale, unreadable, altered or of another format is
ignored, and rebuilt by the full path.  The fast path answers only when it can answer
exactly as the full path would: on anything else (an unknown name, a bad value, a rule
file of the user's own, a Hugging Face config, an undefined value, a missing formula) it
returns ``None`` and the full path answers, with its errors.  ``tests/test_fast.py``
checks the two agree.

Text from the command line reaches Python only through the lark grammar of the rule
language; nothing is evaluated.
"""
from __future__ import annotations

import math
import operator
import os
from fractions import Fraction
from pathlib import Path

from .cache import KEEP_OTHERS, read, source_key, write
from .errors import EngineError
from .layout import DIVIDES, broken
from .report import OPAQUE_RULES, SHOWN_INPUTS, SIZES, TOP_LEVEL, TOTAL_OPAQUE, Report, extra_rules
from .units import BYTE_UNITS, UNITS, read_decimal, unit_words

#: the layout of the compiled form; a file of another format is ignored
FORMAT = 2
#: the most combinations of options whose formula column is kept
MAX_FORMULAS = 1000
#: the most bits an exact value may have (as :data:`engine.model.MAX_BITS`)
MAX_BITS = 100_000
#: the largest value, and the finest fraction's denominator, a name may be given (as
#: :data:`engine.values.MAX_VALUE`)
MAX_VALUE = 10**30


class Unsupported(Exception):
    """The fast path cannot answer exactly as the full path would; the full path answers."""


class UnitMisuse(Unsupported):
    """Constant arithmetic that mixes bytes with plain numbers or puts a unit in an exponent;
    the full path misses it only where a zero drops its unit (``0 GiB``)."""


# ---------------------------------------------------------------- files
def _key() -> str | None:
    return source_key()


def _read(kind: str, key: str):
    """The stored ``kind`` for sources ``key``, when it is of this format and well formed."""
    stored = read(kind, key)
    if (isinstance(stored, dict) and stored.get("format") == FORMAT and stored.get("key") == key
            and (kind != "formulas" or _formula_columns(stored.get("formulas")))):
        return stored
    return None


def _formula_columns(formulas) -> bool:
    """Whether ``formulas`` maps keys of :func:`_formula_key` to {rule: formula text}.  (The
    compiled form is compared whole with a fresh one by :func:`ensure` instead.)"""
    return isinstance(formulas, dict) and all(
        isinstance(k, tuple) and isinstance(column, dict)
        and all(isinstance(n, str) and isinstance(f, str) for n, f in column.items())
        for k, column in formulas.items())


def _write(kind: str, key: str, data: dict, keep: int = KEEP_OTHERS) -> None:
    write(kind, key, dict(data, format=FORMAT, key=key), keep)


# ---------------------------------------------------------------- compiling (full path, with sympy)
def ensure(library, key: str, built: bool = True) -> None:
    """Write the compiled form of ``library`` (the shipped one, hashed ``key``) unless the
    cache holds exactly that already: whatever else is there is replaced.  A library loaded
    from its snapshot (not ``built``) was compiled when the snapshot was written: a compiled
    form that reads back whole (its HMAC checked) is that one."""
    if not built and _read("compiled", key) is not None:
        return
    compiled = compile_library(library)
    if _read("compiled", key) != dict(compiled, format=FORMAT, key=key):
        _write("compiled", key, compiled)


def compile_library(lib) -> dict:
    """The plain-data form of a resolved library: what validating values and evaluating
    rules need, with each rule's expression as a tree of tuples."""
    from .estimate import components, derived
    from .model import Scenario
    inputs = {n: (UNITS[d.unit][0], d.integer, _fraction(d.lower), d.lower_strict, _fraction(d.upper))
              for n, d in lib.inputs.items()}
    options = {n: (tuple(d.choices), d.numeric) for n, d in lib.options.items()}
    rules = {n: (UNITS[d.unit][0], UNITS[d.unit][1], _tree(lib, n)) for n, d in lib.rules.items()}
    rule_domains = {n: (_bound(d.lower), d.lower_strict, _bound(d.upper)) for n, d in lib.rules.items()
                    if d.lower is not None or d.upper is not None}
    defaults = {}
    for name, decl in lib.inputs.items():
        if decl.default is not None:
            defaults[name] = _plain(lib.check_value(name, decl.default, decl.span))
    for name, decl in lib.options.items():
        defaults[name] = decl.default
    presets = {key: tuple((n, _plain(lib.check_value(n, v, span))) for n, v, span in p.settings)
               for key, p in lib.presets.items()}
    return {"inputs": inputs, "options": options, "rules": rules, "defaults": defaults,
            "presets": presets, "components": components(Scenario(lib)) if "total" in lib.rules else [],
            "derived": sorted(derived(lib)), "rule_domains": rule_domains}


def _fraction(value):
    return None if value is None else Fraction(int(value.p), int(value.q))


def _bound(value):
    """A rule's domain bound as plain data: a Fraction, the name of an input or rule, or None."""
    return value if isinstance(value, str) else _fraction(value)


def _plain(value):
    """A validated value as plain data: a choice name stays a str, a number is a Fraction."""
    return value if isinstance(value, str) else _fraction(value)


def _tree(lib, name: str) -> tuple:
    return expr_tree(lib, lib.lowered[name])


def expr_tree(lib, expr) -> tuple:
    """A resolved expression (a rule's, a check side) as the tree of tuples the compiled form
    keeps: ("+", a, b), ("v", input), ("r", rule), ("if", (condition, value), ...) ...; what
    has no tree form (log2, an irrational power, NaN) is ("?", its text)."""
    import sympy
    from .rules import At
    inputs = {s: n for n, s in lib._input_syms.items()}
    inputs.update({s: n for n, s in lib._option_syms.items()})
    from .rules import RuleDecl
    rules = {s: s.name for s in expr.free_symbols
             if isinstance(lib.decls.get(s.name), RuleDecl) and s == sympy.Symbol(s.name)}
    relations = {sympy.Eq: "==", sympy.Ne: "!=", sympy.Lt: "<", sympy.Le: "<=", sympy.Gt: ">",
                 sympy.Ge: ">="}
    nary = {sympy.Add: "+", sympy.Mul: "*", sympy.Max: "max", sympy.Min: "min", sympy.And: "and",
            sympy.Or: "or"}

    def walk(e) -> tuple:
        if e.is_Rational:
            return ("n", Fraction(int(e.p), int(e.q)))
        if e is sympy.true or e is sympy.false:
            return ("b", bool(e))
        if isinstance(e, sympy.Symbol):
            if e in inputs:
                return ("v", inputs[e])
            if e in rules:
                return ("r", rules[e])
            return ("?", str(e))  # not resolvable: the full path reports it
        if type(e) in nary:
            return (nary[type(e)], *map(walk, e.args))
        if type(e) in relations:
            return (relations[type(e)], walk(e.lhs), walk(e.rhs))
        if isinstance(e, sympy.Not):
            return ("not", walk(e.args[0]))
        if isinstance(e, sympy.Pow) and e.exp.is_Integer:
            return ("^", walk(e.base), int(e.exp))
        if isinstance(e, (sympy.ceiling, sympy.floor)):
            return ("ceil" if isinstance(e, sympy.ceiling) else "floor", walk(e.args[0]))
        if isinstance(e, sympy.Piecewise):
            return ("if", *((walk(c), walk(v)) for v, c in e.args))
        if isinstance(e, At):
            flat = e.args[1:]
            return ("@", e.args[0].name, tuple((inputs[k], walk(v)) for k, v in zip(flat[::2], flat[1::2])))
        return ("?", str(e))  # nan, an irrational power, log2 ...: the full path answers

    return walk(expr)


# ---------------------------------------------------------------- evaluating
def evaluate(compiled: dict, values: dict, names) -> dict[str, Fraction]:
    """The exact values of rules ``names`` under ``values`` (choice names and Fractions):
    :class:`engine.exact.Program` with nothing varying, which folds every rule to its value
    (each rule once per binding); :class:`Unsupported` where one cannot be computed without
    sympy (a value missing, log2, no branch that applies)."""
    from .exact import Program, bindings
    fixed, pins = bindings(compiled, values)
    program = Program(compiled, fixed, (), pins)
    found = [program.rule(name, program.top, frozenset()) for name in names]
    slots = [None] * program.size
    for j, f in program.steps:  # only what cannot be folded: each raises Unsupported
        slots[j] = f(slots)
    out = {}
    for name, (known, v) in zip(names, found):
        value = Fraction(v if known else slots[v])
        if max(value.numerator.bit_length(), value.denominator.bit_length()) > MAX_BITS:
            raise Unsupported(f"'{name}' is too large")
        out[name] = value
    return out


# ---------------------------------------------------------------- values from the command line
def parse_value(text: str, units: bool = False):
    """A ``--set`` value through the rule language's grammar: a choice name (str) or an
    exact number with its power of bytes, ``(Fraction, dim)``; only constant arithmetic.

    ``units``: also through min, max, ceil and floor, and powers of 0 and 1 with any exponent,
    whose values are exact too: the unit check of :func:`engine.model.parse_setting`, for the
    zeros whose unit sympy drops."""
    from lark import Transformer, v_args
    from lark.exceptions import LarkError, VisitError

    @v_args(inline=True)
    class Constant(Transformer):
        def __default__(self, data, children, meta):
            raise Unsupported(f"'{data}' in a value")

        def quantity(self, number, unit):
            value = read_decimal(str(number))  # ValueError (-> Unsupported) when too large to build
            return (value, 0) if unit is None else (value * BYTE_UNITS[str(unit)], 1)

        def name(self, tok):
            return str(tok)

        def add(self, a, b):
            return _same(a, b, a[0] + b[0])

        def sub(self, a, b):
            return _same(a, b, a[0] - b[0])

        def mul(self, a, b):
            return (_sized(_num(a))[0] * _sized(_num(b))[0], a[1] + b[1])

        def div(self, a, b):
            if _num(b)[0] == 0:
                raise Unsupported("division by zero")
            return (_num(a)[0] / b[0], a[1] - b[1])

        def neg(self, a):
            return (-_num(a)[0], a[1])

        def pow(self, a, b):
            if _num(b)[1] != 0:
                raise UnitMisuse("an exponent is a plain number, not bytes")
            if units and _num(a)[0] in (0, 1) and b[0] > 0:  # 0^q = 0, 1^q = 1: the unit's power q
                return (a[0], a[1] * b[0])
            if b[0].denominator != 1 or abs(b[0]) > 64 or (_num(a)[0] == 0 and b[0] < 0):
                raise Unsupported("a power the full path checks")
            return (_sized(a)[0] ** int(b[0]), a[1] * int(b[0]))

        # units: constant conditions are decided, so that the arms are checked too (fuzzer seed
        # 1251: '8 MiB ^ 0 GB' inside an if escaped the check of the zeros that keep their unit)
        def compare(self, a, op, b):
            if not units:
                raise Unsupported("a condition in a value")
            _same(a, b, None)
            return _RELATIONS[str(op)](a[0], b[0])

        def or_(self, a, b):
            return _truth(a) or _truth(b)

        def and_(self, a, b):
            return _truth(a) and _truth(b)

        def not_(self, a):
            return not _truth(a)

        def if_expr(self, cond, then, other):
            _same(then, other, None)  # the arms in one unit, whichever is taken
            return then if _truth(cond) else other

        def call(self, fn, *args):
            if not units or str(fn) not in ("min", "max", "ceil", "floor", "log2", "sqrt"):
                raise Unsupported(f"'{fn}' in a value")
            if str(fn) in ("log2", "sqrt"):  # exact where the value is (log2(1) = 0 drops a unit too)
                return _exact_log2(_num(args[0])) if str(fn) == "log2" else _exact_sqrt(_num(args[0]))
            if str(fn) in ("min", "max"):
                first = _num(args[0])
                for other in args[1:]:
                    _same(first, other, None)
                values = [x[0] for x in args]
                return (min(values) if str(fn) == "min" else max(values), first[1])
            value, dim = _num(args[0])
            return (Fraction(math.ceil(value) if str(fn) == "ceil" else math.floor(value)), dim)

    if len(text) > 10_000:
        raise Unsupported("too long")
    try:
        return Constant().transform(_parser().parse(text, start="expr"))
    except Unsupported:
        raise
    except VisitError as exc:  # lark wraps what a callback raises
        if isinstance(exc.orig_exc, Unsupported):
            raise exc.orig_exc from None
        raise Unsupported(type(exc.orig_exc).__name__) from None
    except (LarkError, ValueError, ArithmeticError, RecursionError) as exc:  # a syntax error,
        raise Unsupported(type(exc).__name__) from None  # Unsupported wrapped by lark, a huge number


def _exact_log2(x):
    """log2 of a plain number that is a power of two, exactly; anything else the full path checks."""
    value, dim = x
    if dim != 0:
        raise UnitMisuse(f"log2 takes a plain number, not {unit_words(dim)}")
    if value <= 0 or value.numerator & (value.numerator - 1) or value.denominator & (value.denominator - 1):
        raise Unsupported("an irrational logarithm")
    return (Fraction(value.numerator.bit_length() - value.denominator.bit_length()), 0)


def _exact_sqrt(x):
    """The square root of a perfect square, exactly, in half the unit; else the full path checks."""
    value, dim = x
    if value < 0 or value.numerator.bit_length() > 4000 or value.denominator.bit_length() > 4000:
        raise Unsupported("a root the full path checks")
    top, bottom = math.isqrt(value.numerator), math.isqrt(value.denominator)
    if top * top != value.numerator or bottom * bottom != value.denominator:
        raise Unsupported("an irrational root")
    return (Fraction(top, bottom), Fraction(dim) / 2)


#: the rule language's relations over exact numbers (also engine.exact's and engine.columns')
_RELATIONS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
              ">": operator.gt, ">=": operator.ge}


def _truth(x):
    if not isinstance(x, bool):
        raise Unsupported("a condition the full path decides")
    return x


def _num(x):
    if isinstance(x, str):
        raise Unsupported("a name in arithmetic")
    return x


def _sized(x):
    """``x`` unless its number is past any value :func:`validate` accepts (the full path
    reports it), so that no arithmetic builds a huge one."""
    if not isinstance(x, str) and max(x[0].numerator.bit_length(), x[0].denominator.bit_length()) > 1000:
        raise Unsupported("a huge number")
    return x


def _same(a, b, value):
    if _num(a)[1] != _num(b)[1]:
        raise UnitMisuse("cannot combine bytes and a plain number")
    return (value, a[1])


_PARSER = None


def _parser():
    global _PARSER
    if _PARSER is None:
        from .paths import lark_parser
        _PARSER = lark_parser()
    return _PARSER


def validate(compiled: dict, name: str, value):
    """``value`` for ``name`` as the full path's :func:`engine.values.validate` returns it,
    when that accepts it; anything it would refuse raises :class:`Unsupported`."""
    if isinstance(value, tuple) and (abs(value[0]) > MAX_VALUE or value[0].denominator > MAX_VALUE):
        raise Unsupported("too large")  # as values.MAX_VALUE
    if name in compiled["options"]:
        choices, _ = compiled["options"][name]
        if isinstance(value, tuple):
            number, dim = value
            value = str(number.numerator) if dim == 0 and number.denominator == 1 else None
        if value not in choices:
            raise Unsupported(f"not a choice of '{name}'")
        return value
    if isinstance(value, str):
        raise Unsupported(f"'{name}' takes a number")
    number, dim = value
    if name in compiled["inputs"]:
        want, integer, lower, strict, upper = compiled["inputs"][name]
        if dim != want and not (want == 1 and dim == 0):
            raise Unsupported("unit")
        if integer and number.denominator != 1:
            raise Unsupported("not whole")
        if lower is not None and not (number > lower if strict else number >= lower):
            raise Unsupported("below the domain")
        if upper is not None and not number <= upper:
            raise Unsupported("above the domain")
        return number
    if name in compiled["rules"]:
        want, integer, _ = compiled["rules"][name]
        lower, strict, upper = compiled["rule_domains"].get(name, (None, False, None))
        if dim != want and not (want == 1 and dim == 0):
            raise Unsupported("unit")
        if (integer and number.denominator != 1) or number < 0:
            raise Unsupported("not a valid pin")
        if isinstance(lower, str) or isinstance(upper, str):
            raise Unsupported("a bound known only in the scenario")  # the full path checks it there
        if lower is not None and not (number > lower if strict else number >= lower):
            raise Unsupported("below the domain")
        if upper is not None and not number <= upper:
            raise Unsupported("above the domain")
        return number
    raise Unsupported(f"unknown name '{name}'")  # the full path says which names are close


def _setting(compiled: dict, text: str):
    if "=" not in text:
        raise Unsupported("no '='")
    name, raw = (p.strip() for p in text.split("=", 1))
    if not raw:
        raise Unsupported("no value")
    return name, validate(compiled, name, parse_value(raw))


# ---------------------------------------------------------------- the estimate
def report(args) -> Report | None:
    """The estimate the full path would print for these arguments, or None when this path
    cannot give it (then nothing has been printed and no error raised)."""
    if getattr(args, "rules", None):
        return None
    key = _key()
    if key is None:
        return None
    compiled = _read("compiled", key)
    if compiled is None:
        return None
    try:
        values = _values(compiled, args)
        names = ([n for n in TOP_LEVEL if n in compiled["rules"]]
                 + extra_rules(values, compiled["rules"]) + [n for n in SIZES if n in compiled["rules"]])
        exact = evaluate(compiled, values, names + list(compiled["components"]))
        if not getattr(args, "no_divisibility", False):
            sizes = [n for ns in DIVIDES.values() for n in ns]
            known = dict(values, **evaluate(compiled, values, [n for n in sizes if n in compiled["rules"]]))
            if broken(values, known.get):
                raise Unsupported("an impossible layout")  # the full path says which rule breaks
        rules = {n: exact[n] for n in names}
        parts = {n: exact[n] for n in compiled["components"]}
        formulas = {}
        if not args.json:
            stored = _read("formulas", key)
            formulas = (stored and stored["formulas"].get(_formula_key(values))) or _column(compiled, values, parts)
            if not formulas or any(n not in formulas for n in (*parts, "total")):
                return None
        return Report(args.model, args.gpu, values, rules, parts, values.get("capacity"), formulas)
    except Unsupported:
        return None
    except (EngineError, ArithmeticError, ValueError, TypeError, KeyError, IndexError, AttributeError,
            RecursionError):
        return None  # whatever the cause (a figure out of range ...), the full path answers or reports it


def _column(compiled: dict, values: dict, parts) -> dict | None:
    """The formula column where every formula in it is a polynomial (:mod:`engine.columns`),
    else None: the full path derives it with sympy."""
    from .columns import Polynomials, text
    from .exact import bindings
    fixed, pins = bindings(compiled, values)
    try:
        each = Polynomials(compiled, fixed, pins, SHOWN_INPUTS, OPAQUE_RULES)
        column = {name: text(each.rule(name)) for name in parts}
        column["total"] = text(Polynomials(compiled, fixed, pins, SHOWN_INPUTS, TOTAL_OPAQUE).rule("total"))
    except (Unsupported, ArithmeticError, ValueError, RecursionError):
        return None
    return column


def _values(compiled: dict, args) -> dict:
    """The scenario's values, in the order :meth:`engine.model.Scenario.create` sets them."""
    model, gpu, capacity = args.model, args.gpu, args.capacity
    if gpu and capacity:
        raise Unsupported("--gpu and --capacity")
    if (("model", model) not in compiled["presets"] or (gpu is not None and ("gpu", gpu) not in compiled["presets"])
            or Path(model).name != model):
        raise Unsupported("not a preset")  # a config file, or an error the full path reports
    try:
        if os.path.lexists(model):
            raise Unsupported("a file named like the preset")  # the full path says which it reads
    except (OSError, ValueError):
        raise Unsupported("not a path") from None
    sets = dict(_setting(compiled, text) for text in args.sets)
    if set(sets) & set(compiled["derived"]):
        raise Unsupported("a pin of a derived rule")  # the full path refuses it
    if capacity:
        if not any(c.isalpha() for c in capacity):
            raise Unsupported("--capacity without a unit")  # the full path refuses it
        sets["capacity"] = _setting(compiled, f"capacity={capacity}")[1]
    values = dict(compiled["defaults"])
    for kind, name in (("model", model), ("gpu", gpu)):
        if name is not None:
            if (kind, name) not in compiled["presets"]:
                raise Unsupported(f"unknown {kind}")
            values.update(compiled["presets"][(kind, name)])
    values.update(sets)
    return values


def _formula_key(values: dict) -> tuple:
    """The formula column depends on every value but the workload's (kept symbolic)."""
    return tuple(sorted((n, str(v)) for n, v in values.items() if n not in SHOWN_INPUTS))


def remember(rep: Report) -> None:
    """Keep the formula column of an estimate made by the full path, for the fast path."""
    key = _key()
    if key is None or not rep.formulas:
        return
    stored = _read("formulas", key) or {"formulas": {}}
    formulas = stored["formulas"]
    formulas[_formula_key(rep.values)] = dict(rep.formulas)
    while len(formulas) > MAX_FORMULAS:
        del formulas[next(iter(formulas))]
    _write("formulas", key, {"formulas": formulas})


# ---------------------------------------------------------------- answers kept as text
# ``show``, ``solve`` and ``plan`` (engine.cli.ANSWERED) print what their arguments and the
# sources alone decide (for a preset model, without a rule file of the user's): derived with
# sympy the first time, the text is kept and printed when they are asked again.
#: the most answers kept (the oldest go first), and the longest one kept
MAX_ANSWERS = 500
MAX_ANSWER_CHARS = 1 << 20


def _answer_key(args) -> tuple[str, str] | None:
    """The cache key of a command's answer and its arguments as text; None when the answer may
    depend on more than both (a rule file, a config.json or a file named like the preset, a
    Hugging Face id, the cache off)."""
    import hashlib
    import json
    source = _key()
    if source is None or getattr(args, "rules", None):
        return None
    model = getattr(args, "model", None)
    if model is not None:
        try:
            if Path(model).name != model or model.endswith(".json") or os.path.lexists(model):
                return None
        except (OSError, ValueError):  # a name no file system takes: the full path says so
            return None
    try:
        text = json.dumps(sorted(vars(args).items()), ensure_ascii=True)
    except (TypeError, ValueError):
        return None
    return source + hashlib.sha256(text.encode()).hexdigest()[:32], text


def answer(args) -> tuple[int, str, list[str]] | None:
    """The exit code, output and notes kept for these arguments, or None."""
    found = _answer_key(args)
    if found is None:
        return None
    key, text = found
    stored = _read("answer", key)
    if (stored is None or stored.get("args") != text or stored.get("code") not in (0, 1)
            or not isinstance(stored.get("out"), str) or not isinstance(stored.get("notes"), list)
            or not all(isinstance(n, str) for n in stored["notes"])):
        return None
    return stored["code"], stored["out"], stored["notes"]


def remember_answer(args, code: int, out: str, notes: list[str]) -> None:
    """Keep a command's answer for the next time it is asked with the same arguments."""
    found = _answer_key(args)
    if found is None or code not in (0, 1) or len(out) > MAX_ANSWER_CHARS:
        return
    key, text = found
    _write("answer", key, {"args": text, "code": code, "out": out, "notes": list(notes)}, keep=MAX_ANSWERS)


def show_keep(args) -> tuple[str, ...]:
    """The inputs ``memform show`` keeps symbolic: the workload's unless set, and --keep."""
    explicit = {t.split("=", 1)[0].strip() for t in args.sets}
    return tuple(n for n in SHOWN_INPUTS if n not in explicit) + tuple(args.keep)


def show(args) -> str | None:
    """What ``memform show RULE MODEL`` prints where the rule written out is a polynomial in the
    names kept (:mod:`engine.columns`; the full path expands such a rule and prints it in the
    same order), or None: the full path answers (sympy), with its errors."""
    from types import SimpleNamespace
    from .columns import Polynomials, text
    from .exact import bindings
    if getattr(args, "rules", None) or args.latex or args.model is None:
        return None
    key = _key()
    compiled = _read("compiled", key) if key else None
    if compiled is None or args.rule not in compiled["rules"]:
        return None
    keep = show_keep(args)
    if any(n not in compiled["inputs"] for n in keep):
        return None
    try:
        values = _values(compiled, SimpleNamespace(model=args.model, gpu=None, capacity=None, sets=args.sets))
        fixed, pins = bindings(compiled, values)
        return f"{args.rule} = {text(Polynomials(compiled, fixed, pins, keep, ()).rule(args.rule))}\n"
    except (Unsupported, EngineError, ArithmeticError, ValueError, TypeError, KeyError, RecursionError):
        return None


def _docs_key(fmt: str) -> str | None:
    import hashlib
    from .paths import data_path
    source = _key()
    if source is None:
        return None
    try:
        examples = (data_path("formulas").parent / "docs" / "examples.toml").read_bytes()
    except OSError:  # the full path reports it
        return None
    return source + hashlib.sha256(fmt.encode() + b"\0" + examples).hexdigest()[:32]


def kept_docs(fmt: str) -> str | None:
    """The reference in ``fmt`` as rendered from these sources and worked examples, or None."""
    key = _docs_key(fmt)
    stored = _read("docs", key) if key else None
    return stored["text"] if stored is not None and isinstance(stored.get("text"), str) else None


def keep_docs(fmt: str, text: str) -> None:
    key = _docs_key(fmt)
    if key is not None:
        _write("docs", key, {"text": text})
