"""Exact answers in a loop: the compiled library specialised to what stays fixed.

``Scenario.with_values(...).evaluate(rule)`` substitutes into sympy expressions: tens of
milliseconds per configuration, and its caches grow with every configuration seen.  A loop
over configurations (a sweep in a notebook, a search of one's own) asks the same rules again
and again with a few values changed.  :class:`Evaluator` takes the library's plain-data form
(:func:`engine.compile.compiler.compile_library`, the trees ``memform estimate`` evaluates without
sympy), fixes the model, the GPU, the options and every value that is not named as varying,
and folds everything those decide: the branches of each option's ``match`` and ``if``, the
model's sizes, whole rules that do not depend on the varying names.  What is left is a
straight-line program over the varying values, one step per rule that still depends on
them, printed as Python source and compiled (:mod:`engine.compile.codegen`, its exact
backend), evaluated with exact integers and :class:`fractions.Fraction`.  Memory is
the program's, whatever the number of configurations.

>>> ev = Evaluator("llama2-7b", "total", varying=("micro_batch", "seq_len"))
>>> ev(micro_batch=1, seq_len=2048) == ev(seq_len=2048, micro_batch=1)
True
>>> evaluate("llama2-7b", "n_params")
Fraction(6738415616, 1)

With nothing varying, the same specialiser folds every rule to its value: that is how
:func:`engine.compile.exact.evaluate_rules` answers ``memform estimate`` without sympy (``tests/test_fast.py``
holds it to the sympy path).  ``tests/test_exact.py`` checks the specialised program against
the folded one for every rule of every model preset, and against the sympy path for the
top-level rules; ``bench/run.py`` measures configurations per second.
"""
from __future__ import annotations

import weakref
from collections import OrderedDict
from fractions import Fraction
from typing import Iterable

from ..errors import DomainError, EngineError, UnknownNameError, did_you_mean
from ..lang.constants import MAX_BITS, MAX_VALUE, Unsupported
from ..lazy import lazy
from . import codegen
from .codegen import PythonExact, Specialiser, load_python, plain
from .trees import _key, _read, validate

compiler = lazy("engine.compile.compiler")  # sympy: only where the cache holds no compiled form
cache = lazy("engine.compile.cache")
lambdas = lazy("engine.compile.lambdas")  # numpy: only for a numpy module

__all__ = ["Evaluator", "evaluate"]



def number(options: dict, name: str, value):
    """A value as a program computes with it: an option's code (its index, or its number
    for a numeric option such as zero_stage), else an exact number (:func:`plain`)."""
    if name in options:
        choices, numeric = options[name]
        return int(value) if numeric else choices.index(value)
    return plain(Fraction(value))


def exact_values(values: dict) -> dict:
    """A scenario's values (choice names, sympy numbers) as the compiled library takes them:
    choice names and Fractions."""
    return {n: (v if isinstance(v, str) else Fraction(int(v.p), int(v.q))) for n, v in values.items()}


def bindings(compiled: dict, values: dict, varying=()) -> tuple[dict, dict]:
    """``values`` (choice names, numbers) but the ``varying`` names, split into the inputs and
    options a :class:`engine.compile.codegen.Specialiser` fixes and the rules it pins."""
    fixed, pins = {}, {}
    for name, value in values.items():
        if name not in varying:
            (pins if name in compiled["rules"] else fixed)[name] = number(compiled["options"], name, value)
    return fixed, pins


