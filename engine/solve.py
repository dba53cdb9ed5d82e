"""Solving for one unknown: the best whole value that fits a capacity, and its closed form.

The answer always comes from an exact integer search over an expression checked to be
monotone in the unknown, so it never returns a value that does not fit.  The closed form
(``micro_batch <= (C - 11 P / 5 - ...) / (...)``) is derived by sympy on the piece of the
expression that is active at the answer, and is reported as the method only when its
floor (or ceiling) reproduces the searched answer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import sympy

from .errors import InfeasibleError, MissingInputError, UsageError
from .estimate import components, formula, whole_bytes
from .model import Scenario
from .rules import InputDecl

#: default divisibility constraints (Megatron requires them): unknown -> rules it must divide
DIVIDES = {"tp": ("num_attention_heads", "num_key_value_heads"), "pp": ("num_hidden_layers",)}
UPPER = 2**24


@dataclass(frozen=True)
class SolveResult:
    """The answer of :func:`solve`."""

    unknown: str
    direction: str
    value: int
    closed_form: str
    bytes_at_value: sympy.Rational
    bytes_at_next: sympy.Rational | None
    next_value: int | None
    method: str
    closed_value: int | None  # the closed form's bound evaluated, where sympy found one
    capacity: sympy.Rational
    target: str
    constraints: tuple[str, ...] = field(default_factory=tuple)

    def _repr_latex_(self) -> str:
        """The answer and its closed form as LaTeX (Jupyter)."""
        from .docs import solve_latex
        return solve_latex(self)

    def to_json(self) -> dict:
        return {"unknown": self.unknown, "value": self.value, "closed_form": self.closed_form,
                "bytes_at_value": whole_bytes(self.bytes_at_value),
                "bytes_at_next": None if self.bytes_at_next is None else whole_bytes(self.bytes_at_next),
                "next_value": self.next_value, "method": self.method, "direction": self.direction,
                "target": self.target, "capacity_bytes": whole_bytes(self.capacity),
                "constraints": list(self.constraints)}


def _fmt(value) -> str:
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
    decl = lib.decls.get(unknown)
    if not isinstance(decl, InputDecl) or not decl.integer:
        known = [n for n, d in lib.inputs.items() if d.integer]
        from .errors import did_you_mean
        raise UsageError(f"'{unknown}' is not a whole-number input that can be solved for",
                         hint=did_you_mean(unknown, known) or "e.g. micro_batch, seq_len, dp, tp, pp")
    if target not in lib.rules:
        lib.check_value(target, None)
    if "capacity" not in scenario.values:
        raise UsageError("solve needs a capacity", hint="give --gpu GPU or --capacity 80GB")
    capacity = scenario.values["capacity"]
    sym = lib._input_syms[unknown]
    f = scenario.expr(target, keep=(unknown,))
    extra = f.free_symbols - {sym}
    if extra:
        raise MissingInputError(f"'{target}' needs values for: " + ", ".join(sorted(s.name for s in extra)))
    lo = max(1, int(math.ceil(decl.lower))) if decl.lower is not None else 1

    def at(x: int) -> sympy.Rational:
        return f.xreplace({sym: sympy.Integer(x)})

    # candidate values: 1, 2, 3... or powers of two, times multiple_of
    if step not in ("1", "pow2"):
        raise UsageError(f"--step takes 1 or pow2, not '{step}'")
    k = multiple_of
    cand = (lambda i: k * 2**i) if step == "pow2" else (lambda i: k * i)
    i_lo = 0 if step == "pow2" else 1
    while cand(i_lo) < lo:
        i_lo += 1
    i_hi = max(i_lo, upper // k if step == "1" else (upper // k).bit_length() - 1)
    divides = [r for r in DIVIDES.get(unknown, ()) if divisibility]
    divisors = {r: scenario.evaluate(r) for r in divides}
    constraints = []
    if k > 1:
        constraints.append(f"{unknown} is a multiple of {k}")
    if step == "pow2":
        constraints.append(f"{unknown} is a power of two")
    constraints += [f"{unknown} divides {r} ({divisors[r]})" for r in divides]

    def valid(x: int) -> bool:
        return all((divisors[r] / x).is_Integer for r in divides)

    if divides:
        # finitely many candidates: evaluate each exactly (no monotonicity needed)
        limit = min([upper] + [int(divisors[r]) for r in divides])
        xs = [cand(i) for i in range(i_lo, i_hi + 1) if cand(i) <= limit and valid(cand(i))]
        fits = [x for x in xs if at(x) <= capacity]
        if not fits:
            worst = xs[-1] if direction == "min" else xs[0]
            raise _infeasible(scenario, target, unknown, worst, at(worst), capacity, direction)
        value = max(fits) if direction == "max" else min(fits)
        pos = xs.index(value)
        others = xs[pos + 1:] if direction == "max" else xs[:pos][::-1]
        nxt = others[0] if others else None
    elif direction == "max":
        _check_monotone(f, sym, cand(i_lo), cand(i_hi), True, unknown)
        if at(cand(i_lo)) > capacity:
            raise _infeasible(scenario, target, unknown, cand(i_lo), at(cand(i_lo)), capacity, direction)
        a, b = i_lo, i_hi  # invariant: cand(a) fits
        while a < b:
            mid = (a + b + 1) // 2
            a, b = (mid, b) if at(cand(mid)) <= capacity else (a, mid - 1)
        value = cand(a)
        nxt = cand(a + 1) if a < i_hi else None
    else:
        _check_monotone(f, sym, cand(i_lo), cand(i_hi), False, unknown)
        if at(cand(i_hi)) > capacity:
            raise _infeasible(scenario, target, unknown, cand(i_hi), at(cand(i_hi)), capacity, direction)
        a, b = i_lo, i_hi  # invariant: cand(b) fits
        while a < b:
            mid = (a + b) // 2
            a, b = (a, mid) if at(cand(mid)) <= capacity else (mid + 1, b)
        value = cand(b)
        nxt = cand(b - 1) if b > i_lo else None
    bytes_at = at(value)
    bytes_next = at(nxt) if nxt is not None else None
    text, closed = _closed_form(scenario, f, sym, unknown, target, capacity, direction, value, k, step)
    method = "closed-form" if closed == value and not divides else "search"
    return SolveResult(unknown, direction, value, text, bytes_at, bytes_next, nxt, method, closed,
                       capacity, target, tuple(constraints))


_MONOTONE: dict = {}  # (f, lo, hi, increasing) -> True: an expression checked once is not checked again


def _check_monotone(f, sym, lo: int, hi: int, increasing: bool, unknown: str) -> None:
    """Refuse to search an expression that is not monotone in the unknown (float check on a
    log-spaced grid of whole values)."""
    key = (f, lo, hi, increasing)
    if key in _MONOTONE:
        return
    _check_monotone_uncached(f, sym, lo, hi, increasing, unknown)
    _MONOTONE[key] = True


def _check_monotone_uncached(f, sym, lo, hi, increasing, unknown) -> None:
    from .checks import compile_expr
    xs = np.unique(np.concatenate([np.arange(lo, min(hi, lo + 64) + 1),
                                   np.floor(np.geomspace(max(lo, 1), max(hi, 1), 400))]))
    with np.errstate(all="ignore"):
        ys = np.broadcast_to(np.asarray(compile_expr(f, [sym])(xs), float), xs.shape)
    d = np.diff(ys)
    tol = 1e-9 * np.maximum(np.abs(ys[1:]), 1)
    bad = d < -tol if increasing else d > tol
    if np.any(bad) or not np.all(np.isfinite(ys)):
        where = int(xs[1:][bad][0]) if np.any(bad) else int(xs[0])
        raise UsageError(f"the target is not {'non-decreasing' if increasing else 'non-increasing'} "
                         f"in '{unknown}' (it turns near {unknown}={where}), so no search can be trusted",
                         hint=f"use 'solve {'min' if increasing else 'max'}' or fix other inputs")


def _active_branch(expr, sym, x0: int):
    """``expr`` with every Piecewise replaced by its branch active at ``sym = x0``."""
    def pick(pw):
        for value, cond in pw.args:
            if cond == True or bool(cond.xreplace({sym: x0})):
                return value
        return pw
    return expr.replace(lambda e: isinstance(e, sympy.Piecewise), pick)


_ROOTS: dict = {}  # smooth expression -> its roots as functions of the capacity C
_BOUNDS: dict = {}  # (target, unknown, direction, scenario without the unknown, branch) -> text
_VALUES: dict = {}  # (smooth, capacity, direction, ...) -> the closed form's whole value
_C = sympy.Symbol("C", positive=True)
_X = sympy.Symbol("x", positive=True)  # the unknown, as a real symbol sympy.solve can work with


def _roots(smooth, x):
    """Roots of ``smooth(x) = C`` with the capacity C symbolic: derived once per expression."""
    if smooth not in _ROOTS:
        try:
            _ROOTS[smooth] = sympy.solve(sympy.Eq(smooth, _C), x)
        except (NotImplementedError, TypeError, ValueError):
            _ROOTS[smooth] = []
    return _ROOTS[smooth]


def _closed_form(scenario, f, sym, unknown, target, capacity, direction, value, k, step):
    """A closed-form bound on the unknown (text) and the whole value it gives (or None)."""
    x = _X
    smooth = _active_branch(f, sym, value).xreplace({sym: x})
    if smooth.has(sympy.ceiling, sympy.floor, sympy.Max, sympy.Min, sympy.Piecewise):
        return f"none: {target} has ceil/floor/max in {unknown}; exact search over whole values", None
    vkey = (smooth, capacity, direction, k, step, value)
    if vkey not in _VALUES:
        roots = [r for r in (r.xreplace({_C: capacity}) for r in _roots(smooth, x)) if r.is_real and r > 0]
        closed = None
        if step == "1" and roots:
            # the root on the active piece: the one nearest the answer
            r = min(roots, key=lambda r: abs(r - value))
            closed = int(sympy.floor(r / k) * k if direction == "max" else sympy.ceiling(r / k) * k)
        _VALUES[vkey] = closed
    closed = _VALUES[vkey]
    # the same bound with the capacity, the parameter count and the workload as symbols
    key = (target, unknown, direction, smooth,
           frozenset((n, v) for n, v in scenario.values.items() if n not in (unknown, "capacity")))
    if key not in _BOUNDS:
        _BOUNDS[key] = _symbolic_bound(scenario, unknown, target, value, direction)
    return _BOUNDS[key], closed


def _symbolic_bound(scenario, unknown, target, value, direction) -> str:
    lib = scenario.library
    sym = lib._input_syms[unknown]
    keep = tuple(dict.fromkeys((unknown, "micro_batch", "seq_len")))
    expr = formula(scenario, target, keep=keep, opaque=("n_params",))
    expr = _active_branch(expr, sym, value)
    x = sympy.Dummy(unknown, positive=True)
    cap = sympy.Symbol("capacity", positive=True)
    op = "<=" if direction == "max" else ">="
    if expr.has(sympy.ceiling, sympy.floor, sympy.Max, sympy.Min, sympy.Piecewise):
        return f"{target}({unknown}) <= capacity (no closed form: ceil/floor/max in {unknown})"
    try:
        roots = sympy.solve(sympy.Eq(expr.xreplace({sym: x}), cap), x)
    except (NotImplementedError, TypeError, ValueError):
        roots = []
    if not roots:
        return f"{target}({unknown}) <= capacity"
    # choose the root that is positive at this scenario's capacity
    numeric = {cap: scenario.values["capacity"], sympy.Symbol("n_params"): scenario.evaluate("n_params")}
    for other in ("micro_batch", "seq_len"):
        if other != unknown:
            numeric[lib._input_syms[other]] = scenario.values[other]
    best = None
    for r in roots:
        v = r.xreplace(numeric)
        if v.is_real and v > 0:
            best = r
    best = best if best is not None else roots[-1]
    return f"{unknown} {op} {sympy.sstr(sympy.simplify(best))}"


def _infeasible(scenario, target, unknown, x, need, capacity, direction) -> InfeasibleError:
    at_x = scenario.with_values(**{unknown: x})
    parts = {n: at_x.evaluate(n) for n in components(at_x, target)}
    largest = max(parts, key=lambda n: parts[n]) if parts else target
    where = _where(unknown, x, direction)
    return InfeasibleError(
        f"does not fit {where}: {target} needs {_fmt(need)} > capacity {_fmt(capacity)}; "
        f"the largest part is {largest} ({float(parts.get(largest, need)) / 1e9:,.1f} GB)")
