"""The formula column of ``memform estimate`` without sympy, where it is a polynomial.

The column shows each component with the scenario's values substituted, except the
workload's inputs (``micro_batch``, ``seq_len``) and the sizes that stay names (``n_params``,
``tensors`` ...).  For most scenarios what is left is a polynomial in those names with
rational coefficients: the options decide every ``match`` and ``if``, and every ``max``,
``min``, ``ceil`` and ``floor`` is over numbers.  :class:`Polynomials` computes it from the
compiled library (:func:`engine.compile.compiler.compile_library`) with exact arithmetic, as
:func:`engine.answers.estimate.formula` does with sympy, and declines (:class:`engine.lang.constants.Unsupported`)
the moment anything is not a polynomial: a condition on a kept name, a ``max`` over one, a
division by one.  Then the full path derives the column with sympy.

Both paths print a polynomial with :func:`text`, in sympy's graded order (``sympy.sstr(expr,
order="grlex")`` of the expanded polynomial), so the two columns are the same text whenever
the polynomials are equal; ``tests/test_fast.py`` holds the one to the other.

>>> text({(("micro_batch", 1), ("seq_len", 1)): Fraction(25304576, 5), (("n_params", 1),): Fraction(11, 5),
...       (): Fraction(4708194562, 5)})
'25304576*micro_batch*seq_len/5 + 11*n_params/5 + 4708194562/5'
>>> text({(("x", 2),): Fraction(-1), (("x", 1), ("y", 1)): Fraction(1, 2), (): Fraction(-3)})
'-x**2 + x*y/2 - 3'
"""
from __future__ import annotations

import math
from fractions import Fraction

from ..lang.constants import MAX_BITS, Unsupported, _RELATIONS
from ..lazy import lazy

sympy = lazy("sympy")  # only to read a sympy expression (from_sympy)

#: a polynomial: {monomial: coefficient}, a monomial a sorted tuple of (name, exponent)
Poly = dict

#: the highest degree and the most terms a column's polynomial may have (else sympy answers)
MAX_DEGREE = 16
MAX_TERMS = 256

def _const(c) -> Poly:
    c = Fraction(c)
    return {(): c} if c else {}


def _constant(p: Poly) -> Fraction:
    """The value of a polynomial without names; Unsupported for any other."""
    if any(m for m in p):
        raise Unsupported("a kept name where a number is needed")
    return p.get((), Fraction(0))


def value_at(p: Poly, point: dict) -> Fraction:
    """The value of a polynomial at ``point``; Unsupported where it names another name."""
    total = Fraction(0)
    for m, c in p.items():
        for n, e in m:
            if n not in point:
                raise Unsupported(f"'{n}' where a number is needed")
            c *= Fraction(point[n]) ** e
        total += c
    return total


def _add(p: Poly, q: Poly) -> Poly:
    out = dict(p)
    for m, c in q.items():
        s = out.get(m, 0) + c
        if s:
            out[m] = s
        else:
            out.pop(m, None)
    return out


def _neg(p: Poly) -> Poly:
    return {m: -c for m, c in p.items()}


def _monomial(a: tuple, b: tuple) -> tuple:
    exps = dict(a)
    for name, e in b:
        exps[name] = exps.get(name, 0) + e
    return tuple(sorted((n, e) for n, e in exps.items() if e))


def _mul(p: Poly, q: Poly) -> Poly:
    out: Poly = {}
    for m, c in p.items():
        for n, d in q.items():
            k = _monomial(m, n)
            s = out.get(k, 0) + c * d
            if s:
                out[k] = s
            else:
                out.pop(k, None)
    return _bounded(out)


def _bounded(p: Poly) -> Poly:
    if len(p) > MAX_TERMS or any(sum(e for _, e in m) > MAX_DEGREE for m in p):
        raise Unsupported("a polynomial too large to print")
    if any(c.numerator.bit_length() + c.denominator.bit_length() > MAX_BITS for c in p.values()):
        raise Unsupported("a coefficient too large")
    return p


def nonnegative(compiled: dict, keep) -> frozenset:
    """The kept inputs declared >= 0 (their sympy symbols are nonnegative): a max or min over
    them is decided from the coefficients alone (:meth:`Polynomials._extreme`)."""
    return frozenset(n for n in keep if n in compiled["inputs"]
                     and compiled["inputs"][n][2] is not None and compiled["inputs"][n][2] >= 0)