class Evaluator:
    """Rules of one model (and GPU) as an exact function of the names in ``varying``.

    ``values`` fixes inputs, options (by choice name) and rule pins beside the presets; the
    names in ``varying`` (inputs, options or rules) are given at each call.  ``rules`` is one
    rule name (a call returns its value) or several (a call returns {rule: value}).
    ``library``: a :class:`engine.Library` of one's own (a user's rule files); by default the
    shipped one, from the cache when it is there (no sympy).

    >>> ev = Evaluator("llama2-70b", ("weights", "total"), gpu="h100-80g",
    ...                values={"zero_stage": 3}, varying=("dp",))
    >>> ev(dp=8)["weights"] == Fraction(68_976_648_192 * 2, 8)
    True
    """

    def __init__(self, model: str | None, rules: str | Iterable[str], gpu: str | None = None,
                 values: dict | None = None, varying: Iterable[str] = (), library=None) -> None:
        compiled = _compiled(library)
        self._setup(compiled, rules, varying, values or {})
        merged = dict(compiled["defaults"])
        for kind, name in (("model", model), ("gpu", gpu)):
            if name is not None:
                if (kind, name) not in compiled["presets"]:
                    known_presets = [n for k, n in compiled["presets"] if k == kind]
                    raise UnknownNameError(f"unknown {kind} '{name}'", hint=did_you_mean(name, known_presets))
                merged.update(compiled["presets"][(kind, name)])
        for name, value in (values or {}).items():
            merged[name] = self._checked(name, value)
        self._build(merged)

    @classmethod
    def of(cls, scenario, rules: str | Iterable[str], varying: Iterable[str] = ()) -> "Evaluator":
        """The rules of a :class:`engine.Scenario` (a preset's, a config.json's, with a user's
        rule files), its values fixed but those in ``varying``."""
        return cls.of_values(_compiled(scenario.library), rules, exact_values(scenario.values), varying)

    @classmethod
    def of_values(cls, compiled: dict, rules: str | Iterable[str], values: dict,
                  varying: Iterable[str] = ()) -> "Evaluator":
        """The rules of a compiled library under ``values`` (a whole scenario's: defaults and
        presets merged, choice names and Fractions, as :func:`evaluate_rules` takes them),
        those in ``varying`` given at each call."""
        self = cls.__new__(cls)
        self._setup(compiled, rules, varying, ())
        self._build(dict(values))
        return self

    def kept(self) -> tuple:
        """This evaluator as plain data (what the cache keeps): :meth:`of_kept` makes it
        again without specialising the library anew."""
        return (self.rules[0] if self._one else self.rules, self.varying, self._residual)

    @classmethod
    def of_kept(cls, compiled: dict, kept: tuple) -> "Evaluator":
        """The evaluator :meth:`kept` gave, over the same compiled library; its program is
        compiled on its first call (a caller may only want :meth:`line` or :meth:`staged`)."""
        rules, varying, residual = kept
        self = cls.__new__(cls)
        self._setup(compiled, rules, varying, ())
        self._residual = residual
        self._readers = tuple(self._reader(n) for n in self.varying)
        self._compile_on_call()
        return self

    def _compile_on_call(self) -> None:
        """The program compiled from the residual on the first call (a caller may only
        want :meth:`line` or :meth:`staged`, which compile their own)."""
        def first(*args):
            steps, outputs = self._residual[:2]
            self._program = load_python(PythonExact(), steps, outputs, len(self.varying))
            return self._program(*args)

        self._program = first

    def _setup(self, compiled: dict, rules, varying, values) -> None:
        self._compiled = compiled
        self._one = isinstance(rules, str)
        self.rules = (rules,) if self._one else tuple(rules)
        self.varying = tuple(varying)
        self._options = compiled["options"]
        known = {*compiled["inputs"], *compiled["options"], *compiled["rules"]}  # names (rules unread)
        for name in (*self.rules, *self.varying, *values):
            if name not in known:
                raise UnknownNameError(f"unknown name '{name}'", hint=did_you_mean(name, known))
        unknown_rule = next((r for r in self.rules if r not in compiled["rules"]), None)
        if unknown_rule:
            raise UnknownNameError(f"'{unknown_rule}' is not a rule", hint=did_you_mean(unknown_rule, compiled["rules"]))

    def _build(self, merged: dict) -> None:
        """The program, with the values in ``merged`` (choice names, Fractions) fixed but the
        varying ones."""
        fixed, pins = bindings(self._compiled, merged, self.varying)
        program = Specialiser(self._compiled["rules"], fixed, self.varying, pins)
        top = dict(program.top)
        outputs = [program.rule(r, top, frozenset()) for r in self.rules]
        self._residual = (program.steps, outputs, program.labels)
        self._program = load_python(PythonExact(), program.steps, outputs, len(self.varying))
        self._readers = tuple(self._reader(n) for n in self.varying)

    def _reader(self, name: str):
        """What a call does with the value of a varying name: the common cases (a whole
        number inside the input's domain, a choice) at once, the rest as :meth:`_checked`."""
        def slow(v):
            return self._number(name, self._checked(name, v))
        if name in self._options:
            choices, numeric = self._options[name]
            codes = {c: self._number(name, c) for c in choices}
            if numeric:
                codes.update({int(c): int(c) for c in choices})
            return lambda v: codes[v] if type(v) in (str, int) and v in codes else slow(v)
        entry = self._compiled["inputs"].get(name)
        if entry is None:
            return slow
        _, _, lower, strict, upper = entry
        low = -MAX_VALUE if lower is None else lower
        high = MAX_VALUE if upper is None else min(upper, MAX_VALUE)
        if strict:
            return lambda v: v if type(v) is int and low < v <= high else slow(v)
        return lambda v: v if type(v) is int and low <= v <= high else slow(v)

    # ------------------------------------------------------------------ values
    def _number(self, name: str, value):
        """An option's code or a number, as the program computes with it."""
        return number(self._options, name, value)

    def _checked(self, name: str, value):
        """``value`` for ``name`` as :func:`engine.compile.trees.validate` accepts it (a choice name, or
        an exact number: an int, a Fraction, or a float that is a whole number)."""
        if isinstance(value, bool) or not isinstance(value, (int, Fraction, float, str)):
            raise DomainError(f"'{name}' takes an int, a Fraction or a choice name, not {type(value).__name__}")
        if isinstance(value, float):
            if not value.is_integer():
                raise DomainError(f"'{name}' = {value!r}: give an exact number (an int or a Fraction)")
            value = int(value)
        given = value if isinstance(value, str) else (Fraction(value), self._dim(name))
        try:
            return validate(self._compiled, name, given)
        except Unsupported:
            raise DomainError(f"'{name}' cannot be {value!r}", hint=self._domain(name)) from None

    def _dim(self, name: str):
        entry = self._compiled["inputs"].get(name) or self._compiled["rules"].get(name)
        return entry[0] if entry else 0

    def _domain(self, name: str) -> str | None:
        if name in self._options:
            return "choices are " + ", ".join(self._options[name][0])
        entry = self._compiled["inputs"].get(name)
        if entry:
            _, integer, lower, strict, upper = entry
            parts = ["a whole number"] if integer else []
            if lower is not None:
                parts.append(f"{'>' if strict else '>='} {lower}")
            if upper is not None:
                parts.append(f"<= {upper}")
            return " and ".join(parts) or None
        return None

    # ------------------------------------------------------------------ calls
    def __call__(self, **values):
        if values.keys() != set(self.varying):
            missing = [n for n in self.varying if n not in values]
            extra = [n for n in values if n not in self.varying]
            raise EngineError("give exactly the varying names" + (f"; missing: {', '.join(missing)}" if missing else "")
                              + (f"; not varying here: {', '.join(extra)}" if extra else ""))
        args = [read(values[name]) for name, read in zip(self.varying, self._readers)]
        try:
            found = self._program(*args)
        except Unsupported as exc:
            raise EngineError(f"cannot evaluate exactly here: {exc}") from None
        except ZeroDivisionError:
            raise DomainError("a rule divides by zero for these values") from None
        out = []
        for v, rule in zip(found, self.rules):
            value = Fraction(v)
            if max(value.numerator.bit_length(), value.denominator.bit_length()) > MAX_BITS:
                raise DomainError(f"'{rule}' has more than {MAX_BITS:,} bits for these values")
            out.append(value)
        return out[0] if self._one else dict(zip(self.rules, out))

    def direction(self, name: str) -> tuple[int | None, list]:
        """How the first rule moves as varying ``name`` grows over whole values >= 1, where
        the program's shape shows it (:func:`engine.compile.codegen.monotone`): (1 never
        decreases, -1 never increases, 0 constant, None where it does not show; the junctions
        b at which the caller compares the values at b - 1 and b)."""
        steps, outputs, _ = self._residual
        return codegen.monotone(steps, outputs[:1], self.varying.index(name))[0]

    def line(self, name: str) -> "Evaluator | None":
        """Where the first rule is a line in varying ``name`` (the program shows it: degree at
        most one), an evaluator of it and its slope in ``name`` ({rule: value, "d rule/d name": slope}):
        its value at every other value of ``name`` without another call
        (:func:`engine.compile.codegen.slope`); else None.

        >>> ev = Evaluator("llama2-7b", "total", gpu="h100-80g", varying=("micro_batch", "dp"))
        >>> at = ev.line("micro_batch")(micro_batch=1, dp=8)
        >>> at["total"] + 2 * at["d total/d micro_batch"] == ev(micro_batch=3, dp=8)
        True
        """
        steps, outputs, labels = self._residual
        found = codegen.slope(steps, outputs[:1], self.varying.index(name))
        if found is None:
            return None
        other = Evaluator.__new__(Evaluator)
        other.__dict__.update(self.__dict__)
        other.rules, other._one = (self.rules[0], f"d {self.rules[0]}/d {name}"), False
        other._residual = (*found, labels)
        other._compile_on_call()
        return other

    def staged(self, slow) -> "Evaluator":
        """The same evaluator, for a loop whose inner names vary fastest: the part of the
        program that only the names in ``slow`` reach is computed once while they keep their
        values from one call to the next (the last values and what they gave are kept:
        memory stays flat), the rest at every call (:func:`engine.compile.codegen.staged`)."""
        steps, outputs, _ = self._residual
        n = len(self.varying)
        fast = [i for i, name in enumerate(self.varying) if name not in slow]
        first_steps, first_out, second_steps, second_out = codegen.staged(steps, outputs, n, fast)
        first = load_python(PythonExact(), first_steps, first_out, n)
        second = load_python(PythonExact(), second_steps, second_out, n + len(first_out))
        at = [i for i in range(n) if i not in fast]
        kept = [None, None]  # the slow values last seen, the first stage's values there

        def program(*args):
            key = [args[i] for i in at]
            if key != kept[0]:
                kept[1], kept[0] = first(*args), key
            return second(*args, *kept[1])

        other = Evaluator.__new__(Evaluator)
        other.__dict__.update(self.__dict__)
        other._program = program
        return other

    def module(self, target: str = "python", title: str = "") -> str:
        """This program as a file of its own (:func:`engine.compile.codegen.module`): a Python
        module (``python``: exact; ``numpy``: float64 over arrays) or a JavaScript script
        (``js``: exact rationals), with ``evaluate(values)`` over the varying names."""
        steps, outputs, labels = self._residual
        backend = {"python": PythonExact, "numpy": lambda: lambdas.Numpy(), "js": codegen.JavaScript}[target]()
        return codegen.module(backend, steps, outputs, self.varying, self.rules, self._options, title, labels)

    @property
    def steps(self) -> int:
        """How many rules (and rebound values) the program still computes per call."""
        return len(self._residual[0])


