"""Solving for one unknown: the best whole value that fits a capacity, and its closed form.

The answer always comes from an exact integer search over an expression checked to be
monotone in the unknown, so it never returns a value that does not fit.  The closed form
(``micro_batch <= (C - 11 P / 5 - ...) / (...)``) is derived by sympy on the piece of the
expression that is active at the answer, and is reported as the method only when its
floor (or ceiling) reproduces the searched answer.  The candidates, the monotonicity grid and
the bisection are :mod:`engine.answers.search`'s, shared with the compiled path
(:func:`engine.answers.quick.solve`), which answers a preset's micro_batch and seq_len without
sympy where the target is linear in them.
"""
from __future__ import annotations

import math

import numpy as np
import sympy

from ..compile.columns import from_sympy, quotient_form, quotient_form_text
from ..compile.lambdas import compile_expr, real_values
from ..compile.model import MAX_BITS, Scenario, components, fit_capacity
from ..errors import (DomainError, InfeasibleError, MissingInputError, ResourceLimitError,
                      UsageError, did_you_mean)
from ..lang.constants import Unsupported
from ..lang.rules import InputDecl
from ..library.layout import DIVIDES, SERVING_MULTIPLES, admits
from .estimate import formula
from .report import whole_bytes
from .search import UPPER, SolveResult, bisect, candidates, chosen, grid, listed, method
from .search import constraints as stated

__all__ = ["SolveResult", "UPPER", "solve"]


def _gb(value) -> str:
    """Bytes in GB to one decimal, in powers of ten past a billion GB (never 'inf')."""
    return str(sympy.Float(value / 10**9, 3)) if value >= 10**18 else f"{float(value) / 1e9:,.1f}"


def _fmt(value) -> str:
    """Bytes in GB and GiB; exact bytes below 0.1 GB, powers of ten past a billion GB."""
    if value < 10**8:
        return f"{whole_bytes(value):,} B"
    if value >= 10**18:
        return f"{sympy.Float(value / 10**9, 3)} GB ({sympy.Float(value / 2**30, 3)} GiB)"
    return f"{float(value) / 1e9:,.1f} GB ({float(value) / 2**30:,.1f} GiB)"


def _where(unknown: str, x: int, direction: str) -> str:
    return f"even at {unknown}={x}" if direction == "max" else f"for any {unknown} up to {x}"


