"""Fuzzing memform: only its own errors may escape, and its answers must hold together.

    python bench/fuzz.py [--surface set,rules,config,cli] [--inputs 100000] [--seed 0]
                         [--jobs 2] [--limit 10] [--out DIR] [--no-confirm]
    python bench/fuzz.py --replay DIR/case.json      # one saved case, as a user would run it

Four surfaces, ``--inputs`` each, every input a command line run through ``engine.cli.main``:

``set``     ``--set NAME=VALUE`` and ``--capacity`` values derived at random from the ``expr``
            rule of grammar/formulas.lark (edge numbers: huge and tiny exponents, long digit
            strings, non-ASCII digits; units in powers and function arguments; constant
            comparisons in ``if``; nested functions), plus known hard values.  Each estimate
            runs on the full path (``MEMFORM_NO_CACHE=1``) and as a user runs it (the
            sympy-free fast path may answer), and the two must print the same.  Each value is
            also computed by this file's own exact arithmetic, and the value memform uses
            (the ``inputs`` of ``--json``) must equal it.
``rules``   rule files through ``estimate --rules FILE``, ``check FILE``, ``show`` and ``solve``:
            declarations derived from the grammar (overrides of the library's rules, new
            inputs, options, dtypes, rules, checks and presets over the library's names), the
            library's own rules as overrides with tokens dropped, swapped, repeated or replaced,
            mutated library files and random text.
``config``  Hugging Face config.json files: the ones in tests/configs with fields dropped,
            repeated (duplicate keys), retyped, nested, set to huge / NaN / negative / zero
            numbers or 4,301-digit integers, other model types, UTF-16 and other encodings,
            deep nesting, odd file names (rich markup, control characters, a preset's name).
``cli``     argument sets over every subcommand (estimate, solve, serve, show, plan,
            names, check, presets, docs, plot into the working folder) with valid and
            invalid flags, values, models (presets, config files, odd and long paths,
            ``[/b]`` markup) and rule files.

What is found (each input with any finding is an escape; exit status 1 if there is one):

- a traceback: an exception other than memform's ``EngineError`` leaves the command; its class
  is the exception type and the innermost frame in engine/;
- a hang: a command uses more than ``--limit`` seconds of CPU (10; ``ITIMER_VIRTUAL`` in the
  worker, so a loaded machine does not turn a slow command into a hang: memform's own budgets
  are CPU time too), and the worker is killed if it does not come back within three times
  that in wall-clock time;
- a broken invariant: an exit status other than 0, 2 (usage) and 1 (infeasible, nothing
  found, a failed check, stale docs: solve, plan, serve, names, check, docs and estimate
  --check only); an error without a message; a control character or a traceback in the
  output; for ``--json``: not strict JSON (``Infinity``, ``NaN``), an error without a message;
  for ``estimate --json``: a byte figure that is not a non-negative integer, a component
  above the total, components that do not sum to the total (each is rounded up, so the sum
  may exceed it by less than one byte per component), ``rules`` disagreeing with
  ``components``, ``fits`` disagreeing with the figures, a value other than the ``--set``
  arithmetic (this file computes each value exactly, on its own), a rule pinned by ``--set``
  or overridden by a constant in a rule file reported as another value, an invalid value
  accepted (non-ASCII digits, a unit in an exponent, bytes added to a number ...); ``solve``
  and ``plan`` figures on the wrong side of the capacity; the fast path printing anything but
  what the full path prints; a config.json whose duplicate keys pass without a word, whose
  sizes are not used as written or are accepted at zero or below; a file in the working
  folder replacing a preset of the same name; a check passed on 0 scenarios.

Findings are counted per surface and per class, with the shortest input of each class saved
under ``--out`` (``case.json``, its files and ``cmd.sh``) and, unless ``--no-confirm``, replayed
in a fresh process without any of the shortcuts below.

Shortcuts (what makes an input cost milliseconds instead of a second): the shipped library is
loaded once per worker and handed to every command (its composition cache reset between
inputs), the library's rule files are parsed once, and ``check`` tests only the fuzzed files'
checks (the library's own take half a minute and are the test suite's business).  The cache
directory is a fresh temporary one (``XDG_CACHE_HOME``), so the user's cache is never touched.
``torch`` commands (measure, calibrate) are not fuzzed.
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import math
import multiprocessing
import os
import random
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from fractions import Fraction
from multiprocessing.connection import wait
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ENGINE = ROOT / "engine"
GRAMMAR = ROOT / "grammar" / "formulas.lark"
FORMULAS = ROOT / "formulas"
CONFIGS = ROOT / "tests" / "configs"
SURFACES = ("set", "rules", "config", "cli")
#: the shipped library's rule files (name, text)
LIBRARY_FILES = [(p.name, p.read_text(encoding="utf-8")) for p in sorted(FORMULAS.glob("*.mem"))]
LIBRARY_NAMES = {name for name, _ in LIBRARY_FILES}
#: commands that may exit 1 (infeasible, nothing found, a failed check, stale docs; estimate --check)
EXIT_ONE = {"solve", "plan", "check", "docs", "names", "serve"}
#: commands whose --json answer is one JSON document
JSON_COMMANDS = {"estimate", "solve", "plan", "names", "serve"}

BYTE_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "PB": 10**15,
              "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50}
FUNCTIONS = {"ceil": 1, "floor": 1, "min": None, "max": None, "sqrt": 1, "log2": 1}
RESERVED = ["if", "then", "else", "match", "and", "or", "not", "in", "where", "rule", "input",
            "option", "dtype", "check", "preset", "source", "override"]
UNITS = ["bytes", "count", "tokens", "params", "ratio"]
#: rules every estimate reports in bytes (engine/compile/outline.py's TOP_LEVEL but the sums)
REPORTED = ("weights", "master", "grads", "optimizer_states", "activations", "logits", "kv_cache", "overhead")

# ---------------------------------------------------------------- numbers and values
ORDINARY = ["0", "1", "1", "2", "2", "3", "4", "8", "16", "64", "100", "1024", "4096", "0.5",
            "0.25", "1.5", "0.1", "70e9", "1e9", "7e-1", "65536", "12"]
EDGE = ["1e400", "1e-400", "1e308", "1e-308", "1e100000000", "1E+2", "9" * 40, "9" * 400,
        "9" * 4301, "1" + "0" * 30, "0" * 40 + "7", "0.000000000000000000001", "1000000000",
        "100000", "4294967296", "18446744073709551617", "123456789.987654321", "2e-5", "5e20",
        "1e10000", "10000"]
#: decimal digits of other scripts: Python's ``\d`` matches them
FOREIGN = ["߃", "١٢", "３", "𝟗", "٣.٥", "৭e২", "१", "1٠"]
#: values known to be hard (from issue 18 and earlier runs); the grammar finds most of them too
HARD_VALUES = [
    "2^3 B", "1/3 B", "max(1 B, 2)", "1e400", "0.5^(10^9)", "0.1^(-10^8)", "(2 B)^1000000000",
    "10^5000", "1e100000000", "if 1 < 2 then 3 else 4", "if 1 == 1 then 3 else 4",
    "if 1 != 1 then 3 else 4", "߃", "2^64", "10^10^10", "sqrt(2)", "sqrt(4)", "log2(8)", "log2(0)",
    "1/0", "0/0", "0^-1", "-0", "80 GB - 1 GB", "80 GB - 1", "3 B / 1 B", "ceil(1.5)", "max(1)",
    "min(2, 3, 1)", "(((((1)))))", "--1", "2^-1", "2^0.5", "4^0.5", "(-8)^(1/3)", "(-1)^0.5",
    "1 GB / 0", "1e9 B", "GB", "8 8", "3 + adamw", "adamw", "bf16", "true", "micro_batch",
    "total", "n_params[dp = 2]", "match zero_stage { 3 => 1, _ => 2 }",
    "if zero_stage == 3 then 1 else 2", "", " ", "80GB", "81559 MiB", "1.5 GiB", "1e-9",
    "9" * 4301, "12345678901234567890", "sqrt(4 GB)", "log2(1 KiB)", "max(1 GB, 2 GB)",
    "ceil(1/3 B)", "2 B * 2 B", "(1 B)^0", "0^0", "0.5^(-3)", "(10^9)^(10^9)",
    "if 1 B < 2 then 1 else 2", "if 1 < 2 and 2 < 1 then 1 else 2", "if not 1 == 2 then 5 else 6",
    "if 2 >= 2 or 1 > 2 then 1 GB else 2 GB", "floor(-0.5)", "-(2)", "1 -- 1",
]
#: strings outside the grammar
WEIRD_VALUES = ["__import__('os').system('true')", "lambda: 1", "0x10", "１２", "∞", "nan", "inf",
                "None", 'S("1")', "1_000", "1,000", "1 000", "\x00", "1\n+2", "80 GB\n", "1;2",
                "1 # c", '"1"', "1e", "e5", ".5", "5.", "+5", "1..2", "[1]", "{1}", "1 B B"]


class Reject(Exception):
    """The value is invalid: memform must refuse it (the reason says why)."""


class Unknown(Exception):
    """This file's arithmetic does not decide the value (too large, or a choice of semantics)."""


def read_number(text: str) -> Fraction:
    """A NUMBER token's exact value, refusing digits other than ASCII ones."""
    if not text.isascii():
        raise Reject("non-ASCII digits")
    m = re.fullmatch(r"(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?", text)
    if m is None:
        raise Reject("not a number")
    whole, frac, exp = m.group(1), m.group(2) or "", int(m.group(3) or 0)
    if len(whole) + len(frac) > 4000 or abs(exp) > 4000:
        raise Unknown("too many digits")
    return Fraction(int(whole + frac), 10 ** len(frac)) * Fraction(10) ** exp


def _root(value: Fraction, n: int) -> Fraction | None:
    """The exact n-th root of a non-negative rational, or None (also when n is too large)."""
    if value in (0, 1):
        return value
    if n > 4096:
        return None

    def iroot(x: int) -> int | None:
        r = round(x ** (1 / n)) if x < 2**1000 else None
        if r is None:
            return None
        for c in (r - 1, r, r + 1):
            if c >= 0 and c**n == x:
                return c
        return None
    p, q = iroot(value.numerator), iroot(value.denominator)
    return None if p is None or q is None else Fraction(p, q)


def _bits(v: Fraction) -> int:
    return max(abs(v.numerator).bit_length(), v.denominator.bit_length(), 1)


