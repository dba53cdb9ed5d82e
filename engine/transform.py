"""Parse tree -> declarations: a lark Transformer that builds sympy objects by constructor.

No text is ever evaluated: numbers are read with :class:`fractions.Fraction`, names
become ``sympy.Symbol``s and functions come from the fixed :data:`FUNCTIONS` table.
"""
from __future__ import annotations

from fractions import Fraction

import sympy
from lark import Token, Transformer, v_args

from .units import BYTE_UNITS
from .errors import FormulaSyntaxError, ResourceLimitError, Span, UnknownNameError, did_you_mean
from .rules import (UNITS, BYTE, At, CheckDecl, DtypeDecl, InputDecl, Match, OptionDecl,
                    PresetDecl, RuleDecl)

FUNCTIONS = {
    "ceil": (sympy.ceiling, 1),
    "floor": (sympy.floor, 1),
    "min": (sympy.Min, None),
    "max": (sympy.Max, None),
    "sqrt": (sympy.sqrt, 1),
    "log2": (lambda x: sympy.log(x, 2), 1),
}


#: the most digits a constant power may have (10^10^10 would not fit in memory)
MAX_DIGITS = 10_000

RELATIONS = {"==": sympy.Eq, "!=": sympy.Ne, "<=": sympy.Le, ">=": sympy.Ge,
             "<": sympy.Lt, ">": sympy.Gt}

RESERVED = {"if", "then", "else", "match", "and", "or", "not", "in", "where", "rule",
            "input", "option", "dtype", "check", "preset", "source", "override"}


def read_number(text: str) -> sympy.Rational:
    """The exact rational value of a NUMBER token (``70e9``, ``0.1``)."""
    f = Fraction(text)
    return sympy.Rational(f.numerator, f.denominator)


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
        lower, strict, upper = domain or (None, False, None)
        strip = lambda v: None if v is None else v.xreplace({BYTE: 1})
        return InputDecl(self._check_name(name), unquote(doc), self.span(name), unit=self._unit(unit),
                         lower=strip(lower), lower_strict=strict, upper=strip(upper), default=default)

    def at_least(self, q):
        return (q, False, None)

    def above(self, q):
        return (q, True, None)

    def between(self, lo, hi):
        return (lo, False, hi)

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
        if numeric and any(Fraction(v).denominator != 1 for v in values):
            raise FormulaSyntaxError("numeric choices must be whole numbers", self.span(name))
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
        override, name, unit, expr, doc, source = children
        # the expression as written: from the '=' after the unit up to the doc string
        decl_text = self.text[meta.start_pos:doc.start_pos]
        eq = decl_text.index("=", decl_text.index(str(unit), decl_text.index(":")) + len(str(unit)))
        raw = decl_text[eq + 1:]
        start = meta.start_pos + eq + 1 + (len(raw) - len(raw.lstrip()))
        line = self.text.count("\n", 0, start) + 1
        column = start - (self.text.rfind("\n", 0, start) + 1) + 1
        first_line = raw.strip().splitlines()[0] if raw.strip() else ""
        expr_span = Span(self.path, line, column, len(first_line), self.lines[line - 1])
        return RuleDecl(self._check_name(name), unquote(doc), self.span(name), unit=self._unit(unit),
                        expr=expr, source=source, override=override is not None,
                        names=self._take_names(), text=" ".join(raw.split()), expr_span=expr_span)

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
        value = read_number(number)
        return value if unit is None else value * BYTE_UNITS[str(unit)] * BYTE

    def name(self, tok):
        self._names.setdefault(str(tok), self.span(tok))
        return sympy.Symbol(str(tok))

    def call(self, fn, *args):
        if str(fn) not in FUNCTIONS:
            raise UnknownNameError(f"unknown function '{fn}'", self.span(fn),
                                   hint=did_you_mean(str(fn), FUNCTIONS) or "functions are " + ", ".join(FUNCTIONS))
        func, arity = FUNCTIONS[str(fn)]
        if arity is not None and len(args) != arity:
            raise FormulaSyntaxError(f"'{fn}' takes {arity} argument, not {len(args)}", self.span(fn))
        if arity is None and len(args) < 2:
            raise FormulaSyntaxError(f"'{fn}' takes two or more arguments", self.span(fn))
        return func(*args)

    def at(self, target, *bindings):
        self._names.setdefault(str(target), self.span(target))
        flat = [x for pair in bindings for x in pair]
        return At(sympy.Symbol(str(target)), *flat)

    def binding(self, name, value):
        self._names.setdefault(str(name), self.span(name))
        return (sympy.Symbol(str(name)), value)

    def add(self, a, b):
        return a + b

    def sub(self, a, b):
        return a - b

    def mul(self, a, b):
        return a * b

    def div(self, a, b):
        return a / b

    def neg(self, a):
        return -a

    @v_args(meta=True)
    def pow(self, meta, children):
        a, b = children
        if a.is_Number and b.is_Number and abs(a) > 1 and (
                abs(b) > 10_000 or abs(b) * sympy.log(abs(a), 10) > MAX_DIGITS):
            raise ResourceLimitError(f"{a}^{b} has more than {MAX_DIGITS:,} digits", self.span(meta))
        return a**b

    def if_expr(self, cond, then, other):
        return sympy.Piecewise((then, cond), (other, True))

    def match_expr(self, option, *arms):
        self._names.setdefault(str(option), self.span(option))
        flat = []
        for choice, value in (a for a in arms if a is not None):
            key = sympy.Symbol(str(choice)) if choice.type == "NAME" else read_number(choice)
            flat += [key, value]
        return Match(sympy.Symbol(str(option)), *flat)

    def arm(self, choice, value):
        return (choice, value)

    def compare(self, a, op, b):
        return RELATIONS[str(op)](a, b, evaluate=False)

    def member(self, option, choices):
        self._names.setdefault(str(option), self.span(option))
        sym = sympy.Symbol(str(option))
        keys = [sympy.Symbol(str(c)) if c.type == "NAME" else read_number(c) for c in choices]
        return sympy.Or(*[sympy.Eq(sym, k, evaluate=False) for k in keys])

    def or_(self, a, b):
        return sympy.Or(a, b)

    def and_(self, a, b):
        return sympy.And(a, b)

    def not_(self, a):
        return sympy.Not(a)