def solve(scenario: Scenario, direction: str, unknown: str, target: str = "total",
          step: str = "1", multiple_of: int = 1, divisibility: bool = True,
          upper: int = UPPER) -> SolveResult:
    """Largest (``max``) or smallest (``min``) whole value of ``unknown`` with
    ``target <= capacity``.

    Examples
    --------
    >>> import engine
    >>> s = Scenario.create(engine.load(), "llama2-70b", values={"n_params": 70 * 10**9,
    ...     "optimizer_step_bytes": 0,
    ...     "zero_stage": 3, "capacity": 80 * 10**9})
    >>> solve(s, "min", "dp", target="model_states").value
    14
    """
    lib = scenario.library
    if direction not in ("max", "min"):
        raise UsageError(f"solve takes 'max' or 'min', not '{direction}'")
    if step not in ("1", "pow2"):
        raise UsageError(f"--step takes 1 or pow2, not '{step}'")
    if isinstance(multiple_of, bool) or not isinstance(multiple_of, int) or not 1 <= multiple_of <= upper:
        raise UsageError(f"--multiple-of takes a whole number from 1 to {upper:,}, not {multiple_of}")
    decl = lib.decls.get(unknown)
    if not isinstance(decl, InputDecl) or not decl.integer:
        known = [n for n, d in lib.inputs.items() if d.integer]
        raise UsageError(f"'{unknown}' is not a whole-number input that can be solved for",
                         hint=did_you_mean(unknown, known) or "e.g. micro_batch, seq_len, dp, tp, pp")
    if target not in lib.rules:
        lib.check_value(target, None)
    if "capacity" not in scenario.values:
        raise UsageError("solve needs a capacity", hint="give --gpu GPU or --capacity 80GB")
    capacity = fit_capacity(scenario)
    sym = lib._input_syms[unknown]
    f = scenario.expr(target, keep=(unknown,))
    extra = f.free_symbols - {sym}
    if extra:
        raise MissingInputError(f"'{target}' needs values for: " + ", ".join(sorted(s.name for s in extra)))
    _check_bits(f, sym, upper, target, unknown)
    lo = max(1, int(math.ceil(decl.lower))) if decl.lower is not None else 1

    def at(x: int) -> sympy.Rational:
        try:
            value = f.xreplace({sym: sympy.Integer(x)})
        except TypeError:  # sympy cannot order a number that is not real (zoo > 2)
            value = sympy.nan
        if value.is_extended_real is not True or not value.is_finite:
            raise _not_real(scenario, target, unknown, x)
        if not value.is_Rational:  # log2(1.5) B: the exact evaluation names the irrational rule
            scenario.with_values(**{unknown: x}).evaluate(target)
        return value

    k = multiple_of
    cand, i_lo, i_hi = candidates(lo, k, step, upper)
    divides = [r for r in DIVIDES.get(unknown, ()) if divisibility]
    divisors = {r: scenario.evaluate(r) for r in divides}
    # serving, tp may also be a multiple of the key/value heads (the engines replicate them)
    serving = scenario.values.get("mode") == "infer"
    multiples = SERVING_MULTIPLES.get(unknown, ()) if serving else ()
    constraints = stated(unknown, k, step) + [f"{unknown} divides {r} ({divisors[r]})"
                                              + (" or is a multiple of it" if r in multiples else "") for r in divides]

    def valid(x: int) -> bool:
        return all(divisors[r].is_Integer and admits(unknown, x, r, int(divisors[r]), serving) for r in divides)

    if divides:
        # finitely many candidates: evaluate each exactly (no monotonicity needed)
        limit = min([upper] + [int(divisors[r]) for r in divides if r not in multiples])
        xs = listed(cand, i_lo, i_hi, limit, step, k, valid)
        if not xs:
            raise UsageError(f"no value of '{unknown}' meets the constraints: " + "; ".join(constraints),
                             hint="--no-divisibility drops the divisibility constraints")
        fits = [x for x in xs if at(x) <= capacity]
        if not fits:
            worst = xs[-1] if direction == "min" else xs[0]
            raise _infeasible(scenario, target, unknown, worst, at(worst), capacity, direction)
        value, nxt = chosen(xs, fits, direction)
    else:
        increasing = direction == "max"
        _check_monotone(f, sym, cand(i_lo), cand(i_hi), increasing, unknown, at)
        edge = cand(i_lo) if increasing else cand(i_hi)
        if at(edge) > capacity:
            raise _infeasible(scenario, target, unknown, edge, at(edge), capacity, direction)
        value, nxt = bisect(lambda x: at(x) <= capacity, direction, cand, i_lo, i_hi)
    bytes_at = at(value)
    bytes_next = at(nxt) if nxt is not None else None
    text, closed, bound = _closed_form(scenario, f, sym, unknown, target, capacity, direction, value, k, step)
    found_by = "search" if divides else method(text, unknown, closed, value)
    return SolveResult(unknown, direction, value, text, bytes_at, bytes_next, nxt, found_by, closed,
                       capacity, target, tuple(constraints), bound if found_by == "closed-form" else None,
                       scenario.values["capacity"])


_MONOTONE: dict = {}  # (f, lo, hi, increasing) -> True: an expression checked once is not checked again


def _check_monotone(f, sym, lo: int, hi: int, increasing: bool, unknown: str, at) -> None:
    """Refuse to search an expression that is not monotone in the unknown (float check on a
    log-spaced grid of whole values); ``at`` evaluates it exactly where floats fail."""
    key = (f, lo, hi, increasing)
    if key in _MONOTONE:
        return
    _check_monotone_uncached(f, sym, lo, hi, increasing, unknown, at)
    _MONOTONE[key] = True


def _check_monotone_uncached(f, sym, lo, hi, increasing, unknown, at) -> None:
    xs = np.array(grid(lo, hi), dtype=float)
    with np.errstate(all="ignore"):  # an overflow is an infinity, still ordered
        try:
            ys = real_values(compile_expr(f, [sym])(xs), len(xs))
        except OverflowError:  # a constant past float64 (64^(2^20)): ordered as an infinity
            ys = np.array([_ordered(f.xreplace({sym: sympy.Integer(int(x))})) for x in xs])
        for x in xs[np.isnan(ys)][:1]:
            at(int(x))  # not a real number there: the exact value names the rule
        d = np.diff(ys)
        tol = 1e-9 * np.maximum(np.abs(ys[1:]), 1)
        bad = d < -tol if increasing else d > tol
    if np.any(bad) or np.any(np.isnan(ys)):
        where = int(xs[1:][bad][0]) if np.any(bad) else int(xs[np.isnan(ys)][0])
        raise UsageError(f"the target is not {'non-decreasing' if increasing else 'non-increasing'} "
                         f"in '{unknown}' (it turns near {unknown}={where}), so no search can be trusted",
                         hint=f"use 'solve {'min' if increasing else 'max'}' or fix other inputs")