def evaluate(node):
    """The exact value of a derived constant expression: ``(Fraction, power of bytes)``, a bool
    for a condition, or a choice name (a bare name at the top).  Raises Reject or Unknown."""
    label, kids = node
    if not isinstance(kids, list):  # a leaf
        raise Unknown(f"leaf {label}")
    args = [k for k in kids if isinstance(k[1], list) or k[0] in ("NUMBER", "BYTE_UNIT", "NAME", "CMP")]
    if label == "quantity":
        value = read_number(args[0][1])
        return (value * BYTE_UNITS[args[1][1]], 1) if len(args) > 1 else (value, 0)
    if label in ("name", "at", "match_expr", "member"):
        raise Reject("a name in arithmetic")
    if label == "call":
        return _call(args[0][1], [evaluate(a) for a in args[1:]])
    if label in ("add", "sub"):
        (a, da), (b, db) = evaluate(args[0]), evaluate(args[1])
        if da != db and 0 in (a, b):  # 0 TB is 0: a unit on a zero leaves no trace in the value
            raise Unknown("a zero in another unit")
        if da != db:
            raise Reject("bytes added to a plain number")
        return (a + b if label == "add" else a - b, da)
    if label == "mul":
        (a, da), (b, db) = evaluate(args[0]), evaluate(args[1])
        return (a * b, da + db)
    if label == "div":
        (a, da), (b, db) = evaluate(args[0]), evaluate(args[1])
        if b == 0:
            raise Reject("division by zero")
        return (a / b, da - db)
    if label == "neg":
        a, da = evaluate(args[0])
        return (-a, da)
    if label == "pow":
        return _power(evaluate(args[0]), evaluate(args[1]))
    if label == "atom" and len(args) == 1:  # ( expr )
        return evaluate(args[0])
    if label == "if_expr":
        cond, then, other = args
        chosen, dropped = (then, other) if _truth(cond) else (other, then)
        value = evaluate(chosen)
        try:
            if evaluate(dropped)[1] != value[1]:
                raise Unknown("branches in different units")
        except Reject:
            raise Unknown("an invalid branch not taken") from None
        return value
    raise Unknown(label)


def _truth(node) -> bool:
    label, kids = node
    args = [k for k in kids if isinstance(k[1], list) or k[0] in ("NUMBER", "NAME", "CMP")]
    if label == "compare":
        (a, da), op, (b, db) = evaluate(args[0]), args[1][1], evaluate(args[2])
        if da != db:
            raise Unknown("a comparison across units")
        return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
    if label == "and_":
        return _truth(args[0]) & _truth(args[1])
    if label == "or_":
        return _truth(args[0]) | _truth(args[1])
    if label == "not_":
        return not _truth(args[0])
    raise Reject("a name in a condition")


def _call(fn: str, args: list):
    if fn not in FUNCTIONS:
        raise Reject("an unknown function")
    arity = FUNCTIONS[fn]
    if (arity is not None and len(args) != arity) or (arity is None and len(args) < 2):
        raise Reject("a wrong number of arguments")
    if fn in ("min", "max"):
        if len({d for _, d in args}) > 1 and any(v == 0 for v, _ in args):
            raise Unknown("a zero in another unit")  # 0 TiB is 0: its unit leaves no trace
        if len({d for _, d in args}) > 1:
            raise Reject("mixed units in min/max")
        return ((min if fn == "min" else max)(v for v, _ in args), args[0][1])
    (v, d), = args
    if d != 0:
        raise Unknown("a unit in a function's argument")
    if fn in ("ceil", "floor"):
        return (Fraction(math.ceil(v) if fn == "ceil" else math.floor(v)), 0)
    if fn == "sqrt":
        root = _root(v, 2) if v >= 0 else None
        if root is None and v >= 0:  # exact only where it cancels (0 * sqrt(2)): not decided here
            raise Unknown("an irrational square root")
        if root is None:
            raise Reject("a complex square root")
        return (root, 0)
    if v <= 0:
        raise Reject("log2 of a number <= 0")
    for p, q in ((v.numerator, v.denominator), (v.denominator, v.numerator)):
        if q == 1 and p & (p - 1) == 0:
            return (Fraction(p.bit_length() - 1) * (1 if v >= 1 else -1), 0)
    raise Unknown("an irrational log2")  # exact only where it cancels: not decided here


def _power(base, exp):
    (b, db), (e, de) = base, exp
    if de != 0:
        raise Reject("a unit in an exponent")
    if b == 0 and e < 0:
        raise Reject("division by zero")
    if e.denominator != 1:
        if db != 0:
            raise Reject("a fractional power of bytes")
        if b < 0:
            raise Reject("a complex power")
        root = _root(b, e.denominator) if _bits(b) < 3000 else None
        if root is None:
            raise Unknown("an irrational power")  # exact only where it cancels: not decided here
        b, e = root, Fraction(e.numerator)
    if b in (0, 1) or (b == -1):
        return (b ** int(e), db * int(e))
    if abs(e) * _bits(b) > 100_000:
        raise Unknown("a power too large to compute")
    return (b ** int(e), db * int(e))


# ---------------------------------------------------------------- the grammar as a generator
class Grammar:
    """grammar/formulas.lark as data: random derivations of any of its rules.

    A derivation is a list of nodes ``(label, children)`` (the label is the rule's alias or
    name, as in lark's trees) and leaves ``(TERMINAL, text)``; :func:`text` joins the leaves.
    Where ``depth`` runs out, only the rules nearest to terminals are taken."""

    def __init__(self, path: Path = GRAMMAR):
        from lark import Lark
        parser = Lark(path.read_text(encoding="utf-8"), parser="lalr", start=["start", "expr"],
                      maybe_placeholders=True, keep_all_tokens=True)
        self.parser = parser
        self.rules: dict[str, list] = {}
        for rule in parser.rules:
            self.rules.setdefault(rule.origin.name, []).append(rule)
        self.literal = {t.name: t.pattern.value for t in parser.terminals if t.pattern.type == "str"}
        self.height = dict.fromkeys(self.rules, math.inf)
        changed = True
        while changed:  # the fewest levels from each rule down to terminals
            changed = False
            for name, rules in self.rules.items():
                best = min(self._height(r) for r in rules)
                if best < self.height[name]:
                    self.height[name], changed = best, True

    def parse(self, text: str) -> list | None:
        """A value's text as a derivation (as :meth:`derive` gives), or None if it is not one."""
        from lark import Token
        from lark.exceptions import LarkError

        def nodes(tree):
            kids = [(c.type, str(c)) if isinstance(c, Token) else nodes(c) for c in tree.children if c is not None]
            return (str(tree.data), kids)
        try:
            return [nodes(self.parser.parse(text, start="expr"))]
        except (LarkError, RecursionError):
            return None

    def _height(self, rule) -> float:
        return 1 + max((self.height.get(s.name, 0) for s in rule.expansion), default=0)

    @staticmethod
    def key(rule) -> str:
        """The name hooks weigh a rule by: its alias, else ``origin:its symbols``."""
        return rule.alias or f"{rule.origin.name}:{' '.join(s.name for s in rule.expansion)}"

    def derive(self, symbol: str, rng: random.Random, hooks, depth: int) -> list:
        rules = self.rules[symbol]
        pool = rules
        if depth <= 0:  # the rules nearest to terminals (two levels too: a number, not only a name)
            low = min(self._height(r) for r in rules)
            pool = [r for r in rules if self._height(r) <= max(low, 2 if depth > -20 else low)]
        weights = [hooks.weight(self.key(r)) for r in pool]
        rule = rng.choices(pool, weights)[0] if sum(weights) > 0 else pool[0]
        label = rule.alias or symbol
        hooks.stack.append([label, {"size": len(rule.expansion)}])
        children, nth = [], 0
        for sym in rule.expansion:
            if sym.is_term:
                word = self.literal.get(sym.name)
                if word is None:
                    word = hooks.terminal(sym.name, label, nth, rng)
                    nth += sym.name == "NAME"
                children.append((sym.name, word))
            else:
                children.extend(self.derive(sym.name, rng, hooks, depth - 1))
        hooks.stack.pop()
        if symbol.startswith("_") or (rule.options.expand1 and len(children) == 1 and not rule.alias):
            return children  # inlined, as lark inlines them
        return [(label, children)]


def leaves(nodes) -> list[str]:
    out = []
    for label, kids in nodes:
        if isinstance(kids, list):
            out.extend(leaves(kids))
        else:
            out.append(kids)
    return out


def text(nodes, rng: random.Random | None = None, spaces=(" ",)) -> str:
    """The derivation's text, tokens separated by one of ``spaces`` (chosen at random)."""
    parts = leaves(nodes)
    if rng is None:
        return " ".join(parts)
    return "".join(p + (rng.choice(spaces) if i < len(parts) - 1 else "") for i, p in enumerate(parts))


class Hooks:
    """Terminal texts and rule weights for deriving ``--set`` values (constant expressions)."""

    WEIGHTS = {"add": 0.25, "sub": 0.2, "mul": 0.25, "div": 0.2, "neg": 0.1, "pow": 0.2,
               "if_expr": 0.12, "match_expr": 0.01, "atom:LPAR expr RPAR": 0.15, "call": 0.2, "at": 0.01,
               "name": 0.04, "or_": 0.1, "and_": 0.1, "not_": 0.1, "member": 0.02,
               "quantity:NUMBER BYTE_UNIT": 0.35}

    def __init__(self, ctx):
        self.ctx = ctx
        self.stack: list = []  # [label, info] of the rules being derived, innermost last
        self.banned: set = set()  # rules (by key prefix) never taken

    def weight(self, key: str) -> float:
        if any(key.startswith(b) for b in self.banned):
            return 0
        return self.WEIGHTS.get(key, 1.0)

    def find(self, label: str) -> dict | None:
        for lab, info in reversed(self.stack):
            if lab == label:
                return info
        return None

    def number(self, rng) -> str:
        r = rng.random()
        return rng.choice(ORDINARY if r < 0.86 else EDGE if r < 0.985 else FOREIGN)

    def terminal(self, name: str, label: str, nth: int, rng) -> str:
        if name == "NUMBER":
            info = self.find("compare")  # the two sides of a comparison are often equal
            if info is None:
                return self.number(rng)
            if "first" not in info or rng.random() < 0.5:
                info.setdefault("first", self.number(rng))
                return info["first"] if rng.random() < 0.5 else self.number(rng)
            return info["first"]
        if name == "BYTE_UNIT":
            return rng.choice(list(BYTE_UNITS))
        if name == "CMP":
            return rng.choice(["==", "!=", "<", "<=", ">", ">="])
        if name == "STRING":
            return rng.choice(['"x"', '""', '"a doc"', '"[/b]"', '"ünï"'])
        if name == "NAME":
            return self.name(label, nth, rng)
        return name.lower()

    def option_choice(self, rng) -> str:
        for lab in ("match_expr", "member"):
            info = self.find(lab)
            if info and info.get("option") in self.ctx.choices:
                return rng.choice(self.ctx.choices[info["option"]] + ["_"] * (lab == "match_expr"))
        return rng.choice(self.ctx.all_choices)

    def name(self, label: str, nth: int, rng) -> str:
        ctx = self.ctx
        if label == "call":  # mostly a function that takes as many arguments as the call has
            several = self.stack[-1][1]["size"] > 4
            fits = [f for f, n in FUNCTIONS.items() if (n is None) == several]
            return rng.choice(fits if rng.random() < 0.9 else list(FUNCTIONS) + ["exp", "abs", "eval"])
        if label == "at":
            return rng.choice(ctx.rule_names)
        if label == "binding":
            return rng.choice(ctx.input_names)
        if label in ("match_expr", "member"):
            option = rng.choice(ctx.option_names)
            self.stack[-1][1]["option"] = option
            return option
        if label == "choice_name":
            return self.option_choice(rng)
        r = rng.random()
        if r < 0.7:
            return rng.choice(ctx.all_choices)
        if r < 0.95:
            return rng.choice(ctx.input_names + ctx.rule_names)
        return rng.choice(RESERVED + ["x", "_", "b"])


