"""Values given to names: preset settings and ``--set NAME=VALUE`` arguments."""
from __future__ import annotations

import sympy

from .errors import DomainError, Span, UnitError, UnknownNameError, did_you_mean
from .rules import BYTE, UNITS, DtypeDecl, InputDecl, OptionDecl, RuleDecl


def validate(lib, name: str, value, span: Span | None = None):
    """Check ``value`` for ``name`` and return it exactly: an option's choice (str) or a
    sympy Rational for an input or a pinned rule (byte units removed)."""
    decl = lib.decls.get(name)
    if decl is None:
        settable = [n for n, d in lib.decls.items() if not isinstance(d, DtypeDecl)]
        raise UnknownNameError(f"unknown name '{name}'", span, hint=did_you_mean(name, settable))
    if isinstance(decl, DtypeDecl):
        raise DomainError(f"'{name}' is a dtype; its size is fixed", span)
    if isinstance(value, sympy.Symbol) and value != BYTE:
        value = value.name
    if isinstance(decl, OptionDecl):
        choice = str(value) if not isinstance(value, str) and getattr(value, "is_Integer", False) else value
        if not isinstance(choice, str) or choice not in decl.choices:
            raise DomainError(f"'{_show(value)}' is not a choice of option '{name}'", span,
                              hint=(did_you_mean(str(choice), decl.choices) or "")
                              + (" " if did_you_mean(str(choice), decl.choices) else "")
                              + "choices are " + ", ".join(decl.choices))
        return choice
    if isinstance(value, str):
        raise DomainError(f"'{name}' takes a number, not '{value}'", span,
                          hint=f"e.g. {name}={_example(decl)}")
    if not isinstance(value, sympy.Basic) or value.free_symbols - {BYTE}:
        raise DomainError(f"the value of '{name}' must be a constant", span)
    dim = sympy.Poly(value, BYTE).degree() if value.has(BYTE) else 0
    want = UNITS[decl.unit][0]
    if dim != want and not (want == 1 and dim == 0):
        raise UnitError(f"'{name}' is in {decl.unit} but the value is in "
                        f"{'bytes' if dim == 1 else 'a plain number'}", span)
    number = value.xreplace({BYTE: 1})
    if not number.is_Rational:
        raise DomainError(f"the value of '{name}' is not a finite number: {number}", span)
    if isinstance(decl, InputDecl):
        if decl.integer and not number.is_Integer:
            raise DomainError(f"'{name}' must be a whole number, not {_num(number)}", span)
        low_ok = decl.lower is None or (number > decl.lower if decl.lower_strict else number >= decl.lower)
        high_ok = decl.upper is None or number <= decl.upper
        if not (low_ok and high_ok):
            raise DomainError(f"'{name}' must be {decl.domain_text()}, not {_num(number)}", span,
                              hint=f"declared at {decl.span.file}:{decl.span.line}: {decl.doc}")
    elif isinstance(decl, RuleDecl):
        if UNITS[decl.unit][1] and not number.is_Integer:
            raise DomainError(f"'{name}' is a whole number ({decl.unit}), not {_num(number)}", span)
        if number < 0:
            raise DomainError(f"'{name}' cannot be negative", span)
    return number


def _num(x) -> str:
    return str(x) if x.is_Integer else f"{float(x):g}"


def _show(value) -> str:
    return value if isinstance(value, str) else _num(value) if getattr(value, "is_Rational", False) else str(value)


def _example(decl) -> str:
    return "8" if decl.unit != "bytes" else "80GB"
