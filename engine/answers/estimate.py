"""Estimates: every top-level rule of a scenario, its per-GPU breakdown and the fit."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Mapping

import sympy

from ..compile.columns import from_sympy, text
from ..compile.model import Scenario, _check_size, components, fit_capacity
from ..compile.outline import (OPAQUE_RULES, SHOWN_INPUTS, SIZES, TOP_LEVEL, TOTAL_OPAQUE,
                               extra_rules)
from ..errors import ResourceLimitError, UsageError
from ..lang.rules import At, OptionDecl
from ..library.registry import COMPOSE_CPU_SECONDS, _OverBudget, _cpu_budget, shipped, substitute
from .report import Report, estimate_json, gb, gib


def formula(scenario: Scenario, rule: str, keep=SHOWN_INPUTS, opaque=OPAQUE_RULES,
            memo: dict | None = None, rebound=()) -> sympy.Expr:
    """``rule`` with the scenario's options and inputs substituted, except the inputs in
    ``keep``; rules in ``opaque`` stay as names (so ``n_params`` reads as P), and rules in
    ``rebound`` read with another value of a name (``target[k = v]``) stay so written.  ``memo`` keeps
    the expanded rules between calls with the same scenario, ``keep`` and ``opaque`` (the
    reference expands every rule: each one's dependencies once, not once per rule)."""
    lib = scenario.library
    pins = dict(scenario.pins())

    def expand(name: str, bindings: dict, memo: dict, top: bool = False) -> sympy.Expr:
        if name in pins:
            return pins[name] if name not in opaque or top else sympy.Symbol(name)
        if name in opaque and not top:
            return sympy.Symbol(name)
        if name not in memo:
            expr = lib.lowered[name]
            if expr.has(At):  # target[k = v]: the target expanded anew with k rebound
                expr = expr.replace(lambda e: isinstance(e, At), lambda e: at(e, bindings, memo))
            # substitute, not xreplace: a max over large arguments is not compared pair by pair
            # (sympy's Max._is_connected factors their differences: a third of `memform docs`)
            expr = substitute(expr, bindings)
            memo[name] = substitute(expr, {sympy.Symbol(d): expand(d, bindings, memo) for d in lib.deps[name]
                                           if sympy.Symbol(d) in expr.free_symbols})
            _check_size(memo[name], name, lib)  # rules that square each other stop here
        return memo[name]

    def shown(key, value) -> str:
        decl = lib.decls.get(key.name)
        if isinstance(decl, OptionDecl) and value.is_Integer:
            return decl.choice_of(int(value))
        return str(value)

    def at(node, bindings: dict, memo: dict) -> sympy.Expr:
        """As Scenario._at: the keys' new values in the current bindings, the target in the new ones."""
        target, flat = node.args[0], node.args[1:]
        if target.name in rebound:
            return sympy.Symbol(f"{target.name}[{', '.join(f'{k} = {shown(k, v)}' for k, v in zip(flat[::2], flat[1::2]))}]")
        sub = dict(bindings)
        sub.update({s: expand(s.name, bindings, memo) for v in flat[1::2] for s in v.free_symbols
                    if s.name in lib.rules})
        new = dict(bindings)
        new.update({k: v.xreplace(sub) for k, v in zip(flat[::2], flat[1::2])})
        return expand(target.name, new, {}, top=True)

    # a user's rule has the CPU budget of one rule's composition: sympy folds a condition over
    # large rules (piecewise_fold orders its arguments by node count, a walk of the whole
    # tree) in time that grows without bound, or walks it recursively past Python's limit; the
    # library's own rules are written out in the reference and are not bounded
    user = rule in lib.rules and not shipped(lib.rules[rule])
    try:
        with _cpu_budget(COMPOSE_CPU_SECONDS) if user else contextlib.nullcontext():
            return expand(rule, scenario.bindings(exclude=keep), {} if memo is None else memo, top=True)
    except (_OverBudget, RecursionError):
        raise ResourceLimitError(f"rule '{rule}' nests too deeply to be written out as one formula"
                                 + (f" (within {COMPOSE_CPU_SECONDS} s of CPU time)" if user else ""),
                                 lib.rules[rule].span if rule in lib.rules else None,
                                 hint="compare such rules' values instead of writing the comparison "
                                      "as a rule, or pin inputs so that it stays small") from None


def show(scenario: Scenario, rule: str, keep=SHOWN_INPUTS) -> sympy.Expr:
    """What ``memform show RULE`` prints: ``rule`` under ``scenario`` with every rule
    inlined, the inputs in ``keep`` symbolic, expanded unless it is piecewise.

    Examples
    --------
    >>> from engine import load
    >>> s = Scenario.create(load(), "llama2-7b", values={"mode": "infer", "kv_paging": "none"})
    >>> show(s, "kv_cache")
    524288*micro_batch*seq_len
    """
    lib = scenario.library
    if rule not in lib.rules:
        decl = lib.decls.get(rule)
        if decl is None:
            lib.check_value(rule, None)  # the unknown-name error, with a hint
        kind = type(decl).__name__.removesuffix("Decl").lower()
        raise UsageError(f"'{rule}' is an {kind}, not a rule" if kind[0] in "aeiou" else
                         f"'{rule}' is a {kind}, not a rule",
                         hint=f"'memform names {rule}' describes it; show takes a rule (memform names --json)")
    for name in keep:
        if name not in lib.inputs:
            lib.check_value(name, None)  # unknown, or not an input
            raise UsageError(f"'{name}' is not an input: only inputs can be kept symbolic")
    expr = formula(scenario, rule, keep=tuple(keep), opaque=())
    if not expr.has(sympy.Piecewise) and _expanded_terms(expr) <= MAX_SHOWN_TERMS:
        expr = sympy.expand(expr)  # a polynomial of a few terms reads best expanded
    return expr


#: the most terms ``show`` expands an expression into (past that it is shown as composed)
MAX_SHOWN_TERMS = 10_000


def _expanded_terms(expr, limit: int = MAX_SHOWN_TERMS) -> int:
    """An upper bound of the terms ``expand(expr)`` gives, capped just past ``limit``
    (found without expanding: ``(h + 1)^(2^40)`` must not be expanded to learn its size)."""
    if expr.is_Add:
        return min(limit + 1, sum(_expanded_terms(a, limit) for a in expr.args))
    if expr.is_Mul:
        out = 1
        for a in expr.args:
            out = min(limit + 1, out * _expanded_terms(a, limit))
        return out
    if expr.is_Pow and expr.exp.is_Integer and expr.exp > 1:
        base = _expanded_terms(expr.base, limit)
        return 1 if base == 1 else min(limit + 1, base ** min(int(expr.exp), 64))
    return 1


@dataclass(frozen=True)
class Estimate:
    """Exact per-GPU bytes of each top-level rule, and whether the total fits."""

    scenario: Scenario
    rules: Mapping[str, sympy.Rational]
    components: Mapping[str, sympy.Rational]
    capacity: sympy.Rational | None

    @property
    def total(self) -> sympy.Rational:
        return self.rules["total"]

    def __repr__(self) -> str:
        s = self.scenario
        fit = "" if self.fits is None else (", fits" if self.fits else ", does not fit")
        on = f" on {s.gpu}" if s.gpu else ""
        return f"<Estimate {s.model or 'model'}{on}: total {gb(self.total)} GB ({gib(self.total)} GiB){fit}>"

    @property
    def fits(self) -> bool | None:
        return None if self.capacity is None else bool(self.total <= self.capacity)

    def _repr_html_(self) -> str:
        """The breakdown as an HTML table with typeset formulas (Jupyter)."""
        from ..present.docs import estimate_html
        return estimate_html(self)

    def to_json(self) -> dict:
        return estimate_json(self.scenario.model, self.scenario.gpu, self.scenario.values, self.rules,
                             self.components, self.capacity)

    def report(self, formulas: bool = True) -> Report:
        """What ``memform estimate`` prints: these numbers and (unless ``formulas`` is
        False, as for JSON) each component's formula."""
        scenario = self.scenario
        shown = {}
        if formulas:
            shown = {name: column_text(formula(scenario, name)) for name in self.components}
            shown["total"] = column_text(formula(scenario, "total", opaque=TOTAL_OPAQUE))
        rules = dict(self.rules, **{n: scenario.evaluate(n) for n in SIZES if n in scenario.library.rules})
        return Report(scenario.model, scenario.gpu, scenario.values, rules, self.components,
                      self.capacity, shown)


def show_text(expr) -> str:
    """An expression as one line of text, its terms in graded order."""
    return sympy.sstr(expr, order="grlex")


def column_text(expr) -> str:
    """A formula of the estimate's column: a polynomial (its names may include a rounding, max
    or min no value decides) expanded and printed as the path without sympy prints it
    (:mod:`engine.compile.columns`), anything else by sympy."""
    try:
        poly = from_sympy(expr, atoms=True)
        return show_text(expr) if poly is None else text(poly)
    except RecursionError:  # sympy orders and prints a deeply nested expression recursively
        return "(nested too deeply to print)"


def estimate(scenario: Scenario) -> Estimate:
    """Evaluate every top-level rule of ``scenario`` exactly.

    Examples
    --------
    >>> from engine import load, Scenario
    >>> est = estimate(Scenario.create(load(), "llama2-7b", values={"optimizer_step_bytes": 0}))
    >>> est.rules["model_states"] == 16 * 6738415616
    True
    """
    lib = scenario.library
    names = [name for name in TOP_LEVEL if name in lib.rules] + extra_rules(scenario.values, lib.rules)
    rules = {name: scenario.evaluate(name) for name in names}
    parts = {name: rules[name] if name in rules else scenario.evaluate(name)
             for name in components(scenario.library)}
    return Estimate(scenario, rules, parts, fit_capacity(scenario))