def whole_positive(compiled: dict, keep) -> frozenset:
    """The kept inputs whose sympy symbols are positive integers (so at least 1): a max or min
    of one term in them and a number is decided (:meth:`Polynomials._at_least`)."""
    return frozenset(n for n in nonnegative(compiled, keep) if compiled["inputs"][n][1]
                     and (compiled["inputs"][n][2] > 0 or compiled["inputs"][n][3]))


class Polynomials:
    """Rules as polynomials in the names ``keep`` (inputs) and ``opaque`` (rules that stay
    names), the other values of ``compiled``'s inputs and options fixed as in ``fixed`` (option
    codes, numbers) and the rules in ``pins`` pinned: :func:`engine.answers.estimate.formula`'s
    expansion, rule by rule."""

    def __init__(self, compiled: dict, fixed: dict, pins: dict, keep: tuple, opaque: tuple, then: tuple = (),
                 point: dict | None = None):
        self.rules = compiled["rules"]
        self.pins = {n: _const(v) for n, v in pins.items()}
        self.opaque = frozenset(opaque)
        self.env = {n: _const(v) for n, v in fixed.items() if n not in keep}
        self.env.update({n: {((n, 1),): Fraction(1)} for n in keep})
        self.memo: dict = {}  # the rules written out in env (an opaque one only as asked for)
        self.nonnegative = nonnegative(compiled, keep)
        self.whole_positive = whole_positive(compiled, keep)
        # what :meth:`then` shares: the expansions that met no name opaque here but not in ``then``
        self._later = frozenset(then)
        self._met = 0  # names met that stay names here and not in ``then``
        self._own: set = set()  # memo entries that hold one of them (this object's alone)
        #: every input, option and rule the expansions so far have read: the values they depend on
        self.read: set = set()
        #: values of kept names that decide a condition on them (the branch active there, as
        #: :func:`engine.answers.solve._active_branch` takes it); None: such a condition is declined
        self.point = point

    def then(self) -> "Polynomials":
        """The same rules with only the names ``then`` (given when this was made) opaque: the
        expansions already written out that hold no other opaque name are the same there, and
        are shared (the total's column inlines what the components' columns keep as names)."""
        other = type(self).__new__(type(self))
        other.__dict__.update(self.__dict__)
        other.opaque = self._later
        other.memo = {n: p for n, p in self.memo.items() if n not in self._own}
        other._met, other._own = 0, set()
        return other

    def _name(self, name: str) -> Poly:
        """``name`` kept as a name."""
        if name not in self._later:
            self._met += 1
        return {((name, 1),): Fraction(1)}

    def rule(self, name: str, over: tuple = ()) -> Poly:
        """``name`` written out (a rule of ``opaque`` too, though the rules it uses stay names);
        only the names in ``over`` may divide it."""
        p = self._expand(name, self.env, self.memo, top=True)
        if isinstance(p, bool) or any(e < 0 and n not in over for m in p for n, e in m):
            raise Unsupported("not a polynomial")
        return p

    def _expand(self, name: str, env: dict, memo: dict, top: bool = False) -> Poly:
        self.read.add(name)  # pinned or not, its value or its rule decides what follows
        if name in self.pins:
            return self.pins[name] if name not in self.opaque or top else self._name(name)
        if name in self.opaque and not top:
            return self._name(name)
        if name not in memo:
            if name not in self.rules:
                raise Unsupported(f"no rule {name!r}")
            before = self._met
            memo[name] = self._node(self.rules[name][2], env, memo)
            if self._met != before and memo is self.memo:
                self._own.add(name)
        elif memo is self.memo and name in self._own:
            self._met += 1  # what holds it holds the name too
        return memo[name]

    def _node(self, t: tuple, env: dict, memo: dict):
        op = t[0]
        if op == "n":
            return _const(t[1])
        if op == "b":
            return t[1]
        if op == "v":
            self.read.add(t[1])
            if t[1] not in env:
                raise Unsupported(f"'{t[1]}' has no value")
            return env[t[1]]
        if op == "r":
            return self._expand(t[1], env, memo)
        if op == "@":  # target[k = v]: the target written out anew with the keys rebound
            rebound = dict(env)
            for name, value in t[2]:
                rebound[name] = self._node(value, env, memo)
            return self._expand(t[1], rebound, {}, top=True)
        if op == "if":
            for cond, value in t[1:]:
                if self._truth(self._node(cond, env, memo)):
                    return self._node(value, env, memo)
            raise Unsupported("no branch applies")
        if op in ("and", "or"):
            want = op == "or"
            for a in t[1:]:
                if self._truth(self._node(a, env, memo)) == want:
                    return want
            return not want
        if op == "not":
            return not self._truth(self._node(t[1], env, memo))
        if op == "^":
            return self._power(self._node(t[1], env, memo), t[2])
        return self._apply(op, [self._node(a, env, memo) for a in t[1:]])

    @staticmethod
    def _power(base: Poly, e: int) -> Poly:
        if e < 0:  # a division: by a number, or by one term (n_params), which may cancel
            if len(base) != 1:
                raise Unsupported("a division by zero or by a sum")
            ((m, c),) = base.items()
            return _bounded({tuple((n, k * e) for n, k in m): c ** e})
        out = _const(1)
        for _ in range(e):
            out = _mul(out, base)
        return out

    def _apply(self, op: str, args: list):
        """An arithmetic, relation, ``max``, ``min`` or rounding node over its operands' values."""
        if op == "+":
            out: Poly = {}
            for a in args:
                out = _add(out, a)
            return _bounded(out)
        if op == "*":
            out = _const(1)
            for a in args:
                out = _mul(out, a)
            return out
        if op in _RELATIONS:
            if self.point is not None and any(m for a in args for m in a):
                return _RELATIONS[op](value_at(args[0], self.point), value_at(args[1], self.point))
            return _RELATIONS[op](_constant(args[0]), _constant(args[1]))
        if op in ("max", "min"):
            return self._extreme(op, args)
        if op in ("ceil", "floor"):
            return _const((math.ceil if op == "ceil" else math.floor)(_constant(args[0])))
        raise Unsupported(f"{op!r} in a formula")

    def _extreme(self, op: str, args: list) -> Poly:
        """max or min of polynomials: the one that is at least (at most) every other one for
        every value of the kept names, where that shows in the coefficients alone (their
        difference has no negative coefficient, and only names that are never negative), as
        sympy's Max and Min decide it from the names' assumptions; else declined."""
        for p in args:
            if all(self._at_least(p, q) if op == "max" else self._at_least(q, p) for q in args if q is not p):
                return p
        raise Unsupported(f"a {op} that depends on a kept name")

    def _at_least(self, p: Poly, q: Poly) -> bool:
        d = _add(p, _neg(q))
        if all(c >= 0 and all(n in self.nonnegative for n, _ in m) for m, c in d.items()):
            return True
        # one term in kept names that are whole and positive (so at least 1) and a negative number:
        # sympy decides c m + c0 >= 0 where c + c0 >= 0 (max(1, dp) is dp, max(2, 2 dp) is 2 dp),
        # though not for more terms (max(1, x + y) stays)
        terms = [(m, c) for m, c in d.items() if m]
        if len(terms) != 1 or d.get((), 0) >= 0:
            return False
        (m, c), = terms
        return c > 0 and all(n in self.whole_positive and e > 0 for n, e in m) and c + d[()] >= 0

    @staticmethod
    def _truth(value) -> bool:
        if not isinstance(value, bool):
            raise Unsupported("a condition that is not decided")
        return value


