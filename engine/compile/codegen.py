"""One compiler, several backends: the library's trees as generated source.

The library is compiled once into plain-data trees (:mod:`engine.compile.compiler`, kept in
the cache).  This module turns those trees into programs:

1. :class:`Specialiser` fixes what stays fixed (the model's sizes, the options, every value
   not named as varying, pinned rules) and folds everything those decide: the branches of
   each ``match`` and ``if``, whole rules that read none of the varying names.  What is left
   is a *residual program*: one step per rule (or rebound value) that still depends on the
   varying names, each a small tree over the varying values and earlier steps.
2. A :class:`Backend` prints the residual program as source in its target: exact Python
   (ints and :class:`fractions.Fraction`, :class:`PythonExact`), vectorised numpy (float64,
   :class:`engine.compile.lambdas.Numpy`, where numpy is imported), JavaScript with exact
   rationals over BigInt (:class:`JavaScript`).  The
   printing (statements, temporaries, laziness of branches) is shared; a backend says how
   each operation is written.

The Python backends' source is compiled in this process by :func:`load_python`.  It is not
text from a user: it is printed from the trees by this module, and before it is compiled
all of it is checked (:func:`_checked_source`): characters only from a small set (no quotes,
backslashes or comments), names only the backend's fixed helpers, its slots, parameters and
temporaries and a few keywords, numbers only decimal integers (and float literals for
numpy).  A rule's or input's name never reaches the source (they become slot numbers and, in
a module written for a user, comments), a fraction is an entry of a constants table, a
message an index into a table of messages.  The programs are not kept between processes:
printing and compiling one takes milliseconds; what the cache keeps is the trees.

>>> from fractions import Fraction
>>> rules = {"area": (0, 0, ("*", ("v", "w"), ("v", "h"))),
...          "half": (0, 0, ("*", ("r", "area"), ("n", Fraction(1, 2))))}
>>> program = Specialiser(rules, {"w": 3}, ("h",), {})
>>> out = [program.rule("half", program.top, frozenset())]
>>> print(PythonExact().source(program.steps, out, 1))
def program(x0):
    s1 = (3 * x0)
    s2 = (_K[0] * s1)
    return (s2,)
<BLANKLINE>
>>> load_python(PythonExact(), program.steps, out, 1)(5)
(Fraction(15, 2),)
"""
from __future__ import annotations

import inspect
import json
import math
import re
from fractions import Fraction

from ..errors import ResourceLimitError
from ..lang.constants import Unsupported, _RELATIONS

def plain(x):
    """An exact number as programs compute with it: an int where it is whole, else a Fraction."""
    if type(x) is Fraction and x.denominator == 1:
        return x.numerator
    return x


def K(value) -> tuple:
    """A folded value as a residual tree."""
    return ("c", value)


def known(t: tuple) -> bool:
    return t[0] == "c"


class Specialiser:
    """The residual program of some rules of a compiled library (``rules``: name -> (dim,
    unit, tree)) with the inputs and options in ``fixed`` fixed (option codes, exact
    numbers), the names in ``varying`` given at each call (slots 0, 1, ...) and the rules in
    ``pins`` pinned.

    :meth:`rule` gives a rule's residual tree: ``("c", value)`` where it folds, else
    ``("s", i)``, slot ``i`` being computed by step ``i`` of :attr:`steps` (a list of
    ``(i, tree)`` in order).  A residual tree is made of ``("c", v)``, ``("s", i)``, ``+``,
    ``*``, ``^`` (an int exponent), ``root`` (a fractional one), ``log``, ``max``, ``min``,
    ``if`` (arms ``(condition or None, value)``, tried in order), the relations, ``and``,
    ``or``, ``not``, ``ceil``, ``floor`` and ``("!", message)``: what cannot be computed
    exactly (a value missing, a branch that no condition selects)."""

    def __init__(self, rules: dict, fixed: dict, varying: tuple, pins: dict) -> None:
        self.rules = rules
        self.steps: list[tuple[int, tuple]] = []
        self.size = len(varying)
        self.top = {n: K(v) for n, v in fixed.items()}
        self.top.update({n: ("s", i) for i, n in enumerate(varying)})
        self.pins = {n: K(v) for n, v in pins.items()}
        self.pins.update({n: ("s", i) for i, n in enumerate(varying) if n in rules})
        self.memo: dict = {}
        self._reads: dict = {}
        self.labels: dict[int, str] = {}  # slot -> the rule it computes (comments of a module)
        #: every rule a step of its own, though its value is a constant, an input or another
        #: rule's (n_params is architecture_params): a runtime that keeps some rules as names
        #: tells each rule apart (the calculator page's polynomials)
        self.every_rule_a_step = False

    def _slot(self, t: tuple) -> tuple:
        self.steps.append((self.size, t))
        self.size += 1
        return ("s", self.size - 1)

    def rule(self, name: str, env: dict, key: frozenset) -> tuple:
        """Rule ``name`` in binding ``env`` (``key``: the names it rebinds, with their
        values): a constant or a slot.  A rule that reads none of the rebound names is the
        outer binding's."""
        if name in self.pins:
            return self.pins[name]
        if key:  # only the rebound names the rule reads make it another step
            key, env = self._read_key(name, key, env)
        found = self.memo.get((key, name))
        if found is None:
            t = self.node(self.rules[name][2], env, key)
            if t[0] not in ("c", "s") or (self.every_rule_a_step and t[0] != "!"):
                t = self._slot(t)
                self.labels[t[1]] = name
            found = self.memo[(key, name)] = t
        return found

    def reads(self, name: str) -> frozenset:
        """The inputs and options rule ``name`` reads, through every rule it uses (a pinned
        rule reads nothing)."""
        found = self._reads.get(name)
        if found is None:
            rules, names, _ = reach(self.rules, [self.rules[name][2]], follow=False)
            self._reads[name] = frozenset()  # a cycle cannot be (the library is resolved)
            found = frozenset(names).union(*(self.reads(r) for r in rules if r not in self.pins))
            self._reads[name] = found
        return found

    def _read_key(self, name: str, key: frozenset, env: dict) -> tuple[frozenset, dict]:
        """``key`` and ``env`` cut to the rebound names rule ``name`` reads (a binding is the
        top one with its key's names rebound: the rest are the top's)."""
        reads = self.reads(name)
        sub = frozenset((n, v) for n, v in key if n in reads)
        if sub == key:
            return key, env
        return sub, ({**self.top, **dict(sub)} if sub else self.top)

    def node(self, t: tuple, env: dict, key: frozenset) -> tuple:
        op = t[0]
        if op == "n":
            return K(plain(t[1]))
        if op == "b":
            return K(t[1])
        if op == "v":
            if t[1] not in env:
                return ("!", f"'{t[1]}' has no value: give one, or a preset that sets it")
            return env[t[1]]
        if op == "r":
            return self.rule(t[1], env, key)
        if op == "?":
            return ("!", f"cannot evaluate {t[1]!r} without sympy")
        if op == "@":
            return self._at(t, env, key)
        if op == "if":  # the arms in order; those whose condition is known false dropped
            arms = []
            for cond, value in t[1:]:
                c = self.node(cond, env, key)
                if known(c) and not c[1]:
                    continue
                v = self.node(value, env, key)
                if known(c) and not arms:  # the first arm that can apply always does
                    return v
                arms.append((None if known(c) else c, v))
                if known(c):
                    break
            if not arms:
                return ("!", "no branch applies")
            if arms[-1][0] is None and all(v == arms[0][1] for _, v in arms):
                return arms[0][1]  # every arm the same: whichever applies
            return ("if", *arms)
        if op in ("root", "log"):  # only where a float backend asks for them (sympy_tree)
            x = self.node(t[1], env, key)
            return (op, x, *t[2:])
        parts = [self.node(a, env, key) for a in (t[1:] if op != "^" else t[1:2])]
        consts = [p[1] for p in parts if known(p)]
        rest = [p for p in parts if not known(p)]
        if op == "+":
            c = plain(sum(consts, 0))
            if not rest:
                return K(c)
            return rest[0] if len(rest) == 1 and c == 0 else ("+", *rest, *((K(c),) if c != 0 else ()))
        if op == "*":
            c = 1
            for v in consts:
                c = c * v
            c = plain(c)
            if not rest or c == 0:
                return K(c)
            return rest[0] if len(rest) == 1 and c == 1 else ("*", *((K(c),) if c != 1 else ()), *rest)
        if op == "^":
            e = t[2]
            if not rest:
                if consts[0] == 0 and e < 0:
                    return ("!", "division by zero")
                return K(plain(Fraction(consts[0]) ** e))
            return rest[0] if e == 1 else ("^", rest[0], e)
        if op in _RELATIONS:
            if not rest:
                return K(_RELATIONS[op](*consts))
            return (op, *parts)
        if op == "and" or op == "or":
            if any(bool(v) == (op == "or") for v in consts):
                return K(op == "or")
            if not rest:
                return K(op == "and")
            return rest[0] if len(rest) == 1 else (op, *rest)
        if op == "not":
            return K(not consts[0]) if not rest else ("not", rest[0])
        if op == "max" or op == "min":
            pick = max if op == "max" else min
            if not rest:
                return K(plain(pick(consts)))
            return (op, *rest, *((K(plain(pick(consts))),) if consts else ()))
        if op == "ceil" or op == "floor":
            if not rest:
                return K((math.ceil if op == "ceil" else math.floor)(consts[0]))
            return (op, rest[0])
        return ("!", f"cannot evaluate {op!r}")

    def _at(self, t: tuple, env: dict, key: frozenset) -> tuple:
        """target[k = v, ...]: the target in a binding with the keys rebound, each value
        computed in the current one (a slot of its own when it varies)."""
        rebound = dict(env)
        for name, value in t[2]:
            v = self.node(value, env, key)
            rebound[name] = v if known(v) or v[0] == "s" else self._slot(v)
        new_key = frozenset((n, v) for n, v in rebound.items() if self.top.get(n) != v)
        if self.every_rule_a_step and t[1] not in self.pins:
            # the target as a step of its own, labelled apart: written out even where the
            # runtime keeps the rule itself as a name (columns.Polynomials expands it so); once
            # for each binding of the names it reads
            new_key, rebound = self._read_key(t[1], new_key, rebound)
            found = self.memo.get((AT, new_key, t[1]))
            if found is None:
                found = self.node(self.rules[t[1]][2], rebound, new_key)
                if found[0] == "!":
                    return found
                found = self.memo[(AT, new_key, t[1])] = self._slot(found)
                self.labels[found[1]] = AT + t[1]
            return found
        return self.rule(t[1], rebound, new_key)


