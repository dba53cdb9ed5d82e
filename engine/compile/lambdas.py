"""Rules as vectorised numpy functions (sympy's lambdify with a printer of our own): the
sweeps of :meth:`engine.compile.model.Scenario.sweep`, the sampled checks and the searches of
``solve`` and ``plot``."""
from __future__ import annotations

import numpy as np
import sympy
from sympy.printing.numpy import NumPyPrinter


class _Printer(NumPyPrinter):
    """NumPy printer whose Max/Min broadcast scalars against arrays and whose Piecewise
    works with boolean branches."""

    def _print_Max(self, expr):
        return self._fold("numpy.maximum", expr.args)

    def _fold(self, fn: str, args) -> str:
        # pairwise calls broadcast scalars against arrays without building a stacked copy
        out = self._print(args[0])
        for a in args[1:]:
            out = f"{fn}({out}, {self._print(a)})"
        return out

    def _print_And(self, expr):
        return self._fold("numpy.logical_and", expr.args)

    def _print_Or(self, expr):
        return self._fold("numpy.logical_or", expr.args)

    def _print_Pow(self, expr, rational=False):
        if expr.exp == -1:
            return f"(1/({self._print(expr.base)}))"
        return super()._print_Pow(expr, rational=rational)

    def _print_Piecewise(self, expr):
        # nested numpy.where: unlike numpy.select it accepts the scalar True of the last
        # branch and keeps boolean branches boolean
        result = "numpy.nan"
        for value, cond in reversed(expr.args):
            result = (self._print(value) if cond == True
                      else f"numpy.where({self._print(cond)}, {self._print(value)}, {result})")
        return result

    def _print_Min(self, expr):
        return self._fold("numpy.minimum", expr.args)

    def _print_ComplexInfinity(self, expr):
        return "numpy.nan"  # zoo (a division by zero): not a real number, reported as such


def compile_expr(expr: sympy.Basic, symbols: list[sympy.Symbol]):
    """A vectorised numpy function of ``symbols`` computing ``expr`` (float64).

    The symbols are renamed first: lambdify puts every symbol's name in the namespace of
    the code it generates, so a user's input named ``numpy`` would hide the module."""
    private = [sympy.Symbol(f"_arg{i}") for i in range(len(symbols))]
    expr = _rename(expr, dict(zip(symbols, private))) if isinstance(expr, sympy.Basic) else expr
    return sympy.lambdify(private, expr, modules="numpy", printer=_Printer, cse=_cse, use_imps=False)


def _rename(expr: sympy.Basic, names: dict) -> sympy.Basic:
    """``expr.xreplace(names)`` with each distinct subexpression rebuilt once: a composed rule
    is a graph whose shared parts xreplace walks again at every use (exponential in the depth)."""
    done: dict = {}

    def walk(node):
        if node in done:
            return done[node]
        if node in names:
            new = names[node]
        elif not node.args:
            new = node
        else:
            args = [walk(a) for a in node.args]
            new = _rebuilt(node, args) if any(a is not b for a, b in zip(args, node.args)) else node
        done[node] = new
        return new
    return walk(expr)


def _rebuilt(node: sympy.Basic, args: list) -> sympy.Basic:
    """``node`` over new arguments without sympy's evaluation (renaming symbols changes
    nothing it would simplify; Piecewise re-folds its conditions, in unbounded time), except
    sums, products and powers: renamed symbols sort differently, and sympy's cse takes their
    arguments to be in canonical order (over an unevaluated, re-sorted product it substituted a
    wrong common factor: memform check reported a negative total for Granite 4.0-H Tiny)."""
    if node.func in (sympy.Add, sympy.Mul, sympy.Pow):
        return node.func(*args)
    try:
        return node.func(*args, evaluate=False)
    except TypeError:  # a class without the evaluate option
        return node.func(*args)


def _cse(exprs):
    """Common subexpressions in the order sympy's trees keep their arguments: cse's default
    re-sorts the arguments of every sum and product by their node counts, quadratic in the
    depth of a composed rule (a check over the serving rules ran for minutes)."""
    return sympy.cse(exprs, order="none", list=False)


def real_values(values, shape) -> np.ndarray:
    """``values`` from a compiled expression as floats of ``shape``; complex entries (a
    square root or logarithm of a negative number) become NaN, as numpy's own real ones do."""
    values = np.asarray(values)
    if np.iscomplexobj(values):
        values = np.where(values.imag == 0, values.real, np.nan)
    return np.broadcast_to(np.asarray(values, float), shape)
