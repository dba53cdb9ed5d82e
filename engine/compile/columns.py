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

import itertools
import math
from fractions import Fraction

from ..lang.constants import MAX_BITS, Unsupported, _RELATIONS
from ..lazy import lazy

sympy = lazy("sympy")  # only to read a sympy expression (from_sympy)

#: a polynomial: {monomial: coefficient}, a monomial a sorted tuple of (name, exponent)
Poly = dict


class Atom(str):
    """A rounding, ``Max`` or ``Min`` of polynomials in kept names that no value decides
    (``ceiling(seq_len/16)``: a sequence in whole KV blocks; ``Min(4096, seq_len)``: a
    sliding window): it stays a name of the column's polynomial, and is that name's text.
    ``op`` is sympy's name for it, ``args`` its polynomials (:meth:`Forms.atom` makes one
    canonical)."""

    op: str
    args: tuple

    def __new__(cls, op: str, args: tuple) -> "Atom":
        self = super().__new__(cls, f"{op}({', '.join(text(a) for a in args)})")
        self.op, self.args = op, args
        return self


def _name_key(name: str) -> tuple:
    """Names first, then the atoms (sympy orders a function after the symbols)."""
    return (isinstance(name, Atom), name)


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
            if isinstance(n, Atom):
                c *= _atom_value(n, point) ** e
                continue
            if n not in point:
                raise Unsupported(f"'{n}' where a number is needed")
            c *= Fraction(point[n]) ** e
        total += c
    return total