#: how a step that computes the target of ``rule[name = value]`` is labelled (every_rule_a_step)
AT = "@"

#: the operations of a compiled tree that every backend computes; ("?", text) is none of them
SUPPORTED = frozenset({"n", "b", "v", "r", "+", "*", "^", "if", "==", "!=", "<", "<=", ">", ">=", "and",
                       "or", "not", "max", "min", "ceil", "floor", "@"})

#: an option's dtype where no dtype applies (sympy's NaN): NaN in the float backends
NAN = ("?", "nan")


def reach(rules: dict, trees, follow: bool = True) -> tuple[set[str], set[str], bool]:
    """The rules and the inputs (and options) that ``trees`` read, directly or through the
    rules they use (``follow``; else the rules they name), and whether every operation on
    the way is one this module evaluates."""
    seen: set = set()
    found: set = set()
    ok = True
    todo = list(trees)
    while todo:
        t = todo.pop()
        op = t[0]
        ok = ok and (op in SUPPORTED or t == NAN)
        if op == "v":
            found.add(t[1])
        elif op == "r" or op == "@":
            if t[1] not in seen:
                seen.add(t[1])
                if follow:
                    todo.append(rules[t[1]][2])
            if op == "@":
                todo.extend(v for _, v in t[2])
        elif op == "if":
            todo.extend(x for arm in t[1:] for x in arm)
        elif op in ("^", "root", "log"):
            todo.append(t[1])
        elif op not in ("n", "b", "?"):
            todo.extend(t[1:])
    return seen, found, ok


def _reindent(lines: list, indent: str) -> list:
    """Statements printed at their own indentation, moved to start at ``indent`` (their
    relative indentation kept)."""
    if not lines:
        return []
    least = min(len(line) - len(line.lstrip(" ")) for line in lines)
    return [indent + line[least:] for line in lines]


def _subtrees(t: tuple):
    """Every node of residual tree ``t``, itself included."""
    todo = [t]
    while todo:
        t = todo.pop()
        yield t
        if t[0] == "if":
            todo.extend(x for arm in t[1:] for x in arm if x is not None)
        elif t[0] not in ("c", "s", "!"):
            todo.extend(x for x in t[1:] if isinstance(x, tuple))


def _slots(t: tuple):
    return (n[1] for n in _subtrees(t) if n[0] == "s")


def live(steps: list, outputs: list) -> list:
    """The steps the outputs need (a rule reached only where a factor of zero drops it, or
    rebound and then not read, is not computed)."""
    needed = {i for t in outputs for i in _slots(t)}
    kept = []
    for i, t in reversed(steps):
        if i in needed:
            kept.append((i, t))
            needed.update(_slots(t))
    return kept[::-1]


def _degrees(steps: list, param: int):
    """(degree of each step, the function that gives a tree's): each as a polynomial in
    parameter ``param``, an upper bound (terms may cancel), or None where it is not one (the
    parameter reaches it through a condition, a ``max``, ``min``, rounding, root or logarithm,
    or a division by something that holds it)."""
    found: dict = {}

    def of(t: tuple):
        op = t[0]
        if op == "c" or op == "!":
            return 0
        if op == "s":
            return found[t[1]] if t[1] in found else int(t[1] == param)
        if op == "if":
            arms = [(None if c is None else of(c), of(v)) for c, v in t[1:]]
            if any(c != 0 for c, _ in arms if c is not None) or any(v is None for _, v in arms):
                return None
            return max(v for _, v in arms)
        if op == "^":
            d = of(t[1])
            return None if d is None or (t[2] < 0 and d) else d * max(t[2], 0)
        ds = [of(a) for a in t[1:] if isinstance(a, tuple)]
        if any(d is None for d in ds):
            return None
        if op == "+":
            return max(ds, default=0)
        if op == "*":
            return sum(ds)
        return 0 if not any(ds) else None  # max, min, rounding, relations, logic, root, log

    for i, t in steps:
        found[i] = of(t)
    return found, of


