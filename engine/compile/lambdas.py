"""Composed sympy expressions as vectorised numpy functions: the sweeps of
:meth:`engine.compile.model.Scenario.sweep`, the sampled checks of a user's rule files and the
searches of ``solve`` and ``plan``.

The expression becomes trees (:func:`engine.compile.totrees.sympy_program`: every
subexpression it uses more than once a step of its own) and the trees a program printed by
the numpy backend of :mod:`engine.compile.codegen`, the compiler the exact evaluator and the
web calculator's JavaScript share."""
from __future__ import annotations

import numpy as np
import sympy

from .codegen import PythonExact, Specialiser, load_python
from .totrees import sympy_program


class Numpy(PythonExact):
    """Vectorised float64 numpy: every branch computed and selected with ``where`` (a
    division by zero in a branch not taken is not an error), what cannot be computed NaN."""

    lazy = False
    divides = True
    floats = True

    def quotient(self, num, den):
        top = " * ".join(num) if num else "1.0"
        return f"({top} / " + (den[0] if len(den) == 1 else "(" + " * ".join(den) + ")") + ")"

    def const(self, value) -> str:
        if value is True or value is False:
            return repr(value)
        f = float(value)  # OverflowError past float64's range: the caller says so
        return repr(f) if f >= 0 else f"({f!r})"

    def power(self, x, e):
        if e >= 0:
            return f"({x} ** {e})"
        return f"(1.0 / {x})" if e == -1 else f"(1.0 / {x} ** {-e})"

    def root(self, x, e): return f"_np.power({x}, {float(e)!r})"
    def log(self, x): return f"_np.log({x})"

    def extreme(self, op, xs): return self._fold("_np.maximum" if op == "max" else "_np.minimum", xs)
    def logic(self, op, xs): return self._fold("_np.logical_and" if op == "and" else "_np.logical_or", xs)

    def negation(self, x): return f"_np.logical_not({x})"
    def rounding(self, op, x): return f"_np.{op}({x})"
    def fail(self, message): return "_NAN"

    def select(self, arms, otherwise):
        out = otherwise
        for c, v in reversed(arms):
            out = f"_np.where({c}, {v}, {out})"
        return out

    def namespace(self) -> dict:
        return {"_np": np, "_NAN": np.nan}


def compile_expr(expr: sympy.Basic, symbols: list[sympy.Symbol]):
    """A vectorised numpy function of ``symbols`` (positional arrays, in order) computing
    ``expr`` in float64: branches are selected with ``where`` (a division by zero in a
    branch not taken is not an error, evaluated under ``numpy.errstate``), what has no
    float value (nan, zoo) is NaN."""
    if isinstance(expr, bool):
        expr = sympy.true if expr else sympy.false
    elif isinstance(expr, int):
        expr = sympy.Integer(expr)
    rules, tree = sympy_program(expr, symbols)
    varying = tuple(f"x{i}" for i in range(len(symbols)))
    program = Specialiser(rules, {}, varying, {})
    out = program.node(tree, program.top, frozenset())
    fn = load_python(Numpy(), program.steps, [out], len(varying))
    return lambda *args: fn(*args)[0]


def real_values(values, shape) -> np.ndarray:
    """``values`` from a compiled expression (an array, or a scalar where the expression is
    constant) as floats of ``shape``; the programs compute in float64 throughout (a root or
    logarithm of a negative number is NaN, never complex)."""
    return np.broadcast_to(np.asarray(values, float), shape)