def _ordered(value) -> float:
    """An exact value as a float that keeps its order: beyond float64 an infinity, not a real
    number NaN."""
    if not value.is_Rational:
        return float("nan") if not value.is_extended_real else float(sympy.sign(value)) * float("inf")
    try:
        return float(value)
    except OverflowError:
        return float("inf") if value > 0 else float("-inf")


def _check_bits(f, sym, largest: int, target: str, unknown: str) -> None:
    """Refuse a target whose exact value would have more than ``MAX_BITS`` bits at some
    candidate (``(micro_batch + 768)^(2^39)``): estimated from the expression's shape (powers
    multiply the bits, products add them), before any power is computed."""
    memo: dict = {}

    def bits(e) -> int:  # an upper bound of the bits of e's numerator and denominator
        if id(e) not in memo:
            if e.is_Rational:
                memo[id(e)] = max(int(e.p).bit_length(), int(e.q).bit_length())
            elif e == sym:
                memo[id(e)] = largest.bit_length()
            elif e.is_Pow and e.exp.is_Rational:
                memo[id(e)] = bits(e.base) * max(1, abs(int(e.exp.p)))
            elif e.is_Mul or e.is_Pow:
                memo[id(e)] = sum(bits(a) for a in e.args)
            else:  # sums, ceil, max, piecewise: about their largest part
                memo[id(e)] = max((bits(a) for a in e.args), default=1) + len(e.args).bit_length()
        return memo[id(e)]

    if bits(f) > MAX_BITS:
        raise ResourceLimitError(f"'{target}' would have a value of more than {MAX_BITS:,} bits for some "
                                 f"{unknown} up to {largest:,}", hint="the rules multiply without bound")


def _active_branch(expr, point: dict):
    """``expr`` with every Piecewise replaced by its branch active at ``point`` (values of
    its symbols); one whose branch ``point`` does not decide stays."""
    def pick(pw):
        for value, cond in pw.args:
            try:
                taken = cond.xreplace(point)
            except TypeError:  # a comparison of a number that is not real
                return pw
            if taken == True:  # noqa: E712 (a sympy boolean)
                return value
            if taken != False:  # noqa: E712
                return pw
        return pw
    return expr.replace(lambda e: isinstance(e, sympy.Piecewise), pick)


def _smooth_in(expr, sym) -> bool:
    """Whether ``expr`` has no ceil, floor, max, min or piecewise part that depends on ``sym``
    (a ``ceiling(seq_len / 16)`` factor is fine when solving for micro_batch)."""
    rough = (sympy.ceiling, sympy.floor, sympy.Max, sympy.Min, sympy.Piecewise)
    return not any(isinstance(e, rough) and e.has(sym) for e in sympy.preorder_traversal(expr))


_BOUNDS: dict = {}  # (target, unknown, branch, scenario without the unknown and capacity) -> roots
_SIMPLE: dict = {}  # a root -> its simplified form (what is printed)
_CAP = sympy.Symbol("usable_memory", positive=True)  # what CUDA hands out (rule usable_memory)