def slope(steps: list, outputs: list, param: int):
    """The program extended with the slope of each output in parameter ``param``, for outputs
    that are lines in it (degree at most one): (steps, outputs + slopes), or None where one is
    not.  Each step that holds the parameter gets a step of its slope (d(a b) = a db where a
    does not hold it; a branch's slope is its arm's, under the same conditions), so that one
    call gives a total and how it grows: the rest of the line without another call."""
    found, of = _degrees(steps, param)
    if any(d is None or d > 1 for d in map(of, outputs)):
        return None
    zero = ("c", 0)
    top = max([param, *(i for i, _ in steps)]) + 1
    slot: dict = {}  # step -> the step of its slope

    def d(t: tuple) -> tuple:
        if of(t) == 0:
            return zero if t[0] != "!" else t
        op = t[0]
        if op == "s":
            return ("c", 1) if t[1] not in found else ("s", slot[t[1]])
        if op == "if":
            return ("if", *((c, d(v)) for c, v in t[1:]))
        if op == "^":  # degree one: the exponent is one
            return d(t[1])
        if op == "+":
            parts = tuple(x for x in map(d, t[1:]) if x != zero)
            return parts[0] if len(parts) == 1 else ("+", *parts)
        if op == "*":  # one factor holds the parameter
            return ("*", *(d(a) if of(a) else a for a in t[1:]))
        raise ValueError(f"no slope of {op!r}")  # degree 0: answered above

    out = []
    for i, t in steps:
        out.append((i, t))
        if found[i]:
            slot[i] = top + len(slot)
            out.append((slot[i], d(t)))
    return out, [*outputs, *map(d, outputs)]


def _combine(monos) -> int | None:
    """The direction of a sum (or max, min) of functions of these directions: 1 non-decreasing,
    -1 non-increasing, 0 constant, None either or unknown."""
    seen = set()
    for m in monos:
        if m is None:
            return None
        if m:
            seen.add(m)
    return None if len(seen) > 1 else (seen.pop() if seen else 0)


class _Shape:
    """What :func:`monotone` knows of a value as the parameter grows: its direction
    (:func:`_combine`'s), its sign (1 >= 0, -1 <= 0, 0 unknown), whether that sign is strict
    (never zero) and, for a literal, the value."""
    __slots__ = ("mono", "sign", "strict", "value")

    def __init__(self, mono, sign=0, strict=False, value=None):
        self.mono, self.sign, self.strict, self.value = mono, sign, strict and bool(sign), value


_UNKNOWN = _Shape(None)
_FLIP = {">": 1, ">=": 1, "<": -1, "<=": -1}  # a growing side against a constant one


#: the most thresholds on the parameter :func:`monotone` splits its range at
MAX_THRESHOLDS = 16
_MIRROR = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}


def _thresholds(steps: list, outputs: list, param: int) -> dict:
    """The conditions that compare the parameter itself with a number ({tree: (op, number)},
    the parameter on the left) and the whole values where one may switch (each b: it may
    differ between b - 1 and b)."""
    found, points = {}, set()
    for t in [t for _, t in steps] + list(outputs):
        for n in _subtrees(t):
            if n[0] not in _MIRROR or len(n) != 3:
                continue
            a, b = n[1], n[2]
            if a == ("s", param) and b[0] == "c" and not isinstance(b[1], bool):
                op, c = n[0], b[1]
            elif b == ("s", param) and a[0] == "c" and not isinstance(a[1], bool):
                op, c = _MIRROR[n[0]], a[1]
            else:
                continue
            found[n] = (op, c)
            # x > c and x <= c switch after floor(c), x >= c and x < c at ceil(c), x == c both
            points.update({math.floor(c) + 1} if op in (">", "<=") else {math.ceil(c)} if op in (">=", "<")
                          else {math.floor(c) + 1, math.ceil(c)})
    return found, sorted(p for p in points if p > 1)


def monotone(steps: list, outputs: list, param: int) -> list:
    """Each output's direction in parameter ``param`` over whole values >= 1, as (direction,
    junctions): 1 never decreases, -1 never increases, 0 constant (None: the program does not
    show one), provided the value never moves the other way from b - 1 to b at each junction
    b (the caller checks those pairs).

    The proof is the program's shape: sums, products of values of known sign, quotients by
    values of strict sign, max, min and rounding keep directions; a branch keeps them where its
    condition does not depend on the parameter, or where a threshold on it switches between
    two numbers (a jump the direction allows).  A condition that compares the parameter itself
    with a number (dp > 1) splits the range: between two such thresholds every one of them
    is decided, and the junctions are left to the caller.  What it cannot see through is None;
    a caller then checks values (engine.answers.search.grid)."""
    compared, points = _thresholds(steps, outputs, param)
    if len(points) > MAX_THRESHOLDS:
        compared, points = {}, []
    directions = [0] * len(outputs)
    for lo, hi in zip([1, *points], [*(p - 1 for p in points), None]):
        if hi == lo:
            continue  # one value: no direction to show
        decided = {t: _RELATIONS[op](lo, c) for t, (op, c) in compared.items()}
        shown = _monotone(steps, outputs, param, decided)
        directions = [None if a is None or b is None else _combine((a, b)) for a, b in zip(directions, shown)]
    return [(d, points if d is not None else []) for d in directions]


