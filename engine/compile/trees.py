"""The compiled form of the library: plain data, kept in the cache, read without sympy.

When the shipped library is resolved (with sympy), :mod:`engine.compile.compiler` writes its
rules out as trees of tuples, its declarations as plain values; :mod:`engine.compile.exact`
folds those trees in exact :class:`fractions.Fraction` arithmetic, as
:meth:`engine.compile.model.Scenario.evaluate` does with sympy, and
:mod:`engine.answers.quick` answers ``memform estimate`` from them.  This module reads and
writes the files (through :mod:`engine.store`: plain JSON behind an HMAC, never a pickle,
named for the hash of the rule files, the grammar and the engine's source) and checks a
value against the declarations as :func:`engine.lang.values.validate` does.  Whatever it
cannot accept exactly as the full path would raises :class:`Unsupported` and the full path
answers, with its errors.
"""
from __future__ import annotations

import json
from collections.abc import Mapping

from ..lang.constants import MAX_VALUE, Unsupported, parse_value
from ..store import KEEP_OTHERS, decode, encode, read, source_key, write

#: the layout of the compiled form; a file of another format is ignored
FORMAT = 4


#: the parts of the compiled form kept entry by entry, each decoded when first asked for
#: (:class:`Kept`): a command reads under half of the rules and two of the presets
KEPT_EACH = ("rules", "presets")


class Kept(Mapping):
    """A part of the compiled form as it is kept (:data:`KEPT_EACH`): each entry's value as the
    text of its own encoding (:func:`engine.store.encode`), decoded the first time it is asked
    for.  Decoding every rule's tree took longer than the rest of an answer from them."""

    def __init__(self, texts: dict):
        self._texts = texts
        self._trees: dict = {}

    def __getitem__(self, name):
        try:
            return self._trees[name]
        except KeyError:
            tree = self._trees[name] = decode(self._texts[name])  # KeyError: not a rule
            return tree

    def __contains__(self, name):
        return name in self._texts

    def __iter__(self):
        return iter(self._texts)

    def __len__(self):
        return len(self._texts)


def _key() -> str | None:
    return source_key()


def _read(kind: str, key: str):
    """The stored ``kind`` for sources ``key``, when it is of this format and well formed."""
    stored = read(kind, key)
    if (isinstance(stored, dict) and stored.get("format") == FORMAT and stored.get("key") == key
            and (kind != "formulas" or _formula_columns(stored.get("formulas")))
            and (kind != "columns" or _dependent_columns(stored.get("columns")))):
        if kind == "compiled":
            for part in KEPT_EACH:
                texts = stored.get(part)
                if not (isinstance(texts, dict) and all(isinstance(t, str) for t in texts.values())):
                    return None
                stored[part] = Kept(texts)
        return stored
    return None


def _formula_columns(formulas) -> bool:
    """Whether ``formulas`` maps keys of :func:`_formula_key` to {rule: formula text}.  (The
    compiled form is compared whole with a fresh one by :func:`ensure` instead.)"""
    return isinstance(formulas, dict) and all(
        isinstance(k, tuple) and isinstance(column, dict)
        and all(isinstance(n, str) and isinstance(f, str) for n, f in column.items())
        for k, column in formulas.items())


def _dependent_columns(columns) -> bool:
    """Whether ``columns`` maps the names a column depends on to {their values: the column}
    (:func:`engine.answers.quick._kept_column`)."""
    return isinstance(columns, dict) and all(
        isinstance(names, tuple) and all(isinstance(n, str) for n in names) and isinstance(kept, dict)
        and all(isinstance(k, tuple) and len(k) == len(names) and all(isinstance(v, str) for v in k)
                for k in kept)
        and _formula_columns(kept)
        for names, kept in columns.items())


def _write(kind: str, key: str, data: dict, keep: int = KEEP_OTHERS) -> None:
    if kind == "compiled":  # each rule's tree and each preset kept as text, read when asked for (Kept)
        data = dict(data, **{part: {name: json.dumps(encode(value), separators=(",", ":"))
                                    for name, value in data[part].items()} for part in KEPT_EACH})
    write(kind, key, dict(data, format=FORMAT, key=key), keep)


def validate(compiled: dict, name: str, value):
    """``value`` for ``name`` as the full path's :func:`engine.lang.values.validate` returns it,
    when that accepts it; anything it would refuse raises :class:`Unsupported`."""
    if isinstance(value, tuple) and (abs(value[0]) > MAX_VALUE or value[0].denominator > MAX_VALUE):
        raise Unsupported("too large")  # as values.MAX_VALUE
    if name in compiled["options"]:
        choices, _ = compiled["options"][name]
        if isinstance(value, tuple):
            number, dim = value
            value = str(number.numerator) if dim == 0 and number.denominator == 1 else None
        if value not in choices:
            raise Unsupported(f"not a choice of '{name}'")
        return value
    if isinstance(value, str):
        raise Unsupported(f"'{name}' takes a number")
    number, dim = value
    if name in compiled["inputs"]:
        want, integer, lower, strict, upper = compiled["inputs"][name]
        if dim != want and not (want == 1 and dim == 0):
            raise Unsupported("unit")
        if integer and number.denominator != 1:
            raise Unsupported("not whole")
        if lower is not None and not (number > lower if strict else number >= lower):
            raise Unsupported("below the domain")
        if upper is not None and not number <= upper:
            raise Unsupported("above the domain")
        return number
    if name in compiled["rules"]:
        want, integer, _ = compiled["rules"][name]
        lower, strict, upper = compiled["rule_domains"].get(name, (None, False, None))
        if dim != want and not (want == 1 and dim == 0):
            raise Unsupported("unit")
        if (integer and number.denominator != 1) or number < 0:
            raise Unsupported("not a valid pin")
        if isinstance(lower, str) or isinstance(upper, str):
            raise Unsupported("a bound known only in the scenario")  # the full path checks it there
        if lower is not None and not (number > lower if strict else number >= lower):
            raise Unsupported("below the domain")
        if upper is not None and not number <= upper:
            raise Unsupported("above the domain")
        return number
    raise Unsupported(f"unknown name '{name}'")  # the full path says which names are close


def _setting(compiled: dict, text: str):
    if "=" not in text:
        raise Unsupported("no '='")
    name, raw = (p.strip() for p in text.split("=", 1))
    if not raw:
        raise Unsupported("no value")
    return name, validate(compiled, name, parse_value(raw))
