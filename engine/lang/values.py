"""Values given to names: preset settings and ``--set NAME=VALUE`` arguments."""
from __future__ import annotations

import sympy

from ..errors import DomainError, Span, UnitError, UnknownNameError, did_you_mean
from .names import ALIASES, hint
from .rules import BYTE, DtypeDecl, InputDecl, OptionDecl, RuleDecl, UNITS, split, unit_words


def validate(lib, name: str, value, span: Span | None = None):
    """Check ``value`` for ``name`` and return it exactly: an option's choice (str) or a
    sympy Rational for an input or a pinned rule (byte units removed)."""
    decl = lib.decls.get(name)
    if decl is None:
        raise UnknownNameError(f"unknown name '{name}'", span, hint=hint(lib, name))
    if isinstance(decl, DtypeDecl):
        alias = ALIASES.get(name)
        raise DomainError(f"'{name}' is a dtype; its size is fixed", span, hint=alias.hint if alias else None)
    if isinstance(value, sympy.Symbol) and value != BYTE:
        value = value.name
    if isinstance(decl, OptionDecl):
        whole = not isinstance(value, str) and getattr(value, "is_Integer", False) and abs(value) < 10**18
        choice = str(value) if whole else value
        if not isinstance(choice, str) or choice not in decl.choices:
            close = did_you_mean(_show(value), decl.choices)
            raise DomainError(f"'{_show(value)}' is not a choice of option '{name}'", span,
                              hint=(f"{close} " if close else "") + "choices are " + ", ".join(decl.choices))
        return choice
    if isinstance(value, str):
        raise DomainError(f"'{name}' takes a number, not '{value}'", span,
                          hint=f"e.g. {name}={_example(decl)}")
    number, dim = _quantity(name, value, span)
    want = UNITS[decl.unit][0]
    if dim != want and not (want == 1 and dim == 0):
        raise UnitError(f"'{name}' is in {decl.unit} but the value is in {unit_words(dim)}", span,
                        hint="a unit belongs to the number just before it: 1/3 B is 1/(3 B); "
                             "write 1 B / 3" if dim < 0 else None)
    if UNITS[decl.unit][1] and not number.is_Integer:
        raise DomainError(f"'{name}' must be a whole number, not {_num(number)}" if isinstance(decl, InputDecl)
                          else f"'{name}' is a whole number ({decl.unit}), not {_num(number)}", span)
    check_domain(decl, number, span)
    if isinstance(decl, RuleDecl) and number < 0:  # a rule's unit implies it
        raise DomainError(f"'{name}' cannot be negative", span)
    return number


#: the largest size of a value, and the finest fraction (1 / MAX_VALUE): far beyond any
#: byte count or degree of parallelism, and far below what Python can print (4,300 digits)
MAX_VALUE = 10**30


def _quantity(name: str, value, span: Span | None):
    """``value`` (a constant, perhaps with a byte unit) as a finite rational of a sane size,
    and its power of bytes."""
    if not isinstance(value, sympy.Expr) or value.free_symbols - {BYTE}:
        raise DomainError(f"the value of '{name}' must be a constant", span)
    parts = split(value)
    if parts is None:
        raise UnitError(f"the value of '{name}' adds bytes to a plain number", span)
    number, dim = parts
    if number.has(sympy.zoo, sympy.oo, -sympy.oo, sympy.nan):
        raise DomainError(f"the value of '{name}' is not a finite number", span)
    if number.is_extended_real is False:
        raise DomainError(f"the value of '{name}' is not a real number", span)
    if not number.is_Rational:
        raise DomainError(f"the value of '{name}' is not a rational number: {_show(number)}", span,
                          hint="exact values are whole numbers or fractions (sqrt and log2 seldom give one)")
    if abs(number) > MAX_VALUE:
        raise DomainError(f"the value of '{name}' is too large: {_num(number)}", span,
                          hint="values are at most 10^30")
    if number.q > MAX_VALUE:
        raise DomainError(f"the value of '{name}' is too fine a fraction: {_num(number)}", span,
                          hint="denominators are at most 10^30")
    return number, dim


def check_domain(decl, number, span: Span | None = None, bounds=None):
    """Raise :class:`DomainError` unless ``number`` lies in the declared domain of ``decl``
    (an input or rule).  A bound that names an input or rule is checked only when ``bounds``
    maps that name to its value in the scenario at hand; :func:`validate` cannot know it.

    Examples
    --------
    >>> from engine.lang.parser import parse_text
    >>> (d,) = parse_text('rule s : count in [0, n] = n "s"')
    >>> check_domain(d, sympy.Integer(3), bounds={"n": sympy.Integer(2)})
    Traceback (most recent call last):
    ...
    engine.errors.DomainError: 's' must be >= 0 and <= n (n = 2), not 3
    hint: declared at <string>:1: s
    """
    bounds = bounds or {}
    value = {b: bounds.get(b) for b in (decl.lower, decl.upper) if isinstance(b, str)}
    lower = value[decl.lower] if isinstance(decl.lower, str) else decl.lower
    upper = value[decl.upper] if isinstance(decl.upper, str) else decl.upper
    low_ok = lower is None or (number > lower if decl.lower_strict else number >= lower)
    high_ok = upper is None or number <= upper
    if not (low_ok and high_ok):
        known = ", ".join(f"{b} = {_num(v)}" for b, v in value.items() if v is not None)
        raise DomainError(f"'{decl.name}' must be {decl.domain_text()}{f' ({known})' if known else ''}, "
                          f"not {_num(number)}", span, hint=f"declared at {decl.span.file}:{decl.span.line}: {decl.doc}")


def _num(x) -> str:
    """A number for a message; a huge one by its size (Python prints at most 4,300 digits)."""
    bits = max(int(x.p).bit_length(), int(x.q).bit_length())
    if bits > 300:
        return f"a number of about {int(bits * 0.30103):,} digits"
    return str(x) if x.is_Integer else f"{float(x):g}"


def _show(value) -> str:
    """A value for a message, cut short; never thousands of digits."""
    if isinstance(value, str) or getattr(value, "is_Rational", False):
        return value if isinstance(value, str) else _num(value)
    try:
        text = str(value)
    except ValueError:  # an integer past the 4,300 digits Python prints
        return "a value with a huge number in it"
    return text if len(text) <= 60 else text[:57] + "..."


def _example(decl) -> str:
    return "8" if decl.unit != "bytes" else "80GB"
