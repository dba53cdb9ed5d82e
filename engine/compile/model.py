"""Scenarios: a library with options chosen, inputs bound and rules pinned.

A :class:`Scenario` is immutable; ``with_values`` returns a new one.  Evaluation is
exact (sympy Integer / Rational): numbers are only rounded when they are formatted.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Mapping

import numpy as np
import sympy

from ..errors import (DomainError, EngineError, FormulaSyntaxError, MissingInputError,
                      ResourceLimitError, Span, UnitError, UsageError)
from ..lang.constants import UnitMisuse, Unsupported, parse_value as constant
from ..lang.names import resolve
from ..lang.parser import parse_value
from ..lang.rules import At, DtypeDecl, InputDecl, OptionDecl, UNITS, unit_words
from ..lang.values import check_domain
from ..library.registry import Library, MAX_TERMS, _OverBudget, _cpu_budget, _tree_size, substitute
from .lambdas import compile_expr
from .outline import FIT_RULE, TOP_LEVEL, check_usable


def parse_setting(lib: Library, text: str, notes: list | None = None) -> tuple[str, object]:
    """``NAME=VALUE`` from the command line -> (name, validated value).

    A name from another tool (:data:`engine.lang.names.ALIASES`) is applied as memform's own,
    with a sentence appended to ``notes``; one that cannot be is refused with a hint.
    """
    if "=" not in text:
        raise UsageError(f"'--set {text}' needs the form NAME=VALUE", Span("--set", 1, 1, len(text), text),
                         hint="e.g. --set micro_batch=8")
    name_part, raw_part = text.split("=", 1)
    name, raw = name_part.strip(), raw_part.strip()
    # where the name and the value start in the argument (0-based), past any spaces
    name_at = len(name_part) - len(name_part.lstrip())
    value_at = len(name_part) + 1 + len(raw_part) - len(raw_part.lstrip())
    name_span = Span("--set", 1, name_at + 1, len(name) or 1, text)
    value_span = Span("--set", 1, value_at + 1, max(1, len(raw)), text)
    if name not in lib.decls:
        alias = resolve(lib, name, raw)
        if alias is None:
            lib.check_value(name, None, name_span)  # raises the unknown-name error with a hint
        if notes is not None:
            notes.append(f"--set {name}={raw} is memform's --set {alias[0]}={alias[1]}")
        name, raw = alias
    try:
        value = parse_value(raw, "--set", constant=True) if raw else None
    except EngineError as exc:  # located in the value: relocate it in the whole argument
        if exc.span is None or exc.span.line != 1:
            raise
        hint = exc.hint
        if isinstance(exc, FormulaSyntaxError) and "unexpected end" not in exc.message:
            hint = ("a value is a number with an optional byte unit (80GB, 81559 MiB, 70e9), a choice "
                    "name, or arithmetic on those (2^30, 80 * 1GB)")
        raise type(exc)(exc.message, Span("--set", 1, value_at + exc.span.column, exc.span.length, text),
                        hint=hint) from None
    if value is None:
        raise UsageError(f"'--set {text}' has no value", value_span)
    if isinstance(value, sympy.Expr) and not value.free_symbols:
        _check_zero_units(lib, name, raw, value_span)
    return name, lib.check_value(name, value, value_span)


def _check_zero_units(lib: Library, name: str, raw: str, span: Span) -> None:
    """Units counted again with the zeros that keep them: sympy's ``0 * B`` is ``0``, so a
    zero given with a unit (``alloc_margin=0 MiB``, ``16 MB ^ 0 GiB``, ``0 GiB + 5``) is
    refused as any other value in the wrong unit would be."""
    decl = lib.decls.get(name)
    if decl is None or isinstance(decl, DtypeDecl):
        return
    try:
        _, dim = constant(raw, units=True)
    except UnitMisuse as exc:
        raise UnitError(str(exc), span,
                        hint="a zero keeps its unit: 0 GiB is bytes") from None
    except Unsupported:  # not plain constant arithmetic: validation has the last word
        return
    if isinstance(decl, OptionDecl):  # a numeric choice (zero_stage = 3) is a plain number
        if dim != 0:
            raise UnitError(f"option '{name}' takes a choice, not a value in {unit_words(dim)}", span)
        return
    want = UNITS[decl.unit][0]
    if dim != want and not (want == 1 and dim == 0):
        raise UnitError(f"'{name}' is in {decl.unit} but the value is in "
                        f"{unit_words(dim)}", span)


@dataclass(frozen=True)
class Scenario:
    """Option choices, input values and rule pins over a resolved :class:`Library`."""

    library: Library = field(repr=False)
    values: Mapping[str, object] = field(default_factory=dict)
    model: str | None = None
    gpu: str | None = None

    # ------------------------------------------------------------------ building
    @classmethod
    def create(cls, library: Library, model: str | None = None, gpu: str | None = None,
               values: Mapping[str, object] | None = None) -> "Scenario":
        """Defaults, then the model and GPU presets, then ``values`` (validated)."""
        merged: dict[str, object] = {}
        for name, decl in library.inputs.items():
            if decl.default is not None:
                merged[name] = library.check_value(name, decl.default, decl.span)
        for name, decl in library.options.items():
            merged[name] = decl.default
        for kind, preset in (("model", model), ("gpu", gpu)):
            if preset is not None:
                for name, value, span in library.preset(kind, preset).settings:
                    merged[name] = library.check_value(name, value, span)
        for name, value in (values or {}).items():
            merged[name] = library.check_value(name, _as_sympy(value))
        _check_pins(library, values or {})
        return _check_pin_domains(cls(library, merged, model, gpu), values or {})

    def with_values(self, **values) -> "Scenario":
        merged = dict(self.values)
        for name, value in values.items():
            merged[name] = self.library.check_value(name, _as_sympy(value))
        _check_pins(self.library, values)
        return _check_pin_domains(Scenario(self.library, merged, self.model, self.gpu), values)

    # ------------------------------------------------------------------ views
    def pins(self) -> frozenset:
        rules = self.library.rules
        return frozenset((n, v) for n, v in self.values.items() if n in rules)

    def bindings(self, exclude=()) -> dict[sympy.Symbol, sympy.Expr]:
        lib = self.library
        out = {}
        for name, value in self.values.items():
            if name in exclude:
                continue
            decl = lib.decls[name]
            if isinstance(decl, InputDecl):
                out[lib._input_syms[name]] = value
            elif isinstance(decl, OptionDecl):
                out[lib._option_syms[name]] = sympy.Integer(decl.code(value))
        return out

    def option(self, name: str) -> str:
        return self.values[name]

    # ------------------------------------------------------------------ evaluation
    def expr(self, rule: str, keep=()) -> sympy.Expr:
        """The rule under this scenario; names in ``keep`` stay symbolic (cached)."""
        key = ("expr", rule, tuple(keep),
               frozenset((n, v) for n, v in self.values.items() if n not in keep))
        cache = self.library._compose_cache
        if key not in cache:
            composed = self.library.compose(rule, self.pins())
            try:
                # each shared part of the composed rule once (xreplace rebuilds it at every use:
                # 9 s for the reserved peak, 0.06 s so)
                cache[key] = substitute(composed, self.bindings(exclude=keep))
            except (TypeError, ValueError):  # sympy cannot order a number that is not real (zoo > 2, max(nan, 1))
                self.evaluate(rule)  # raises the error that names the rule
                raise DomainError(f"'{rule}' compares a number that is not real in this scenario") from None
        return cache[key]

    def sweep(self, rule: str, **arrays):
        """Evaluate ``rule`` over numpy arrays of inputs (and option codes) in one call.

        Examples
        --------
        >>> import numpy as np, engine
        >>> s = Scenario.create(engine.load(), "llama2-7b")
        >>> s.sweep("kv_cache", micro_batch=np.array([1, 2]), mode=np.array([1, 1])).tolist()
        [1073741824.0, 2147483648.0]
        """
        names = tuple(arrays)
        fn = compiled(self, rule, names)
        values = [np.asarray(a, dtype=float) for a in arrays.values()]
        shape = np.broadcast_shapes(*(v.shape for v in values))
        out = np.empty(shape)
        flat = [np.broadcast_to(v, shape).reshape(-1) for v in values]
        target = out.reshape(-1)
        with np.errstate(all="ignore"):  # branches not taken may divide by zero
            # in cache-sized chunks: the temporaries stay in cache instead of streaming memory
            for start in range(0, target.size, _CHUNK):
                stop = start + _CHUNK
                target[start:stop] = fn(*(v[start:stop] for v in flat))
        return out

    def _value(self, name: str, memo: dict, bindings: dict, pins: dict) -> sympy.Expr:
        """The value of one rule, rule by rule: each resolved rule gets the scenario's
        numbers and its dependencies' values (no whole-library composition)."""
        if name in pins:
            return pins[name]
        if name not in memo:
            lib = self.library
            expr = lib.lowered[name]
            if expr.has(At):
                expr = expr.replace(lambda e: isinstance(e, At),
                                    lambda e: self._at(e, memo, bindings, pins))
            sub = dict(bindings)
            sub.update({sympy.Symbol(d): _unknowns(d, self._value(d, memo, bindings, pins)) for d in lib.deps[name]})
            try:
                value = _chosen(expr, sub)
            except TypeError as exc:  # sympy cannot order a number that is not real (zoo > 2)
                raise _not_real(lib, name, expr, sub, str(exc)) from None
            except ValueError as exc:  # min(x, nan): "The argument 'nan' is not comparable"
                raise _not_real(lib, name, expr, sub, f"it compares an undefined value ({exc})") from None
            if not value.is_Rational and value.is_number and value.is_extended_real is False and value.is_finite:
                # sqrt(-1), log2(-1): not a number of bytes (zoo stays 'undefined' in evaluate)
                raise _not_real(lib, name, expr, sub, f"its value is {sympy.sstr(value)}")
            if value.is_number and not value.is_Rational and value.is_finite and value.is_extended_real:
                # log(4)/log(2) is 2; sqrt(10^9) is a real number, but not an exact one.  simplify
                # over a 400-digit constant beside a logarithm runs for minutes: bounded
                try:
                    with _cpu_budget(SIMPLIFY_CPU_SECONDS):
                        value = sympy.simplify(value)
                except _OverBudget:
                    raise _not_real(lib, name, expr, sub, f"its value {_short(value)} is not shown to be exact "
                                    f"within {SIMPLIFY_CPU_SECONDS} s of CPU time", irrational=True) from None
                if not value.is_Rational:
                    raise _not_real(lib, name, expr, sub, f"its value {_short(value)} is irrational", irrational=True)
            _check_size(value, name, lib)
            memo[name] = value
        return memo[name]

    def _at(self, node, memo, bindings, pins) -> sympy.Expr:
        """``target[k = v, ...]``: the target's value in this scenario with the keys rebound."""
        lib = self.library
        target, flat = node.args[0], node.args[1:]
        deps = {s for v in flat[1::2] for s in v.free_symbols if s.name in lib.rules and s == sympy.Symbol(s.name)}
        sub = dict(bindings)
        sub.update({d: self._value(d.name, memo, bindings, pins) for d in deps})
        rebound = dict(bindings)
        rebound.update({k: v.xreplace(sub) for k, v in zip(flat[::2], flat[1::2])})
        return self._value(target.name, {}, rebound, pins)

    def evaluate(self, rule: str) -> sympy.Rational:
        """The exact value of a rule (bytes for byte rules) or of an input."""
        if rule in self.library.inputs:
            if rule not in self.values:
                raise MissingInputError(f"'{rule}' has no value", hint=f"give it with --set {rule}=VALUE")
            return self.values[rule]
        if rule not in self.library.rules:
            self.library.check_value(rule, None)  # unknown-name error with hint
        key = ("values", frozenset(self.values.items()))  # one memo per scenario: estimate
        memo = self.library._compose_cache.setdefault(key, {})  # evaluates a dozen rules
        value = self._value(rule, memo, self.bindings(), dict(self.pins()))
        if value.free_symbols:
            missing = sorted(s.name for s in value.free_symbols)
            raise MissingInputError(f"'{rule}' needs values for: {', '.join(missing)}",
                                    hint="give them with --set NAME=VALUE or choose a model preset")
        if value is sympy.nan or not value.is_finite:
            bad = [f"{n}={v}" for n, v in self.values.items() if isinstance(self.library.decls[n], OptionDecl)]
            raise MissingInputError(f"'{rule}' is undefined for this combination of options",
                                    hint=", ".join(bad))
        return value