#: a value :class:`Reads` cannot write out (a ceil of a kept name, a condition on one ...)
_UNKNOWN = object()


class Reads(Polynomials):
    """The values a formula column depends on where it is not a polynomial (sympy writes it):
    the expansion :class:`Polynomials` makes, which instead of declining goes on where it
    cannot write a value out, through every arm of a branch it cannot decide.  What it reads
    (:attr:`Polynomials.read`) includes everything the column's text can depend on: a
    branch sympy decides is decided here too (its condition over numbers alone), or all its
    arms are read.  A column sympy wrote for some values is then the column for any values
    that agree on these (engine.answers.quick keeps it so)."""

    def walk(self, name: str) -> None:
        self._expand(name, self.env, self.memo, top=True)

    def _node(self, t: tuple, env: dict, memo: dict):
        op = t[0]
        if op in ("n", "b", "@"):  # "@" rebinds with this walker's values
            return super()._node(t, env, memo)
        if op == "v":
            self.read.add(t[1])
            return env.get(t[1], _UNKNOWN)
        if op == "r":
            try:
                return self._expand(t[1], env, memo)
            except Unsupported:  # no such rule: the full path says so
                return _UNKNOWN
        if op == "if":
            arms = t[1:]
            for i, (cond, value) in enumerate(arms):
                c = self._node(cond, env, memo)
                if not isinstance(c, bool):  # not decided: any arm from here on may be taken
                    for later_cond, _ in arms[i + 1:]:
                        self._node(later_cond, env, memo)
                    for _, later in arms[i:]:
                        self._node(later, env, memo)
                    return _UNKNOWN
                if c:
                    return self._node(value, env, memo)
            return _UNKNOWN  # no branch applies: the full path says so
        if op in ("and", "or", "not"):
            values = []
            for a in t[1:]:
                v = self._node(a, env, memo)
                values.append(v)
                if isinstance(v, bool) and op != "not" and v == (op == "or"):
                    return v  # decided: the rest is not read (as sympy does not)
            if not all(isinstance(v, bool) for v in values):
                return _UNKNOWN
            return (not values[0]) if op == "not" else (op == "and")
        if op == "^":
            base = self._node(t[1], env, memo)
            if base is _UNKNOWN:
                return _UNKNOWN
            try:
                return self._power(base, t[2])
            except Unsupported:
                return _UNKNOWN
        args = [self._node(a, env, memo) for a in t[1:]]
        if any(a is _UNKNOWN for a in args):
            return _UNKNOWN
        try:
            return self._apply(op, args)
        except Unsupported:
            return _UNKNOWN


