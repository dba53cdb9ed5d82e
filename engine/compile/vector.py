"""Rules over many scenarios at once: the compiled trees evaluated with numpy (float64).

:mod:`engine.answers.quick` evaluates the library's plain-data trees exactly, one scenario at a
time; this module evaluates the same trees over arrays, one element per scenario, rule by
rule (each rule once per binding), without composing anything in sympy.  ``memform check``
samples every check this way: composing a check's sides over every option and input and
compiling them with lambdify took seconds per check (two minutes for the library's 30), and
the trees need none of it.  Branches are evaluated whole and selected with ``numpy.where``
(a division by zero in a branch not taken is not an error, as in the compiled sympy path);
values are floats, so a check compares them within a tolerance.
"""
from __future__ import annotations

import numpy as np

#: the operations a tree may hold for this evaluator; ("?", text) is none of them
SUPPORTED = frozenset({"n", "b", "v", "r", "+", "*", "^", "if", "==", "!=", "<", "<=", ">", ">=", "and",
                       "or", "not", "max", "min", "ceil", "floor", "@"})

#: an option's dtype where no dtype applies (sympy's NaN): NaN here too
NAN = ("?", "nan")

_FOLDS = {"+": np.add, "*": np.multiply, "and": np.logical_and, "or": np.logical_or, "max": np.maximum,
          "min": np.minimum}
_RELATIONS = {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
              ">=": np.greater_equal}


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
        elif op == "^":
            todo.append(t[1])
        elif op not in ("n", "b", "?"):
            todo.extend(t[1:])
    return seen, found, ok


class VectorEvaluator:
    """The trees of ``rules`` over ``env`` (name -> array of values, option codes as
    numbers), with ``pins``: rule -> (mask, values), the rule's value where ``mask`` holds."""

    def __init__(self, rules: dict, env: dict, pins: dict | None = None, parent: "VectorEvaluator | None" = None,
                 rebound: frozenset = frozenset()) -> None:
        self.rules, self.env, self.pins = rules, env, pins or {}
        self.memo: dict = {}
        # a binding with some names rebound (target[k = v]) takes from its parent every rule
        # that reads none of them
        self.parent, self.rebound = parent, rebound
        self.reads: dict = parent.reads if parent is not None else {}

    def rule(self, name: str):
        found = self.memo.get(name)
        if found is None:
            if self.parent is not None and not (self._reads(name) & self.rebound):
                found = self.memo[name] = self.parent.rule(name)
                return found
            value = self.value(self.rules[name][2])
            if name in self.pins:
                mask, pinned = self.pins[name]
                value = np.where(mask, pinned, value)
            found = self.memo[name] = value
        return found

    def _reads(self, name: str) -> frozenset:
        """The inputs and options rule ``name`` reads, through every rule it uses."""
        found = self.reads.get(name)
        if found is None:
            self.reads[name] = frozenset()  # a cycle cannot be (the library is resolved)
            names, inputs, _ = reach({}, [self.rules[name][2]], follow=False)
            found = frozenset(inputs).union(*(self._reads(n) for n in names))
            self.reads[name] = found
        return found

    def value(self, t: tuple):
        op = t[0]
        if op == "n":
            return float(t[1])  # OverflowError past float64's range: the caller says so
        if op == "b":
            return t[1]
        if op == "v":
            return self.env[t[1]]  # KeyError: an input without values, the caller's to give
        if op == "r":
            return self.rule(t[1])
        if op in _FOLDS:  # n-ary: +, *, and, or, max, min
            fold = _FOLDS[op]
            out = self.value(t[1])
            for a in t[2:]:
                out = fold(out, self.value(a))
            return out
        if op == "^":
            base, exp = np.asarray(self.value(t[1]), float), t[2]
            return base ** exp if exp >= 0 else 1.0 / base ** -exp
        if op == "if":
            out = np.nan
            for cond, value in reversed(t[1:]):
                out = np.where(self.value(cond), self.value(value), out)
            return out
        if op in _RELATIONS:
            return _RELATIONS[op](self.value(t[1]), self.value(t[2]))
        if op == "not":
            return np.logical_not(self.value(t[1]))
        if op == "ceil":
            return np.ceil(self.value(t[1]))
        if op == "floor":
            return np.floor(self.value(t[1]))
        if op == "@":  # target[k = v, ...]: the target in a binding with the keys rebound
            env = dict(self.env)
            env.update({k: self.value(v) for k, v in t[2]})
            keys = frozenset(k for k, _ in t[2])
            child = VectorEvaluator(self.rules, env, self.pins, self, self.rebound | keys)
            return child.rule(t[1])
        if t == NAN:
            return np.nan
        raise ValueError(f"no vector form for {t[1] if op == '?' else op!r}")
