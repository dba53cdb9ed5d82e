"""Declarations of the rule language, as frozen dataclasses (no lark import here).

Expressions are sympy objects built by :mod:`engine.lang.transform`; names in them are plain
``sympy.Symbol``s until :mod:`engine.library.registry` resolves them against the declarations.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import sympy

from ..errors import Span
from .units import UNITS, unit_words  # noqa: F401 (re-exported)


#: The unit symbol that byte literals (``4 B``, ``80 GB``) carry until units are checked.
BYTE = sympy.Symbol("B", positive=True)


def split(value: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr] | None:
    """``(coefficient, power of bytes)`` of a constant (``1/3 B`` -> ``(1/3, 1)``), or None
    for an expression with names."""
    if value.free_symbols - {BYTE}:
        return None
    coeff, dim = value.as_coeff_exponent(BYTE)
    return None if coeff.has(BYTE) else (coeff, dim)


class At(sympy.Function):
    """``target[name=value, ...]``: ``target`` with some names rebound (args alternate)."""

    @classmethod
    def eval(cls, *args):  # noqa: eval-ok (sympy.Function hook): stays unevaluated until applied
        return None


class Match(sympy.Function):
    """``match option { choice => expr, ... }``: args are option, then choice/expr pairs."""

    @classmethod
    def eval(cls, *args):  # noqa: eval-ok (sympy.Function hook)
        return None


@dataclass(frozen=True)
class Decl:
    name: str
    doc: str
    span: Span = field(compare=False, repr=False)

    @property
    def kind(self) -> str:
        return type(self).__name__.removesuffix("Decl").lower()


@dataclass(frozen=True)
class DtypeDecl(Decl):
    size: sympy.Rational = sympy.Integer(0)  # bytes per element


@dataclass(frozen=True)
class InputDecl(Decl):
    unit: str = "count"
    lower: sympy.Rational | None = None
    lower_strict: bool = False
    upper: sympy.Rational | None = None
    default: sympy.Expr | None = None  # may carry BYTE

    @property
    def integer(self) -> bool:
        return UNITS[self.unit][1]

    def symbol(self) -> sympy.Symbol:
        """The sympy symbol that stands for this input in resolved expressions."""
        positive = self.lower is not None and (self.lower > 0 or (self.lower == 0 and self.lower_strict))
        nonneg = self.lower is not None and self.lower >= 0
        return sympy.Symbol(self.name, integer=self.integer or None, positive=positive or None,
                            nonnegative=nonneg or None, real=True)

    def domain_text(self) -> str:
        return domain_text(self.lower, self.lower_strict, self.upper) or "any value"


@dataclass(frozen=True)
class OptionDecl(Decl):
    choices: tuple[str, ...] = ()
    default: str = ""
    numeric: bool = False  # choices are whole numbers (zero_stage)

    def code(self, choice: str) -> int:
        """The number that stands for ``choice`` (its value if numeric, else its index)."""
        return int(choice) if self.numeric else self.choices.index(choice)

    def choice_of(self, code: int) -> str:
        return str(code) if self.numeric else self.choices[code]

    def symbol(self) -> sympy.Symbol:
        return sympy.Symbol(self.name, integer=True, nonnegative=True)


@dataclass(frozen=True)
class RuleDecl(Decl):
    unit: str = "bytes"
    expr: sympy.Expr = sympy.Integer(0)
    source: str | None = None
    override: bool = False
    text: str = ""  # the expression as written
    names: Mapping[str, Span] = field(default_factory=dict, compare=False, repr=False)
    expr_span: Span | None = field(default=None, compare=False, repr=False)
    # the declared domain (``in [0, 1]``); a bound is a number or the name of an input or rule
    lower: sympy.Rational | str | None = None
    lower_strict: bool = False
    upper: sympy.Rational | str | None = None

    def domain_text(self) -> str:
        """The values a pin may take: the declared domain, or what the unit implies."""
        return domain_text(self.lower, self.lower_strict, self.upper) or ">= 0"

    def bound_names(self) -> list[str]:
        """The inputs and rules the domain's bounds name (known only in a scenario)."""
        return [b for b in (self.lower, self.upper) if isinstance(b, str)]


def domain_text(lower, strict: bool, upper) -> str:
    """``>= 1``, ``> 0 and <= 1``, ``>= 0 and <= num_hidden_layers``; empty for no bounds."""
    parts = []
    if lower is not None:
        parts.append(f"{'>' if strict else '>='} {lower}")
    if upper is not None:
        parts.append(f"<= {upper}")
    return " and ".join(parts)


@dataclass(frozen=True)
class CheckDecl(Decl):
    lhs: sympy.Expr = sympy.Integer(0)
    op: str = "=="
    rhs: sympy.Expr = sympy.Integer(0)
    where: sympy.Basic | None = None
    text: str = ""
    names: Mapping[str, Span] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class PresetDecl(Decl):
    preset_kind: str = "model"
    # (name, value, span): value is a sympy number (may carry BYTE) or a choice name (str)
    settings: tuple[tuple[str, object, Span], ...] = ()