class PlainHooks(Hooks):
    """Arithmetic on plain numbers only: values a name's unit accepts more often than not."""

    WEIGHTS = dict(Hooks.WEIGHTS, if_expr=0.3)

    def __init__(self, ctx):
        super().__init__(ctx)
        self.banned = {"name", "at", "match_expr", "member", "quantity:NUMBER BYTE_UNIT"}

    def number(self, rng) -> str:
        r = rng.random()
        return rng.choice(ORDINARY if r < 0.85 else EDGE if r < 0.99 else FOREIGN)


# ---------------------------------------------------------------- what the generators know
class Context:
    """Names of the shipped library (read once) and the real config.json files."""

    def __init__(self, lib):
        self.decls = {}
        for n, d in lib.inputs.items():
            self.decls[n] = ("input", d.unit)
        for n, d in lib.rules.items():
            self.decls[n] = ("rule", d.unit)
        for n, d in lib.options.items():
            self.decls[n] = ("option", tuple(d.choices))
        for n in lib.dtypes:
            self.decls[n] = ("dtype", None)
        self.input_names = sorted(lib.inputs)
        self.rule_names = sorted(lib.rules)
        self.option_names = sorted(lib.options)
        self.dtype_names = sorted(lib.dtypes)
        self.choices = {n: list(d.choices) for n, d in lib.options.items()}
        self.all_choices = sorted({c for cs in self.choices.values() for c in cs if not c.isdigit()})
        self.count_names = sorted(n for n, (k, u) in self.decls.items() if k in ("input", "rule") and u != "bytes")
        self.byte_names = sorted(n for n, (k, u) in self.decls.items() if k in ("input", "rule") and u == "bytes")
        self.models = sorted(n for k, n in lib.presets if k == "model")
        self.gpus = sorted(n for k, n in lib.presets if k == "gpu")
        self.preset_settings = {n: {k: str(v) for k, v, _ in p.settings} for (kind, n), p in lib.presets.items()
                                if kind == "model"}
        self.tokens = " ".join(t for _, t in LIBRARY_FILES).split()
        self.override_rules = [
            f'override rule {n} : {d.unit} = {d.text} "{d.doc}"' for n, d in lib.rules.items()
            if getattr(d, "text", None)]
        self.configs = [(p.name, p.read_text(encoding="utf-8")) for p in sorted(CONFIGS.glob("*.json"))]
        self.grammar = Grammar()
        common = ["micro_batch", "seq_len", "dp", "tp", "pp", "capacity", "cuda_context", "alloc_margin",
                  "n_params", "hidden_size", "num_hidden_layers", "vocab_size", "num_key_value_heads",
                  "grad_accum", "cp", "ep", "num_experts"]
        self.common_inputs = [n for n in common if n in self.decls]
        try:  # other tools' names for memform's settings
            from engine.lang.names import ALIASES
            self.aliases = sorted(ALIASES)
            self.alias_targets = {k: a.name for k, a in ALIASES.items() if a.name}
        except ImportError:
            self.aliases, self.alias_targets = [], {}


# ---------------------------------------------------------------- surface: --set values
def value_text(rng, ctx, name: str = "") -> tuple[str, list | None]:
    """A value for ``name`` and its derivation (None for values outside the grammar): a
    choice of an option, plain arithmetic (in bytes for a byte quantity), or anything the
    grammar derives."""
    r = rng.random()
    if r < 0.06:
        value = rng.choice(HARD_VALUES)
        return value, ctx.grammar.parse(value)
    if r < 0.08:
        return rng.choice(WEIRD_VALUES), None
    kind, unit = ctx.decls.get(name.strip(), (None, None))
    if kind == "option" and r < 0.6:
        choice = rng.choice(unit)
        return choice, [("name", [("NAME", choice)])]
    if r < 0.7:
        nodes = ctx.grammar.derive("expr", rng, PlainHooks(ctx), rng.randint(2, 7))
        if unit == "bytes" and rng.random() < 0.7:  # ( expr ) * 1 GiB
            nodes = [("mul", [("atom", [("LPAR", "("), *nodes, ("RPAR", ")")]), ("STAR", "*"),
                              ("quantity", [("NUMBER", "1"), ("BYTE_UNIT", rng.choice(list(BYTE_UNITS)))])])]
        return text(nodes), nodes
    nodes = ctx.grammar.derive("expr", rng, Hooks(ctx), rng.choice([rng.randint(2, 7), rng.randint(7, 15)]))
    return text(nodes), nodes


def expectation(ctx, name: str, nodes) -> list | None:
    """What memform must do with ``NAME=value``: ``["num", "p/q"]``, ``["choice", c]``,
    ``["reject", reason]``, or None when this file does not decide."""
    decl = ctx.decls.get(name.strip())
    if name.strip() in ctx.aliases:
        return None  # translated by engine/lang/names.py
    if decl is None:
        return ["reject", "an unknown name"]
    if decl[0] == "dtype":
        return ["reject", "a dtype's size"]
    if nodes is None:
        return None
    try:
        if len(nodes) == 1 and nodes[0][0] == "name":
            value = nodes[0][1][0][1]
        else:
            value = evaluate(nodes[0])
    except Reject as exc:
        return ["reject", str(exc)]
    except (Unknown, RecursionError, ValueError, ZeroDivisionError, OverflowError):
        return None
    kind, unit = decl
    if kind == "option":
        if isinstance(value, tuple):
            number, dim = value
            if dim != 0 or number.denominator != 1 or _bits(number) > 64:
                return ["reject", "not a choice"]
            value = str(number.numerator)
        return ["choice", value] if value in unit else ["reject", "not a choice"]
    if isinstance(value, str):
        return None  # a name for a number: refused, by a message of its own
    number, dim = value
    if dim not in ((0, 1) if unit == "bytes" else (0,)):
        return ["reject", "a value in the wrong unit"]
    if _bits(number) > 12_000:  # beyond Python's 4,300-digit str(); memform has its own limits
        return None
    return ["num", str(number)]


def set_name(rng, ctx) -> str:
    r = rng.random()
    if r < 0.4:
        return rng.choice(ctx.common_inputs)
    if r < 0.55:
        return rng.choice(ctx.option_names)
    if r < 0.6:  # a rule every estimate reports, or one of their sums
        return rng.choice(REPORTED + ("total", "model_states", "n_params"))
    if r < 0.75:
        return rng.choice(ctx.rule_names)
    if r < 0.9:
        return rng.choice(ctx.input_names)
    if r < 0.93:
        return rng.choice(ctx.dtype_names)
    if r < 0.96 and ctx.aliases:
        return rng.choice(ctx.aliases)
    return rng.choice(["", "bogus", "micro_bach", "MICRO_BATCH", " micro_batch", "micro_batch ", "µ", "a-b"])


def gen_set(rng, ctx) -> dict:
    sets, oracle = [], {}
    model = rng.choice(ctx.models + ["gpt2", "llama2-7b"] * 3)
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        name = set_name(rng, ctx)
        value, nodes = value_text(rng, ctx, name)
        bare = rng.random() < 0.01  # no '=' at all
        sets += ["--set", name if bare else f"{name}{rng.choice(['=', '=', '=', ' = '])}{value}"]
        oracle[name.strip()] = None if bare else expectation(ctx, name, nodes)  # the last one counts
        target = ctx.alias_targets.get(name.strip())
        if target in ctx.decls and name.strip() not in ctx.decls:
            oracle[target] = None  # an alias applied sets its target: not decided here
    where, r = [], rng.random()
    if r < 0.15:
        value, nodes = value_text(rng, ctx, "capacity")
        where = ["--capacity", value]
        oracle["capacity"] = expectation(ctx, "capacity", nodes)
    elif r < 0.4:
        where = ["--gpu", rng.choice(ctx.gpus)]
    oracle = {n: e for n, e in oracle.items() if e is not None}
    r = rng.random()
    if r < 0.8:
        return case("set", ["estimate", model, "--json", *sets, *where], oracle=oracle, compare=True)
    if r < 0.92:
        return case("set", ["estimate", model, *sets, *where], compare=True)
    if r < 0.96:
        return case("set", ["show", rng.choice(["total", "weights", "activations"]), model, *sets])
    return case("set", ["solve", "max", rng.choice(["micro_batch", "seq_len"]), model, "--json", *sets,
                        *(where or ["--gpu", "h100-80g"])])


def case(surface: str, argv: list, files: dict | None = None, oracle: dict | None = None,
         compare: bool = False) -> dict:
    """One input: a command line, the files it reads (name -> bytes) and what must hold."""
    return {"surface": surface, "argv": [str(a) for a in argv], "files": files or {},
            "oracle": oracle or {}, "compare": compare}