def _monotone(steps: list, outputs: list, param: int, decided: dict) -> list:
    """:func:`monotone` where the conditions in ``decided`` have the values there."""
    found: dict = {}

    def sign_of(x) -> tuple:
        return (1 if x >= 0 else -1), x != 0

    def of(t: tuple) -> _Shape:
        op = t[0]
        if t in decided:
            return _Shape(0, value=decided[t])
        if op == "c":
            v = t[1]
            if isinstance(v, bool):
                return _Shape(0, value=v)
            sign, strict = sign_of(v)
            return _Shape(0, sign, strict, v)
        if op == "!":
            return _Shape(0, 0, value="fails")
        if op == "s":
            if t[1] in found:
                return found[t[1]]
            return _Shape(1, 1, True) if t[1] == param else _Shape(0)
        if op == "if":
            return branches(t[1:])
        if op == "^":
            return power(of(t[1]), t[2])
        args = [of(a) for a in t[1:] if isinstance(a, tuple)]
        if op == "+":
            return _Shape(_combine(a.mono for a in args), *sum_sign(args))
        if op == "*":
            return product(args)
        if op in ("max", "min"):
            mono = _combine(a.mono for a in args)
            pos = [a for a in args if a.sign == 1]
            neg = [a for a in args if a.sign == -1]
            if op == "max":
                sign, strict = (1, any(a.strict for a in pos)) if pos else ((-1, all(a.strict for a in neg))
                                                                           if len(neg) == len(args) else (0, False))
            else:
                sign, strict = (-1, any(a.strict for a in neg)) if neg else ((1, all(a.strict for a in pos))
                                                                            if len(pos) == len(args) else (0, False))
            return _Shape(mono, sign, strict)
        if op in ("ceil", "floor"):
            a = args[0]
            return _Shape(a.mono, a.sign, a.strict and (a.sign == 1) == (op == "ceil"))
        if op in ("root", "log"):
            a = args[0]
            if a.sign != 1 or a.mono is None or (op == "log" and not a.strict):
                return _UNKNOWN
            return _Shape(a.mono, 1 if op == "root" else 0, op == "root" and a.strict)
        if all(a.mono == 0 for a in args):  # relations and logic on constants
            return _Shape(0)
        return _UNKNOWN

    def sum_sign(args) -> tuple:
        if all(a.sign == 1 for a in args):
            return 1, any(a.strict for a in args)
        if all(a.sign == -1 for a in args):
            return -1, any(a.strict for a in args)
        return 0, False

    def product(args) -> _Shape:
        if any(a.mono is None for a in args):
            return _UNKNOWN
        sign, strict = 1, True
        for a in args:
            sign, strict = sign * a.sign, strict and a.strict
        # |product| is the product of |factors|, each of direction sign * mono
        if not all(a.sign for a in args):
            return _Shape(0 if all(a.mono == 0 for a in args) else None)
        magnitude = _combine(a.sign * a.mono for a in args)
        return _Shape(None if magnitude is None else sign * magnitude, sign, strict)

    def power(a: _Shape, e: int) -> _Shape:
        if e == 0:
            return _Shape(0, 1, True, 1)
        if a.mono is None:
            return _UNKNOWN
        if e < 0:  # 1 / a: where a keeps a strict sign, it turns the other way
            if not a.strict:
                return _UNKNOWN
            a = _Shape(-a.mono, a.sign, True)
            e = -e
        if e == 1:
            return a
        if e % 2:  # an odd power keeps the order of every two values
            return _Shape(a.mono, a.sign, a.strict)
        if not a.sign:
            return _Shape(0 if a.mono == 0 else None, 1)
        return _Shape(a.sign * a.mono, 1, a.strict)

    def condition(t: tuple) -> int | None:
        """How a condition switches as the parameter grows: 0 never, 1 from false to true,
        -1 from true to false, None unknown."""
        op = t[0]
        if t in decided:
            return 0
        if op in _FLIP:
            a, b = of(t[1]), of(t[2])
            if a.mono is None or b.mono is None:
                return None
            if b.mono == 0:
                return _FLIP[op] * a.mono
            if a.mono == 0:
                return -_FLIP[op] * b.mono
            return None
        if op == "not":
            d = condition(t[1])
            return None if d is None else -d
        if op in ("and", "or"):
            return _combine(condition(a) for a in t[1:])
        shape = of(t)
        return 0 if shape.mono == 0 else None

    def branches(arms: tuple) -> _Shape:
        kept = []  # the arms that may be taken, a decided condition's as the last
        for c, v in arms:
            if c is not None and c in decided:
                if decided[c]:
                    kept.append((None, v))
                    break
                continue
            kept.append((c, v))
            if c is None:
                break
        if len(kept) == 1:
            return of(kept[0][1])
        if not kept:
            return _Shape(0, 0, value="fails")  # no branch applies
        arms = tuple(kept)
        values = [of(v) for _, v in arms]
        switches = [0 if c is None else condition(c) for c, _ in arms]
        if all(d == 0 for d in switches):  # the same arm for every value of the parameter
            live = [v for v in values if v.value != "fails"] or values
            mono = _combine(v.mono for v in live)
            return _Shape(mono, *sum_sign(live)) if mono is not None else _UNKNOWN
        if len(arms) == 2 and arms[1][0] is None and switches[0]:
            on, off = values  # the first arm where the condition holds
            if on.value is None or off.value is None or "fails" in (on.value, off.value):
                return _UNKNOWN
            before, after = (off, on) if switches[0] == 1 else (on, off)
            jump = (after.value > before.value) - (after.value < before.value)
            return _Shape(jump, *sum_sign(values))
        return _UNKNOWN

    for i, t in steps:
        found[i] = of(t)
    return [of(t).mono for t in outputs]


def _renamed(t: tuple, names: dict) -> tuple:
    """Residual tree ``t`` with its slots (and parameters) renamed by ``names``."""
    op = t[0]
    if op == "s":
        return ("s", names.get(t[1], t[1]))
    if op in ("c", "!"):
        return t
    if op == "if":
        return ("if", *((None if c is None else _renamed(c, names), _renamed(v, names)) for c, v in t[1:]))
    return (op, *(_renamed(a, names) if isinstance(a, tuple) else a for a in t[1:]))


def staged(steps: list, outputs: list, n_params: int, fast) -> tuple:
    """The program split in two: the steps that no parameter in ``fast`` reaches (the first
    stage, a program of the same parameters that returns the values the rest reads) and the
    others (the second stage, a program of the parameters and those values, in that order):
    (first steps, first outputs, second steps, second outputs).  A caller that varies the
    ``fast`` parameters in its inner loop computes the first stage once per value of the
    others.  Every step is computed as before (steps are statements; only branches are
    lazy), so the two compute what the one did."""
    fast = set(fast)
    slow: dict = {}  # step -> no fast parameter reaches it
    for i, t in steps:
        slow[i] = all(slow[j] if j in slow else j not in fast for j in _slots(t))
    first = [(i, t) for i, t in steps if slow[i]]
    second = [(i, t) for i, t in steps if not slow[i]]
    read = sorted({j for _, t in second for j in _slots(t) if slow.get(j)}
                  | {j for t in outputs for j in _slots(t) if slow.get(j)})
    names = {j: n_params + k for k, j in enumerate(read)}  # the first stage's values: parameters
    top = n_params + len(read)
    names.update({i: top + k for k, (i, _) in enumerate(second)})
    return (first, [("s", j) for j in read],
            [(names[i], _renamed(t, names)) for i, t in second], [_renamed(t, names) for t in outputs])