# ---------------------------------------------------------------- printing
def _term(monomial: tuple, c: Fraction) -> str:
    """One term as sympy's str printer writes a product: the numerator's factors (the
    coefficient's first), then ``/`` and the coefficient's denominator."""
    factors = [f"{n}**{e}" if e != 1 else n for n, e in monomial]
    p, q = abs(c.numerator), c.denominator
    if p != 1 or not factors:
        factors.insert(0, str(p))
    body = "*".join(factors) + (f"/{q}" if q != 1 else "")
    return ("-" if c < 0 else "") + body


def text(p: Poly, order: str = "grlex") -> str:
    """A polynomial as ``sympy.sstr(expr, order="grlex")`` prints it: terms by total degree,
    then by their exponents over the names in alphabetical order, highest first; with
    ``order="lex"`` by the exponents alone, as ``sympy.sstr(expr)`` prints a sum."""
    if not p:
        return "0"
    names = sorted({n for m in p for n, _ in m})

    def key(m: tuple):
        exps = dict(m)
        vector = tuple(exps.get(n, 0) for n in names)
        return (sum(vector), vector) if order == "grlex" else vector

    out = ""
    for i, m in enumerate(sorted(p, key=key, reverse=True)):
        t = _term(m, p[m])
        if i == 0:
            out = t
        else:
            out += f" - {t[1:]}" if t.startswith("-") else f" + {t}"
    return out


def linear_root(p: Poly, x: str, rhs: str) -> tuple[Fraction, Poly, tuple]:
    """The root of ``p = rhs`` in ``x``, for ``p`` of degree one in ``x`` whose coefficient of
    ``x`` is one positive term and whose other terms are constant or linear in ``n_params``, as
    sympy writes it: ``R * P / m``, a positive rational R, a primitive polynomial P with whole
    coefficients and a monomial m (anything else: Unsupported).

    >>> linear_root({(("n_params", 1),): Fraction(11, 5), (("s", 1), ("x", 1)): Fraction(3, 10),
    ...              (): Fraction(7)}, "x", "C")
    (Fraction(2, 3), {(('C', 1),): 5, (('n_params', 1),): -11, (): -35}, (('s', 1),))
    """
    slope, rest = {}, {}
    for m, c in p.items():
        e = dict(m).get(x, 0)
        if e == 0:
            rest[m] = c
        elif e == 1:
            slope[tuple((n, k) for n, k in m if n != x)] = c
        else:
            raise Unsupported(f"not linear in {x}")
    if len(slope) != 1 or any(m not in ((), (("n_params", 1),)) for m in rest):
        raise Unsupported("a root sympy writes otherwise")
    (m, c), = slope.items()
    num = _add({((rhs, 1),): Fraction(1)}, _neg(rest))
    if c <= 0 or not m or len(num) < 3 or any((v / c).denominator == 1 for v in num.values()):
        raise Unsupported("a root sympy writes otherwise")  # e.g. (usable_memory - n_params - 5/2)/seq_len
    content = Fraction(math.gcd(*(v.numerator for v in num.values())),
                       math.lcm(*(v.denominator for v in num.values())))
    return content / c, {k: int(v / content) for k, v in num.items()}, m


