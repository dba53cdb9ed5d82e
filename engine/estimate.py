"""Estimates: every top-level rule of a scenario, its per-GPU breakdown and the fit."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import sympy

from .model import Scenario
from .report import (OPAQUE_RULES, SHOWN_INPUTS, TOP_LEVEL, Report, estimate_json, extra_rules,  # noqa: F401
                     gb, gib, whole_bytes)


def components(scenario: Scenario, rule: str = "total") -> list[str]:
    """The leaves of ``rule`` when every rule that is a plain sum of rules is split."""
    lib = scenario.library
    expr = lib.lowered[rule]
    if rule in TOP_LEVEL and rule not in ("total", "model_states"):
        return [rule]  # a top-level rule is a component even when it is a sum (weights)
    if isinstance(expr, sympy.Add) and all(
            isinstance(a, sympy.Symbol) and a.name in lib.rules and a == sympy.Symbol(a.name)
            for a in expr.args):
        names = [a.name for a in expr.args]
        ordered = [n for n in TOP_LEVEL if n in names] + [n for n in names if n not in TOP_LEVEL]
        return [leaf for n in ordered for leaf in components(scenario, n)]
    return [rule]


def formula(scenario: Scenario, rule: str, keep=SHOWN_INPUTS, opaque=OPAQUE_RULES) -> sympy.Expr:
    """``rule`` with the scenario's options and inputs substituted, except the inputs in
    ``keep``; rules in ``opaque`` stay as names (so ``n_params`` reads as P)."""
    lib = scenario.library
    pins = dict(scenario.pins())
    bindings = scenario.bindings(exclude=keep)
    memo: dict[str, sympy.Expr] = {}

    def expand(name: str, top: bool = False) -> sympy.Expr:
        if name in pins:
            return pins[name] if name not in opaque or top else sympy.Symbol(name)
        if name in opaque and not top:
            return sympy.Symbol(name)
        if name not in memo:
            expr = lib.lowered[name].xreplace(bindings)
            memo[name] = expr.xreplace({sympy.Symbol(d): expand(d) for d in lib.deps[name]
                                        if sympy.Symbol(d) in expr.free_symbols})
        return memo[name]

    from .registry import apply_at
    return apply_at(expand(rule, top=True))


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

    @property
    def fits(self) -> bool | None:
        return None if self.capacity is None else bool(self.total <= self.capacity)

    def _repr_html_(self) -> str:
        """The breakdown as an HTML table with typeset formulas (Jupyter)."""
        from .docs import estimate_html
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
            shown = {name: show_text(formula(scenario, name)) for name in self.components}
            shown["total"] = show_text(formula(scenario, "total", opaque=("n_params",)))
        rules = dict(self.rules, n_params=scenario.evaluate("n_params"))
        return Report(scenario.model, scenario.gpu, scenario.values, rules, self.components,
                      self.capacity, shown)


def show_text(expr) -> str:
    """An expression as one line of text, its terms in graded order."""
    return sympy.sstr(expr, order="grlex")


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
             for name in components(scenario)}
    capacity = scenario.values.get("capacity")
    return Estimate(scenario, rules, parts, capacity)