def _closed_form(scenario, f, sym, unknown, target, capacity, direction, value, k, step):
    """A closed-form bound on the unknown as text (or why there is none), the whole value
    it gives at this scenario's numbers (None without one) and the bound as a relation.

    The bound is solved once per scenario without the capacity, with the capacity, the
    parameter count and the workload as symbols; its whole value comes from the same
    expression, so a bound that is printed is the bound that was checked."""
    none = f"{target}({unknown}) <= usable_memory"
    branch = _active_branch(f, {sym: value})
    if not _smooth_in(branch, sym):
        return f"none: {target} has ceil/floor/max in {unknown}; exact search over whole values", None, None
    key = (target, unknown, branch,
           frozenset((n, v) for n, v in scenario.values.items() if n not in (unknown, "capacity")))
    if key not in _BOUNDS:
        _BOUNDS[key] = _symbolic_roots(scenario, unknown, target, value)
    roots = _BOUNDS[key]
    if isinstance(roots, str):
        return f"{none} ({roots})", None, None
    lib = scenario.library
    numeric = {_CAP: capacity}
    for other in {s for r in roots for s in r.free_symbols} - {_CAP}:  # n_params, seq_len ...
        numeric[other] = scenario.evaluate(other.name) if other.name in lib.rules else scenario.values[other.name]
    real = []
    for r in roots:
        v = r.xreplace(numeric)
        if v.is_extended_real and v > 0:
            real.append((r, v))
    if step != "1" or not real:
        return none, None, None
    # the root on the active piece: the one nearest the answer
    root, v = min(real, key=lambda rv: abs(rv[1] - value))
    closed = int(sympy.floor(v / k) * k if direction == "max" else sympy.ceiling(v / k) * k)
    if root not in _SIMPLE:
        _SIMPLE[root] = sympy.simplify(root)
    op = "<=" if direction == "max" else ">="
    relation = sympy.Le if direction == "max" else sympy.Ge
    bound = relation(sympy.Symbol(unknown), _SIMPLE[root].xreplace({_CAP: sympy.Symbol("usable_memory")}),
                     evaluate=False)
    return f"{unknown} {op} {_written(root, _SIMPLE[root])}", closed, bound


def _written(root, simple) -> str:
    """A root as ``solve`` prints it: a quotient of two sums in memform's own form (the one
    the compiled path writes, :func:`engine.compile.columns.quotient_form`), else as sympy
    simplifies it."""
    num, den = sympy.fraction(sympy.cancel(root))
    p, q = from_sympy(num), from_sympy(den)
    if p is not None and q is not None:
        try:
            return quotient_form_text(*quotient_form(p, q))
        except Unsupported:
            pass
    return sympy.sstr(simple)


def _symbolic_roots(scenario, unknown, target, value):
    """The roots of ``target(unknown) = capacity`` on the branch active at ``value``, with
    the capacity, the parameter count and the workload as symbols (or why there are none)."""
    lib = scenario.library
    sym = lib._input_syms[unknown]
    keep = tuple(dict.fromkeys((unknown, "micro_batch", "seq_len")))
    expr = formula(scenario, target, keep=keep, opaque=("n_params",))
    point = {lib._input_syms[n]: scenario.values[n] for n in keep if n in scenario.values}
    expr = _active_branch(expr, {**point, sym: value})
    if not _smooth_in(expr, sym):
        return f"no closed form: ceil/floor/max in {unknown}"
    if expr.has(sympy.log, sympy.exp):  # sympy's simplify raises 3/2 to huge powers combining logs
        return "no closed form: a logarithm in the target"
    x = sympy.Dummy(unknown, positive=True)
    try:
        roots = sympy.solve(sympy.Eq(expr.xreplace({sym: x}), _CAP), x)
    except (NotImplementedError, TypeError, ValueError):
        roots = []
    roots = [r for r in roots if not r.has(x)]
    return roots or "sympy finds no closed form"


def _not_real(scenario, target, unknown, x) -> DomainError:
    """The error for a target that is not a real number at ``unknown = x``: the exact
    evaluation's own, which names the rule that leaves the reals, where it raises one."""
    try:
        scenario.with_values(**{unknown: x}).evaluate(target)
    except TypeError:  # sympy cannot order a number that is not real (zoo > 2)
        pass
    return DomainError(f"'{target}' is not a real number at {unknown}={x}",
                       hint="a rule takes the square root or logarithm of a negative number, or divides by zero")


def _infeasible(scenario, target, unknown, x, need, capacity, direction) -> InfeasibleError:
    at_x = scenario.with_values(**{unknown: x})
    parts = {n: at_x.evaluate(n) for n in components(at_x.library, target)}
    largest = max(parts, key=lambda n: parts[n]) if parts else target
    where = _where(unknown, x, direction)
    return InfeasibleError(
        f"does not fit {where}: {target} needs {_fmt(need)} > usable memory {_fmt(capacity)}; "
        f"the largest part is {largest} ({_gb(parts.get(largest, need))} GB)")
