"""Parse tree -> declarations: a lark Transformer that builds sympy objects by constructor.

No text is ever evaluated: numbers are read with :class:`fractions.Fraction`, names
become ``sympy.Symbol``s and functions come from the fixed :data:`FUNCTIONS` table.

Constant parts are closed over the language's domain as they are built: a constant is a
finite real number times a power of the byte unit (``1/3 B``), units combine only where
they make sense (no bytes in an exponent, no bytes added to a plain number), comparisons of
constants are decided here, and no constant grows past :data:`MAX_DIGITS` digits.  The
units of names are only known once the library is resolved (:mod:`engine.library.registry`).
"""
from __future__ import annotations

import math
import re
from typing import NamedTuple

import sympy
from lark import Token, Transformer, v_args

from ..errors import (DomainError, FormulaSyntaxError, ResourceLimitError, Span, UnitError,
                      UnknownNameError, did_you_mean)
from .rules import (At, BYTE, CheckDecl, DtypeDecl, InputDecl, Match, OptionDecl, PresetDecl,
                    RuleDecl, UNITS, split, unit_words)
from .units import BYTE_UNITS, MAX_DIGITS, read_decimal

FUNCTIONS = {
    "ceil": (sympy.ceiling, 1),
    "floor": (sympy.floor, 1),
    "min": (sympy.Min, None),
    "max": (sympy.Max, None),
    "sqrt": (sympy.sqrt, 1),
    "log2": (lambda x: sympy.log(x, 2), 1),
}


#: the largest constant exponent of a power whose base has names (hidden_size ^ 2); a
#: larger one would only stop, much later, at the evaluation's size limit
MAX_EXPONENT = 10_000
#: the largest q of a fractional exponent p/q (a q-th root): sympy's search for an exact root
#: of a large number runs for minutes when q is 10^8
MAX_ROOT_DEGREE = 64
#: the most digits of a constant whose root or logarithm is taken (sympy's exact root of a
#: 4,000-digit number takes a minute)
MAX_ROOT_DIGITS = 100

RELATIONS = {"==": sympy.Eq, "!=": sympy.Ne, "<=": sympy.Le, ">=": sympy.Ge,
             "<": sympy.Lt, ">": sympy.Gt}

RESERVED = {"if", "then", "else", "match", "and", "or", "not", "in", "where", "rule",
            "input", "option", "dtype", "check", "preset", "source", "override"}


def read_number(text: str) -> sympy.Rational:
    """The exact rational value of a NUMBER token (``70e9``, ``0.1``); ValueError when it
    has more than :data:`MAX_DIGITS` digits."""
    f = read_decimal(text)
    return sympy.Rational(f.numerator, f.denominator)


def _size(value: sympy.Expr) -> float:
    """About how many digits each unit of an exponent adds to a power of constant ``value``."""
    heights = [math.log10(max(abs(int(r.p)), int(r.q))) for r in value.atoms(sympy.Rational) if r != 0]
    return max(heights, default=0.0)


def _short(x) -> str:
    """A constant for a message (``2 B``), without writing out thousands of digits."""
    coeff, dim = split(x) or (x, 0)
    if dim != 0:
        return f"{_short(coeff)} {'B' if dim == 1 else f'B^{dim}'}"
    if x.is_Rational and max(int(x.p).bit_length(), int(x.q).bit_length()) > 100:
        return f"(a number of about {int(max(int(x.p).bit_length(), int(x.q).bit_length()) * 0.30103):,} digits)"
    return str(x)


def _bound(value):
    """A domain bound as declarations keep it: a number without its byte unit, or a name."""
    if value is None:
        return None
    return str(value) if isinstance(value, Token) else value.xreplace({BYTE: sympy.Integer(1)})


#: blanks and comments up to the '=' that starts a rule's expression
_BLANKS_TO_EQ = re.compile(r"(?:\s|#[^\n]*)*=")

#: :data:`MAX_DIGITS` in bits
_MAX_BITS = int(MAX_DIGITS / math.log10(2))


class _Domain(NamedTuple):
    lower: object  # a sympy number, a bound's name (Token) or None
    strict: bool
    upper: object
    end: int  # where the domain ends in the text


def unquote(tok: Token) -> str:
    return str(tok)[1:-1]