def _chosen(expr: sympy.Expr, sub: dict) -> sympy.Expr:
    """``expr.xreplace(sub)``, but a condition's arms are substituted only up to the first whose
    condition holds: an arm not taken may hold what has no value here (a division by a
    rule pinned to 0 in a branch for other models), which sympy would refuse to build."""
    if not expr.has(sympy.Piecewise):
        return expr.xreplace(sub)
    if isinstance(expr, sympy.Piecewise):
        for value, cond in expr.args:
            decided = cond.xreplace(sub)
            if decided is sympy.true:
                return _chosen(value, sub)
            if decided is not sympy.false:
                return expr.xreplace(sub)  # not decided by the numbers: as sympy builds it
        return expr.xreplace(sub)
    return expr.func(*(_chosen(a, sub) for a in expr.args))


def _unknowns(name: str, value: sympy.Expr) -> sympy.Expr:
    """The value of rule ``name`` as the rules that use it see it.  A value that still holds
    inputs without a value (a rule evaluated with some inputs missing) is carried on as an opaque
    term of those inputs, ``pending_name(inputs)``: evaluate() only reports which inputs are
    missing, a branch not taken or a factor 0 still drops it, and sympy never works on the
    expression itself (its assumptions take exponential time on a rule squared 60 times)."""
    if value.is_number or not value.free_symbols:
        return value
    return sympy.Function(f"pending_{name}")(*sorted(value.free_symbols, key=str))


