"""Constant values in the rule language, exactly and without sympy: a ``--set`` value parsed
by the grammar and folded in :class:`fractions.Fraction` arithmetic (:func:`parse_value`),
and the limits every exact path shares.  What this cannot decide exactly raises
:class:`Unsupported`, and the full path (sympy) answers instead."""
from __future__ import annotations

import math
import operator
from fractions import Fraction

from .grammar import value_parser
from .units import BYTE_UNITS, read_decimal, unit_words

#: the most bits an exact value may have (as :data:`engine.compile.model.MAX_BITS`)
MAX_BITS = 100_000
#: the largest value, and the finest fraction's denominator, a name may be given (as
#: :data:`engine.lang.values.MAX_VALUE`)
MAX_VALUE = 10**30


class Unsupported(Exception):
    """The fast path cannot answer exactly as the full path would; the full path answers."""


class UnitMisuse(Unsupported):
    """Constant arithmetic that mixes bytes with plain numbers or puts a unit in an exponent;
    the full path misses it only where a zero drops its unit (``0 GiB``)."""


def parse_value(text: str, units: bool = False):
    """A ``--set`` value through the rule language's grammar: a choice name (str) or an
    exact number with its power of bytes, ``(Fraction, dim)``; only constant arithmetic.

    ``units``: also through min, max, ceil and floor, and powers of 0 and 1 with any exponent,
    whose values are exact too: the unit check of :func:`engine.compile.model.parse_setting`, for the
    zeros whose unit sympy drops."""
    runtime, parser = _parser()

    @runtime.v_args(inline=True)
    class Constant(runtime.Transformer):
        def __default__(self, data, children, meta):
            raise Unsupported(f"'{data}' in a value")

        def quantity(self, number, unit):
            value = read_decimal(str(number))  # ValueError (-> Unsupported) when too large to build
            return (value, 0) if unit is None else (value * BYTE_UNITS[str(unit)], 1)

        def name(self, tok):
            return str(tok)

        def add(self, a, b):
            return _same(a, b, a[0] + b[0])

        def sub(self, a, b):
            return _same(a, b, a[0] - b[0])

        def mul(self, a, b):
            return (_sized(_num(a))[0] * _sized(_num(b))[0], a[1] + b[1])

        def div(self, a, b):
            if _num(b)[0] == 0:
                raise Unsupported("division by zero")
            return (_num(a)[0] / b[0], a[1] - b[1])

        def neg(self, a):
            return (-_num(a)[0], a[1])

        def pow(self, a, b):
            if _num(b)[1] != 0:
                raise UnitMisuse("an exponent is a plain number, not bytes")
            if units and _num(a)[0] in (0, 1) and b[0] > 0:  # 0^q = 0, 1^q = 1: the unit's power q
                return (a[0], a[1] * b[0])
            if b[0].denominator != 1 or abs(b[0]) > 64 or (_num(a)[0] == 0 and b[0] < 0):
                raise Unsupported("a power the full path checks")
            return (_sized(a)[0] ** int(b[0]), a[1] * int(b[0]))

        # units: constant conditions are decided, so that the arms are checked too (fuzzer seed
        # 1251: '8 MiB ^ 0 GB' inside an if escaped the check of the zeros that keep their unit)
        def compare(self, a, op, b):
            if not units:
                raise Unsupported("a condition in a value")
            _same(a, b, None)
            return _RELATIONS[str(op)](a[0], b[0])

        def or_(self, a, b):
            return _truth(a) or _truth(b)

        def and_(self, a, b):
            return _truth(a) and _truth(b)

        def not_(self, a):
            return not _truth(a)

        def if_expr(self, cond, then, other):
            _same(then, other, None)  # the arms in one unit, whichever is taken
            return then if _truth(cond) else other

        def call(self, fn, *args):
            if not units or str(fn) not in ("min", "max", "ceil", "floor", "log2", "sqrt"):
                raise Unsupported(f"'{fn}' in a value")
            if str(fn) in ("log2", "sqrt"):  # exact where the value is (log2(1) = 0 drops a unit too)
                return _exact_log2(_num(args[0])) if str(fn) == "log2" else _exact_sqrt(_num(args[0]))
            if str(fn) in ("min", "max"):
                first = _num(args[0])
                for other in args[1:]:
                    _same(first, other, None)
                values = [x[0] for x in args]
                return (min(values) if str(fn) == "min" else max(values), first[1])
            value, dim = _num(args[0])
            return (Fraction(math.ceil(value) if str(fn) == "ceil" else math.floor(value)), dim)

    if len(text) > 10_000:
        raise Unsupported("too long")
    try:
        return Constant().transform(parser.parse(text, start="expr"))
    except Unsupported:
        raise
    except runtime.VisitError as exc:  # lark wraps what a callback raises
        if isinstance(exc.orig_exc, Unsupported):
            raise exc.orig_exc from None
        raise Unsupported(type(exc.orig_exc).__name__) from None
    except (runtime.LarkError, ValueError, ArithmeticError, RecursionError) as exc:  # a syntax error,
        raise Unsupported(type(exc).__name__) from None  # Unsupported wrapped by lark, a huge number


def _exact_log2(x):
    """log2 of a plain number that is a power of two, exactly; anything else the full path checks."""
    value, dim = x
    if dim != 0:
        raise UnitMisuse(f"log2 takes a plain number, not {unit_words(dim)}")
    if value <= 0 or value.numerator & (value.numerator - 1) or value.denominator & (value.denominator - 1):
        raise Unsupported("an irrational logarithm")
    return (Fraction(value.numerator.bit_length() - value.denominator.bit_length()), 0)


def _exact_sqrt(x):
    """The square root of a perfect square, exactly, in half the unit; else the full path checks."""
    value, dim = x
    if value < 0 or value.numerator.bit_length() > 4000 or value.denominator.bit_length() > 4000:
        raise Unsupported("a root the full path checks")
    top, bottom = math.isqrt(value.numerator), math.isqrt(value.denominator)
    if top * top != value.numerator or bottom * bottom != value.denominator:
        raise Unsupported("an irrational root")
    return (Fraction(top, bottom), Fraction(dim) / 2)


#: the rule language's relations over exact numbers (also engine.compile.exact's and engine.compile.columns')
_RELATIONS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
              ">": operator.gt, ">=": operator.ge}


def _truth(x):
    if not isinstance(x, bool):
        raise Unsupported("a condition the full path decides")
    return x


def _num(x):
    if isinstance(x, str):
        raise Unsupported("a name in arithmetic")
    return x


def _sized(x):
    """``x`` unless its number is past any value :func:`validate` accepts (the full path
    reports it), so that no arithmetic builds a huge one."""
    if not isinstance(x, str) and max(x[0].numerator.bit_length(), x[0].denominator.bit_length()) > 1000:
        raise Unsupported("a huge number")
    return x


def _same(a, b, value):
    if _num(a)[1] != _num(b)[1]:
        raise UnitMisuse("cannot combine bytes and a plain number")
    return (value, a[1])


_PARSER = None


def _parser():
    """``(runtime, parser)``: :func:`engine.lang.grammar.value_parser`, once per process."""
    global _PARSER
    if _PARSER is None:
        _PARSER = value_parser()
    return _PARSER