@v_args(inline=True)
class ToDecls(Transformer):
    """Builds declarations from one file's parse tree; ``path`` and ``text`` locate errors."""

    def __init__(self, path: str, text: str):
        super().__init__()
        self.path = path
        self.text = text
        self.lines = text.splitlines()
        self._names: dict[str, Span] = {}

    # ------------------------------------------------------------------ helpers
    def span(self, tok, length: int | None = None) -> Span:
        """The place of a token, or of a tree node's ``meta``."""
        line = getattr(tok, "line", None) or 1
        col = getattr(tok, "column", None) or 1
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        if length is None:
            if isinstance(tok, Token):
                length = len(str(tok))
            else:  # a Meta: up to its end, or to the end of its first line
                same = getattr(tok, "end_line", line) == line
                length = (tok.end_column - col) if same else len(text) - col + 1
        return Span(self.path, line, col, max(1, length), text)

    def _take_names(self) -> dict[str, Span]:
        names, self._names = self._names, {}
        return names

    def _unit(self, tok: Token) -> str:
        if str(tok) not in UNITS:
            raise UnknownNameError(f"unknown unit '{tok}'", self.span(tok),
                                   hint=did_you_mean(str(tok), UNITS) or "units are " + ", ".join(UNITS))
        return str(tok)

    def _check_name(self, tok: Token) -> str:
        if str(tok) in RESERVED:
            raise FormulaSyntaxError(f"'{tok}' is a keyword and cannot be a name", self.span(tok))
        return str(tok)

    # ------------------------------------------------------------------ file
    def start(self, *decls):
        return list(decls)

    # ------------------------------------------------------------------ declarations
    def dtype_decl(self, name, size, doc):
        self._take_names()
        if size.free_symbols != {BYTE}:
            raise FormulaSyntaxError("a dtype size needs a byte unit, e.g. '2 B'", self.span(name))
        return DtypeDecl(self._check_name(name), unquote(doc), self.span(name), size=size / BYTE)

    def input_decl(self, name, unit, domain, default, doc):
        self._take_names()
        lower, strict, upper, _ = domain or (None, False, None, 0)
        for bound in (lower, upper):
            if isinstance(bound, Token):
                raise FormulaSyntaxError(f"an input's bounds are numbers, not names like '{bound}'",
                                         self.span(bound), hint="a rule's domain may name an input or rule")
        return InputDecl(self._check_name(name), unquote(doc), self.span(name), unit=self._unit(unit),
                         lower=_bound(lower), lower_strict=strict, upper=_bound(upper), default=default)

    @v_args(meta=True)
    def at_least(self, meta, children):
        return _Domain(children[0], False, None, meta.end_pos)

    @v_args(meta=True)
    def above(self, meta, children):
        return _Domain(children[0], True, None, meta.end_pos)

    @v_args(meta=True)
    def between(self, meta, children):
        return _Domain(children[0], False, children[1], meta.end_pos)

    def bound_name(self, tok):
        return tok

    def option_decl(self, name, choices, default, doc):
        self._take_names()
        values = [str(c) for c in choices]
        numeric = all(c.type == "NUMBER" for c in choices)
        if not numeric and any(c.type == "NUMBER" for c in choices):
            raise FormulaSyntaxError("an option's choices are all names or all numbers", self.span(name))
        if len(set(values)) != len(values):
            raise FormulaSyntaxError(f"option '{name}' lists a choice twice", self.span(name))
        if str(default) not in values:
            raise UnknownNameError(f"default '{default}' is not a choice of option '{name}'",
                                   self.span(default), hint=did_you_mean(str(default), values))
        if numeric and not all(re.fullmatch(r"0|[1-9][0-9]{0,17}", v) for v in values):
            raise FormulaSyntaxError("numeric choices must be whole numbers", self.span(name),
                                     hint="written plainly, below 10^18: 0, 1, 2, not 1.0, 01 or 1e3")
        return OptionDecl(self._check_name(name), unquote(doc), self.span(name), choices=tuple(values),
                          default=str(default), numeric=numeric)

    def choices(self, *items):
        return list(items)

    def choice_name(self, tok):
        return tok

    def choice_int(self, tok):
        return tok

    @v_args(meta=True)
    def rule_decl(self, meta, children):
        override, name, unit, domain, expr, doc, source = children
        # the expression as written: from the '=' after the unit (and domain) up to the doc string
        eq = _BLANKS_TO_EQ.match(self.text, domain.end if domain else unit.end_pos).end()
        raw = self.text[eq:doc.start_pos]
        start = eq + (len(raw) - len(raw.lstrip()))
        line = self.text.count("\n", 0, start) + 1
        column = start - (self.text.rfind("\n", 0, start) + 1) + 1
        first_line = raw.strip().splitlines()[0] if raw.strip() else ""
        expr_span = Span(self.path, line, column, len(first_line), self.lines[line - 1])
        lower, strict, upper, _ = domain or (None, False, None, 0)
        return RuleDecl(self._check_name(name), unquote(doc), self.span(name), unit=self._unit(unit),
                        expr=expr, source=source, override=override is not None,
                        names=self._take_names(), text=" ".join(raw.split()), expr_span=expr_span,
                        lower=_bound(lower), lower_strict=strict, upper=_bound(upper))

    def source(self, tok):
        return unquote(tok)

    def check_decl(self, doc, lhs, op, rhs, where):
        return CheckDecl(unquote(doc), unquote(doc), self.span(doc), lhs=lhs, op=str(op), rhs=rhs,
                         where=where, names=self._take_names())

    def where(self, cond):
        return cond

    def preset_decl(self, kind, name, *rest):
        *settings, doc = rest
        self._take_names()
        settings = tuple(s for s in settings if s is not None)
        return PresetDecl(unquote(name), unquote(doc) if doc else "", self.span(name),
                          preset_kind=str(kind), settings=settings)

    def setting(self, name, value):
        return (str(name), value, self.span(name))

    def choice_name_value(self, tok):
        return str(tok)

    def signed_quantity(self, q):
        return -q

    # ------------------------------------------------------------------ expressions
    def quantity(self, number, unit):
        value = self._number(number)
        return value if unit is None else value * BYTE_UNITS[str(unit)] * BYTE

    def _number(self, tok: Token) -> sympy.Rational:
        try:
            return read_number(str(tok))
        except ValueError as exc:
            shown = str(tok) if len(tok) <= 40 else str(tok)[:20] + "..."
            raise ResourceLimitError(f"the number {shown} {exc}", self.span(tok)) from None

    def name(self, tok):
        self._names.setdefault(str(tok), self.span(tok))
        return sympy.Symbol(str(tok))

    @v_args(meta=True)
    def call(self, meta, children):
        fn, *args = children
        if str(fn) not in FUNCTIONS:
            raise UnknownNameError(f"unknown function '{fn}'", self.span(fn),
                                   hint=did_you_mean(str(fn), FUNCTIONS) or "functions are " + ", ".join(FUNCTIONS))
        func, arity = FUNCTIONS[str(fn)]
        if arity is not None and len(args) != arity:
            raise FormulaSyntaxError(f"'{fn}' takes {arity} argument, not {len(args)}", self.span(fn))
        if arity is None and len(args) < 2:
            raise FormulaSyntaxError(f"'{fn}' takes two or more arguments", self.span(fn))
        parts = [split(a) for a in args]
        if not all(parts):
            return self._checked(func(*args), meta)
        # constants: the function of the coefficients, in the unit it keeps
        if str(fn) in ("ceil", "floor", "min", "max"):
            dim = self._one_unit(parts, meta)
            return self._checked(func(*(c for c, _ in parts)) * BYTE**dim, meta)
        if str(fn) == "log2" and parts[0][1] != 0:
            raise UnitError(f"log2 takes a plain number, not {unit_words(parts[0][1])}", self.span(meta))
        self._root(parts[0][0], meta, "a root" if str(fn) == "sqrt" else "the logarithm")
        return self._checked(func(*args), meta)  # sqrt(4 B) is 2 B^(1/2)

    def at(self, target, *bindings):
        self._names.setdefault(str(target), self.span(target))
        flat = [x for pair in bindings for x in pair]
        return At(sympy.Symbol(str(target)), *flat)

    def binding(self, name, value):
        self._names.setdefault(str(name), self.span(name))
        return (sympy.Symbol(str(name)), value)

    @v_args(meta=True)
    def add(self, meta, children):
        return self._sum(meta, *children)

    @v_args(meta=True)
    def sub(self, meta, children):
        a, b = children
        return self._sum(meta, a, -b)

    def _sum(self, meta, a, b):
        parts = [split(a), split(b)]
        if not all(parts):
            return self._checked(a + b, meta)
        dim = self._one_unit(parts, meta)
        return self._checked((parts[0][0] + parts[1][0]) * BYTE**dim, meta)

    @v_args(meta=True)
    def mul(self, meta, children):
        a, b = children
        return self._checked(a * b, meta)

    @v_args(meta=True)
    def div(self, meta, children):
        a, b = children
        return self._checked(a / b, meta)

    def neg(self, a):
        return -a

    @v_args(meta=True)
    def pow(self, meta, children):
        a, b = children
        base, exp = split(a), split(b)
        if exp is None:
            raise ResourceLimitError(f"the exponent of '{self._source(meta)}' must be a constant number",
                                     self.span(meta), hint="a power with a variable exponent has no bound on its size")
        if exp[1] != 0 and exp[0] != 0:
            raise UnitError(f"an exponent is a plain number, not {unit_words(exp[1])}", self.span(meta),
                            hint="a unit belongs to the number just before it: 2^3 B is 2^(3 B); "
                                 "write 8 B, or 2^3 * 1 B")
        b = exp[0]
        if not b.is_Integer and b.q > MAX_ROOT_DEGREE:
            degree = f"{b.q:,}" if b.q < 10**6 else f"a {len(str(b.q))}-digit number"
            raise ResourceLimitError(f"the exponent of '{self._source(meta)}' takes a root of degree {degree}; "
                                     f"the limit is {MAX_ROOT_DEGREE}", self.span(meta),
                                     hint="a fractional exponent p/q takes a q-th root: 0.5, 1/3 or 0.25 are fine")
        if base is None:
            if abs(b) > MAX_EXPONENT:
                raise ResourceLimitError(f"the exponent of '{self._source(meta)}' is more than {MAX_EXPONENT:,}",
                                         self.span(meta), hint="the value would be far too large to compute")
        elif base[0] not in (0, 1, -1) and (abs(b) > MAX_DIGITS or abs(b) * _size(base[0]) > MAX_DIGITS):
            shown = str(a) if a.is_Integer and a > 0 else f"({_short(a)})"
            raise ResourceLimitError(f"{shown}^{_short(b)} has more than {MAX_DIGITS:,} digits", self.span(meta))
        elif not b.is_Integer:
            self._root(base[0], meta, "a root")
        return self._checked(a**b, meta)

    @v_args(meta=True)
    def if_expr(self, meta, children):
        cond, then, other = children
        parts = [split(then), split(other)]
        if all(parts):
            self._one_unit(parts, meta)
        return sympy.Piecewise((then, cond), (other, True))

    def match_expr(self, option, *arms):
        self._names.setdefault(str(option), self.span(option))
        flat = []
        for choice, value in (a for a in arms if a is not None):
            key = sympy.Symbol(str(choice)) if choice.type == "NAME" else self._number(choice)
            flat += [key, value]
        return Match(sympy.Symbol(str(option)), *flat)

    def arm(self, choice, value):
        return (choice, value)

    @v_args(meta=True)
    def compare(self, meta, children):
        a, op, b = children
        parts = [split(a), split(b)]
        if not all(parts):  # names: resolved (and compared) with the library
            return RELATIONS[str(op)](a, b, evaluate=False)
        self._one_unit(parts, meta)
        decided = RELATIONS[str(op)](parts[0][0], parts[1][0])
        if decided not in (sympy.true, sympy.false):
            raise DomainError(f"'{self._source(meta)}' cannot be decided exactly", self.span(meta))
        return decided

    def member(self, option, choices):
        self._names.setdefault(str(option), self.span(option))
        sym = sympy.Symbol(str(option))
        keys = [sympy.Symbol(str(c)) if c.type == "NAME" else self._number(c) for c in choices]
        return sympy.Or(*[sympy.Eq(sym, k, evaluate=False) for k in keys])

    def or_(self, a, b):
        return sympy.Or(a, b)

    def and_(self, a, b):
        return sympy.And(a, b)

    def not_(self, a):
        return sympy.Not(a)

    # ------------------------------------------------------------------ the domain of constants
    def _source(self, meta) -> str:
        """The text of a tree node, on one line."""
        return " ".join(self.text[meta.start_pos:meta.end_pos].split())

    def _one_unit(self, parts, meta):
        """The power of bytes that constants ``parts`` share (a zero takes any unit)."""
        dims = list(dict.fromkeys(d for c, d in parts if c != 0))
        if len(dims) > 1:
            raise UnitError(f"cannot combine {unit_words(dims[0])} and {unit_words(dims[1])}",
                            self.span(meta), hint="give each number its unit: 2 B, not 2")
        return dims[0] if dims else 0

    def _root(self, value, meta, what: str):
        if _size(value) > MAX_ROOT_DIGITS:
            raise ResourceLimitError(f"'{self._source(meta)}' takes {what} of a number of more than "
                                     f"{MAX_ROOT_DIGITS} digits", self.span(meta))

    def _checked(self, value, meta):
        """``value``, unless a constant in it is not a finite real number or is too large."""
        if value.has(sympy.zoo, sympy.oo, -sympy.oo, sympy.nan):
            raise DomainError(f"'{self._source(meta)}' is not a finite number", self.span(meta))
        part = split(value)
        if value.has(sympy.I) or (part and part[0].is_extended_real is False):
            raise DomainError(f"'{self._source(meta)}' is not a real number", self.span(meta))
        coeff = value.as_coeff_Mul()[0]
        if coeff.is_Rational and max(int(coeff.p).bit_length(), int(coeff.q).bit_length()) > _MAX_BITS:
            raise ResourceLimitError(f"'{self._source(meta)}' has more than {MAX_DIGITS:,} digits",
                                     self.span(meta))
        return value