# ---------------------------------------------------------------- surface: rule files
class FileHooks(Hooks):
    """Hooks for whole declarations: fresh names where a name is declared, the library's and
    the file's own names where one is used."""

    WEIGHTS = dict(Hooks.WEIGHTS, name=1.0, at=0.1, match_expr=0.1, member=0.3)

    def __init__(self, ctx, state: dict, override: bool = False, count_only: bool = False):
        super().__init__(ctx)
        self.state = state  # the file so far: name -> (kind, unit or choices)
        self.override = override  # a rule declaration replaces one of the library's
        self.count_only = count_only  # expressions over plain numbers only
        self.banned = {"rule_decl:RULE" if override else "rule_decl:OVERRIDE"}

    def number(self, rng) -> str:
        r = rng.random()
        return rng.choice(ORDINARY if r < 0.8 else EDGE if r < 0.995 else FOREIGN)

    def declared(self, kind: str, rng) -> str:
        r = rng.random()
        if r < 0.06:
            return rng.choice(self.ctx.input_names + self.ctx.rule_names)  # a redefinition
        if r < 0.08:
            return rng.choice(RESERVED)
        if r < 0.11:  # names of the modules compiled code runs with
            name = rng.choice(["numpy", "sympy", "math", "np", "builtins", "print", "exec", "lambda_", "select"])
            self.state[name] = (kind, None)
            return name
        name = f"fz_{kind}{len(self.state)}"
        self.state[name] = (kind, None)
        return name

    def used_name(self, rng) -> str:
        ctx, own = self.ctx, [n for n, (k, _) in self.state.items() if k in ("input", "rule")]
        r = rng.random()
        if own and r < 0.3:
            return rng.choice(own)
        if self.count_only or r < 0.75:
            return rng.choice(ctx.count_names)
        if r < 0.9:
            return rng.choice(ctx.byte_names + ctx.dtype_names)
        if r < 0.95:
            return rng.choice(ctx.option_names + ctx.all_choices)
        return rng.choice(["numpy", "x", "sympy", "self", "nan", "oo", "zoo", "pi"])

    def name(self, label: str, nth: int, rng) -> str:
        ctx, info = self.ctx, self.stack[-1][1]
        if label in ("dtype_decl", "input_decl", "option_decl", "rule_decl"):
            kind = label.split("_")[0]
            if nth == 0:
                if self.override and label == "rule_decl":
                    info["name"] = rng.choice(ctx.rule_names if rng.random() < 0.95 else ctx.input_names)
                else:
                    info["name"] = self.declared(kind, rng)
                return info["name"]
            unit = ctx.decls.get(info["name"], (None, None))[1] if self.override else None
            unit = unit if unit in UNITS and rng.random() < 0.9 else rng.choice(UNITS * 5 + ["byte", "int"])
            if info["name"] in self.state:
                self.state[info["name"]] = (kind, unit)
            return unit
        if label == "preset_decl":
            return rng.choice(["model"] * 8 + ["gpu", "cpu"])
        if label == "setting":
            names = ["hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                     "intermediate_size", "vocab_size", "tie_word_embeddings", "mlp", "capacity"]
            return rng.choice(names + ctx.input_names[:5] + [rng.choice(ctx.option_names)])
        if label == "choice_name_value":
            return rng.choice(["true", "false", "swiglu", "gelu", "rmsnorm"] + ctx.all_choices[:10])
        if label == "choice_name" and self.find("option_decl") is not None:
            return rng.choice(["a", "b", "c", "small", "big", "true", "false", "fp32"])
        if label in ("call", "at", "binding", "match_expr", "member", "choice_name"):
            return super().name(label, nth, rng)
        return self.used_name(rng)

    def terminal(self, name: str, label: str, nth: int, rng) -> str:
        if name == "STRING":
            info = self.stack[-1][1]
            strings = info["strings"] = info.get("strings", 0) + 1
            if label == "preset_decl" and strings == 1:  # the preset's name
                preset = f"fz-m{len(self.state)}"
                self.state[preset] = ("preset", None)
                return f'"{preset}"'
            return rng.choice(['"fz"', '"a doc"', '""', '"[/b] markup"', '"ünïcode"'])
        return super().terminal(name, label, nth, rng)


def expression(rng, ctx, state, count_only: bool) -> str:
    hooks = FileHooks(ctx, state, count_only=count_only)
    return text(ctx.grammar.derive("expr", rng, hooks, rng.randint(3, 12)))


def templated_decl(rng, ctx, state) -> tuple[str, str | None]:
    """One declaration from a skeleton with derived expressions; returns (text, rule it affects)."""
    doc = rng.choice(['"fz"', '"a doc"', '"[/b]"'])
    kind = rng.choices(["override", "rule", "input", "option", "dtype", "check", "preset", "chain"],
                       [35, 15, 14, 6, 4, 14, 8, 2])[0]
    if kind == "chain":  # each rule uses the one before twice: the expression doubles per step
        first = len(state)
        lines = [f"rule fz_sq{first} : count = {rng.choice(ctx.count_names)} * 2 {doc}"]
        state[f"fz_sq{first}"] = ("rule", "count")
        for i in range(first + 1, first + rng.choice([10, 30, 40, 60])):
            lines.append(f"rule fz_sq{i} : count = fz_sq{i - 1} * fz_sq{i - 1} + 1 {doc}")
            state[f"fz_sq{i}"] = ("rule", "count")
        last = f"fz_sq{i}"
        lines.append(f"override rule overhead : bytes = {last} * 1 B {doc}")
        return "\n".join(lines), last
    if kind == "override" and rng.random() < 0.2:  # a constant: its value is known
        name = rng.choice(REPORTED)
        nodes = ctx.grammar.derive("expr", rng, PlainHooks(ctx), rng.randint(2, 6))
        try:
            value, dim = evaluate(nodes[0])
            if dim == 0 and _bits(value) < 2000:
                state.setdefault("#values", ("values", {}))[1][name] = str(value)
        except (Reject, Unknown, ArithmeticError, ValueError):
            pass
        return f"override rule {name} : bytes = ({text(nodes)}) * 1 B {doc}", name
    if kind == "override":
        name = rng.choice(ctx.rule_names)
        unit = ctx.decls[name][1]
        expr = expression(rng, ctx, state, count_only=True)
        if unit == "bytes":
            expr = f"({expr}) * {rng.choice(['1 B', 'bf16', '2 B', '1 GB'])}"
        return f"override rule {name} : {unit} = {expr} {doc}", name
    if kind == "rule":
        name = f"fz_rule{len(state)}"
        unit = rng.choice(UNITS)
        state[name] = ("rule", unit)
        expr = expression(rng, ctx, state, count_only=unit != "bytes")
        if unit == "bytes":
            expr = f"({expr}) * 1 B"
        return f"rule {name} : {unit} = {expr} {doc}", name
    if kind == "input":
        name = f"fz_input{len(state)}"
        unit = rng.choice(UNITS)
        state[name] = ("input", unit)
        q = lambda: rng.choice(ORDINARY + EDGE[:6]) + (rng.choice([" B", " GB", ""]) if unit == "bytes" else "")
        domain = rng.choice(["", f">= {q()}", f"> {q()}", f"in [{q()}, {q()}]"])
        default = rng.choice(["", f"= {q()}"])
        return f"input {name} : {unit} {domain} {default} {doc}", None
    if kind == "option":
        name = f"fz_option{len(state)}"
        choices = rng.choice([["a", "b"], ["x", "y", "z"], ["0", "1", "2"], ["1"], ["a", "a"]])
        state[name] = ("option", choices)
        default = rng.choice(choices + ["q"])
        return f"option {name} in {{{', '.join(choices)}}} = {default} {doc}", None
    if kind == "dtype":
        name = f"fz_dtype{len(state)}"
        state[name] = ("dtype", None)
        return f"dtype {name} = {rng.choice(ORDINARY)} {rng.choice(['B', 'B', 'KiB', ''])} {doc}", None
    if kind == "check":
        op = rng.choice(["==", "!=", "<", "<=", ">", ">="])
        where = f" where {expression(rng, ctx, state, True)} {op} {rng.choice(ORDINARY)}" if rng.random() < 0.4 else ""
        return (f"check {doc}: {expression(rng, ctx, state, True)} {op} "
                f"{expression(rng, ctx, state, True)}{where}"), None
    base = rng.choice(ctx.models)
    settings = dict(ctx.preset_settings.get(base, {}))
    for _ in range(rng.randint(0, 3)):
        settings[rng.choice(list(settings) or ["hidden_size"])] = rng.choice(ORDINARY + EDGE[:8] + ["-1", "true", "x"])
    name = f"fz-m{len(state)}"
    state[name] = ("preset", None)
    body = ", ".join(f"{k} = {v}" for k, v in settings.items())
    return f'preset model "{name}" {{ {body} }} {doc}', None


def derived_decl(rng, ctx, state) -> tuple[str, str | None]:
    """One declaration derived from the grammar with FileHooks."""
    symbol = rng.choices(["rule_decl", "input_decl", "option_decl", "dtype_decl", "check_decl", "preset_decl"],
                         [40, 15, 8, 5, 20, 12])[0]
    override = symbol == "rule_decl" and rng.random() < 0.6
    hooks = FileHooks(ctx, state, override=override)
    nodes = ctx.grammar.derive(symbol, rng, hooks, rng.randint(6, 16))
    words = leaves(nodes)
    target = words[2] if override and len(words) > 2 else (words[1] if symbol == "rule_decl" else None)
    return text(nodes, rng, (" ", " ", " ", "\n", "\n  ", "\t", " # c\n")), target


def mutate(tokens: list[str], rng, pool: list[str]) -> list[str]:
    toks = list(tokens) or [""]
    for _ in range(rng.randint(1, 6)):
        i = rng.randrange(len(toks))
        op = rng.random()
        if op < 0.3:
            del toks[i]
        elif op < 0.55:
            j = rng.randrange(len(toks))
            toks[i], toks[j] = toks[j], toks[i]
        elif op < 0.75:
            toks.insert(i, toks[i])
        else:
            toks[i] = rng.choice(pool)
        toks = toks or [""]
    return toks


def gen_rules(rng, ctx) -> dict:
    state: dict = {}
    targets, mutated_library = [], False
    r = rng.random()
    if r < 0.6:
        decls = []
        for _ in range(rng.choice([1, 1, 2, 2, 3, 4, 6])):
            decl, target = (templated_decl if rng.random() < 0.5 else derived_decl)(rng, ctx, state)
            decls.append(decl)
            targets += [target] if target else []
        body = "\n".join(decls) + "\n"
    elif r < 0.8:
        chosen = rng.sample(ctx.override_rules, rng.randint(1, 3))
        pool = ctx.tokens + ORDINARY + EDGE + HARD_VALUES[:20]
        body = "\n".join(" ".join(mutate(c.split(" "), rng, pool)) for c in chosen) + "\n"
        targets = [c.split()[2] for c in chosen]
    elif r < 0.92:
        mutated_library = True
        name, source = rng.choice(LIBRARY_FILES)
        body = " ".join(mutate(source.split(" "), rng, ctx.tokens + EDGE + WEIRD_VALUES))
    else:
        alphabet = 'rule input option check preset dtype override if then else match=+-*/^(){}[],:"#_ xyz12.\nBGi<>!'
        body = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
    path = rng.choice(["fuzz.mem"] * 12 + ["[/b].mem", "ü.mem", "a b.mem"])
    files = {path: body.encode("utf-8")}
    models = [n for n, (k, _) in state.items() if k == "preset"]
    model = (rng.choice(models) if models and rng.random() < 0.5
             else rng.choice(["gpt2", "gpt2", "llama2-7b", "mixtral-8x7b"] + ctx.models))
    sets = []
    for _ in range(rng.choice([0, 0, 1, 2])):
        own = [n for n, (k, _) in state.items() if k == "input"]
        if own and rng.random() < 0.5:
            sets.append(f"{rng.choice(own)}={rng.choice(ORDINARY + EDGE[:6])}")
        else:
            sets.append(rng.choice(["dp=1", "dp=16", "tp=2", "micro_batch=4", "seq_len=1", "zero_stage=3",
                                    "mode=infer", "pp=4", "micro_batch=1e6"]))
    sets = [a for s in sets for a in ("--set", s)]
    r = rng.random()
    if r < 0.5:
        argv = ["estimate", model, "--rules", path, "--json", *sets]
    elif r < 0.6:
        argv = ["estimate", model, "--rules", path, *sets]
    elif r < 0.8 and not mutated_library:  # the library's own checks take ~1 s each
        argv = ["check", path, "--samples", rng.choice(["1", "3", "10", "10", "0", "-1"])]
    elif r < 0.9:
        argv = ["show", rng.choice(targets + ["total", "weights"]), model, "--rules", path, *sets]
    else:
        argv = ["solve", "max", "micro_batch", model, "--gpu", "h100-80g", "--rules", path, "--json", *sets]
    values = state.get("#values", (None, {}))[1]
    return case("rules", argv, files, oracle={"rules": values} if values else None)


# ---------------------------------------------------------------- surface: config.json
class Raw(str):
    """JSON text written as it is (NaN, 1e400, a 4,301-digit integer)."""


def dump(value) -> str:
    """JSON text of ``value``; a dict is a list of (key, value) pairs, so keys may repeat."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, list) and value and all(isinstance(p, tuple) for p in value):
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {dump(v)}" for k, v in value) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(dump(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def odd_number(rng):
    return rng.choice([Raw("NaN"), Raw("Infinity"), Raw("-Infinity"), Raw("1e400"), Raw("-1e400"),
                       Raw("9" * 4301), Raw("-0.0"), Raw("1e-400"), 0, -1, -64, 2**63, 2**64 + 1,
                       10**30, 0.5, 1.0, 4096.0, 3, 7, 1, 2, 64, 128, 32000])


SIZE_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
               "vocab_size", "head_dim", "intermediate_size")
from engine.library.hfconfig import FAMILIES as _HF_FAMILIES  # noqa: E402 (ROOT is on the path above)
FAMILIES = sorted(_HF_FAMILIES)
#: quantization_config blocks as checkpoints write them, mutated before use
QUANT_BLOCKS = [
    {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True, "damp_percent": 0.01},
    {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"},
    {"quant_method": "fp8", "activation_scheme": "dynamic"},
    {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", "weight_block_size": [128, 128]},
    {"quant_method": "compressed-tensors", "format": "int-quantized", "ignore": ["lm_head"],
     "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
         "num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True, "dynamic": False}}}},
    {"quant_method": "compressed-tensors", "format": "pack-quantized",
     "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
         "num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": False}}}},
    {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
     "bnb_4bit_use_double_quant": True},
    {"quant_method": "bitsandbytes", "load_in_8bit": True},
    {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"]},
]


def quant_block(rng):
    """A quantization_config block: a real layout with one or two of its fields mutated."""
    block = json.loads(json.dumps(rng.choice(QUANT_BLOCKS)))
    for _ in range(rng.choice([0, 1, 1, 2])):
        target = block
        if "config_groups" in block and rng.random() < 0.5:
            target = block["config_groups"]["group_0"]["weights"] if isinstance(block["config_groups"], dict) \
                and "group_0" in block["config_groups"] else block
        key = rng.choice(list(target) + ["bogus", "[/b]"])
        op = rng.random()
        if op < 0.3:
            target.pop(key, None)
        elif op < 0.9:
            target[key] = rng.choice([None, True, False, "", "x", [], {}, [128, 64], -1, 0, 3, 5, 2**63,
                                      0.5, "e5m2", "group", "block", "tensor", "float", ["model.layers.0.mlp"]])
        else:
            return rng.choice([None, "fp8", [], 7, {"quant_method": 1}])
    return block
EXTRA_FIELDS = ["num_local_experts", "n_routed_experts", "num_experts_per_tok", "n_shared_experts",
                "moe_intermediate_size", "first_k_dense_replace", "q_lora_rank", "kv_lora_rank",
                "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "n_embd", "n_layer", "n_head",
                "attention_bias", "mlp_only_layers", "decoder_sparse_step", "bogus", "\u001b[31mred",
                "[/b]", "k" * 300]


def gen_config(rng, ctx) -> dict:
    name, source = rng.choice(ctx.configs)
    pairs = list(json.loads(source).items())
    duplicated = False
    for _ in range(rng.choice([0, 1, 1, 2, 3, 5])):
        i = rng.randrange(len(pairs)) if pairs else 0
        key = pairs[i][0] if pairs else "hidden_size"
        op = rng.random()
        if op < 0.15 and pairs:
            del pairs[i]
        elif op < 0.2:
            pairs.append((key, odd_number(rng)))
            duplicated = True
        elif op < 0.45 and pairs:
            pairs[i] = (key, odd_number(rng))
        elif op < 0.6 and pairs:
            v = pairs[i][1]
            pairs[i] = (key, rng.choice([str(v), [v], [("v", v)], None, True, False, "", "x",
                                         v + 0.5 if isinstance(v, (int, float)) and not isinstance(v, bool) else 1.5]))
        elif op < 0.7 and pairs:
            v = pairs[i][1]
            for _ in range(rng.choice([1, 2, 40])):
                v = [v]
            pairs[i] = (key, v)
        elif op < 0.8:
            mt = rng.choice(FAMILIES + ["", "LLAMA", "bert", "x" * rng.choice([10, 100_000]), 7])
            pairs = [(k, v) for k, v in pairs if k != "model_type"] + [("model_type", mt)]
        else:
            value = rng.choice([0, 1, 2, 8, 64, 1024, None, True, "x", odd_number(rng)])
            pairs.append((rng.choice(EXTRA_FIELDS), value))
    if rng.random() < 0.15:
        pairs = [(k, v) for k, v in pairs if k != "quantization_config"] + [("quantization_config", quant_block(rng))]
    doc = dump(pairs) if pairs else "{}"
    r = rng.random()
    if r < 0.03:
        doc = "[" * rng.choice([100, 100_000]) + "]" * rng.choice([0, 100])
    elif r < 0.05:
        doc = doc[: rng.randrange(len(doc) + 1)]
    elif r < 0.07:
        doc = rng.choice(["", "[]", '"x"', "1", "null", "{}", '{"model_type": "llama"}'])
    elif r < 0.09:
        doc = doc[:-1] + ', "deep": ' + "[" * 100_000 + "]" * 100_000 + "}"
    encoding = rng.choices(["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-32", "latin-1"], [85, 3, 5, 2, 2, 3])[0]
    try:
        data = doc.encode(encoding)
    except UnicodeEncodeError:
        data = doc.encode("utf-8")
    path = rng.choices(["config.json", "[/b].json", "[red]x[/red].json", "llama2-7b", "a b.json", "ü.json",
                        "x\u001b[31m.json", "sub/config.json", "model.JSON"], [70, 4, 3, 5, 3, 3, 3, 4, 2])[0]
    oracle = {}
    if path == "llama2-7b":  # a file named like a preset must not replace the preset silently
        oracle["shadow"] = {k: ctx.preset_settings["llama2-7b"][k] for k in ("hidden_size",)}
    elif encoding in ("utf-8", "utf-8-sig") and r >= 0.09:
        counts = {}
        for k, _ in pairs:
            counts[k] = counts.get(k, 0) + 1
        family = dict(pairs).get("model_type")
        oracle["duplicates"] = duplicated and any(c > 1 for c in counts.values())
        oracle["sizes"] = {k: (v if not isinstance(v, Raw) else str(v)) for k, v in pairs
                           if k in SIZE_FIELDS and counts[k] == 1 and family != "gpt2"
                           # a nested vision-language config's language model is text_config: a
                           # top-level size there is not the model's (LLaVA's deprecated vocab_size)
                           and "text_config" not in counts
                           # Falcon's key-value heads are num_kv_heads (with multi_query and
                           # new_decoder_architecture): transformers never reads num_key_value_heads
                           and not (family == "falcon" and k == "num_key_value_heads")
                           # Mamba2's head_dim is its SSM heads' width (mamba_head_dim), not an
                           # attention head's; Granite 4.0-H without experts builds its dense MLP
                           # shared_intermediate_size wide, never reading intermediate_size
                           and not (family == "mamba2" and k == "head_dim")
                           and not (family == "granitemoehybrid" and k == "intermediate_size")
                           and isinstance(v, (int, Raw)) and not isinstance(v, bool)}
    r = rng.random()
    gpu = ["--gpu", rng.choice(ctx.gpus)] if rng.random() < 0.3 else []
    if r < 0.7:
        argv = ["estimate", path, "--json", *gpu]
    elif r < 0.8:
        argv = ["estimate", path, *gpu]
    elif r < 0.88:
        argv = ["solve", "max", "micro_batch", path, "--gpu", "h100-80g", "--json"]
    elif r < 0.96:
        argv = ["show", "total", path]
    else:
        argv = ["plan", path, "--gpu", "h100-80g", "--gpus", "8", "--json"]
    return case("config", argv, {path: data}, oracle=oracle)


# ---------------------------------------------------------------- surface: command lines
CLI_FILES = {
    "mine.mem": b'override rule overhead : bytes = cuda_context + 2 GB "mine"\n',
    "bad.mem": b'rule x : bytes = (1 B "bad"\n',
    "checks.mem": b'check "dp is positive": dp >= 1\ncheck "never": dp > 0 where dp < 0\n',
    "[/b].mem": b'input fz_width : count >= 1 = 4 "[/b]"\n',
    "empty.mem": b"",
}


def gen_cli(rng, ctx) -> dict:
    files = {}

    def model():
        r = rng.random()
        if r < 0.6:
            return rng.choice(ctx.models)
        if r < 0.75:
            name, source = rng.choice(ctx.configs)
            files[name] = source.encode()
            return name
        if r < 0.8:
            files["llama2-7b"] = dict(ctx.configs)["gpt2.json"].encode()
            return "llama2-7b"
        if r < 0.85:
            files["[/b].json"] = dict(ctx.configs)["gpt2.json"].encode()
            return "[/b].json"
        return rng.choice(["", "-", "llama2-7B", "llama2-7b ", "[/b]", "[red]x", "x" * 300, "a/" * 150 + "c.json",
                           "/", "/dev/null", ".", "missing.json", "ü.json", "x\u001b[31m", "--json"])

    def rules_file():
        name = rng.choice(list(CLI_FILES) + ["missing.mem", "/", "x" * 300 + ".mem"])
        if name in CLI_FILES:
            files[name] = CLI_FILES[name]
        return name

    def value(kind):
        pools = {
            "gpu": ctx.gpus * 4 + ["", "H100-80G", "h100", "[/b]", "x" * 300],
            "capacity": ["80GB", "80 GB", "1 B", "0", "-1", "1e400", "1e100000000", "abc", "߃", "80GiB", "1/3 B",
                         "9" * 4301, "2^3 B", "1e9"],
            "gpus": ["8", "8", "1", "64", "0", "-1", "3", "1000000", "99999999999999999999", "x", "1e3", "2^3"],
            "top": ["-3", "0", "1", "3", "1000000000"],
            "max-micro-batch": ["0", "-1", "4", "100000000"],
            "sort": ["model_parallel", "micro_batch", "memory", "bogus"],
            "target": ["total", "model_states", "peak", "weights", "bogus", "capacity", "micro_batch"],
            "step": ["1", "pow2", "2"],
            "multiple-of": ["0", "-1", "1", "2", "5", "8", "3", "1000000000"],
            "samples": ["-1", "0", "1", "3", "100000", "x"],
            "range": ["512:4096", "1:2", "0:5", "9:1", "²:9", "1:1099511627777", "x", "", "1:", "512:131072",
                      "١:٩", "1:" + "9" * 30],
            "x": ["seq_len", "micro_batch", "dp"],
            "out": ["out.png", "out.svg", "out.pdf", "sub/dir/out.png", "/proc/forbidden.png", "", "[/b].png",
                    "x" * 300],
            "format": ["md", "latex", "html", "bogus"],
            "keep": ["micro_batch", "seq_len", "dp", "bogus", "total"],
            "engine": ["vllm", "vllm", "sglang", "trtllm", ""],
            "min-tp-for": ["1", "8", "50", "0", "-1", "1000001", "x", "99999999999999999999"],
            "max-len-for": ["1", "8", "64", "0", "-3", "1000001", "x"],
            "tp": ["1", "2", "8", "0", "-1", "3", "1000000", "x"],
            "pp": ["1", "2", "4", "0", "-2", "99999999999999999999"],
            "vary": ["micro_batch", "micro_batch,seq_len", "seq_len,recompute,dp", "zero_stage,dp,tp", "n_params",
                     "total", "bogus", "", ",", "micro_batch,micro_batch", "capacity", "[/b]", "x" * 300],
            "rule": ["total", "weights", "activations", "peak", "usable_memory", "bogus", "micro_batch"],
            "compile-target": ["python", "numpy", "js", "js", "cobol"],
            "compile-out": ["out.py", "out.js", "sub/dir/out.py", "/proc/forbidden.py", "", "x" * 300],
            "web-out": ["site", "sub/dir/site", "/proc/forbidden", "", "x" * 300, "[/b]"],
            "title": ["memform", "<script>x</script>", "", "x" * 300, "ü & [/b]"],
        }
        if kind == "set":
            name = set_name(rng, ctx)
            return f"{name}={value_text(rng, ctx, name)[0] if rng.random() < 0.5 else rng.choice(ORDINARY)}"
        if kind == "rules":
            return rules_file()
        return rng.choice(pools[kind])

    cmd = rng.choices(["estimate", "solve", "show", "plan", "check", "presets", "docs", "plot", "names", "serve",
                       "junk"], [25, 15, 12, 8, 8, 3, 3, 5, 4, 8, 4])[0]
    if cmd == "junk" and rng.random() < 0.6:  # (drawn apart: every other command's draws stay those of a seed)
        cmd = "compile"
    elif cmd == "junk" and rng.random() < 0.4:  # (likewise: only junk's draws move)
        cmd = "web"
    flags = {"estimate": ["gpu", "capacity", "json", "set", "rules", "check", "no-divisibility"],
             "solve": ["gpu", "capacity", "target", "step", "multiple-of", "no-divisibility", "json", "set", "rules"],
             "show": ["keep", "latex", "set", "rules"],
             "plan": ["gpu", "capacity", "gpus", "sort", "top", "max-micro-batch", "json", "set", "rules",
                      "no-divisibility"],
             "names": ["json", "rules"],
             "serve": ["engine", "gpu", "capacity", "tp", "pp", "json", "set", "rules", "min-tp-for", "max-len-for"],
             "check": ["samples"], "presets": [], "docs": ["format", "out", "check"],
             "plot": ["x", "range", "gpu", "capacity", "out", "set", "rules"],
             "compile": ["gpu", "capacity", "rule", "rule", "target", "out", "set", "rules"],
             "web": ["rules", "title", "out"], "junk": []}[cmd]
    unknowns = ["micro_batch", "seq_len", "dp", "tp", "pp", "cp", "n_params", "hidden_size", "zero_stage",
                "total", "bogus", "capacity"]
    if cmd == "estimate":
        argv = [cmd, model()]
    elif cmd == "solve":
        argv = [cmd, rng.choice(["max", "min", "max", "mid"]), rng.choice(unknowns), model()]
    elif cmd == "show":
        argv = [cmd, rng.choice(["total", "weights", "activations", "kv_cache", "peak", "bogus", "micro_batch"])]
        argv += [model()] if rng.random() < 0.8 else []
    elif cmd == "plan":
        argv = [cmd, model(), "--gpus", value("gpus")]
    elif cmd == "check":
        argv = [cmd, *[rules_file() for _ in range(rng.choice([0, 1, 1, 2]))], "--samples", rng.choice(["1", "3"])]
    elif cmd == "plot":  # the default image is MODEL-X.png: kept inside the working folder
        m = model()
        argv = [cmd, m, "--x", value("x"), "--range", value("range")]
        argv += ["--out", "out.png"] if m.startswith("/") else []
    elif cmd == "serve":
        argv = [cmd, model()] + (["--gpu", value("gpu")] if rng.random() < 0.7 else [])
    elif cmd == "compile":
        argv = [cmd, model(), "--vary", value("vary")]
    elif cmd == "web":  # the page's three files: kept inside the working folder
        argv = [cmd, "--out", value("web-out")]
    elif cmd == "names":
        argv = [cmd] + ([rng.choice(["zero", "*_bytes", "tp", "[", "*", "", "x" * 300, "batch_size", "ü", "[/b]"])]
                        if rng.random() < 0.8 else [])
    elif cmd == "junk":
        argv = [rng.choice(["", "estimat", "--help", "-h", "--version", "ESTIMATE", "measure", "calibrate"])]
    else:
        argv = [cmd]
    if cmd == "docs":
        argv += rng.choice([["--out", "docsout"], ["--check", "--out", "docsout"], ["--check"],
                            ["--format", value("format"), "--out", "docsout"], ["--out", "/proc/x"]])
    for _ in range(rng.choice([0, 1, 1, 2, 3, 4])):
        if not flags or rng.random() < 0.08:
            argv += [rng.choice(["--bogus", "--json=1", "-x", "--", "--set", "--gpu=h100-80g", "--rules"])]
            continue
        flag = rng.choice(flags)
        if flag in ("json", "latex", "no-divisibility", "check"):  # switches
            argv.append(f"--{flag}")
        elif cmd == "compile" and flag in ("target", "out"):  # compile's own choices and file names
            argv += [f"--{flag}", value(f"compile-{flag}")]
        elif cmd == "web" and flag == "out":
            argv += ["--out", value("web-out")]
        else:
            argv += [f"--{flag}", value(flag)]
    if rng.random() < 0.1 and len(argv) > 1:  # a missing or extra positional
        argv.pop(rng.randrange(1, len(argv))) if rng.random() < 0.5 else argv.append(rng.choice(["extra", "llama2-7b"]))
    oracle = {}
    if files.get("llama2-7b") and "llama2-7b" in argv:
        oracle["shadow"] = {"hidden_size": ctx.preset_settings["llama2-7b"]["hidden_size"]}
    return case("cli", argv, files, oracle=oracle)


GENERATORS = {"set": gen_set, "rules": gen_rules, "config": gen_config, "cli": gen_cli}


def generate(surface: str, rng: random.Random, ctx: Context) -> dict:
    """One random input of ``surface``."""
    return GENERATORS[surface](rng, ctx)


# ---------------------------------------------------------------- invariants of the output
def _strict(text: str):
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")
    return json.loads(text, parse_constant=refuse)


def _whole(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def estimate_problems(data: dict) -> list[tuple[str, str]]:
    """What is wrong with an ``estimate --json`` document (README, engine/answers/report.py)."""
    out = []
    comps, rules, inputs = data.get("components") or {}, data.get("rules") or {}, data.get("inputs") or {}
    figures = [("total_bytes", data.get("total_bytes"))]
    figures += [(f"components.{n}", v) for n, v in comps.items()] + [(f"rules.{n}", v) for n, v in rules.items()]
    for name in ("capacity_bytes", "usable_bytes"):
        if data.get(name) is not None:
            figures.append((name, data[name]))
    for name, v in figures:
        if not _whole(v):
            return [(f"byte figure not a whole number ({name})", f"{name} = {v!r}")]
        if v < 0:
            out.append((f"negative byte figure ({name})", f"{name} = {v:,}"))
            break
    total = data["total_bytes"]
    if rules.get("total") != total:
        out.append(("total_bytes != rules.total", f"{total:,} vs {rules.get('total')!r}"))
    above = [(n, v) for n, v in comps.items() if v > total]
    if above:
        out.append((f"component above the total ({above[0][0]})", f"{above[0][0]} = {above[0][1]:,} > total {total:,}"))
    excess = sum(comps.values()) - total
    if comps and not 0 <= excess <= len(comps) - 1:
        out.append(("components do not sum to the total", f"sum {sum(comps.values()):,} vs total {total:,}"))
    differ = [n for n in comps if n in rules and rules[n] != comps[n]]
    if differ:
        out.append((f"rules.{differ[0]} != components.{differ[0]}", f"{rules[differ[0]]:,} vs {comps[differ[0]]:,}"))
    parts = ("weights", "master", "grads", "optimizer_states")
    if "model_states" in rules and "model_states" not in comps and all(p in comps for p in parts):
        excess = sum(comps[p] for p in parts) - rules["model_states"]
        if not 0 <= excess <= 3:
            out.append(("model_states != weights + master + grads + optimizer_states",
                        f"{rules['model_states']:,} vs {sum(comps[p] for p in parts):,}"))
    cap, capacity = data.get("usable_bytes", data.get("capacity_bytes")), inputs.get("capacity")
    if (cap is None) != (data.get("fits") is None):
        out.append(("fits without a capacity (or none with one)", f"fits = {data.get('fits')!r}"))
    elif cap is not None and _whole(capacity):
        if data["fits"] != (total <= cap):
            out.append(("fits disagrees with the figures", f"total {total:,}, capacity {cap:,}, fits {data['fits']}"))
        if "peak" in rules and data.get("fits_at_peak") != (rules["peak"] <= cap):
            out.append(("fits_at_peak disagrees with the figures",
                        f"peak {rules['peak']:,}, capacity {cap:,}, fits_at_peak {data.get('fits_at_peak')}"))
    return out


def value_problems(data: dict, oracle: dict) -> list[tuple[str, str]]:
    """The ``--set`` values memform used, and the rules pinned by them or by a rule file's
    constant override, against this file's arithmetic."""
    out, inputs, rules = [], data.get("inputs") or {}, data.get("rules") or {}
    for name, expected in (oracle.get("rules") or {}).items():
        v = Fraction(expected)
        if v >= 0 and rules.get(name) != math.ceil(v):
            out.append(("a constant rule reported as another value", f"{name}: expected {math.ceil(v)}, "
                                                                       f"got {rules.get(name)!r}"))
    for name, (kind, expected) in ((n, e) for n, e in oracle.items() if isinstance(e, list)):
        got = inputs.get(name, "(missing)")
        if kind == "reject":
            out.append((f"--set accepted: {expected}", f"{name} = {got!r}"))
        elif kind == "choice" and got != expected:
            out.append(("--set choice differs", f"{name}: expected {expected!r}, got {got!r}"))
        elif kind == "num":
            v = Fraction(expected)
            ok = (_whole(got) and got == v) if v.denominator == 1 else (
                isinstance(got, float) and math.isclose(got, float(v), rel_tol=1e-9))
            if not ok:
                out.append(("--set value differs from its arithmetic",
                            f"{name}: expected {_short(str(v))}, got {_short(repr(got))}"))
            elif name in rules and v >= 0 and rules[name] != math.ceil(v):
                out.append(("a pinned rule reported as another value", f"{name}: pinned to {_short(str(v))}, "
                                                                       f"reported {rules[name]!r}"))
    return out


def config_problems(data: dict, oracle: dict, err: str) -> list[tuple[str, str]]:
    out, inputs = [], data.get("inputs") or {}
    if oracle.get("duplicates") and "duplicate" not in err.lower():
        out.append(("config.json: duplicate keys accepted silently", ""))
    for name, raw in (oracle.get("sizes") or {}).items():
        got = inputs.get(name)
        if isinstance(raw, str):
            out.append((f"config.json: {_short(raw)} accepted as a size", f"{name} = {got!r}"))
        elif raw <= 0:
            out.append(("config.json: a size <= 0 accepted", f"{name} = {raw} -> {got!r}"))
        elif got != raw:
            out.append(("config.json: a size not used as written", f"{name}: {raw} -> {got!r}"))
    return out


def _short(s: str, n: int = 60) -> str:
    return s if len(s) <= n else s[: n // 2] + f"...({len(s):,} chars)..." + s[-10:]


def output_problems(c: dict, run: dict) -> list[tuple[str, str]]:
    """Every invariant of one finished command (exit status, messages, output)."""
    argv, code, out, err = c["argv"], run["code"], run["out"], run["err"]
    cmd = argv[0] if argv else ""
    found = []
    if code not in (0, 1, 2):
        found.append((f"exit status {code}", ""))
    elif code == 1 and cmd not in EXIT_ONE and not (cmd == "estimate" and "--check" in argv):
        found.append((f"exit status 1 from {cmd}", err.strip()[:200]))
    # an answer is one JSON document on stdout, an error may be one too; after "--" the text
    # "--json" is an argument (a names pattern), not the flag
    json_out = "--json" in (argv[:argv.index("--")] if "--" in argv else argv)
    data = None
    if json_out and (out.strip() or code == 0) and (code != 0 or cmd in JSON_COMMANDS):
        try:
            data = _strict(out)
        except ValueError as exc:
            return found + [(f"{cmd} --json: not strict JSON", str(exc)[:200])]
    if code != 0 and isinstance(data, dict) and "error" in data:
        error = data["error"]
        if not (isinstance(error, dict) and error.get("message") and error.get("exit_code") == code):
            found.append(("--json: an error without a message or with another exit status", _short(out, 200)))
        return found
    if code != 0 and data is None:
        message = err.strip() or out.strip()
        if not message or message == "memform: error:":
            found.append(("error without a message", ""))
    if "Traceback (most recent call last)" in out + err:
        found.append(("traceback printed", ""))
    bad = re.search(r"[\x00-\x08\x0b-\x1f\x7f\x9b]", out + err)
    if bad:
        found.append(("control character in the output", repr(bad.group())))
    # the formula reference itself (1.8 MB of Markdown, more as HTML) is what `memform docs`
    # prints without --out; anything else that long echoes an input
    if len(out) + len(err) > 1_000_000 and not (cmd == "docs" and "--out" not in argv and "--check" not in argv):
        found.append(("output over 1 MB", f"{len(out) + len(err):,} characters"))
    if code != 0:
        return found
    oracle = c.get("oracle") or {}
    if cmd == "estimate" and isinstance(data, dict):
        found += [(f"estimate --json: {p}", d) for p, d in estimate_problems(data)]
        found += value_problems(data, oracle)
        if c["surface"] == "config":
            found += config_problems(data, oracle, err)
        shadow = oracle.get("shadow")
        given = {a.split("=", 1)[0].strip() for a in argv[1:] if "=" in a}  # --set k=v may change k itself
        if shadow and any(str(data["inputs"].get(k)) != v for k, v in shadow.items() if k not in given):
            found.append(("a file in the working folder replaces the preset of its name", ""))
    if cmd == "estimate" and data is None and len(argv) > 1:
        model = argv[1]
        if 0 < len(model) < 40 and model.isprintable() and model not in out:
            found.append(("estimate: MODEL not printed as given (markup?)", repr(model)))
    if cmd == "solve" and isinstance(data, dict):
        cap = data.get("usable_bytes", data.get("capacity_bytes"))
        if not (_whole(data.get("value")) and _whole(cap) and _whole(data.get("bytes_at_value"))):
            found.append(("solve --json: a figure not a whole number", ""))
        elif data["bytes_at_value"] > cap or (data.get("bytes_at_next") is not None and data["bytes_at_next"] < cap):
            found.append(("solve --json: answer on the wrong side of the capacity",
                          f"at value {data['bytes_at_value']:,}, next {data.get('bytes_at_next')}, capacity {cap:,}"))
    if cmd == "plan" and isinstance(data, dict):
        for row in data.get("layouts", []):
            if any(isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0 for v in row.values()):
                found.append(("plan --json: a negative figure in a layout", json.dumps(row)[:200]))
                break
    if cmd == "check" and re.search(r"^ok .*\(0 scenarios\)", out, re.M):
        found.append(("check: passed on 0 scenarios", ""))
    return found


# ---------------------------------------------------------------- running one input
class Hang(BaseException):
    """The per-command time limit passed (a BaseException: ``except Exception`` cannot eat it)."""


def _alarm(signum, frame):
    raise Hang()


def _frame(tb) -> str:
    """The innermost frame in engine/ ('file.py:function'), else the innermost of all."""
    frames = traceback.extract_tb(tb)
    inside = [f for f in frames if Path(f.filename).resolve().is_relative_to(ENGINE)]
    f = (inside or frames or [None])[-1]
    return "?" if f is None else f"{Path(f.filename).name}:{f.name}" + ("" if inside else " (no engine frame)")


def _innermost(tb) -> str:
    frames = traceback.extract_tb(tb)
    return f"{Path(frames[-1].filename).name}:{frames[-1].lineno} {frames[-1].name}" if frames else ""


def invoke(argv: list, no_cache: bool, limit: float) -> dict:
    """Run one command line in this process: exit status and output, or the escape."""
    from engine.cli import main
    saved = os.environ.pop("MEMFORM_NO_CACHE", None)
    if no_cache:
        os.environ["MEMFORM_NO_CACHE"] = "1"
    out, err = io.StringIO(), io.StringIO()
    start = time.monotonic()
    signal.signal(signal.SIGVTALRM, _alarm)
    signal.setitimer(signal.ITIMER_VIRTUAL, limit)  # user CPU time: memform's budgets use ITIMER_PROF
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv), out, err)
    except Hang as exc:
        return {"escape": (f"hang > {limit:g} s CPU at {_frame(exc.__traceback__)}", _innermost(exc.__traceback__))}
    except SystemExit as exc:
        code = exc.code
        if not (code == 0 and ({"--help", "-h", "--version"} & set(argv))):
            return {"escape": (f"SystemExit({code!r})", "")}
    except BaseException as exc:  # noqa: BLE001 - an escape: what a user would see as a traceback
        if isinstance(exc, KeyboardInterrupt):
            raise
        return {"escape": (f"{type(exc).__name__} at {_frame(exc.__traceback__)}",
                           f"{type(exc).__name__}: {_short(str(exc), 200)} [{_innermost(exc.__traceback__)}]")}
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        os.environ.pop("MEMFORM_NO_CACHE", None)
        if saved is not None:
            os.environ["MEMFORM_NO_CACHE"] = saved
    return {"code": code, "out": out.getvalue(), "err": err.getvalue(), "seconds": time.monotonic() - start}