def evaluate_rules(compiled: dict, values: dict, names) -> dict[str, Fraction]:
    """The exact values of rules ``names`` under ``values`` (choice names and Fractions):
    :class:`engine.compile.codegen.Specialiser` with nothing varying, which folds every rule
    to its value (each rule once per binding); :class:`Unsupported` where one cannot be
    computed without sympy (a value missing, log2, no branch that applies)."""
    fixed, pins = bindings(compiled, values)
    program = Specialiser(compiled["rules"], fixed, (), pins)
    found = [program.rule(name, program.top, frozenset()) for name in names]
    if program.steps:  # only what cannot be folded: each raises Unsupported
        found = load_python(PythonExact(), program.steps, found, 0)()
    else:
        found = [v for _, v in found]
    out = {}
    for name, v in zip(names, found):
        value = Fraction(v)
        if max(value.numerator.bit_length(), value.denominator.bit_length()) > MAX_BITS:
            raise Unsupported(f"'{name}' is too large")
        out[name] = value
    return out


# ---------------------------------------------------------------- the shipped library
_COMPILED: dict | None = None
_OF_LIBRARY: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # a user's library's form
#: specialised programs kept by :func:`evaluate`, the least recently used dropped first
MAX_PROGRAMS = 64
_PROGRAMS: OrderedDict = OrderedDict()