def common_factors(steps: list, outputs: list, most: int = 64) -> tuple[list, list]:
    """``steps`` and ``outputs`` with every pair of factors that two or more products share
    computed once, as a step of its own placed before its first use (``x0 * x1`` in
    ``a * x0 * x1 + b * x0 * x1 * s9``), the most shared pair first, at most ``most``
    times.  For the strict backends (numpy), where every subexpression is computed anyway:
    an exact backend would compute a factor of a branch not taken."""
    trees = [t for _, t in steps] + list(outputs)
    slot = 1 + max([i for i, _ in steps] + [-1] + [i for t in trees for i in _slots(t)])
    made: list = []
    for _ in range(most):
        counts: dict = {}
        for t in trees:
            for node in (n for n in _subtrees(t) if n[0] == "*"):
                factors = sorted({a for a in node[1:] if a[0] != "c"}, key=repr)
                for i, a in enumerate(factors):
                    for b in factors[i + 1:]:
                        counts[(a, b)] = counts.get((a, b), 0) + 1
        if not counts:
            break
        pair, n = max(counts.items(), key=lambda kv: (kv[1], -len(repr(kv[0]))))
        if n < 2:
            break
        new = ("s", slot)
        trees = [_replace_pair(t, pair, new) for t in trees]
        made.append((slot, ("*", *pair)))
        slot += 1
    if not made:
        return steps, outputs
    body = list(zip([i for i, _ in steps], trees[:len(steps)]))
    # each new step right after the last step it reads (its uses all come later)
    after: dict = {}
    defined = {i: k for k, (i, _) in enumerate(body)}
    for m in made:
        where = max((defined[i] for i in _slots(m[1]) if i in defined), default=-1)
        defined[m[0]] = where
        after.setdefault(where, []).append(m)
    out = list(after.get(-1, []))
    for k, step in enumerate(body):
        out.append(step)
        out.extend(after.get(k, []))
    return out, trees[len(steps):]


def _replace_pair(t: tuple, pair: tuple, new: tuple) -> tuple:
    op = t[0]
    if op in ("c", "s", "!"):
        return t
    if op == "if":
        return ("if", *((None if c is None else _replace_pair(c, pair, new), _replace_pair(v, pair, new))
                        for c, v in t[1:]))
    args = [_replace_pair(x, pair, new) if isinstance(x, tuple) else x for x in t[1:]]
    if op == "*" and pair[0] in args and pair[1] in args:
        args.remove(pair[0])
        args.remove(pair[1])
        args.append(new)
        return ("*", *args) if len(args) > 1 else new
    return (op, *args)