def runs_of(c: dict) -> list[bool]:
    """The runs of a case: True for the full path (no cache); an estimate is compared with the
    path a user gets (and, for a table, a second time, when the formula column is cached)."""
    if not c.get("compare"):
        return [False]
    return [True, False] if "--json" in c["argv"] else [True, False, False]


def run_case(c: dict, workdir: Path, limit: float = 10) -> dict:
    """Run one input in ``workdir`` (emptied first); its exit status and findings."""
    workdir = Path(workdir)
    assert workdir.name.startswith("memform-fuzz-"), workdir  # never empty anything else
    for child in workdir.iterdir():
        shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    for name, data in c["files"].items():
        path = workdir / name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data if isinstance(data, bytes) else base64.b64decode(data))
        except OSError:
            pass  # a name the file system refuses (too long): the command meets it as given
    here = os.getcwd()
    os.chdir(workdir)
    try:
        runs = [invoke(c["argv"], no_cache, limit) for no_cache in runs_of(c)]
    finally:
        os.chdir(here)
    escapes = [r["escape"] for r in runs if "escape" in r]
    if escapes:
        return {"code": None, "findings": [escapes[0]]}
    first = runs[0]
    findings = output_problems(c, first)
    for r in runs[1:]:
        if (r["code"], r["out"]) != (first["code"], first["out"]):
            findings.append(("fast path prints other than the full path", _difference(first, r)))
            break
    return {"code": first["code"], "findings": findings}