def _not_real(lib, name: str, expr, sub: dict, why: str, irrational: bool = False):
    """A rule whose value leaves the real numbers (or, ``irrational``, the exact ones), with the
    values of the names it uses."""
    rule = lib.rules[name]

    def shown(s) -> str:
        decl = lib.decls.get(s.name)
        return decl.choice_of(int(sub[s])) if isinstance(decl, OptionDecl) else _short(sub[s])
    used = ", ".join(f"{s.name}={shown(s)}" for s in sorted(expr.free_symbols, key=str) if s in sub)
    kind = "an exact number" if irrational else "a real number"
    rounding = "memform's figures are exact: round it with floor() or ceil()" if irrational else None
    hints = [h for h in (f"with {used}" if used else None, rounding) if h]
    return DomainError(f"rule '{name}' is not {kind} here: {why}", rule.expr_span or rule.span,
                       hint="; ".join(hints) if hints else None)


#: CPU seconds simplify may spend showing that a value with logarithms or roots is exact
SIMPLIFY_CPU_SECONDS = 2


def _short(value, n: int = 60) -> str:
    """A value as sympy prints it, cut to ``n`` characters."""
    text = sympy.sstr(value)
    return text if len(text) <= n else text[:n - 3] + "..."


#: the most bits a rule's exact value may have (a byte count needs about 60)
MAX_BITS = 100_000


