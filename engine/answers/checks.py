"""Testing the library's ``check`` invariants on every model preset.

Each check is composed once into two expressions over inputs and option codes,
compiled with :func:`engine.compile.lambdas.compile_expr` (the numpy backend of
:mod:`engine.compile.codegen`), and evaluated on a sample of
scenarios per model preset: inputs the preset leaves open are drawn log-uniformly within
their domain, options the preset leaves open are drawn over all their choices, except
architecture names (those some model preset sets), which keep their defaults.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import sympy

from ..compile.compiler import compile_library, expr_tree
from ..compile.lambdas import Numpy, compile_expr, real_values
from ..compile.model import Scenario
from ..compile.codegen import Specialiser, load_python, reach
from ..errors import DomainError, EngineError, MissingInputError, ResourceLimitError, UsageError
from ..lang.rules import CheckDecl, InputDecl, OptionDecl
from ..library.registry import COMPOSE_CPU_SECONDS, Library, _OverBudget, _cpu_budget, shipped


#: the most scenarios per model preset a check may sample (memory grows with it)
MAX_SAMPLES = 20_000


def validate_samples(samples) -> None:
    """Refuse a sample count that tests nothing or cannot fit in memory (``--samples``)."""
    if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= MAX_SAMPLES:
        raise UsageError(f"--samples takes a whole number from 1 to {MAX_SAMPLES:,}, not {samples}",
                         hint="a check tested on no scenario would pass without testing anything")


@dataclass
class CheckResult:
    check: CheckDecl
    samples: int
    failure: str | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None


def _sample_input(decl: InputDecl, rng: np.random.Generator, n: int) -> np.ndarray:
    lo = float(decl.lower) if decl.lower is not None else 0.0
    if decl.unit == "ratio" or decl.upper is not None:
        hi = float(decl.upper) if decl.upper is not None else 1.0
        vals = rng.uniform(lo, hi, n)
        if decl.lower_strict:
            vals = np.maximum(vals, lo + 1e-6)
        return vals
    if decl.unit == "bytes":
        return rng.uniform(lo, 8 * 2**30, n)
    lo_i = max(1, int(np.ceil(lo))) if not (decl.lower_strict and lo == 0) else 1
    vals = np.exp(rng.uniform(np.log(lo_i), np.log(2**16), n))
    return np.floor(vals)


def _models(lib: Library) -> list[tuple[str, dict]]:
    return [(name, {n: v for n, v, _ in preset.settings})
            for (kind, name), preset in sorted(lib.presets.items()) if kind == "model"]


def _column(lib, sym, fixed, architecture, rng, n) -> np.ndarray:
    """Values of one input or option for ``n`` scenarios of one model preset."""
    decl = lib.decls[sym.name]
    if sym.name in fixed:
        value = lib.check_value(sym.name, fixed[sym.name])
        return np.full(n, float(decl.code(value) if isinstance(decl, OptionDecl) else value))
    if sym.name in architecture and isinstance(decl, OptionDecl):
        return np.full(n, float(decl.code(decl.default)))
    if sym.name in architecture and decl.default is not None:
        return np.full(n, float(lib.check_value(sym.name, decl.default)))
    if isinstance(decl, OptionDecl):
        return rng.choice([decl.code(c) for c in decl.choices], n).astype(float)
    return _sample_input(decl, rng, n)


def run_check(lib: Library, check, lhs, rhs, where, samples: int = 2000, seed: int = 0) -> CheckResult:
    """Evaluate one resolved check (see :func:`_run_check`); a check whose numbers leave float64's
    range (a 400-digit constant) cannot be sampled and fails, saying so.  Composing, compiling
    and sampling a check of a user's rule file has the CPU budget of one rule's composition
    (the built-in checks take at most about 3 s, and are not bounded): sympy folds a condition
    over rules that hold conditions of their own in time that grows without bound."""
    budget = contextlib.nullcontext() if shipped(check) else _cpu_budget(COMPOSE_CPU_SECONDS)
    try:
        with budget:
            return _run_check(lib, check, lhs, rhs, where, samples, seed)
    except _OverBudget:
        raise ResourceLimitError(f"check '{check.name}' took more than {COMPOSE_CPU_SECONDS} s of CPU time to "
                                 "compose and compile", check.span,
                                 hint="sympy folds each condition over the conditions of the rules it uses, "
                                      "and that grows without bound; compare simpler rules, or split the "
                                      "check") from None
    except OverflowError:
        return CheckResult(check, 0, "its values exceed float64's range (about 1.8e308), in which "
                                     "checks are sampled: it tested nothing")


def _run_check(lib: Library, check, lhs, rhs, where, samples: int, seed: int) -> CheckResult:
    """Evaluate one resolved check on ``samples`` scenarios per model preset.

    Each side is composed and compiled once: rules that some preset pins (num_key_value_heads)
    stay symbols, filled per preset with the pinned value or the rule's own value.  A check
    that no sampled scenario reaches (its ``where`` never holds) fails: it tested nothing."""
    validate_samples(samples)
    rng = np.random.default_rng(seed)
    models = _models(lib)
    # names some model preset sets describe the architecture: a preset that leaves one
    # unset means its default (a dense model has num_experts = 0), so it is not sampled
    architecture = {n for _, fixed in models for n in fixed}
    pinned = sorted(n for n in architecture if n in lib.rules)
    pins = [(n, sympy.Symbol(n)) for n in pinned]
    try:
        left, right = lib.compose_expr(lhs, pins), lib.compose_expr(rhs, pins)
        cond = lib.compose_expr(where, pins) if where is not sympy.true else sympy.true
    except (ValueError, TypeError):  # sympy cannot order or compare a value that is not a real number
        raise DomainError(f"check '{check.name}' compares a value that is not a real number once the rules it "
                          "uses are inlined", check.span,
                          hint="a rule it uses divides by zero in one of its branches, or takes the square root "
                               "of a negative number; compare simpler rules") from None
    defaults = {n: lib.compose(n) for n in pinned}  # a pinned rule's value where a preset does not pin it
    needed = left.free_symbols | right.free_symbols | getattr(cond, "free_symbols", set())
    for n in pinned:
        needed |= defaults[n].free_symbols
    inputs = sorted((s for s in needed if s.name not in pinned), key=lambda s: s.name)
    pin_syms = [sympy.Symbol(n) for n in pinned]
    columns = {s: [] for s in inputs + pin_syms}
    owners = []
    compiled: dict = {}  # a pinned rule's default value, compiled once for every preset
    for name, fixed in models:
        cols = {s: _column(lib, s, fixed, architecture, rng, samples) for s in inputs}
        for n, sym in zip(pinned, pin_syms):
            if n in fixed:
                cols[sym] = np.full(samples, float(lib.check_value(n, fixed[n])))
            else:
                if n not in compiled:
                    compiled[n] = compile_expr(defaults[n], inputs)
                cols[sym] = real_values(compiled[n](*(cols[s] for s in inputs)), samples)
        for sym, col in cols.items():
            columns[sym].append(col)
        owners += [(name, fixed)] * samples
    symbols = inputs + pin_syms
    args = [np.concatenate(columns[s]) for s in symbols]
    size = len(owners)
    with np.errstate(all="ignore"):
        a = real_values(compile_expr(left, symbols)(*args), size)
        b = real_values(compile_expr(right, symbols)(*args), size)
        mask = (np.broadcast_to(np.asarray(compile_expr(cond, symbols)(*args), bool), (size,))
                if cond is not sympy.true else np.ones(size, bool))
    return _verdict(lib, check, (lhs, rhs), a, b, mask, owners, {s.name: col for s, col in zip(inputs, args)})


def _verdict(lib: Library, check, sides, a, b, mask, owners, columns: dict) -> CheckResult:
    """The result of a check whose sides are ``a`` and ``b`` over the sampled scenarios
    (``owners``: the model preset of each; ``columns``: the values of the inputs and options
    read), where ``mask`` holds: the first scenario that breaks it, with its values."""
    size = len(owners)
    tested, bad = _judge(check.op, a, b, mask)
    if not tested:
        return _nothing_tested(check, size)
    if not len(bad):
        return CheckResult(check, tested)
    i = bad[0]
    name, fixed = owners[i]
    sample = _sample_at(lib, columns, fixed, i)
    return CheckResult(check, tested, _failure(lib, check, sides, name, sample, a[i], b[i]))


def _judge(op: str, a, b, mask) -> tuple[int, np.ndarray]:
    """How many scenarios a check tested (``mask``), and the indices of those that break it."""
    tol = 1e-9 * np.maximum(np.abs(a), np.abs(b)) + 1e-6
    ok = {"==": np.abs(a - b) <= tol, "!=": np.abs(a - b) > tol, "<=": a <= b + tol,
          ">=": a + tol >= b, "<": a < b - tol, ">": a > b + tol}[op]
    ok &= np.isfinite(a) & np.isfinite(b)
    return int(mask.sum()), np.nonzero(mask & ~ok)[0]


def _nothing_tested(check, size: int) -> CheckResult:
    return CheckResult(check, 0, f"tested nothing: its 'where' holds in none of the {size:,} scenarios sampled")


def _sample_at(lib: Library, columns: dict, fixed: dict, i: int) -> dict:
    """The values scenario ``i`` gives the names in ``columns`` that its preset leaves open."""
    sample = {}
    for n, col in columns.items():
        if n not in fixed:
            decl = lib.decls[n]
            sample[n] = decl.choice_of(int(col[i])) if isinstance(decl, OptionDecl) else float(col[i])
    return sample


def _failure(lib: Library, check, sides, name: str, sample: dict, a: float, b: float) -> str:
    where = f"fails for {name}" + (" with " if sample else "") + ", ".join(
        f"{n}={v}" if isinstance(v, str) else f"{n}={v:g}" for n, v in sample.items())
    unreal = [side for side, v in (("left", a), ("right", b)) if not np.isfinite(v)]
    if not unreal:
        return f"{where}: {a:.6g} {check.op} {b:.6g} is false"
    origin = _origin(lib, sides, name, sample)
    return (f"{where}: the {' and '.join(unreal)} side {'is' if len(unreal) == 1 else 'are'} not a finite "
            "real number" + (f"\n{origin}" if origin else ""))


def _origin(lib: Library, sides, model: str, sample: dict) -> str | None:
    """The rule that first leaves the real numbers in one failing scenario, as a located
    error, found by evaluating the rules the check uses exactly, in dependency order."""
    try:
        scenario = Scenario.create(lib, model, values=sample)
    except EngineError:
        return None
    used = {s.name for e in sides for s in e.free_symbols if s.name in lib.rules}
    todo = list(used)
    while todo:
        for dep in lib.deps[todo.pop()] - used:
            used.add(dep)
            todo.append(dep)
    for rule in (r for r in lib.order if r in used):
        span = lib.rules[rule].expr_span or lib.rules[rule].span
        try:
            value = scenario.evaluate(rule)
        except MissingInputError:
            continue  # a division by zero in a branch not taken, or an input the check rebinds
        except EngineError as exc:
            return str(exc)
        except TypeError as exc:  # sympy cannot order a number that is not real (zoo > 2)
            return str(DomainError(f"rule '{rule}' is not a real number here: {exc}", span))
        if value.is_extended_real is False:
            return str(DomainError(f"rule '{rule}' is not a real number here: its value is {sympy.sstr(value)}",
                                   span))
    return None


def run_checks(lib: Library, samples: int = 2000) -> list[CheckResult]:
    """Every check of the library, each on ``samples`` scenarios per model preset.  The
    library's own checks over its own rules are sampled together, on one sample of every
    input and option per preset, by :class:`_Sampled` (no sympy composition: seconds for all
    of them); the others (a user's checks, checks over a user's overrides, rules with no tree
    form) one by one, composed and compiled (:func:`run_check`)."""
    validate_samples(samples)
    sampled = _Sampled(lib, samples).run([item for item in lib.lowered_checks if shipped(item[0])])
    return [sampled.get(id(item[0])) or run_check(lib, *item, samples=samples, seed=i)
            for i, item in enumerate(lib.lowered_checks)]


def _program(rules: dict, prepared: list, varying: tuple, failed: dict):
    """The sides (and conditions) of the checks in ``prepared`` as one numpy program of the
    names in ``varying`` (every input and option, and the rules a preset pins), each rule
    computed once for every check that reads it (:mod:`engine.compile.codegen`), and
    {id(check): the places of its trees among the program's outputs}.  A check whose numbers
    leave float64's range is marked in ``failed`` (:func:`run_check` says so) and left out."""
    def build(items):
        program = Specialiser(rules, {}, varying, {})
        trees = [program.node(t, program.top, frozenset()) for *_, ts, _ in items for t in ts]
        return load_python(Numpy(), program.steps, trees, len(varying))

    kept = prepared
    try:
        fn = build(kept)
    except OverflowError:  # some check's constant: found one check at a time, the others kept
        kept = []
        for item in prepared:
            try:
                build([item])
                kept.append(item)
            except OverflowError:
                failed[id(item[0])] = None
        fn = build(kept)
    places, start = {}, 0
    for check, _, trees, _ in kept:
        places[id(check)] = range(start, start + len(trees))
        start += len(trees)
    return fn, places


class _Sampled:
    """Checks on one sample of every input and option, ``samples`` scenarios per model preset
    (the options and inputs a preset leaves open drawn as :func:`_column` draws them), one
    preset at a time: the library's rules over it (one numpy program of every input and
    option for all the checks, :func:`_program`, each rule evaluated once for every check
    that reads it), no sympy composition."""

    def __init__(self, lib: Library, samples: int, seed: int = 0) -> None:
        self.lib, self.samples, self.seed = lib, samples, seed

    def run(self, items) -> dict:
        """{id(check): CheckResult} for the checks of ``items`` (as ``lib.lowered_checks``
        holds them) that read only the library's own rules, in tree form."""
        lib = self.lib
        if not items:
            return {}
        rules = compile_library(lib)["rules"]
        prepared = []
        for check, lhs, rhs, where in items:
            trees = [expr_tree(lib, e) for e in (lhs, rhs)]
            if where is not sympy.true:
                trees.append(expr_tree(lib, where))
            used, inputs, ok = reach(rules, trees)
            if ok and all(shipped(lib.rules[r]) for r in used):
                prepared.append((check, (lhs, rhs), trees, sorted(inputs)))
        models = _models(lib)
        architecture = {n for _, fixed in models for n in fixed}
        pinned = sorted(n for n in architecture if n in lib.rules)
        syms = {**lib._input_syms, **lib._option_syms}
        rng = np.random.default_rng(self.seed)
        n = self.samples
        tested = {id(c): 0 for c, *_ in prepared}
        failed: dict = {}
        names = sorted(syms)
        programs: dict = {}  # the pinned rules -> the checks' program (every input and option varying)
        for name, fixed in models:
            env = {k: _column(lib, syms[k], fixed, architecture, rng, n) for k in names}
            pins = tuple(k for k in pinned if k in fixed)
            if pins not in programs:
                programs[pins] = _program(rules, prepared, (*names, *pins), failed)
            program, places = programs[pins]
            args = [env[k] for k in names] + [np.full(n, float(lib.check_value(k, fixed[k]))) for k in pins]
            with np.errstate(all="ignore"):
                values = program(*args)
            for check, sides, trees, inputs in prepared:
                where = places.get(id(check))
                if id(check) in failed or where is None:
                    continue
                a, b = (real_values(values[i], n) for i in where[:2])
                mask = (np.broadcast_to(np.asarray(values[where[2]], bool), (n,))
                        if len(where) == 3 else np.ones(n, bool))
                count, bad = _judge(check.op, a, b, mask)
                tested[id(check)] += count
                if len(bad):
                    i = bad[0]
                    failed[id(check)] = (name, _sample_at(lib, {k: env[k] for k in inputs}, fixed, i), a[i], b[i])
        out = {}
        size = n * len(models)
        for check, sides, _, _ in prepared:
            key = id(check)
            if key in failed:
                if failed[key] is not None:
                    name, sample, a, b = failed[key]
                    out[key] = CheckResult(check, tested[key], _failure(lib, check, sides, name, sample, a, b))
            elif not tested[key]:
                out[key] = _nothing_tested(check, size)
            else:
                out[key] = CheckResult(check, tested[key])
        return out
