"""sympy expressions as the trees of tuples that :mod:`engine.compile.codegen` compiles: a
resolved rule's for the compiled form (:func:`expr_tree`), a composed expression's for the
float backends (:func:`sympy_program`)."""
from __future__ import annotations

from fractions import Fraction

import sympy

from ..lang.rules import At, RuleDecl


_RELATION_OPS = {sympy.Eq: "==", sympy.Ne: "!=", sympy.Lt: "<", sympy.Le: "<=", sympy.Gt: ">", sympy.Ge: ">="}
_NARY = {sympy.Add: "+", sympy.Mul: "*", sympy.Max: "max", sympy.Min: "min", sympy.And: "and", sympy.Or: "or"}


def _node(e, args: list, leaf, floats: bool) -> tuple:
    """The tree of sympy node ``e`` over its arguments' trees ``args``; ``leaf`` gives a
    symbol's tree.  ``floats``: roots and logarithms as the float backends compute them, where
    the compiled form keeps them as ("?", text)."""
    if e.is_Rational:
        return ("n", Fraction(int(e.p), int(e.q)))
    if e is sympy.true or e is sympy.false:
        return ("b", bool(e))
    if isinstance(e, sympy.Symbol):
        return leaf(e)
    if type(e) in _NARY:
        return (_NARY[type(e)], *args)
    if type(e) in _RELATION_OPS:
        return (_RELATION_OPS[type(e)], *args)
    if isinstance(e, sympy.Not):
        return ("not", args[0])
    if isinstance(e, sympy.ITE):  # what sympy folds a Piecewise of conditions into
        return ("if", (args[0], args[1]), (("b", True), args[2]))
    if isinstance(e, sympy.Implies):
        return ("or", ("not", args[0]), args[1])
    if isinstance(e, sympy.Xor) and len(args) == 2:
        return ("!=", args[0], args[1])
    if isinstance(e, sympy.Pow) and e.exp.is_Integer:
        return ("^", args[0], int(e.exp))
    if isinstance(e, (sympy.ceiling, sympy.floor)):
        return ("ceil" if isinstance(e, sympy.ceiling) else "floor", args[0])
    if isinstance(e, sympy.Piecewise):
        return ("if", *((c, v) for v, c in zip(args[::2], args[1::2])))
    if floats and isinstance(e, sympy.Pow) and e.exp.is_Rational:
        return ("root", args[0], Fraction(int(e.exp.p), int(e.exp.q)))
    if floats and isinstance(e, sympy.log) and len(e.args) == 1:
        return ("log", args[0])
    return ("?", str(e))  # nan, zoo, an irrational power, log2 ...: the full path answers


def _arguments(e) -> tuple:
    """The sympy arguments of ``e`` in the order :func:`_node` takes them (a Piecewise's
    arms flattened to value, condition, value, condition ...)."""
    if isinstance(e, sympy.Piecewise):
        return tuple(x for arm in e.args for x in arm)
    if isinstance(e, sympy.Pow):
        return (e.base,)
    if isinstance(e, (sympy.Symbol, sympy.Rational)) or e.is_Atom:
        return ()
    return e.args


def sympy_program(expr, symbols: list) -> tuple[dict, tuple]:
    """A composed sympy expression (``symbols`` its variables) as trees for
    :mod:`engine.compile.codegen`: the root tree, whose variables are ``("v", "x0")``,
    ``("v", "x1")`` ... in the order of ``symbols``, and a rule for every subexpression used
    more than once (the graph's sharing kept: a composed rule is a graph whose shared parts a
    tree would repeat, exponentially in the depth).  Roots and logarithms are kept for the
    float backends; anything else without a tree form (nan, zoo, a symbol not in
    ``symbols``) is ("?", text)."""
    names = {s: ("v", f"x{i}") for i, s in enumerate(symbols)}
    uses: dict = {}
    todo = [expr]
    while todo:  # how often each distinct subexpression is an argument
        e = todo.pop()
        uses[e] = uses.get(e, 0) + 1
        if uses[e] == 1:
            todo.extend(_arguments(e))
    rules: dict = {}
    done: dict = {}

    def leaf(s):
        return names.get(s, ("?", str(s)))

    todo = [(expr, False)]
    while todo:  # post-order: every argument's tree before its node's
        e, ready = todo.pop()
        if e in done:
            continue
        args = _arguments(e)
        if not ready:
            todo.append((e, True))
            todo.extend((a, False) for a in args if a not in done)
            continue
        t = _node(e, [done[a] for a in args], leaf, floats=True)
        if uses[e] > 1 and args:
            name = f"_{len(rules)}"
            rules[name] = (0, 0, t)
            t = ("r", name)
        done[e] = t
    return rules, done[expr]


def expr_tree(lib, expr) -> tuple:
    """A resolved expression (a rule's, a check side) as the tree of tuples the compiled form
    keeps: ("+", a, b), ("v", input), ("r", rule), ("if", (condition, value), ...) ...; what
    has no tree form (log2, an irrational power, NaN) is ("?", its text)."""
    inputs = {s: n for n, s in lib._input_syms.items()}
    inputs.update({s: n for n, s in lib._option_syms.items()})
    rules = {s: s.name for s in expr.free_symbols
             if isinstance(lib.decls.get(s.name), RuleDecl) and s == sympy.Symbol(s.name)}

    def leaf(e) -> tuple:
        if e in inputs:
            return ("v", inputs[e])
        if e in rules:
            return ("r", rules[e])
        return ("?", str(e))  # not resolvable: the full path reports it

    def walk(e) -> tuple:
        if isinstance(e, At):
            flat = e.args[1:]
            return ("@", e.args[0].name, tuple((inputs[k], walk(v)) for k, v in zip(flat[::2], flat[1::2])))
        return _node(e, [walk(a) for a in _arguments(e)], leaf, floats=False)

    return walk(expr)