# ---------------------------------------------------------------------------- backends
class Backend:
    """How a target language writes a residual program.  The shared printer
    (:meth:`source`) walks the trees; a backend gives each operation's text from its
    operands' texts, and says whether its branches are lazy (exact backends: a branch not
    taken is never computed, so it cannot divide by zero) or strict (numpy computes every
    branch and selects elementwise).

    Expressions deeper than :attr:`MAX_DEPTH` are split into temporaries; a lazy construct
    whose later operands need statements of their own becomes a local function (Python) or
    an arrow function (JavaScript) that returns early."""

    MAX_DEPTH = 40
    lazy = True
    floats = False  # float literals in its source (numpy)
    comment = "#"
    divides = False  # prints a * b / c (float backends) rather than a * b * c^-1

    def __init__(self) -> None:
        self.constants: list = []
        self.messages: list[str] = []
        self.temps = 0

    # the operations: operands are source texts ------------------------------------
    def const(self, value) -> str: raise NotImplementedError
    def slot(self, i: int) -> str: return f"s{i}"
    def param(self, i: int) -> str: return f"x{i}"
    def add(self, xs: list) -> str: raise NotImplementedError
    def mul(self, xs: list) -> str: raise NotImplementedError
    def power(self, x: str, e: int) -> str: raise NotImplementedError
    def root(self, x: str, e: Fraction) -> str: return self.fail("a root cannot be exact")
    def log(self, x: str) -> str: return self.fail("a logarithm cannot be exact")
    def extreme(self, op: str, xs: list) -> str: raise NotImplementedError
    def relation(self, op: str, a: str, b: str) -> str: raise NotImplementedError
    def logic(self, op: str, xs: list) -> str: raise NotImplementedError
    def negation(self, x: str) -> str: raise NotImplementedError
    def rounding(self, op: str, x: str) -> str: raise NotImplementedError
    def fail(self, message: str) -> str: raise NotImplementedError
    def select(self, arms: list, otherwise: str) -> str: raise NotImplementedError  # strict backends

    # statements ----------------------------------------------------------------
    def assign(self, name: str, text: str) -> str: raise NotImplementedError
    def function(self, params: list, body: list, outputs: list) -> list: raise NotImplementedError
    # lazy backends: a conditional expression, and a block that returns early
    def choose(self, c: str, v: str, otherwise: str) -> str: raise NotImplementedError
    def block_open(self, name: str) -> str: raise NotImplementedError
    block_end: str | None = None
    def call(self, name: str) -> str: raise NotImplementedError
    def if_open(self, c: str) -> str: raise NotImplementedError
    if_close: str | None = None
    def returns(self, v: str) -> str: raise NotImplementedError
    indent_unit = "    "

    @staticmethod
    def _fold(fn: str, xs: list) -> str:
        """``fn`` applied pairwise, left to right: fn(fn(a, b), c)."""
        out = xs[0]
        for x in xs[1:]:
            out = f"{fn}({out}, {x})"
        return out

    def conditional(self, arms: list) -> str:
        """The value of the first arm whose condition holds, as one (lazy) expression."""
        out = arms[-1][1]
        for c, v in reversed(arms[:-1]):
            out = self.choose(c, v, out)
        return out

    def lazy_block(self, name: str, arms: list, indent: str) -> list:
        """``name`` set by a block that tries the arms in order and returns at the first whose
        condition holds: a local function (Python) or an arrow function (JavaScript) defined
        at the program's first level, however deep the branch it serves (its body reads only
        the program's slots and its own temporaries), and called where the value is needed.
        An arm: (its condition's statements, the condition or None for 'otherwise', its
        value's statements, the value), printed at the function's own level."""
        top = self.indent_unit
        inner = top + self.indent_unit
        lines = [top + self.block_open(name)]
        for c_lines, c, v_lines, v in arms:
            lines.extend(_reindent(c_lines, inner))
            if c is None:
                lines.extend(_reindent(v_lines, inner))
                lines.append(inner + self.returns(v))
                break
            lines.append(inner + self.if_open(c))
            lines.extend(_reindent(v_lines, inner + self.indent_unit))
            lines.append(inner + self.indent_unit + self.returns(v))
            if self.if_close:
                lines.append(inner + self.if_close)
        if self.block_end:
            lines.append(top + self.block_end)
        self._defs.extend(lines)
        return [indent + self.call(name)]

    def _const_index(self, value) -> int:
        for i, c in enumerate(self.constants):
            if type(c) is type(value) and c == value:
                return i
        self.constants.append(value)
        return len(self.constants) - 1

    def _message(self, message: str) -> int:
        if message not in self.messages:
            self.messages.append(message)
        return self.messages.index(message)

    def temp(self) -> str:
        self.temps += 1
        return f"t{self.temps}"

    # the printer -------------------------------------------------------------
    def source(self, steps: list, outputs: list, n_params: int, labels: dict | None = None) -> str:
        """The program as one function of the varying values (in order) that returns the
        outputs (residual trees: constants or slots), as a tuple or array of them.
        ``labels``: slot -> the rule it computes, written as a comment after the step."""
        self._n_params = n_params
        self._defs: list[str] = []
        steps = live(steps, outputs)
        if not self.lazy and len(steps) <= 256:  # a sweep's program; not the checks' thousands of steps
            steps, outputs = common_factors(steps, outputs)
        body: list[str] = []
        for i, t in steps:
            body += self.step(i, t, labels.get(i) if labels else None)
        outs = [self.output(t, body) for t in outputs]
        return "\n".join(self.function([self.param(i) for i in range(n_params)], self._defs + body, outs)) + "\n"

    def step(self, i: int, t: tuple, label: str | None) -> list[str]:
        """The statements of step ``i`` (its temporaries, then its slot's assignment)."""
        lines: list[str] = []
        line = self.indent_unit + self.assign(self.slot(i), self.expr(t, lines, self.indent_unit))
        return lines + [line + (f"  {self.comment} {label}" if label else "")]

    def output(self, t: tuple, body: list) -> str:
        """An output's expression (its temporaries added to ``body``)."""
        return self.expr(t, body, self.indent_unit)

    def expr(self, t: tuple, out: list, indent: str) -> str:
        return self._expr(t, out, indent)[0]

    def _hoist(self, text: str, out: list, indent: str) -> tuple[str, int]:
        name = self.temp()
        out.append(indent + self.assign(name, text))
        return name, 0

    def _expr(self, t: tuple, out: list, indent: str) -> tuple[str, int]:
        """(text, depth) of residual tree ``t``; statements it needs are added to ``out``."""
        op = t[0]
        if op == "c":
            return self.const(t[1]), 0
        if op == "s":
            return (self.param(t[1]) if t[1] < self._n_params else self.slot(t[1])), 0
        if op == "!":
            return self.fail(t[1]), 1
        if op == "if":
            return self._branches(t[1:], out, indent)
        if op in ("and", "or") and self.lazy:
            return self._lazy_logic(op, t[1:], out, indent)
        if op == "*" and self.divides and any(a[0] == "^" and a[2] < 0 for a in t[1:]):
            # a * b / (c * d): numerators and denominators (float backends)
            num = [self._expr(a, out, indent) for a in t[1:] if not (a[0] == "^" and a[2] < 0)]
            den = [self._expr(a[1] if a[2] == -1 else ("^", a[1], -a[2]), out, indent)
                   for a in t[1:] if a[0] == "^" and a[2] < 0]
            text = self.quotient([p[0] for p in num], [p[0] for p in den])
            depth = 2 + max(p[1] for p in num + den)
            return self._hoist(text, out, indent) if depth > self.MAX_DEPTH else (text, depth)
        operands = t[1:2] if op in ("^", "root", "log") else t[1:]  # (an exponent is not one)
        parts = [self._expr(a, out, indent) for a in operands]
        xs = [p[0] for p in parts]
        depth = 1 + max((p[1] for p in parts), default=0)
        if op == "+":
            text = self.add(xs)
        elif op == "*":
            text = self.mul(xs)
        elif op == "^":
            text = self.power(xs[0], t[2])
        elif op == "root":
            text = self.root(xs[0], t[2])
        elif op == "log":
            text = self.log(xs[0])
        elif op in ("max", "min"):
            text = self.extreme(op, xs)
            depth += len(xs)
        elif op in _RELATIONS:
            text = self.relation(op, *xs)
        elif op in ("and", "or"):
            text = self.logic(op, xs)
            depth += len(xs)
        elif op == "not":
            text = self.negation(xs[0])
        elif op in ("ceil", "floor"):
            text = self.rounding(op, xs[0])
        else:
            raise ValueError(f"no source for {op!r}")
        if depth > self.MAX_DEPTH:
            return self._hoist(text, out, indent)
        return text, depth

    def _branches(self, arms: tuple, out: list, indent: str) -> tuple[str, int]:
        if not self.lazy:  # every arm computed, the first whose condition holds selected
            done = []
            for cond, value in arms:
                c = None if cond is None else self._expr(cond, out, indent)[0]
                done.append((c, self._expr(value, out, indent)[0]))
            otherwise = self.fail("no branch applies")
            if done[-1][0] is None:
                otherwise = done.pop()[1]
            text = self.select(done, otherwise)
            return self._hoist(text, out, indent) if len(done) > 4 else (text, 2 * len(done) + 1)
        name = self.temp()
        inner = indent + self.indent_unit
        printed = []
        depths = [0]
        for cond, value in arms:
            c_lines: list = []
            c, dc = (None, 0) if cond is None else self._expr(cond, c_lines, inner)
            v_lines: list = []
            v, dv = self._expr(value, v_lines, inner)
            printed.append((c_lines, c, v_lines, v))
            depths.append(max(dc, dv))
        if printed[-1][1] is not None:
            printed.append(([], None, [], self.fail("no branch applies")))
        depth = 2 * len(printed) + max(d for d in depths)
        if all(not c_lines and not v_lines for c_lines, _, v_lines, _ in printed) and depth <= self.MAX_DEPTH:
            self.temps -= 1  # no statements: one expression (Python's and JavaScript's are lazy)
            return self.conditional([(c, v) for _, c, _, v in printed]), depth
        lines = self.lazy_block(name, printed, indent)
        out.extend(lines)
        return name, 0

    def _lazy_logic(self, op: str, args: tuple, out: list, indent: str) -> tuple[str, int]:
        """``a and b and c``: the later operands computed only where the earlier ones do not
        decide; printed as an ``if`` where an operand needs statements of its own."""
        inner = indent + self.indent_unit
        done = []
        for a in args:
            lines: list = []
            done.append((lines, self._expr(a, lines, inner)[0]))
        if all(not lines for lines, _ in done):
            return self.logic(op, [x for _, x in done]), 1 + len(done)
        # or: the first true operand; and: the first false one; else the last
        decided = self.const(op == "or")
        arms = []
        for lines, x in done[:-1]:
            cond = x if op == "or" else self.negation(x)
            arms.append((lines, cond, [], decided))
        lines, x = done[-1]
        arms.append((lines, None, [], x))
        name = self.temp()
        out.extend(self.lazy_block(name, arms, indent))
        return name, 0


def _inv(x):
    """1 / x exactly (a printed program's ``x ** -1``)."""
    if x == 0:
        raise ZeroDivisionError("division by zero")
    return Fraction(1, x) if type(x) is int else 1 / x


def _div(a, b):
    """a / b exactly: an int where b divides a (most divisions of a layout: a size by tp, a
    count by dp), which keeps what follows in int arithmetic, else a Fraction."""
    if b == 0:
        raise ZeroDivisionError("division by zero")
    if type(a) is int and type(b) is int:
        q, r = divmod(a, b)
        return Fraction(a, b) if r else q
    return a / b  # a Fraction on either side: exact