def _atom_value(a: Atom, point: dict) -> Fraction:
    values = [value_at(p, point) for p in a.args]
    if a.op in ("Max", "Min"):
        return max(values) if a.op == "Max" else min(values)
    return Fraction((math.ceil if a.op == "ceiling" else math.floor)(values[0]))


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
    them is decided from the coefficients alone (:meth:`Forms._extreme`)."""
    return frozenset(n for n in keep if n in compiled["inputs"]
                     and compiled["inputs"][n][2] is not None and compiled["inputs"][n][2] >= 0)


def whole_positive(compiled: dict, keep) -> frozenset:
    """The kept inputs whose sympy symbols are positive integers (so at least 1): a max or min
    of one term in them and a number is decided (:meth:`Forms._at_least`)."""
    return frozenset(n for n in nonnegative(compiled, keep) if compiled["inputs"][n][1]
                     and (compiled["inputs"][n][2] > 0 or compiled["inputs"][n][3]))


def integer(compiled: dict, keep) -> frozenset:
    """The kept inputs whose sympy symbols are integers: a term in them with a whole
    coefficient is whole, and leaves a rounding (:meth:`Forms._round`)."""
    return frozenset(n for n in keep if n in compiled["inputs"] and compiled["inputs"][n][1])


class Forms:
    """What is known of the kept names (never negative, whole and positive, whole) and what
    follows from it: the argument of a max (min) that is the largest (smallest) for every value,
    where sympy's Max and Min decide it from the names' assumptions; and, with ``atoms``, a
    rounding, max or min that no value decides, kept as an :class:`Atom` in the form sympy's
    ceiling, Max and Min take (integer terms out of a rounding, nested ones flattened, an
    argument provably exceeded dropped), else declined (:class:`Unsupported`)."""

    def __init__(self, nonnegative: frozenset, whole_positive: frozenset, integer: frozenset = frozenset(),
                 atoms: bool = False):
        self.nonnegative, self.whole_positive, self.integer = nonnegative, whole_positive, integer
        self.atoms = atoms

    def _extreme(self, op: str, args: list) -> Poly:
        """max or min of polynomials: the one that is at least (at most) every other one for
        every value of the kept names, where that shows in the coefficients alone (their
        difference has no negative coefficient, and only names that are never negative), as
        sympy's Max and Min decide it from the names' assumptions; else an atom or declined."""
        for p in args:
            if all(self._at_least(p, q) if op == "max" else self._at_least(q, p) for q in args if q is not p):
                return p
        if not self.atoms:
            raise Unsupported(f"a {op} that depends on a kept name")
        return self._extreme_atom("Max" if op == "max" else "Min", args)

    def _extreme_atom(self, kind: str, args: list) -> Poly:
        """Max or Min kept as an atom: nested ones of the same kind flattened, every argument
        that another one provably exceeds (falls short of) dropped, and each pair left seen to
        cross (each the larger at some values of the names): a pair sympy could order is
        declined, whichever way it would write it."""
        flat: dict = {}
        for a in args:
            inner = _single_atom(a)
            for b in (inner.args if inner is not None and inner.op == kind else (a,)):
                self._of_kept_names(b)
                flat.setdefault(text(b), b)
        kept: list = []
        for t in sorted(flat):
            q = flat[t]
            if any(self._beyond(kind, p, q) for p in kept):
                continue
            kept = [r for r in kept if not self._beyond(kind, q, r)]
            kept.append(q)
        if len(kept) == 1:
            return kept[0]
        for i, p in enumerate(kept):
            for q in kept[i + 1:]:
                if not self._cross(p, q):
                    raise Unsupported(f"a {kind} whose arguments may be ordered")
        return {((Atom(kind, tuple(sorted(kept, key=_arg_key))), 1),): Fraction(1)}

    def _beyond(self, kind: str, p: Poly, q: Poly) -> bool:
        return self._at_least(p, q) if kind == "Max" else self._at_least(q, p)

    def _round(self, op: str, p: Poly) -> Poly:
        """ceil or floor of a polynomial: of a number, a number; else, with ``atoms``, its whole
        terms (a whole coefficient over whole names, as sympy's ``is_integer``) taken out and
        the rest kept as an atom, as sympy's ceiling and floor take them; of a Max or Min
        times a positive number, the Max or Min of its arguments rounded."""
        rounding = math.ceil if op == "ceil" else math.floor
        if not any(m for m in p):
            return _const(rounding(_constant(p)))
        if not self.atoms:
            raise Unsupported(f"a {op} of a kept name")
        self._of_kept_names(p)
        if len(p) == 1:  # c Max(a, b) with c > 0 rounds as Max(round(c a), round(c b)): rounding is monotone
            ((m, c),) = p.items()
            if c > 0 and len(m) == 1 and m[0][1] == 1 and isinstance(m[0][0], Atom) and m[0][0].op in ("Max", "Min"):
                a = m[0][0]
                return self._extreme(a.op.lower(), [self._round(op, _mul(_const(c), arg)) for arg in a.args])
        whole = {m: c for m, c in p.items() if c.denominator == 1 and all(self._whole(n) for n, _ in m)}
        rest = {m: c for m, c in p.items() if m not in whole}
        if not any(m for m in rest):
            return _add(whole, _const(rounding(rest.get((), Fraction(0)))))
        return _add(whole, {((Atom("ceiling" if op == "ceil" else "floor", (rest,)), 1),): Fraction(1)})

    def _of_kept_names(self, p: Poly) -> None:
        """An atom's argument names only whole positive kept names (and atoms of them): what
        :meth:`_cross` samples."""
        for m in p:
            for n, e in m:
                if e < 0 or (not isinstance(n, Atom) and n not in self.whole_positive):
                    raise Unsupported(f"a rounding, max or min of '{n}'")

    def _whole(self, name: str) -> bool:
        if isinstance(name, Atom):
            return name.op in ("ceiling", "floor") or all(
                all(c.denominator == 1 and all(self._whole(n) for n, _ in m) for m, c in a.items()) for a in name.args)
        return name in self.integer

    def _never_negative(self, name: str) -> bool:
        if isinstance(name, Atom):
            return all(self._plainly_nonnegative(a) for a in name.args)
        return name in self.nonnegative

    def _plainly_nonnegative(self, d: Poly) -> bool:
        return all(c >= 0 and all(self._never_negative(n) for n, _ in m) for m, c in d.items())

    def _at_least(self, p: Poly, q: Poly) -> bool:
        d = _add(p, _neg(q))
        if self._nonnegative(d):
            return True
        if self.atoms and any(isinstance(n, Atom) for m in d for n, _ in m):
            return any(self._nonnegative(b) for b in self._lower_bounds(d))
        return False

    def _nonnegative(self, d: Poly) -> bool:
        if self._plainly_nonnegative(d):
            return True
        # one term in kept names that are whole and positive (so at least 1) and a negative number:
        # sympy decides c m + c0 >= 0 where c + c0 >= 0 (max(1, dp) is dp, max(2, 2 dp) is 2 dp),
        # though not for more terms (max(1, x + y) stays)
        terms = [(m, c) for m, c in d.items() if m]
        if len(terms) != 1 or d.get((), 0) >= 0:
            return False
        (m, c), = terms
        return c > 0 and all(n in self.whole_positive and e > 0 for n, e in m) and c + d[()] >= 0

    def _lower_bounds(self, d: Poly) -> list:
        """Polynomials at most ``d`` at every value: in a term of one atom and names never
        negative, a Min the term falls with replaced by one of its arguments, a Max or a
        ceiling it rises with by one of its arguments, a floor it falls with by its argument;
        of arguments never negative, a Max it falls with by their sum, a Min it rises with by 0."""
        choices = []
        for m, c in d.items():
            atoms = [(n, e) for n, e in m if isinstance(n, Atom)]
            others = tuple((n, e) for n, e in m if not isinstance(n, Atom))
            options = [{m: c}]
            if len(atoms) == 1 and atoms[0][1] == 1 and all(self._never_negative(n) for n, _ in others):
                a = atoms[0][0]
                if (a.op == "Min" and c < 0) or (a.op in ("Max", "ceiling") and c > 0) or (a.op == "floor" and c < 0):
                    options += [_mul({others: c}, arg) for arg in a.args]
                elif a.op in ("Max", "Min") and all(self._plainly_nonnegative(arg) for arg in a.args):
                    # of arguments never negative, a Max is at most their sum, a Min at least 0
                    options.append(_mul({others: c}, _sum(a.args)) if c < 0 else {})
            choices.append(options)
        out = [{}]
        for options in choices:
            out = [_add(b, o) for b in out for o in options]
            if len(out) > MAX_BOUNDS:
                return []
        return out

    def _cross(self, p: Poly, q: Poly) -> bool:
        """Whether each of ``p`` and ``q`` is the larger at some whole positive values of their
        names (then no assumption orders them: sympy keeps both)."""
        d = _add(p, _neg(q))
        names = sorted(_names(d))
        if len(names) > 3:
            return False
        above = below = False
        for values in itertools.product(SAMPLES, repeat=len(names)):
            v = value_at(d, dict(zip(names, values)))
            above, below = above or v > 0, below or v < 0
            if above and below:
                return True
        return False


#: the values of whole positive names at which :meth:`Forms._cross` looks for each side
#: (the page's runtime takes them from here too)
SAMPLES = (1, 2, 3, 5, 8, 16, 64, 100, 1000, 4095, 4096, 4097, 10**5, 10**6, 10**8)
#: the most lower bounds :meth:`Forms._lower_bounds` tries (none past it: not shown to hold)
MAX_BOUNDS = 64


def _sum(polys) -> Poly:
    out: Poly = {}
    for p in polys:
        out = _add(out, p)
    return out


def _names(p: Poly) -> set:
    out = set()
    for m in p:
        for n, _ in m:
            if isinstance(n, Atom):
                for a in n.args:
                    out |= _names(a)
            else:
                out.add(n)
    return out


def _single_atom(p: Poly) -> Atom | None:
    if len(p) == 1:
        ((m, c),) = p.items()
        if c == 1 and len(m) == 1 and m[0][1] == 1 and isinstance(m[0][0], Atom):
            return m[0][0]
    return None


def _arg_key(p: Poly) -> tuple:
    """A Max's or Min's arguments in sympy's order: numbers first."""
    return (any(m for m in p), text(p))


class Polynomials(Forms):
    """Rules as polynomials in the names ``keep`` (inputs) and ``opaque`` (rules that stay
    names), the other values of ``compiled``'s inputs and options fixed as in ``fixed`` (option
    codes, numbers) and the rules in ``pins`` pinned: :func:`engine.answers.estimate.formula`'s
    expansion, rule by rule.  With ``atoms``, a rounding, max or min no value decides stays
    an :class:`Atom` (the estimate's column), else it is declined."""

    def __init__(self, compiled: dict, fixed: dict, pins: dict, keep: tuple, opaque: tuple, then: tuple = (),
                 point: dict | None = None, atoms: bool = False):
        super().__init__(nonnegative(compiled, keep), whole_positive(compiled, keep), integer(compiled, keep), atoms)
        self.rules = compiled["rules"]
        self.pins = {n: _const(v) for n, v in pins.items()}
        self.opaque = frozenset(opaque)
        self.env = {n: _const(v) for n, v in fixed.items() if n not in keep}
        self.env.update({n: {((n, 1),): Fraction(1)} for n in keep})
        self.memo: dict = {}  # the rules written out in env (an opaque one only as asked for)
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
            return self._round(op, args[0])
        raise Unsupported(f"{op!r} in a formula")

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
    factors = [f"{n}**{e}" if e != 1 else n for n, e in sorted(monomial, key=lambda t: _name_key(t[0]))]
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
    names = sorted({n for m in p for n, _ in m}, key=_name_key)

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


def _over(p: Poly, x: str) -> tuple[Poly, Poly]:
    """``p`` split into what it divides by ``x`` (``x`` taken out of those terms) and the rest,
    which is free of ``x``; Unsupported where ``x`` has another power."""
    over, rest = {}, {}
    for m, c in p.items():
        e = dict(m).get(x, 0)
        if e == 0:
            rest[m] = c
        elif e == -1:
            over[tuple((n, k) for n, k in m if n != x)] = c
        else:
            raise Unsupported(f"not a quotient in {x}")
    return over, rest


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
    over, rest = _over(p, x)
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


def reciprocal_sum_root(p: Poly, x: str, rhs: str) -> tuple[Poly, Poly]:
    """The root of ``p = rhs`` in ``x`` for ``p = rest + B / x`` whose ``B`` has two terms or
    more (a layout's shards: ``tp`` divides weights, gradients and activations alike) and whose
    ``rest`` is free of ``x``: ``x = B / (rhs - rest)``, as the numerator and denominator
    (:func:`quotient_form` writes them in memform's own form; anything else: Unsupported).

    >>> reciprocal_sum_root({(("s", 1), ("x", -1)): Fraction(3), (("x", -1),): Fraction(1, 2),
    ...                      (): Fraction(7)}, "x", "u")
    ({(('s', 1),): Fraction(3, 1), (): Fraction(1, 2)}, {(('u', 1),): Fraction(1, 1), (): Fraction(-7, 1)})
    """
    over, rest = _over(p, x)
    if len(over) < 2:
        raise Unsupported(f"not a sum over {x}")
    return over, _add({((rhs, 1),): Fraction(1)}, _neg(rest))


def quotient_form(num: Poly, den: Poly) -> tuple[int, Poly, Poly]:
    """``num / den`` (polynomials with rational coefficients) as memform writes a quotient of
    sums, whatever form sympy gave them in: ``c N / D`` with ``N`` and ``D`` whole, coprime
    together, ``D``'s first term in ``lex`` order positive and ``c`` the positive content of the
    numerator (``N`` primitive); Unsupported where either has fewer than two terms or a name is
    an atom.

    >>> quotient_form({(("s", 1),): Fraction(-6), (): Fraction(-3, 2)}, {(("u", 1),): Fraction(-1), (): Fraction(7)})
    (3, {(('s', 1),): 4, (): 1}, {(('u', 1),): 2, (): -14})
    """
    if len(num) < 2 or len(den) < 2 or any(isinstance(n, Atom) for q in (num, den) for m in q for n, _ in m):
        raise Unsupported("not a quotient of sums")
    scale = math.lcm(*(v.denominator for q in (num, den) for v in q.values()))
    common = math.gcd(*((v * scale).numerator for q in (num, den) for v in q.values()))
    num = {k: int(v * scale / common) for k, v in num.items()}
    den = {k: int(v * scale / common) for k, v in den.items()}
    names = sorted({n for k in den for n, _ in k})
    first = max(den, key=lambda k: tuple(dict(k).get(n, 0) for n in names))
    if den[first] < 0:
        num, den = {k: -v for k, v in num.items()}, {k: -v for k, v in den.items()}
    content = math.gcd(*num.values())
    return content, {k: v // content for k, v in num.items()}, den


def quotient_form_text(content: int, num: Poly, den: Poly) -> str:
    """A :func:`quotient_form` as both ``solve`` paths print it: ``c*(N)/(D)``, each sum in
    ``lex`` order (``c`` left out when it is one)."""
    top = f"({text(num, order='lex')})"
    return (f"{content}*{top}" if content != 1 else top) + f"/({text(den, order='lex')})"


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


def from_sympy(expr, atoms: bool = False) -> Poly | None:
    """A sympy expression as a polynomial with rational coefficients in its free symbols (by
    their names), or None when it is not one; with ``atoms``, a ceiling, floor, Max or Min
    in it made an :class:`Atom` as :class:`Polynomials` makes it from the compiled rules
    (so that both paths print the same column), or None where that declines."""
    names = sorted(expr.free_symbols, key=lambda s: s.name)
    if not names:
        return _const(Fraction(int(expr.p), int(expr.q))) if expr.is_Rational else None
    try:
        poly = sympy.Poly(expr, *names)
    except (sympy.PolynomialError, sympy.GeneratorsNeeded):
        poly = None
    if poly is not None and (poly.domain.is_QQ or poly.domain.is_ZZ):
        out: Poly = {}
        for exps, c in poly.terms():
            c = sympy.Rational(c)
            out[tuple((s.name, e) for s, e in zip(names, exps) if e)] = Fraction(int(c.p), int(c.q))
        return out
    if not atoms:
        return None
    forms = Forms(frozenset(s.name for s in names if s.is_nonnegative),
                  frozenset(s.name for s in names if s.is_integer and s.is_positive),
                  frozenset(s.name for s in names if s.is_integer), atoms=True)
    try:
        out = _from_tree(expr, forms)
    except (Unsupported, ArithmeticError, RecursionError):
        return None
    return None if any(e < 0 for m in out for _, e in m) else out


def _from_tree(e, forms: Forms) -> Poly:
    if e.is_Rational:
        return _const(Fraction(int(e.p), int(e.q)))
    if e.is_Symbol:
        return {((e.name, 1),): Fraction(1)}
    if e.is_Add or e.is_Mul:
        out = _const(0 if e.is_Add else 1)
        for a in e.args:
            out = _bounded(_add(out, _from_tree(a, forms))) if e.is_Add else _mul(out, _from_tree(a, forms))
        return out
    if e.is_Pow and e.exp.is_Integer:
        return Polynomials._power(_from_tree(e.base, forms), int(e.exp))
    if isinstance(e, (sympy.ceiling, sympy.floor)):
        return forms._round("ceil" if isinstance(e, sympy.ceiling) else "floor", _from_tree(e.args[0], forms))
    if isinstance(e, (sympy.Max, sympy.Min)):
        return forms._extreme("max" if isinstance(e, sympy.Max) else "min", [_from_tree(a, forms) for a in e.args])
    raise Unsupported(f"{type(e).__name__} in a column")
