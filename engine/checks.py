"""Testing the library's ``check`` invariants on every model preset.

Each check is composed once into two expressions over inputs and option codes,
compiled with :func:`compile_expr` (lambdify to numpy), and evaluated on a sample of
scenarios per model preset: inputs the preset leaves open are drawn log-uniformly within
their domain, options the preset leaves open are drawn over all their choices, except
architecture names (those some model preset sets), which keep their defaults.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import sympy
from sympy.printing.numpy import NumPyPrinter

from .registry import Library
from .rules import CheckDecl, InputDecl, OptionDecl


class _Printer(NumPyPrinter):
    """NumPy printer whose Max/Min broadcast scalars against arrays and whose Piecewise
    works with boolean branches."""

    def _print_Max(self, expr):
        return "numpy.maximum.reduce(numpy.broadcast_arrays({}))".format(
            ", ".join(self._print(a) for a in expr.args))

    def _print_Piecewise(self, expr):
        # nested numpy.where: unlike numpy.select it accepts the scalar True of the last
        # branch and keeps boolean branches boolean
        result = "numpy.nan"
        for value, cond in reversed(expr.args):
            result = (self._print(value) if cond == True
                      else f"numpy.where({self._print(cond)}, {self._print(value)}, {result})")
        return result

    def _print_Min(self, expr):
        return "numpy.minimum.reduce(numpy.broadcast_arrays({}))".format(
            ", ".join(self._print(a) for a in expr.args))


def compile_expr(expr: sympy.Basic, symbols: list[sympy.Symbol]):
    """A vectorised numpy function of ``symbols`` computing ``expr`` (float64)."""
    return sympy.lambdify(symbols, expr, modules="numpy", printer=_Printer, cse=True)


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


def run_check(lib: Library, check, lhs, rhs, where, samples: int = 2000, seed: int = 0) -> CheckResult:
    """Evaluate one resolved check on ``samples`` scenarios per model preset."""
    rng = np.random.default_rng(seed)
    total = 0
    # names some model preset sets describe the architecture: a preset that leaves one
    # unset means its default (a dense model has num_experts = 0), so it is not sampled
    architecture = {n for (kind, _), p in lib.presets.items() if kind == "model" for n, _, _ in p.settings}
    for (kind, name), preset in sorted(lib.presets.items()):
        if kind != "model":
            continue
        fixed = {n: v for n, v, _ in preset.settings}
        pins = [(n, lib.check_value(n, v)) for n, v in fixed.items() if n in lib.rules]
        left, right = lib.compose_expr(lhs, pins), lib.compose_expr(rhs, pins)
        cond = lib.compose_expr(where, pins) if where is not sympy.true else sympy.true
        symbols = sorted((left.free_symbols | right.free_symbols | getattr(cond, "free_symbols", set())),
                         key=lambda s: s.name)
        columns = []
        for sym in symbols:
            decl = lib.decls[sym.name]
            if sym.name in fixed:
                value = lib.check_value(sym.name, fixed[sym.name])
                code = decl.code(value) if isinstance(decl, OptionDecl) else float(value)
                columns.append(np.full(samples, float(code)))
            elif sym.name in architecture and isinstance(decl, OptionDecl):
                columns.append(np.full(samples, float(decl.code(decl.default))))
            elif sym.name in architecture and decl.default is not None:
                columns.append(np.full(samples, float(lib.check_value(sym.name, decl.default))))
            elif isinstance(decl, OptionDecl):
                codes = [decl.code(c) for c in decl.choices]
                columns.append(rng.choice(codes, samples).astype(float))
            else:
                columns.append(_sample_input(decl, rng, samples))
        with np.errstate(all="ignore"):
            a = np.broadcast_to(np.asarray(compile_expr(left, symbols)(*columns), float), (samples,))
            b = np.broadcast_to(np.asarray(compile_expr(right, symbols)(*columns), float), (samples,))
            mask = (np.broadcast_to(np.asarray(compile_expr(cond, symbols)(*columns), bool), (samples,))
                    if cond is not sympy.true else np.ones(samples, bool))
        scale = np.maximum(np.abs(a), np.abs(b))
        tol = 1e-9 * scale + 1e-6
        op = check.op
        ok = {"==": np.abs(a - b) <= tol, "!=": np.abs(a - b) > tol, "<=": a <= b + tol,
              ">=": a + tol >= b, "<": a < b - tol, ">": a > b + tol}[op]
        ok &= np.isfinite(a) & np.isfinite(b)
        bad = np.nonzero(mask & ~ok)[0]
        total += int(mask.sum())
        if len(bad):
            i = bad[0]
            shown = []
            for sym, col in zip(symbols, columns):
                if sym.name in fixed:
                    continue
                decl = lib.decls[sym.name]
                shown.append(f"{sym.name}={decl.choice_of(int(col[i]))}" if isinstance(decl, OptionDecl)
                             else f"{sym.name}={col[i]:g}")
            return CheckResult(check, total, f"fails for {name} with {', '.join(shown)}: "
                                              f"{a[i]:.6g} {op} {b[i]:.6g} is false")
    return CheckResult(check, total)


def run_checks(lib: Library, samples: int = 2000) -> list[CheckResult]:
    """Every check of the library, each on ``samples`` scenarios per model preset."""
    return [run_check(lib, *item, samples=samples, seed=i) for i, item in enumerate(lib.lowered_checks)]
