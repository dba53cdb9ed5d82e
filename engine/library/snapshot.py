"""The resolved library as plain data, so that a new process need not parse and resolve it.

Building the shipped library (lark parsing every rule file, sympy building and simplifying
every expression, then resolving names, units and dependencies) takes seconds, and every
command that needs sympy (``show``, ``solve``, ``plan``, ``docs``, ``check``, an estimate
the fast path declines) paid it.  :func:`dump` writes a resolved :class:`Library` as plain
data (kept by :mod:`engine.store`: JSON with an HMAC, never a pickle) and :func:`load`
rebuilds it, in a fraction of the time, without any simplification: a sympy expression is
stored as a table of nodes (each distinct subexpression once; its class, named from a fixed
list, and the table indices of its arguments) and rebuilt node by node with its arguments
exactly as sympy left them, so the rebuilt expression is the same tree (``==``, the same
hash) as the one the rules built.  Declarations are stored field by field, places (spans)
included, so errors from a loaded library read the same.

Nothing in the data is evaluated: a class not on the list, a field a declaration does not
have, a table index out of range or a malformed entry and the whole snapshot is refused
(:class:`Refused`), and the library is built from its rule files as before.
``tests/test_snapshot.py`` checks that the rebuilt library equals a freshly built one.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import sympy
from sympy.core.basic import Basic
from sympy.functions.elementary.piecewise import ExprCondPair

from ..errors import Span
from ..lang.rules import (At, CheckDecl, DtypeDecl, InputDecl, Match, OptionDecl, PresetDecl,
                          RuleDecl)
from ..paths import data_path
from .registry import Library, _display_path

#: the layout of a snapshot (3: a span's file inside the shipped rules folder stored relative to it,
#: any other by its absolute path); one of another format is not read
FORMAT = 3
#: the stored form of a file in the shipped rules folder: this, then its path relative to the folder
#: (the cache is shared by every checkout of the same sources, each with its own folder)
SHIPPED = "<formulas>/"

_DECLS = {c.__name__: c for c in (DtypeDecl, InputDecl, OptionDecl, RuleDecl, CheckDecl, PresetDecl)}
_FIELDS = {name: tuple(f.name for f in dataclasses.fields(c)) for name, c in _DECLS.items()}

# how each kind of node is rebuilt from arguments that are already as sympy built them:
# without evaluation, and with what sympy's constructors set beside the arguments
_ASSOC = {"Add": sympy.Add, "Mul": sympy.Mul}  # cls._from_args: is_commutative from the args
_LATTICE = {"Max": sympy.Max, "Min": sympy.Min, "And": sympy.And, "Or": sympy.Or}  # and _argset
_PLAIN = {c.__name__: c for c in (
    sympy.Eq, sympy.Ne, sympy.Lt, sympy.Le, sympy.Gt, sympy.Ge, sympy.Not, sympy.Tuple)}
_POW = {"Pow": sympy.Pow}
_FUNCTIONS = {c.__name__: c for c in (sympy.ceiling, sympy.floor, sympy.log, At, Match)}
_ATOMS = {"true": sympy.true, "false": sympy.false, "nan": sympy.nan, "zoo": sympy.zoo,
          "oo": sympy.oo, "-oo": -sympy.oo}
_ATOM_NAMES = {id(v): k for k, v in _ATOMS.items()}
_ASSUMPTIONS = frozenset({"integer", "positive", "nonnegative", "real", "commutative"})


class Refused(ValueError):
    """The data is not a snapshot this module writes."""


# ---------------------------------------------------------------- writing
class _Writer:
    def __init__(self) -> None:
        self.nodes: list[list] = []
        self.index: dict = {}  # (type, expr) -> its row
        self.files: dict[str, str] = {}  # a span's file as shown -> as stored
        self.shipped = data_path("formulas").resolve()

    def node(self, e) -> int:
        key = (type(e), e)
        found = self.index.get(key)
        if found is not None:
            return found
        name = type(e).__name__
        if isinstance(e, sympy.Integer):
            row = ["I", int(e)]
        elif isinstance(e, sympy.Rational):
            row = ["Q", int(e.p), int(e.q)]
        elif id(e) in _ATOM_NAMES:
            row = [_ATOM_NAMES[id(e)]]
        elif type(e) is sympy.Symbol:
            assumptions = e._assumptions_orig
            if set(assumptions) - _ASSUMPTIONS or not all(v is True or v is False for v in assumptions.values()):
                raise TypeError(f"symbol {e} with assumptions {assumptions}")
            row = ["S", e.name, [k if v else "!" + k for k, v in assumptions.items()]]  # in order
        elif type(e) is ExprCondPair:
            row = ["ECP", *map(self.node, e.args)]
        elif _class(name) is not None:
            if _class(name) is not type(e):
                raise TypeError(f"{type(e)} is not sympy's {name}")
            row = [name, *map(self.node, e.args)]
        else:
            raise TypeError(f"a {name} is not kept in a snapshot")
        self.nodes.append(row)
        self.index[key] = found = len(self.nodes) - 1
        return found

    def stored(self, file: str) -> str:
        """A file as kept: relative to the shipped rules folder (:data:`SHIPPED`) when inside it,
        else by its absolute path; a name that is no file (``<string>``) as it is."""
        if not os.path.isfile(file):
            return file
        path = Path(file).resolve()
        if path.is_relative_to(self.shipped):
            return SHIPPED + path.relative_to(self.shipped).as_posix()
        return str(path)

    def value(self, v):
        """A field's value as plain data: every tuple is tagged by its first item."""
        if v is None or isinstance(v, (bool, str)) or type(v) is int:
            return v
        if isinstance(v, Basic):
            return ("x", self.node(v))
        if type(v) is Span:  # shown relative to the reader's folder
            if v.file not in self.files:
                self.files[v.file] = self.stored(v.file)
            return ("s", self.files[v.file], v.line, v.column, v.length, v.text)
        if type(v).__name__ in _DECLS and type(v) is _DECLS[type(v).__name__]:
            return ("D", type(v).__name__, tuple(self.value(getattr(v, f)) for f in _FIELDS[type(v).__name__]))
        if type(v) is tuple:
            return ("t", *map(self.value, v))
        if type(v) is list:
            return [self.value(x) for x in v]
        if type(v) is dict:
            return {self.value(k): self.value(x) for k, x in v.items()}
        raise TypeError(f"a {type(v).__name__} is not kept in a snapshot")


