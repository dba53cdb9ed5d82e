"""Compiling a resolved library (sympy) into the plain-data form of :mod:`engine.compile.trees`."""
from __future__ import annotations

from fractions import Fraction

import sympy

from ..lang.rules import At, RuleDecl
from ..lang.units import UNITS
from .model import components, derived
from .trees import FORMAT, _read, _write


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
            "presets": presets, "components": components(lib) if "total" in lib.rules else [],
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
    inputs = {s: n for n, s in lib._input_syms.items()}
    inputs.update({s: n for n, s in lib._option_syms.items()})
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