def _difference(a: dict, b: dict) -> str:
    if a["code"] != b["code"]:
        return f"exit {a['code']} vs {b['code']}"
    for x, y in zip(a["out"].splitlines(), b["out"].splitlines()):
        if x != y:
            return f"{x.strip()[:100]!r} vs {y.strip()[:100]!r}"
    return "output lengths differ"


# ---------------------------------------------------------------- shortcuts (see the docstring)
def _is_library_check(check) -> bool:
    """Whether a check comes from the shipped library (its file is formulas/NAME.mem)."""
    path = Path(getattr(getattr(check, "span", None), "file", "") or "")
    return path.parent.name == "formulas" and path.name in LIBRARY_NAMES


@contextlib.contextmanager
def shortcuts(shipped=None):
    """Reuse the shipped library and its parsed files between commands; ``check`` tests only
    the fuzzed files' checks.  With ``shipped=None`` only the latter (a faithful replay)."""
    import engine.answers.checks as checks
    import engine.compile.cache as cache
    import engine.library.registry as registry
    saved = cache.load, registry.parse_text, checks.run_checks
    original_load, original_parse, original_checks = saved
    parsed: dict = {}
    library_texts = {t for _, t in LIBRARY_FILES}

    def load(extra=(), folder=None, **kw):
        extra = list(extra)
        if shipped is not None and folder is None and not extra and not kw:
            shipped._compose_cache.clear()
            shipped._compose_cache.update(snapshot)
            return shipped
        return original_load(extra, folder=folder, **kw)

    def parse_text(text, path="<string>"):
        if text not in library_texts:
            return original_parse(text, path)
        if (text, path) not in parsed:
            parsed[(text, path)] = original_parse(text, path)
        return list(parsed[(text, path)])

    def run_checks(lib, *args, **kw):
        every = getattr(lib, "lowered_checks", None)
        if every is None:
            return original_checks(lib, *args, **kw)
        lib.lowered_checks = [item for item in every if not _is_library_check(item[0])]
        try:
            return original_checks(lib, *args, **kw)
        finally:
            lib.lowered_checks = every

    snapshot = dict(shipped._compose_cache) if shipped is not None else {}
    if shipped is not None:
        cache.load, registry.parse_text = load, parse_text
    checks.run_checks = run_checks
    try:
        yield
    finally:
        cache.load, registry.parse_text, checks.run_checks = saved




