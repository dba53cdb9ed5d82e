"""Estimates: every top-level rule of a scenario, its per-GPU breakdown and the fit."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import sympy

from .model import Scenario
from .rules import OptionDecl

#: The top-level rules every estimate reports (DESIGN.md: the public interface).
TOP_LEVEL = ("weights", "master", "grads", "optimizer_states", "model_states", "activations",
             "logits", "kv_cache", "overhead", "total")

#: Inputs that stay symbolic in the formula column: the workload of one step.
SHOWN_INPUTS = ("micro_batch", "seq_len")
#: Rules that stay as names in the formula column.
OPAQUE_RULES = ("n_params", "tensors") + TOP_LEVEL


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
        values = {}
        lib = self.scenario.library
        for name, value in sorted(self.scenario.values.items()):
            decl = lib.decls[name]
            values[name] = value if isinstance(decl, OptionDecl) else _json_number(value)
        return {
            "model": self.scenario.model,
            "gpu": self.scenario.gpu,
            "total_bytes": whole_bytes(self.total),
            "components": {n: whole_bytes(v) for n, v in self.components.items()},
            "rules": {n: whole_bytes(v) for n, v in self.rules.items()},
            "inputs": values,
            "capacity_bytes": None if self.capacity is None else whole_bytes(self.capacity),
            "fits": self.fits,
        }


def whole_bytes(value) -> int:
    """Bytes rounded up to a whole byte (a fractional byte still occupies one)."""
    return int(sympy.ceiling(value))


def _json_number(value):
    return int(value) if value.is_Integer else float(value)


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
    rules = {name: scenario.evaluate(name) for name in TOP_LEVEL if name in lib.rules}
    if "peak" in lib.rules:  # the largest phase of the step, beside the plain sum
        rules["peak"] = scenario.evaluate("peak")
    if "host_memory" in lib.rules and scenario.values.get("offload", "none") != "none":
        rules["host_memory"] = scenario.evaluate("host_memory")  # CPU bytes, not in the GPU total
    if scenario.values.get("convention", "memform") != "memform":  # what the named tool reports
        rules["convention_total"] = scenario.evaluate("convention_total")
    parts = {name: rules[name] if name in rules else scenario.evaluate(name)
             for name in components(scenario)}
    capacity = scenario.values.get("capacity")
    return Estimate(scenario, rules, parts, capacity)


def gb(value) -> str:
    return f"{float(value) / 1e9:,.2f}"


def gib(value) -> str:
    return f"{float(value) / 2**30:,.2f}"