def _check_size(value: sympy.Expr, name: str, lib) -> None:
    """Refuse values that explode: huge exact numbers, or (with inputs missing) huge
    expressions, as a chain of rules that each use the previous one twice makes."""
    if value.is_Rational:
        if max(int(value.p).bit_length(), int(value.q).bit_length()) > MAX_BITS:
            raise ResourceLimitError(f"rule '{name}' has a value of more than {MAX_BITS:,} bits",
                                     lib.rules[name].span, hint="the rules multiply without bound")
    elif _tree_size(value, {}) > MAX_TERMS:
        raise ResourceLimitError(f"rule '{name}' expands to more than {MAX_TERMS:,} terms",
                                 lib.rules[name].span, hint="restructure the rules")


_CHUNK = 1 << 11  # elements per chunk of a sweep (cache-sized temporaries)


def compiled(scenario: "Scenario", rule: str, over: tuple[str, ...]):
    """A vectorised numpy function of the inputs / options named in ``over`` that computes
    ``rule`` under ``scenario`` (float64); options take their integer codes.  Compiled once
    per (rule, scenario values, over) and cached on the library."""
    lib = scenario.library
    key = ("compiled", rule, tuple(sorted(scenario.values.items(), key=lambda kv: kv[0])), over)
    cache = lib._compose_cache
    if key not in cache:
        symbols = []
        for name in over:
            decl = lib.decls.get(name)
            if isinstance(decl, InputDecl):
                symbols.append(lib._input_syms[name])
            elif isinstance(decl, OptionDecl):
                symbols.append(lib._option_syms[name])
            else:
                raise UsageError(f"'{name}' is not an input or option that can be swept")
        expr = scenario.expr(rule, keep=over)
        extra = expr.free_symbols - set(symbols)
        if extra:
            raise MissingInputError(f"'{rule}' needs values for: "
                                    + ", ".join(sorted(s.name for s in extra)))
        cache[key] = compile_expr(expr, symbols)
    return cache[key]