# ---------------------------------------------------------------- workers
def _worker(conn, shipped, limit: float, memory_gb: float) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the run
    if memory_gb:
        size = int(memory_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (size, size))
    workdir = Path(tempfile.mkdtemp(prefix="memform-fuzz-"))  # inside the run's scratch folder
    os.chdir(workdir)
    with shortcuts(shipped):
        while True:
            c = conn.recv()
            if c is None:
                break
            try:
                result = run_case(c, workdir, limit)
            except MemoryError:
                result = {"code": None, "findings": [("MemoryError in the fuzzer's worker", "")]}
            conn.send(result)
    shutil.rmtree(workdir, ignore_errors=True)


class Pool:
    """Worker processes (forked, so they share the loaded library) that run cases with a
    deadline each; a worker past it is killed and replaced."""

    def __init__(self, jobs: int, shipped, limit: float, memory_gb: float):
        self.ctx = multiprocessing.get_context("fork")
        self.args = (shipped, limit, memory_gb)
        self.limit = limit
        self.workers = [self._start() for _ in range(jobs)]

    def _start(self) -> dict:
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker, args=(child, *self.args), daemon=True)
        proc.start()
        child.close()
        return {"proc": proc, "conn": parent, "case": None, "since": 0.0}

    def run(self, cases):
        """Yield (case, result) for every case, in the order they finish."""
        cases = iter(cases)
        pending = True
        while True:
            for w in self.workers:
                if w["case"] is None and pending:
                    c = next(cases, None)
                    if c is None:
                        pending = False
                        break
                    w["case"], w["since"] = c, time.monotonic()
                    w["conn"].send(c)
            busy = [w for w in self.workers if w["case"] is not None]
            if not busy:
                return
            ready = wait([w["conn"] for w in busy], timeout=1)
            for w in busy:
                c = w["case"]
                deadline = 3 * self.limit * len(runs_of(c)) + 30
                if w["conn"] in ready:
                    try:
                        result = w["conn"].recv()
                    except (EOFError, OSError):
                        result = {"code": None, "findings": [("worker died (a crash, or the memory limit)", "")]}
                        self._replace(w)
                    w["case"] = None
                    yield c, result
                elif time.monotonic() - w["since"] > deadline:
                    self._replace(w)
                    w["case"] = None
                    yield c, {"code": None, "findings": [(f"hang > {deadline:g} s, killed (no Python frame)", "")]}

    def _replace(self, w: dict) -> None:
        w["proc"].kill()
        w["proc"].join()
        w.update(self._start(), case=None)

    def close(self) -> None:
        for w in self.workers:
            try:
                w["conn"].send(None)
            except OSError:
                pass
        for w in self.workers:
            w["proc"].join(timeout=5)
            if w["proc"].is_alive():
                w["proc"].kill()


