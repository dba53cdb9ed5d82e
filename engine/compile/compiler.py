"""Compiling a resolved library (sympy) into the plain-data form of :mod:`engine.compile.trees`."""
from __future__ import annotations

from fractions import Fraction

from ..lang.units import UNITS
from .model import components, derived
from .totrees import expr_tree
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