def components(lib: Library, rule: str = "total") -> list[str]:
    """The leaves of ``rule`` when every rule that is a plain sum of rules is split."""
    expr = lib.lowered[rule]
    if rule in TOP_LEVEL and rule not in ("total", "model_states"):
        return [rule]  # a top-level rule is a component even when it is a sum (weights)
    if isinstance(expr, sympy.Add) and all(
            isinstance(a, sympy.Symbol) and a.name in lib.rules and a == sympy.Symbol(a.name)
            for a in expr.args):
        names = [a.name for a in expr.args]
        ordered = [n for n in TOP_LEVEL if n in names] + [n for n in names if n not in TOP_LEVEL]
        return [leaf for n in ordered for leaf in components(lib, n)]
    return [rule]


def derived(lib) -> frozenset[str]:
    """Rules computed from the components of ``total`` without being one (``total``,
    ``model_states``, ``peak`` ...): pinning one would leave the components it is made of
    as they were, so :class:`Scenario` refuses such pins."""
    found = getattr(lib, "_derived", None)
    if found is None:
        parts = set(components(lib)) if "total" in lib.rules else set()
        closure: dict[str, set] = {}

        def deps(name: str) -> set:
            if name not in closure:
                closure[name] = set()
                for d in lib.deps.get(name, ()):
                    closure[name] |= {d} | deps(d)
            return closure[name]

        found = lib._derived = frozenset(n for n in lib.rules if n not in parts and deps(n) & parts)
    return found


def fit_capacity(scenario: Scenario):
    """What the scenario's totals must fit in (rule ``usable_memory``: the GPU's memory as CUDA
    reports it), or None without a capacity."""
    if "capacity" not in scenario.values:
        return None
    usable = scenario.evaluate(FIT_RULE) if FIT_RULE in scenario.library.rules else scenario.values["capacity"]
    check_usable(usable)
    return usable


def _check_pins(lib: Library, values) -> None:
    """Refuse pins of rules derived from the estimate's components (``total`` ...)."""
    wrong = [n for n in values if n in lib.rules and n in derived(lib)]
    if wrong:
        raise DomainError(f"'{wrong[0]}' is computed from the components of the estimate and cannot be "
                          "pinned", hint="pin the components instead ("
                          + ", ".join(components(lib)) + "), or give --capacity to ask whether it fits")


def _check_pin_domains(scenario: Scenario, given) -> Scenario:
    """Check the rules pinned in ``given`` whose domain names an input or rule
    (``stage_dense_layers in [0, layers_per_stage]``) against those values in ``scenario``."""
    lib = scenario.library
    for name in given:
        decl = lib.rules.get(name)
        if decl is None or not decl.bound_names():
            continue
        bounds = {}
        for bound in decl.bound_names():
            try:
                bounds[bound] = scenario.evaluate(bound)
            except EngineError:  # not known in this scenario (no model yet): not checked
                pass
        check_domain(decl, scenario.values[name], None, bounds)
    return scenario


def _as_sympy(value):
    if isinstance(value, (sympy.Basic, str)):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return sympy.Integer(value)
    if isinstance(value, float):
        f = Fraction(repr(value))
        return sympy.Rational(f.numerator, f.denominator)
    return value