class PythonExact(Backend):
    """Exact Python: ints, :class:`fractions.Fraction` for what is not whole (from the
    constants table ``_K``), Python's own ``max``, ``min`` and conditional evaluation."""

    def const(self, value) -> str:
        if value is True or value is False:
            return repr(value)
        if type(value) is int:
            return repr(value) if value >= 0 else f"({value!r})"
        return f"_K[{self._const_index(value)}]"

    divides = True  # a * b / c as _div(a * b, c): a whole quotient stays an int

    def add(self, xs): return "(" + " + ".join(xs) + ")"
    def mul(self, xs): return "(" + " * ".join(xs) + ")"

    def quotient(self, num, den):
        top = " * ".join(num) if num else "1"
        return f"_div({top}, " + (den[0] if len(den) == 1 else "(" + " * ".join(den) + ")") + ")"

    def power(self, x, e):
        if e >= 0:
            return f"({x} ** {e})"
        return f"_inv({x} ** {-e})" if e != -1 else f"_inv({x})"

    def extreme(self, op, xs): return f"{op}({', '.join(xs)})"
    def relation(self, op, a, b): return f"({a} {op} {b})"
    def logic(self, op, xs): return "(" + f" {op} ".join(xs) + ")"
    def negation(self, x): return f"(not {x})"
    def rounding(self, op, x): return f"_{op}({x})"
    def fail(self, message): return f"_no({self._message(message)})"
    def assign(self, name, text): return f"{name} = {text}"

    def function(self, params, body, outputs):
        return [f"def program({', '.join(params)}):", *body,
                self.indent_unit + "return (" + "".join(o + ", " for o in outputs).rstrip() + ")"]

    def choose(self, c, v, otherwise): return f"({v} if {c} else {otherwise})"
    def block_open(self, name): return f"def _{name}():"
    def call(self, name): return f"{name} = _{name}()"
    def if_open(self, c): return f"if {c}:"
    if_close = None
    def returns(self, v): return f"return {v}"

    def namespace(self) -> dict:
        messages = tuple(self.messages)

        def no(k):
            raise Unsupported(messages[k])

        return {"_K": tuple(self.constants), "_no": no, "_inv": _inv, "_div": _div, "_ceil": math.ceil,
                "_floor": math.floor, "max": max, "min": min}


class JavaScript(Backend):
    """JavaScript with exact rationals: every number a value of the page's small runtime
    ``Q`` (BigInt numerator and denominator; :data:`JS_RUNTIME`), every operation a call of
    it, branches and ``and``/``or`` lazy (arrow functions that return early)."""

    indent_unit = "  "
    comment = "//"

    def const(self, value) -> str:
        if value is True or value is False:
            return "true" if value else "false"
        value = Fraction(value)
        if value.denominator == 1:
            return f"Q.int({value.numerator}n)"
        return f"Q.frac({value.numerator}n, {value.denominator}n)"

    def add(self, xs): return self._fold("Q.add", xs)
    def mul(self, xs): return self._fold("Q.mul", xs)

    def power(self, x, e): return f"Q.pow({x}, {e})"
    def extreme(self, op, xs): return self._fold(f"Q.{op}", xs)
    def relation(self, op, a, b): return f"Q.{_JS_RELATIONS[op]}({a}, {b})"
    def logic(self, op, xs): return "(" + (" && " if op == "and" else " || ").join(xs) + ")"
    def negation(self, x): return f"(!{x})"
    def rounding(self, op, x): return f"Q.{op}({x})"
    def fail(self, message): return f"Q.fail({_js_string(message)})"
    def assign(self, name, text): return f"const {name} = {text};"

    def __init__(self, name: str = "program") -> None:
        super().__init__()
        if not name.isidentifier():
            raise ValueError(f"not a JavaScript function name: {name!r}")
        self.name = name

    def function(self, params, body, outputs):
        return [f"function {self.name}({', '.join(params)}) {{", *body,
                self.indent_unit + "return [" + ", ".join(outputs) + "];", "}"]

    def choose(self, c, v, otherwise): return f"({c} ? {v} : {otherwise})"
    def block_open(self, name): return f"const _{name} = () => {{"
    block_end = "};"
    def call(self, name): return f"const {name} = _{name}();"
    def if_open(self, c): return f"if ({c}) {{"
    if_close = "}"
    def returns(self, v): return f"return {v};"


class JavaScriptOnDemand(JavaScript):
    """JavaScript whose steps are computed on demand: each slot a memoised thunk
    (``Q.once``) holding its own temporaries, each output a thunk too.  The program returns
    the thunks; a caller computes only the outputs it reads, so a rule it does not need
    (one engine's figure, when another serves) cannot stop it, as the exact Python path
    computes only the rules asked for.  A step that computes a rule passes ``Q.once`` the rule's
    index in :attr:`rule_names`: a runtime other than the exact one (the page's polynomials,
    which keep some rules as names) can tell the rules apart (with
    :attr:`Specialiser.every_rule_a_step`, each rule has a step).  (The calculator page,
    ``memform web``.)"""

    def slot(self, i: int) -> str:
        return f"s{i}()"

    def source(self, steps: list, outputs: list, n_params: int, labels: dict | None = None) -> str:
        self.rule_names: list[str] = []
        return super().source(steps, outputs, n_params, labels)

    def step(self, i, t, label):
        ind, inner = self.indent_unit, self.indent_unit * 2
        local: list[str] = []
        text = self.expr(t, local, inner)
        rule = ""
        if label:  # its name is rule_names[index] (no comment per step: the page's weight)
            self.rule_names.append(label)
            rule = f", {len(self.rule_names) - 1}"
        if local:
            return [f"{ind}const s{i} = Q.once(() => {{", *local, f"{inner}return {text};", f"{ind}}}{rule});"]
        return [f"{ind}const s{i} = Q.once(() => {text}{rule});"]

    def output(self, t, body):
        local: list[str] = []
        text = self.expr(t, local, self.indent_unit * 2)
        return f"() => {{ {' '.join(line.strip() for line in local)} return {text}; }}" if local else f"() => {text}"


def _js_string(value) -> str:
    """``value`` (a string, a list or dict of them) as a JavaScript literal that is safe
    inside an HTML script element."""
    return json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


_JS_RELATIONS = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}

#: the JavaScript backend's runtime: exact rationals over BigInt (arithmetic only; every
#: formula comes from the generated program)
JS_RUNTIME = r"""
const Q = (() => {
  const gcd = (a, b) => { a = a < 0n ? -a : a; b = b < 0n ? -b : b; while (b) { [a, b] = [b, a % b]; } return a; };
  const make = (n, d) => {
    if (d === 0n) throw new Error("division by zero");
    if (d < 0n) { n = -n; d = -d; }
    const g = gcd(n, d) || 1n;
    return { n: n / g, d: d / g };
  };
  const cmp = (a, b) => { const x = a.n * b.d, y = b.n * a.d; return x < y ? -1 : x > y ? 1 : 0; };
  const floor = (a) => { const q = a.n / a.d; return { n: (a.n % a.d !== 0n && a.n < 0n) ? q - 1n : q, d: 1n }; };
  const ceil = (a) => { const q = a.n / a.d; return { n: (a.n % a.d !== 0n && a.n > 0n) ? q + 1n : q, d: 1n }; };
  return {
    int: (n) => ({ n, d: 1n }),
    frac: (n, d) => make(n, d),
    add: (a, b) => make(a.n * b.d + b.n * a.d, a.d * b.d),
    mul: (a, b) => make(a.n * b.n, a.d * b.d),
    pow: (a, e) => {
      if (e < 0) { if (a.n === 0n) throw new Error("division by zero"); a = make(a.d, a.n); e = -e; }
      return make(a.n ** BigInt(e), a.d ** BigInt(e));
    },
    max: (a, b) => (cmp(a, b) >= 0 ? a : b),
    min: (a, b) => (cmp(a, b) <= 0 ? a : b),
    eq: (a, b) => cmp(a, b) === 0, ne: (a, b) => cmp(a, b) !== 0,
    lt: (a, b) => cmp(a, b) < 0, le: (a, b) => cmp(a, b) <= 0,
    gt: (a, b) => cmp(a, b) > 0, ge: (a, b) => cmp(a, b) >= 0,
    floor, ceil,
    fail: (message) => { throw new Error("cannot evaluate exactly: " + message); },
    text: (a) => (a.d === 1n ? a.n.toString() : a.n.toString() + "/" + a.d.toString()),
    once: (f) => { let done = false, v; return () => { if (!done) { v = f(); done = true; } return v; }; },
  };
})();
"""