def _compiled(library=None) -> dict:
    """The plain-data form of ``library``, or of the shipped library: from the cache when it
    holds it (no sympy), else compiled from a loaded library (and kept for this process)."""
    if library is not None:
        if library not in _OF_LIBRARY:
            _OF_LIBRARY[library] = compiler.compile_library(library)
        return _OF_LIBRARY[library]
    global _COMPILED
    if _COMPILED is None:
        key = _key()
        stored = _read("compiled", key) if key else None
        if stored is None:
            stored = compiler.compile_library(cache.load())
        _COMPILED = stored
    return _COMPILED


def evaluate(model: str | None, rule: str, gpu: str | None = None, **values) -> Fraction:
    """The exact value of ``rule`` for ``model`` (and ``gpu``) with ``values`` (numbers for
    inputs and pins, choice names for options): the same as
    ``Scenario.create(lib, model, gpu).with_values(**values).evaluate(rule)``, at the speed of
    a specialised :class:`Evaluator`.  Options and the set of names given select the program
    (kept, :data:`MAX_PROGRAMS` at most); numbers vary freely between calls.

    >>> evaluate("llama2-7b", "weights", zero_stage=3, dp=8) == 6_738_415_616 * 2 // 8
    True
    """
    options = _compiled()["options"]
    varying = tuple(sorted(n for n, v in values.items() if n not in options))
    fixed = tuple(sorted((n, v) for n, v in values.items() if n in options))
    key = (model, gpu, rule, varying, fixed)
    ev = _PROGRAMS.get(key)
    if ev is None:
        ev = _PROGRAMS[key] = Evaluator(model, rule, gpu, dict(fixed), varying)
        if len(_PROGRAMS) > MAX_PROGRAMS:
            _PROGRAMS.popitem(last=False)
    else:
        _PROGRAMS.move_to_end(key)
    return ev(**{n: values[n] for n in varying})