def _class(name: str):
    if name == "Piecewise":
        return sympy.Piecewise
    return _ASSOC.get(name) or _LATTICE.get(name) or _PLAIN.get(name) or _FUNCTIONS.get(name) or _POW.get(name)


def dump(lib) -> dict:
    """A resolved library as plain data (what :func:`engine.store.write` takes); TypeError
    when it holds something a snapshot does not keep."""
    w = _Writer()
    checks = {id(c): i for i, c in enumerate(lib.checks)}
    body = {
        "decls": w.value(list(lib.decls.values())),
        "checks": w.value(lib.checks),
        "presets": w.value(list(lib.presets.values())),
        "files": [w.stored(f) for f in lib.files],
        "lowered": w.value(lib.lowered),
        "deps": {n: sorted(d) for n, d in lib.deps.items()},
        "order": list(lib.order),
        "inputs": w.value(lib._input_syms),
        "options": w.value(lib._option_syms),
        "lowered_checks": [(checks[id(c)], *(w.value(e) for e in rest)) for c, *rest in lib.lowered_checks],
    }
    return {"format": FORMAT, "nodes": w.nodes, "library": body}


# ---------------------------------------------------------------- reading
class _Reader:
    def __init__(self, rows) -> None:
        if not isinstance(rows, list):
            raise Refused("no node table")
        self.nodes: list = []
        self.files: dict[str, str] = {}  # a span's file as stored -> as shown here
        self.shipped = data_path("formulas")
        for row in rows:
            self.nodes.append(self._build(row))

    def _arg(self, i):
        if type(i) is not int or not 0 <= i < len(self.nodes):
            raise Refused("a node refers to one not built before it")
        return self.nodes[i]

    def _build(self, row):
        if not isinstance(row, list) or not row or not isinstance(row[0], str):
            raise Refused("a malformed node")
        tag, rest = row[0], row[1:]
        if tag == "I" and len(rest) == 1 and type(rest[0]) is int:
            return sympy.Integer(rest[0])
        if tag == "Q" and len(rest) == 2 and all(type(x) is int for x in rest) and rest[1] > 1:
            return sympy.Rational(rest[0], rest[1])
        if tag in _ATOMS and not rest:
            return _ATOMS[tag]
        if tag == "S" and len(rest) == 2 and isinstance(rest[0], str) and isinstance(rest[1], list) \
                and {k.removeprefix("!") for k in rest[1] if isinstance(k, str)} <= _ASSUMPTIONS:
            return sympy.Symbol(rest[0], **{k.removeprefix("!"): not k.startswith("!") for k in rest[1]})
        args = [self._arg(i) for i in rest]
        if tag == "ECP" and len(args) == 2:
            return sympy.Tuple.__new__(ExprCondPair, *args)
        if tag == "Piecewise" and args and all(type(a) is ExprCondPair for a in args):
            return Basic.__new__(sympy.Piecewise, *args)
        if tag in _ASSOC and len(args) >= 2 and all(isinstance(a, sympy.Expr) for a in args):
            return _ASSOC[tag]._from_args(args)
        if tag in _LATTICE and len(args) >= 2:
            built = Basic.__new__(_LATTICE[tag], *args)
            built._argset = frozenset(args)
            return built
        if tag in _PLAIN and args:
            return Basic.__new__(_PLAIN[tag], *args)
        if tag in _FUNCTIONS and args:
            return _FUNCTIONS[tag](*args, evaluate=False)
        if tag == "Pow" and len(args) == 2:
            return sympy.Pow(*args, evaluate=False)
        raise Refused(f"a node of kind {tag!r}")

    def shown(self, file: str) -> str:
        """A stored file as it is shown here: the shipped rules folder of this checkout or
        installation, relative to the current folder where inside it."""
        if file not in self.files:
            if file.startswith(SHIPPED):
                self.files[file] = _display_path(self.shipped / file.removeprefix(SHIPPED))
            else:
                self.files[file] = _display_path(Path(file)) if os.path.isabs(file) else file
        return self.files[file]

    def value(self, v):
        if v is None or isinstance(v, (bool, str)) or type(v) is int:
            return v
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if isinstance(v, dict):
            return {self.value(k): self.value(x) for k, x in v.items()}
        if not isinstance(v, tuple) or not v:
            raise Refused("a malformed value")
        tag = v[0]
        if tag == "x" and len(v) == 2:
            return self._arg(v[1])
        if tag == "t":
            return tuple(self.value(x) for x in v[1:])
        if tag == "s" and len(v) == 6 and isinstance(v[1], str) and isinstance(v[5], str) \
                and all(type(x) is int for x in v[2:5]):
            return Span(self.shown(v[1]), *v[2:])
        if tag == "D" and len(v) == 3 and v[1] in _DECLS and isinstance(v[2], tuple) \
                and len(v[2]) == len(_FIELDS[v[1]]):
            return _DECLS[v[1]](**dict(zip(_FIELDS[v[1]], map(self.value, v[2]))))
        raise Refused("a malformed value")


def load(data):
    """The library :func:`dump` wrote; :class:`Refused` for anything else."""
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("library"), dict):
        raise Refused("not a snapshot of this format")
    try:
        r = _Reader(data["nodes"])
        body = data["library"]
        lib = Library()
        lib.decls = {d.name: d for d in r.value(body["decls"])}
        lib.checks = r.value(body["checks"])
        lib.presets = {(p.preset_kind, p.name): p for p in r.value(body["presets"])}
        lib.files = [r.shown(f) for f in body["files"]]
        lib.lowered = r.value(body["lowered"])
        lib.deps = {n: set(d) for n, d in body["deps"].items()}
        lib.order = list(body["order"])
        lib._input_syms = r.value(body["inputs"])
        lib._option_syms = r.value(body["options"])
        lib.lowered_checks = [(lib.checks[i], *map(r.value, rest)) for i, *rest in body["lowered_checks"]]
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise Refused(str(exc)) from None
    lib.resolved = True
    return lib