# ---------------------------------------------------------------- standalone modules
def module(backend: Backend, steps: list, outputs: list, varying: tuple, rules: tuple, options: dict,
           title: str, labels: dict | None = None) -> str:
    """A residual program as a file of its own: a Python module (:class:`PythonExact`:
    exact; :class:`engine.compile.lambdas.Numpy`: float64 over arrays) or a JavaScript script
    (:class:`JavaScript`: exact rationals)
    with the program, the names it takes and gives (``VARYING``, ``RULES``), the codes of
    the options among them (``CODES``) and ``evaluate(values)``: {rule: value} from {name:
    value} (an option by its choice name or code).  Names and messages are string literals
    only; importing the module runs nothing but its definitions."""
    codes = {n: {c: (int(c) if numeric else i) for i, c in enumerate(choices)}
             for n, (choices, numeric) in options.items() if n in varying}
    if isinstance(backend, JavaScript):
        body = backend.source(steps, outputs, len(varying), labels)
        return "\n".join([
            *("// " + line for line in title.splitlines()),
            '"use strict";', JS_RUNTIME.strip(), body.rstrip(),
            f"const VARYING = {_js_string(list(varying))};",
            f"const RULES = {_js_string(list(rules))};",
            f"const CODES = {_js_string(codes)};",
            "// {rule: exact value as text} for {name: value}: an option by its choice name or code,",
            "// a number as a string or a number ('3/2' for a fraction)",
            "function evaluate(values) {",
            "  const args = VARYING.map((n) => {",
            "    let v = values[n];",
            "    if (n in CODES && typeof v === 'string' && v in CODES[n]) { v = CODES[n][v]; }",
            "    const [a, b] = String(v).split('/');",
            "    return b === undefined ? Q.int(BigInt(a)) : Q.frac(BigInt(a), BigInt(b));",
            "  });",
            "  const out = program(...args);",
            "  return Object.fromEntries(RULES.map((r, i) => [r, Q.text(out[i])]));",
            "}",
            "if (typeof module !== 'undefined') { module.exports = { VARYING, RULES, CODES, program, evaluate, Q }; }",
            ""])
    body = backend.source(steps, outputs, len(varying), labels)
    lines = ["# " + line for line in title.splitlines()]
    if backend.floats:
        lines += ["import numpy as _np", "", "_NAN = _np.nan"]
    else:
        lines += ["import math", "from fractions import Fraction", "",
                  "_K = (" + "".join(f"Fraction({c.numerator}, {c.denominator}), " for c in backend.constants) + ")",
                  f"_MESSAGES = {tuple(backend.messages)!r}", "_ceil = math.ceil", "_floor = math.floor", "", "",
                  "def _no(k):", "    raise ValueError('cannot evaluate exactly: ' + _MESSAGES[k])", "", "",
                  inspect.getsource(_inv), "", inspect.getsource(_div)]
    lines += ["", f"VARYING = {tuple(varying)!r}", f"RULES = {tuple(rules)!r}", f"CODES = {codes!r}", "", "",
              body.rstrip(), "", "",
              "def evaluate(values):",
              '    """{rule: value} for {name: value} of every name in VARYING (an option by its choice',
              '    name or its code)."""',
              "    args = [CODES[n][values[n]] if isinstance(values[n], str) else values[n] for n in VARYING]",
              "    return dict(zip(RULES, map(_plain, program(*args))))" if not backend.floats else
              "    return dict(zip(RULES, program(*args)))", ""]
    if not backend.floats:
        at = lines.index("def evaluate(values):")
        lines[at:at] = ["def _plain(v):", "    return v.numerator if type(v) is Fraction and v.denominator == 1 else v",
                        "", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------- loading Python source
#: the names a generated Python program may use besides its slots, temporaries and keywords
_HELPERS = frozenset({"program", "_K", "_no", "_inv", "_div", "_ceil", "_floor", "max", "min", "_np", "_NAN",
                      "power", "log", "maximum", "minimum", "logical_and", "logical_or", "logical_not",
                      "ceil", "floor", "where"})
_FLOAT = re.compile(r"(?<![\w.])\d+\.\d+(?:e[+-]\d+)?(?![\w.])|(?<![\w.])\d+e[+-]\d+(?![\w.])")
_WORD = re.compile(r"[A-Za-z_]\w*|\d\w*")
_LOCAL_NAME = re.compile(r"_?[sxt]\d+")


def _checked_source(source: str, floats: bool) -> str:
    """``source`` when it holds only what a printed program has (see the module's doc):
    names from :data:`_HELPERS`, slots, parameters, temporaries and keywords; numbers as
    decimal integers (and floats where ``floats``); operators and brackets; no strings,
    comments or escapes.  Anything else is a bug in the printer, refused before anything is
    compiled."""
    text = _FLOAT.sub(" ", source) if floats else source
    odd = set(text) - _SOURCE_CHARACTERS
    if odd:
        raise ValueError(f"a generated program holds {''.join(sorted(odd))!r}")
    for word in set(_WORD.findall(text)):
        if not (word in _HELPERS or word.isdigit() or word in _KEYWORDS or _LOCAL_NAME.fullmatch(word)):
            raise ValueError(f"a generated program holds {word!r}")
    return source


_KEYWORDS = frozenset({"def", "return", "if", "else", "not", "and", "or", "True", "False"})
_SOURCE_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_ \n()[],.:=<>!+-*/")


def load_python(backend: PythonExact, steps: list, outputs: list, n_params: int):
    """The residual program printed by ``backend`` (:class:`PythonExact` or
    :class:`Numpy`), compiled into a function of the varying values."""
    try:
        source = _checked_source(backend.source(steps, outputs, n_params), backend.floats)
        namespace = backend.namespace()
        code = compile(source, "<memform program>", "exec")  # noqa: eval-ok  printed by this module, tokens checked
    except (SyntaxError, RecursionError, MemoryError):  # too many levels of nested branches
        raise ResourceLimitError("the rules nest too deeply to be compiled",
                                 hint="split a deeply nested rule into rules of their own") from None
    exec(code, namespace)  # noqa: eval-ok  (see _checked_source)
    return namespace["program"]