def reciprocal_root(p: Poly, x: str, rhs: str) -> tuple[int, tuple, Poly]:
    """The root of ``p = rhs`` in ``x``, for ``p`` whose one term in ``x`` is a positive
    ``c m / x`` (the state ZeRO shards over dp) and whose other terms are free of ``x``: ``x =
    c m / (rhs - rest)``, as sympy's ``simplify`` writes it, ``a m / D`` with ``a`` whole and
    ``D`` a polynomial of two terms or more with whole coprime coefficients, its first term in
    ``lex`` order positive (anything else: Unsupported).

    >>> reciprocal_root({(("n_params", 1), ("x", -1)): Fraction(88, 5), (("s", 1),): Fraction(3),
    ...                  (): Fraction(7, 5)}, "x", "u")
    (-88, (('n_params', 1),), {(('s', 1),): 15, (): 7, (('u', 1),): -5})
    """
    over, rest = {}, {}
    for m, c in p.items():
        e = dict(m).get(x, 0)
        if e == 0:
            rest[m] = c
        elif e == -1:
            over[tuple((n, k) for n, k in m if n != x)] = c
        else:
            raise Unsupported(f"not a root sympy writes as a quotient in {x}")
    if len(over) != 1:
        raise Unsupported(f"not one term over {x}")
    (m, c), = over.items()
    den = _add(rest, {((rhs, 1),): Fraction(-1)})  # x = -c m / (rest - rhs)
    if c <= 0 or len(den) < 2:
        raise Unsupported("a root sympy writes otherwise")
    scale = math.lcm(c.denominator, *(v.denominator for v in den.values()))
    content = math.gcd((c * scale).numerator, *((v * scale).numerator for v in den.values()))
    a = -int(c * scale / content)
    den = {k: int(v * scale / content) for k, v in den.items()}
    names = sorted({n for k in den for n, _ in k})
    first = max(den, key=lambda k: tuple(dict(k).get(n, 0) for n in names))
    if den[first] < 0:  # sympy keeps the denominator's leading coefficient positive
        a, den = -a, {k: -v for k, v in den.items()}
    return a, m, den


def quotient_text(a: int, m: tuple, den: Poly) -> str:
    """A :func:`reciprocal_root` as ``sympy.sstr`` prints it."""
    return f"{_term(m, Fraction(a))}/({text(den, order='lex')})"


def root_text(ratio: Fraction, num: Poly, m: tuple) -> str:
    """A :func:`linear_root` as ``sympy.sstr(sympy.simplify(root))`` prints it."""
    bottom = _term(m, Fraction(ratio.denominator))
    if ratio.denominator != 1 or len(m) > 1 or m[0][1] != 1:
        bottom = f"({bottom})"
    top = f"({text(num, order='lex')})"
    return (f"{ratio.numerator}*{top}" if ratio.numerator != 1 else top) + f"/{bottom}"


def from_sympy(expr) -> Poly | None:
    """A sympy expression as a polynomial with rational coefficients in its free symbols (by
    their names), or None when it is not one."""
    names = sorted(expr.free_symbols, key=lambda s: s.name)
    if not names:
        return _const(Fraction(int(expr.p), int(expr.q))) if expr.is_Rational else None
    try:
        poly = sympy.Poly(expr, *names)
    except (sympy.PolynomialError, sympy.GeneratorsNeeded):
        return None
    if not poly.domain.is_QQ and not poly.domain.is_ZZ:
        return None
    out: Poly = {}
    for exps, c in poly.terms():
        c = sympy.Rational(c)
        out[tuple((s.name, e) for s, e in zip(names, exps) if e)] = Fraction(int(c.p), int(c.q))
    return out