# ---------------------------------------------------------------- the run and its report
def describe(c: dict) -> str:
    """The case as a command line (files listed with their size and start)."""
    line = "memform " + shlex.join(c["argv"])
    for name, data in c["files"].items():
        raw = data if isinstance(data, bytes) else base64.b64decode(data)
        line += f"\n      file {name!r} ({len(raw):,} bytes): {_short(repr(raw[:300])[2:-1], 160)}"
    return line


def size(c: dict) -> int:
    return sum(map(len, c["argv"])) + sum(len(d) for d in c["files"].values())


def save(c: dict, folder: Path) -> None:
    """``case.json``, the case's files and ``cmd.sh`` (run from this folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    stored = dict(c, files={n: base64.b64encode(d).decode() for n, d in c["files"].items()})
    (folder / "case.json").write_text(json.dumps(stored, indent=1, ensure_ascii=False), encoding="utf-8")
    for name, data in c["files"].items():
        try:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)
        except OSError:
            pass
    (folder / "cmd.sh").write_text('cd "$(dirname "$0")" && memform ' + shlex.join(c["argv"]) + "\n")


@contextlib.contextmanager
def scratch():
    """A temporary folder for a run, removed at its end: the cache (``XDG_CACHE_HOME``, so the
    user's is never touched) and the workers' working folders."""
    root = tempfile.mkdtemp(prefix="memform-fuzz-run-")
    saved = tempfile.tempdir
    tempfile.tempdir = root
    os.environ["XDG_CACHE_HOME"] = os.path.join(root, "cache")
    try:
        yield root
    finally:
        tempfile.tempdir = saved
        shutil.rmtree(root, ignore_errors=True)


def replay(path: Path, limit: float) -> int:
    """Run one saved case in this process without the library shortcuts; print its findings."""
    stored = json.loads(path.read_text(encoding="utf-8"))
    stored["files"] = {n: base64.b64decode(d) for n, d in stored["files"].items()}
    with scratch():
        import engine
        engine.load()  # warm the cache, as a user's second command finds it
        with shortcuts(None):
            result = run_case(stored, Path(tempfile.mkdtemp(prefix="memform-fuzz-")), limit)
    print(json.dumps(result))
    return 1 if result["findings"] else 0


def confirm(folder: Path, key: str, limit: float) -> str:
    try:
        done = subprocess.run([sys.executable, __file__, "--replay", str(folder / "case.json"), "--limit", str(limit)],
                              capture_output=True, text=True, timeout=limit * 3 + 90)
    except subprocess.TimeoutExpired:
        return "hang" if key.startswith("hang") else "other (hang)"
    try:
        found = [k for k, _ in json.loads(done.stdout.strip().splitlines()[-1])["findings"]]
    except (ValueError, IndexError, KeyError):
        return "?"
    return "yes" if key in found else ("other: " + found[0]) if found else "no"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--surface", default=",".join(SURFACES), help="comma-separated: " + ", ".join(SURFACES))
    ap.add_argument("--inputs", type=int, default=100_000, help="inputs per surface")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2, help="worker processes")
    ap.add_argument("--limit", type=float, default=10, help="seconds per command")
    ap.add_argument("--memory-gb", type=float, default=4, help="address-space limit per worker (0: none)")
    ap.add_argument("--out", help="where the shortest input of each class is saved (default: a temporary folder)")
    ap.add_argument("--no-confirm", action="store_true", help="do not replay each class in a fresh process")
    ap.add_argument("--replay", metavar="CASE.json", help="run one saved case and print its findings")
    args = ap.parse_args(argv)
    if args.replay:
        return replay(Path(args.replay), args.limit)
    surfaces = [s.strip() for s in args.surface.split(",") if s.strip()]
    for s in surfaces:
        if s not in SURFACES:
            ap.error(f"unknown surface {s!r}")
    out_dir = Path(args.out or tempfile.mkdtemp(prefix="memform-fuzz-out-"))
    with scratch():
        stats, classes = run(surfaces, args, out_dir)
    report(stats, classes, out_dir, args)
    return 1 if classes else 0


def run(surfaces: list[str], args, out_dir: Path) -> tuple[dict, dict]:
    """Every surface's inputs through the worker pool: counts per surface, findings per class.
    The first input of each new class is saved under ``out_dir``/found/NN as it is found, so a
    long run can be fixed from before it ends."""
    import engine
    shipped = engine.load()  # written to the fresh cache: the fast path finds it
    ctx = Context(shipped)
    stats, classes = {}, {}  # surface -> counts; class -> {"count": {surface: n}, "case", "detail"}
    pool = Pool(args.jobs, shipped, args.limit, args.memory_gb)
    try:
        for surface in surfaces:
            rng = random.Random(f"{args.seed}:{surface}")
            st = stats[surface] = {"inputs": 0, 0: 0, 1: 0, 2: 0, "escapes": 0, "hangs": 0, "seconds": 0.0}
            start = last = time.monotonic()
            cases = (generate(surface, rng, ctx) for _ in range(args.inputs))
            for c, result in pool.run(cases):
                st["inputs"] += 1
                if result["code"] in (0, 1, 2):
                    st[result["code"]] += 1
                if result["findings"]:
                    st["escapes"] += 1
                    st["hangs"] += any(k.startswith("hang") for k, _ in result["findings"])
                for key, detail in dict(result["findings"]).items():
                    if key not in classes:  # seen as it happens, not only in the final report
                        found = out_dir / "found" / f"{len(classes) + 1:02d}"
                        save(c, found)
                        print(f"[{surface}] new class: {_short(key, 100)}\n    {describe(c)}\n    saved: {found}",
                              file=sys.stderr, flush=True)
                    entry = classes.setdefault(key, {"count": {}, "case": c, "detail": detail})
                    entry["count"][surface] = entry["count"].get(surface, 0) + 1
                    if size(c) < size(entry["case"]):
                        entry["case"], entry["detail"] = c, detail
                if time.monotonic() - last > 30:
                    last = time.monotonic()
                    print(f"[{surface}] {st['inputs']:,}/{args.inputs:,} inputs, {st['escapes']:,} escapes, "
                          f"{last - start:.0f} s", file=sys.stderr, flush=True)
            st["seconds"] = time.monotonic() - start
    except KeyboardInterrupt:
        print("interrupted: the counts so far", file=sys.stderr)
    finally:
        pool.close()
    return stats, classes


def report(stats: dict, classes: dict, out_dir: Path, args) -> None:
    """The counts per surface, the classes with their counts, then each class's shortest input."""
    print(f"\nmemform fuzz: seed {args.seed}, {args.jobs} job(s), limit {args.limit:g} s per command")
    print(f"{'surface':8} {'inputs':>9} {'exit 0':>8} {'exit 1':>7} {'exit 2':>8} {'escapes':>8} {'hangs':>6}"
          f" {'wall s':>8} {'h/100k':>7}")
    for surface, st in stats.items():
        per = st["seconds"] / max(1, st["inputs"]) * 100_000 / 3600
        print(f"{surface:8} {st['inputs']:9,} {st[0]:8,} {st[1]:7,} {st[2]:8,} {st['escapes']:8,} {st['hangs']:6,}"
              f" {st['seconds']:8.0f} {per:7.1f}")
    ordered = sorted(classes.items(), key=lambda kv: -sum(kv[1]["count"].values()))
    print(f"\n{len(classes)} classes; the shortest input of each is saved under {out_dir}/NN")
    print(f"{'#':>3}  {'class':70} " + " ".join(f"{s:>6}" for s in stats) + "  fresh process")
    for i, (key, entry) in enumerate(ordered, 1):
        folder = out_dir / f"{i:02d}"
        save(entry["case"], folder)
        entry["confirmed"] = "-" if args.no_confirm else confirm(folder, key, args.limit)
        counts = " ".join(f"{entry['count'].get(s, 0):6,}" for s in stats)
        print(f"{i:3}  {_short(key, 70):70} {counts}  {entry['confirmed']}")
    for i, (key, entry) in enumerate(ordered, 1):
        print(f"\n{i:2}. {key}")
        if entry["detail"]:
            print(f"    {_short(entry['detail'], 300)}")
        print("    " + describe(entry["case"]))


if __name__ == "__main__":
    raise SystemExit(main())
