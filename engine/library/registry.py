"""The library: every declaration of every rule file in one flat namespace.

:meth:`Library.resolve` turns parsed declarations into resolved sympy expressions:
names are checked (with "did you mean" hints), option comparisons become comparisons of
integer option codes, dtype names become byte sizes, units are checked, and cycles
between rules are rejected.  :meth:`Library.compose` then inlines rule references,
giving one expression per rule over inputs and option codes only.
"""
from __future__ import annotations

import contextlib
import graphlib
import signal
import sys
import threading
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType
from typing import Iterable, Mapping

import sympy

from ..errors import (DependencyCycleError, DomainError, EngineError, ErrorGroup,
                      FormulaSyntaxError, RedefinitionError, ResourceLimitError, Span, UnitError,
                      UnknownNameError, did_you_mean, shown)
from ..lang.parser import parse_text
from ..lang.rules import (At, BYTE, CheckDecl, Decl, DtypeDecl, InputDecl, Match, OptionDecl,
                          PresetDecl, RuleDecl, UNITS, unit_words)
from ..lang.values import validate
from ..paths import data_path

PRESET_KINDS = ("model", "gpu")


class Library:
    """All declarations, resolved.  Build with :func:`load`; treat as read-only."""

    def __init__(self) -> None:
        self.decls: dict[str, Decl] = {}
        self.checks: list[CheckDecl] = []
        self.presets: dict[tuple[str, str], PresetDecl] = {}
        self.files: list[str] = []
        self._compose_cache: dict = {}
        self._views: dict = {}  # kind of declaration -> (decls it was made of, its view)
        self.resolved = False

    # ------------------------------------------------------------------ loading
    def add_text(self, text: str, path: str = "<string>", user: bool = False) -> None:
        """Parse ``text`` and add its declarations (``user`` files may ``override`` rules)."""
        self.files.append(path)
        errors: list[EngineError] = []
        for decl in parse_text(text, path):
            try:
                self._add(decl, user)
            except EngineError as exc:
                errors.append(exc)
        _raise_all(errors)

    def add_file(self, path: str | Path, user: bool = False) -> None:
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise EngineError(f"cannot read rule file '{path}': {exc.strerror}") from None
        self.add_text(text, _display_path(path), user)

    def load_dir(self, folder: str | Path) -> None:
        for path in sorted(Path(folder).glob("*.mem")):
            self.add_file(path)

    def _add(self, decl, user: bool) -> None:
        self.resolved = False
        if isinstance(decl, CheckDecl):
            self.checks.append(decl)
            return
        if isinstance(decl, PresetDecl):
            if decl.preset_kind not in PRESET_KINDS:
                raise UnknownNameError(f"unknown preset kind '{decl.preset_kind}'", decl.span,
                                       hint="preset kinds are " + ", ".join(PRESET_KINDS))
            key = (decl.preset_kind, decl.name)
            if key in self.presets:
                first = self.presets[key].span
                raise RedefinitionError(f"preset {decl.preset_kind} '{decl.name}' is defined twice",
                                        decl.span, hint=f"first defined at {first.file}:{first.line}")
            self.presets[key] = decl
            return
        old = self.decls.get(decl.name)
        overriding = isinstance(decl, RuleDecl) and decl.override
        if overriding and not user:
            raise FormulaSyntaxError("'override' is only for a user's rule file, loaded beside the library",
                                     decl.span)
        if overriding and not isinstance(old, RuleDecl):
            raise UnknownNameError(f"'override' of '{decl.name}', which is not a rule", decl.span,
                                   hint=did_you_mean(decl.name, self.rule_names()))
        if old is not None and not overriding:
            raise RedefinitionError(
                f"'{decl.name}' is already defined", decl.span,
                hint=f"first defined at {old.span.file}:{old.span.line}"
                + ("; write 'override rule' to replace it" if user and isinstance(old, RuleDecl) else ""))
        self.decls[decl.name] = decl
        self._views.clear()

    # ------------------------------------------------------------------ views
    def _of(self, cls) -> Mapping:
        """The declarations of one kind, by name (read-only; made once, not at every use:
        resolving, composing and formatting ask for them thousands of times)."""
        made = self._views.get(cls)
        if made is None or made[0] is not self.decls or len(made[1]) > len(self.decls):
            made = self._views[cls] = (self.decls, MappingProxyType(
                {n: d for n, d in self.decls.items() if isinstance(d, cls)}))
        return made[1]

    @property
    def rules(self) -> dict[str, RuleDecl]:
        return self._of(RuleDecl)

    @property
    def inputs(self) -> dict[str, InputDecl]:
        return self._of(InputDecl)

    @property
    def options(self) -> dict[str, OptionDecl]:
        return self._of(OptionDecl)

    @property
    def dtypes(self) -> dict[str, DtypeDecl]:
        return self._of(DtypeDecl)

    def rule_names(self) -> list[str]:
        return list(self.rules)

    def preset(self, kind: str, name: str) -> PresetDecl:
        try:
            return self.presets[(kind, name)]
        except KeyError:
            known = [n for k, n in self.presets if k == kind]
            raise UnknownNameError(f"unknown {kind} '{name}'",
                                   hint=did_you_mean(name, known) or f"known: {', '.join(sorted(known))}") from None

    def unit_dim(self, name: str) -> Fraction:
        return Fraction(UNITS[self.decls[name].unit][0])

    # ------------------------------------------------------------------ resolution
    def resolve(self, base: "Library | None" = None) -> "Library":
        """Check every name, unit and dependency; build the resolved expressions.

        ``base``: a resolved library (the shipped one, when a user's rule files are added to
        it) whose resolved expression a rule takes over where its own would be the same: the
        rule, its unit and the declaration of every name it uses are unchanged (a rule used
        only by its unit).  Lowering the shipped rules again costs seconds per command."""
        errors: list[EngineError] = []
        self.lowered: dict[str, sympy.Expr] = {}
        self.deps: dict[str, set[str]] = {}
        rules = self.rules
        self._input_syms = {n: d.symbol() for n, d in self.inputs.items()}
        self._option_syms = {n: d.symbol() for n, d in self.options.items()}
        if base is not None and not (getattr(base, "resolved", False) and base.dtypes == self.dtypes):
            base = None
        for name, rule in rules.items():
            try:
                if base is not None and self._unchanged(base, rule):
                    self.lowered[name], self.deps[name] = base.lowered[name], set(base.deps[name])
                else:
                    self._lower_rule(name, rule)
                want = self.unit_dim(name)
                for bound in rule.bound_names():  # a domain's bound names an input or rule of its unit
                    if bound not in self.inputs and bound not in rules:
                        raise UnknownNameError(f"rule '{name}': its domain names '{bound}', which is not "
                                               "declared", rule.span, hint=did_you_mean(bound, [*self.inputs, *rules]))
                    if self.unit_dim(bound) != want:
                        raise UnitError(f"rule '{name}': its domain's bound '{bound}' is in "
                                        f"{self.decls[bound].unit}, the rule in {rule.unit}", rule.span)
            except EngineError as exc:
                self.lowered.pop(name, None)
                errors.append(exc)
        for decl in self.inputs.values():
            if decl.default is not None:
                try:
                    self.check_value(decl.name, decl.default, decl.span)
                except EngineError as exc:
                    errors.append(exc)
        if not errors:
            try:
                graph = {n: self.deps[n] for n in rules}
                self.order = list(graphlib.TopologicalSorter(graph).static_order())
            except graphlib.CycleError as exc:
                cycle = list(reversed(exc.args[1]))
                errors.append(DependencyCycleError("rules form a cycle: " + " -> ".join(cycle),
                                                   rules[cycle[0]].span))
        self.lowered_checks = []
        for check in self.checks:
            try:
                low = _Lowering(self, check.names, check.span, f"check \"{check.doc}\"")
                lhs, rhs = low.value(check.lhs), low.value(check.rhs)
                where = low.condition(check.where) if check.where is not None else sympy.true
                dims = _Dims(self, check.span, f"check \"{check.doc}\"")
                dims.same(dims.of(lhs), dims.of(rhs))
                if check.where is not None:
                    dims.of(where)
                self.lowered_checks.append((check, *(e.xreplace({BYTE: sympy.Integer(1)}) for e in (lhs, rhs, where))))
            except EngineError as exc:
                errors.append(exc)
        for key, preset in self.presets.items():
            checked = base is not None and base.presets.get(key) is preset  # valid in base
            for name, value, span in preset.settings:
                if checked and self.decls.get(name) == base.decls.get(name):
                    continue  # and declared alike here: valid here
                try:
                    self.check_value(name, value, span)
                except EngineError as exc:
                    errors.append(exc)
        _raise_all(errors)
        self.resolved = True
        self._compose_cache.clear()
        return self

    def _lower_rule(self, name: str, rule: RuleDecl) -> None:
        """Rule ``name`` over inputs, option codes and other rules' names, its unit checked."""
        expr = _Lowering(self, rule.names, rule.expr_span or rule.span, f"rule '{name}'").value(rule.expr)
        dim = _Dims(self, rule.expr_span or rule.span, f"rule '{name}'").of(expr)
        want = self.unit_dim(name)
        if dim is not None and dim != want:
            hint = ("multiply by a dtype size (e.g. 'bf16') or write a byte literal like '4 B'"
                    if want == 1 and dim == 0 else None)
            raise UnitError(f"rule '{name}' is declared in {rule.unit} but its expression is in "
                            f"{unit_words(dim)}", rule.expr_span or rule.span, hint=hint)
        expr = expr.xreplace({BYTE: sympy.Integer(1)})
        if expr.has(sympy.zoo, sympy.oo, -sympy.oo):
            raise UnitError(f"rule '{name}' divides by zero", rule.expr_span or rule.span)
        self.lowered[name] = expr
        self.deps[name] = {s.name for s in expr.free_symbols
                           if s.name in self.rules and s == sympy.Symbol(s.name)}

    def _unchanged(self, base: "Library", rule: RuleDecl) -> bool:
        """Whether ``rule`` resolves here as in ``base``: the same expression and unit, and
        every name in it declared alike (a rule it uses: of the same unit)."""
        old = base.rules.get(rule.name)
        if old is None or old.unit != rule.unit or old.expr != rule.expr or rule.name not in base.lowered:
            return False
        for sym in rule.expr.atoms(sympy.Symbol):
            new_decl, old_decl = self.decls.get(sym.name), base.decls.get(sym.name)
            if isinstance(new_decl, RuleDecl) and isinstance(old_decl, RuleDecl):
                if new_decl.unit != old_decl.unit:
                    return False
            elif new_decl != old_decl:
                return False
        return True

    def check_value(self, name: str, value, span: Span | None = None):
        """Validate a value for a name (input, option or rule pin) and return its exact
        form: an option's choice name, or a sympy number without the byte unit."""
        return validate(self, name, value, span)

    # ------------------------------------------------------------------ composition
    def compose(self, name: str, pins: Iterable[tuple[str, sympy.Expr]] = ()) -> sympy.Expr:
        """The expression of rule ``name`` over inputs and option codes only.

        ``pins`` replaces rules by numbers (``n_params = 70e9``).  Results are cached.
        """
        pins = frozenset(pins)
        key = (name, pins)
        if key in self._compose_cache:
            return self._compose_cache[key]
        pinned = dict(pins)
        # the rules composed so far under these pins, shared by later calls (total, then
        # model_states, reuse each other's parts); not written to the cache file
        memo: dict[str, sympy.Expr] = self._compose_cache.setdefault(("memo", pins), {})

        # the measures of the rules in memo, shared with it: a rule composed by an earlier call
        # counts at its size, not as one node (the limits held or not by the order of calls)
        degrees, sizes_of, nestings, nodes = self._compose_cache.setdefault(("measures", pins), ({}, {}, {}, {}))
        # degrees: polynomial degree of each composed rule (a pinned one: 1); sizes_of: its
        # tree size once built; nestings: its min/max nesting; nodes: tree sizes by node id
        # (every node is kept alive by memo)

        def expand(n: str) -> sympy.Expr:
            if n in pinned:
                return pinned[n]  # a sympy number (or a Symbol standing for one)
            if n not in memo:
                sub = {sympy.Symbol(d): expand(d) for d in self.deps[n]}
                _BUDGET.rule = n
                # bounded before sympy builds anything: its automatic simplification of a
                # high-degree polynomial (a chain of squares), of deeply nested min / max or of
                # a huge tree runs for minutes
                for measure, known, default, limit, what, hint in (  # default: an input's measure
                        (_degree, degrees, 1, MAX_DEGREE, "has a polynomial degree of {:,}",
                         "a rule that squares another, in a long chain, doubles its degree at every step; "
                         "memory formulas have degrees below 100"),
                        (_minmax_nesting, nestings, 0, MAX_MINMAX_NESTING, "nests min/max {} deep",
                         "sympy compares the arguments of every min and max, and the work doubles with "
                         "each level; memory formulas nest them at most 4 deep"),
                        (_composed_size, sizes_of, 1, MAX_TERMS, "expands to {:,} terms",
                         "a rule that uses another rule several times, in a long chain, doubles its size "
                         "at every step; restructure the rules")):
                    found = measure(self.lowered[n], lambda s: known.get(s, default), {})
                    if found > limit:
                        raise ResourceLimitError(
                            f"rule '{n}' {what.format(found)} once the rules it uses are inlined; the limit "
                            f"is {limit:,}", self.rules[n].span, hint=hint)
                    known[n] = found
                try:
                    memo[n] = _inlined(self.lowered[n], sub)
                except (ValueError, TypeError):  # sympy cannot order a min or max argument (zoo)
                    raise DomainError(f"rule '{n}' takes the min or max of a value that is not a real number "
                                      "once the rules it uses are inlined", self.rules[n].span,
                                      hint="a rule it uses divides by zero or takes the square root of a "
                                           "negative number (an override that sets a divisor to 0?)") from None
                sizes_of[n] = _tree_size(memo[n], nodes)  # as sympy built it: its users' measure
            return memo[n]

        with _cpu_budget(COMPOSE_CPU_SECONDS) as over:
            try:
                result = expand(name)
            except _OverBudget:
                culprit = over.rule or name
                raise ResourceLimitError(
                    f"composing rule '{culprit}' took more than {COMPOSE_CPU_SECONDS} s of CPU time",
                    self.rules[culprit].span if culprit in self.rules else None,
                    hint="sympy simplifies each min, max, ceil and floor as it is built; nested deeply "
                         "over large expressions that takes unbounded time; restructure the rules") from None
        self._compose_cache[key] = result
        return result

    def compose_expr(self, expr: sympy.Expr, pins=()) -> sympy.Expr:
        """Inline every rule that a resolved expression (e.g. a check side) refers to."""
        sub = {sympy.Symbol(n): self.compose(n, pins) for n in self.rules
               if sympy.Symbol(n) in expr.free_symbols}
        return _inlined(expr, sub)


#: the largest expression (counted as a tree: every use of a shared part again) a composed rule
#: may have; the built-in library's largest, the reserved peak, has about 2.6 million.  A rule
#: chain that doubles its size at every step passes it four steps after a million
MAX_TERMS = 8_000_000
#: the highest degree (exponents summed over a product, bounded structurally) a composed rule
#: may have; the built-in library's highest is 63 (serving's block count)
MAX_DEGREE = 512
#: how deep min and max may nest in a composed rule (the built-in library's deepest is 4)
MAX_MINMAX_NESTING = 8
#: CPU seconds one composition may take (the whole built-in library composes in about 2 on a
#: 2-core machine; its largest rule, the reserved peak, in about 1.3): half the 10 s within which
#: every command answers
COMPOSE_CPU_SECONDS = 5


class _OverBudget(BaseException):
    """Raised by the CPU timer inside sympy: a BaseException, so no ``except Exception``
    in sympy swallows it."""


class _Budget(threading.local):
    active = False
    rule: str | None = None
    hook = False  # inside another unraisable hook: a signal waits for the next refire


_BUDGET = _Budget()


#: once a budget is spent, how often (seconds) the timer fires again until the block is left:
#: a signal handled inside a finaliser (a sympy generator closed by the garbage collector) has
#: its exception swallowed ("Exception ignored in ..."), and a one-shot timer would then never
#: stop the work
_REFIRE_SECONDS = 0.1
#: the wall-clock backstop of a CPU budget, as a multiple of it: work that spends its time
#: outside the CPU (paging, a blocked call) is stopped too; generous, so that a loaded machine
#: does not refuse what an idle one answers
_WALL_FACTOR = 4


@contextlib.contextmanager
def _cpu_budget(seconds: float):
    """Raise :class:`_OverBudget` once the process has spent ``seconds`` of CPU time inside
    the block (ITIMER_PROF, user and system time: load on the machine does not count) or
    ``_WALL_FACTOR`` times as many seconds have passed, and again every
    :data:`_REFIRE_SECONDS` until the block is left.  Only in the main thread, where signals
    are delivered, and not nested."""
    if _BUDGET.active or threading.current_thread() is not threading.main_thread() \
            or not hasattr(signal, "ITIMER_PROF") or not hasattr(signal, "pthread_kill"):
        yield _BUDGET
        return

    def stop(signum, frame):
        if _BUDGET.active and not _BUDGET.hook:
            raise _OverBudget()

    previous_hook = sys.unraisablehook

    def unraisable(info):
        # the budget's own signal, swallowed in a finaliser: expected, the next refire stops the
        # work; another exception goes to the hook that was there, which no signal interrupts
        # (pytest formats it, and failed the test when the refire landed in its formatting)
        if isinstance(info.exc_value, _OverBudget):
            return
        _BUDGET.hook = True
        try:
            previous_hook(info)
        finally:
            _BUDGET.hook = False

    done = threading.Event()
    main = threading.get_ident()

    def backstop():  # the wall clock: signal the main thread until the block is left
        if done.wait(seconds * _WALL_FACTOR):
            return
        while not done.is_set():
            signal.pthread_kill(main, signal.SIGPROF)
            done.wait(_REFIRE_SECONDS)

    old = signal.signal(signal.SIGPROF, stop)
    sys.unraisablehook = unraisable
    _BUDGET.active, _BUDGET.rule = True, None
    watch = threading.Thread(target=backstop, name="memform-budget", daemon=True)
    signal.setitimer(signal.ITIMER_PROF, seconds, _REFIRE_SECONDS)
    watch.start()
    try:
        yield _BUDGET
    finally:
        while True:  # a refire during the clean-up interrupts it: do it again
            try:
                _BUDGET.active = False  # from here on the handler does nothing
                signal.setitimer(signal.ITIMER_PROF, 0)
                done.set()
                watch.join()  # no signal is sent once the handler is restored
                break
            except _OverBudget:
                pass
        signal.signal(signal.SIGPROF, old)
        sys.unraisablehook = previous_hook


def _minmax_nesting(expr: sympy.Basic, nesting_of, memo: dict[int, int]) -> int:
    """How deep Min and Max nest in ``expr`` once each rule symbol carries ``nesting_of(name)``."""
    key = id(expr)
    if key not in memo:
        if expr.is_Symbol:
            memo[key] = nesting_of(expr.name)
        else:
            inner = max((_minmax_nesting(a, nesting_of, memo) for a in expr.args), default=0)
            memo[key] = inner + isinstance(expr, (sympy.Min, sympy.Max))
    return memo[key]


def _composed_size(expr: sympy.Basic, size_of, memo: dict[int, int]) -> int:
    """Nodes of ``expr`` counted as a tree once each rule symbol is replaced by a tree of
    ``size_of(name)`` nodes: the size before sympy builds (and simplifies) it."""
    key = id(expr)
    if key not in memo:
        if expr.is_Symbol:
            memo[key] = size_of(expr.name)
        else:
            memo[key] = 1 + sum(_composed_size(a, size_of, memo) for a in expr.args)
    return memo[key]


def _degree(expr: sympy.Basic, degree_of, memo: dict[int, int]) -> int:
    """An upper bound on the degree of ``expr`` as a polynomial (a divisor counts as its
    degree too), where ``degree_of(name)`` gives each symbol's; linear in the DAG."""
    key = id(expr)
    if key not in memo:
        if not expr.free_symbols:
            d = 0
        elif expr.is_Symbol:
            d = degree_of(expr.name)
        elif expr.is_Mul:
            d = sum(_degree(a, degree_of, memo) for a in expr.args)
        elif expr.is_Pow and expr.exp.is_Number:
            d = _degree(expr.base, degree_of, memo) * int(abs(sympy.ceiling(expr.exp)))
        elif expr.is_Pow:
            d = _degree(expr.base, degree_of, memo) + _degree(expr.exp, degree_of, memo)
        else:
            d = max((_degree(a, degree_of, memo) for a in expr.args), default=0)
        memo[key] = d
    return memo[key]


def _tree_size(expr: sympy.Basic, sizes: dict[int, int]) -> int:
    """Nodes of ``expr`` counted as a tree, in time linear in its (shared) DAG."""
    return _composed_size(expr, lambda name: 1, sizes)


#: nodes past which a min or max argument counts as large (see substitute)
SMALL_NODES = 200


def _small(expr: sympy.Basic, limit: int = SMALL_NODES) -> bool:
    """Whether ``expr`` has at most ``limit`` nodes (counted as a tree, stopping early)."""
    stack, seen = [expr], 0
    while stack:
        seen += 1
        if seen > limit:
            return False
        stack.extend(stack.pop().args)
    return True


def substitute(expr: sympy.Basic, sub: dict, memo: dict | None = None) -> sympy.Basic:
    """``expr.xreplace(sub)``, with each distinct subexpression rebuilt once (``memo``: a
    composed rule is a graph whose shared parts a plain walk visits again at every use) and
    each min and max rebuilt as :func:`_rebuilt` says."""
    if memo is None:
        memo = {}
    if expr in sub:
        return sub[expr]
    if not expr.args:
        return expr
    if expr not in memo:
        memo[expr] = _rebuilt(expr, [substitute(a, sub, memo) for a in expr.args])
    return memo[expr]


def _rebuilt(expr: sympy.Basic, args: list) -> sympy.Basic:
    """``expr`` over new arguments, except that a min or max whose arguments are large composed
    rules is built without sympy's simplification: it compares every pair of arguments by
    factoring their difference (Max._is_connected), which took tens of seconds on the peak's
    composition, and did not end in 15 minutes when a check rebound ``recompute`` in the
    composed peak (``peak_allocated[recompute = full, ...]``).  Over numbers and small arguments
    min and max simplify as usual; the value is the same either way."""
    if all(a is b for a, b in zip(args, expr.args)):
        return expr
    if isinstance(expr, (sympy.Max, sympy.Min)) and not all(a.is_number or _small(a) for a in args):
        # not even Max(..., evaluate=False): it sorts its arguments by their tree size (ordered,
        # _nodes), a walk of every use of every shared part, 3 s of the peak's composition.
        # The arguments keep the order sympy gave the rule's own (small) arguments.
        args = list(dict.fromkeys(args))
        if len(args) == 1:
            return args[0]
        built = sympy.Expr.__new__(expr.func, *args)
        built._argset = frozenset(args)  # as MinMaxBase.__new__ sets it
        return built
    if isinstance(expr, sympy.core.relational.Relational):
        return _relation(expr.func, *args)
    return expr.func(*args)


def _relation(func, lhs: sympy.Expr, rhs: sympy.Expr) -> sympy.Basic:
    """``func(lhs, rhs)`` (Eq, Lt, ...), where a side that is a Piecewise (a composed rule that
    is a flag: ``Eq(autocast, 1)``) is taken apart branch by branch: its value is the relation
    of the first branch whose condition holds.  A Piecewise in a condition is folded by sympy
    the same way (piecewise_fold), then rewritten as ITE through its set and logic
    simplification (as_set, simplify_logic, periodicity): 4 s of the peak's composition, for
    conditions of a few dozen nodes.  A Piecewise deeper in a side is left to sympy."""
    for side, pw in enumerate((lhs, rhs)):
        if isinstance(pw, sympy.Piecewise):
            branches, earlier = [], []
            for value, cond in pw.args:
                holds = _relation(func, value, rhs) if side == 0 else _relation(func, lhs, value)
                branches.append(sympy.And(cond, *[sympy.Not(c) for c in earlier], holds))
                earlier.append(cond)
            return sympy.Or(*branches)
    return func(lhs, rhs)


def shipped(decl) -> bool:
    """Whether a declaration (a rule, a check) is one of the library's own (in formulas/)."""
    file = getattr(decl.span, "file", None)
    try:
        return file is not None and Path(file).resolve().parent == data_path("formulas").resolve()
    except (OSError, ValueError):
        return False


def _inlined(expr: sympy.Expr, sub: dict) -> sympy.Expr:
    """``expr`` (a lowered rule or check side) with the composed rules of ``sub`` inlined and
    its own ``At`` nodes applied.  The composed rules hold none, so only ``expr`` is asked:
    the small lowered text, not the composed tree, which a walk visits once per use of each
    shared part (20 s of the peak's composition)."""
    composed = substitute(expr, sub)
    return apply_at(composed) if expr.has(At) else composed


def apply_at(expr: sympy.Expr) -> sympy.Expr:
    """Replace every ``At(target, k1, v1, ...)`` by ``target`` with the keys rebound, each
    distinct subexpression once and each min and max as :func:`_rebuilt` says (called by
    :func:`_inlined`, which knows whether there is one)."""
    memo: dict = {}

    def walk(node):
        if not node.args:
            return node
        if node not in memo:
            args = [walk(a) for a in node.args]
            if isinstance(node, At):
                memo[node] = substitute(args[0], dict(zip(args[1::2], args[2::2])))
            else:
                memo[node] = _rebuilt(node, args)
        return memo[node]
    return walk(expr)


def _raise_all(errors: list[EngineError]) -> None:
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise ErrorGroup(errors)


def _display_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


class _Lowering:
    """Resolves the plain names of one declaration's expression."""

    def __init__(self, lib: Library, names, span: Span, what: str):
        self.lib, self.names, self.span, self.what = lib, names, span, what

    def _where(self, name: str) -> Span:
        return self.names.get(name, self.span)

    def _unknown(self, name: str, known, what="name") -> UnknownNameError:
        return UnknownNameError(f"unknown {what} '{name}' in {self.what}", self._where(name),
                                hint=did_you_mean(name, known))

    def _option(self, e) -> OptionDecl | None:
        if isinstance(e, sympy.Symbol) and e == sympy.Symbol(e.name):
            d = self.lib.decls.get(e.name)
            return d if isinstance(d, OptionDecl) else None
        return None

    def _code(self, opt: OptionDecl, key) -> sympy.Integer:
        if isinstance(key, sympy.Symbol):
            if key.name in opt.choices and not opt.numeric:
                return sympy.Integer(opt.code(key.name))
            raise UnknownNameError(f"'{key.name}' is not a choice of option '{opt.name}' in {self.what}",
                                   self._where(key.name) if key.name in self.names else self._where(opt.name),
                                   hint=did_you_mean(key.name, opt.choices) or "choices are " + ", ".join(opt.choices))
        if opt.numeric and key.is_Integer and str(key) in opt.choices:
            return sympy.Integer(key)
        raise UnknownNameError(f"{key} is not a choice of option '{opt.name}' in {self.what}",
                               self._where(opt.name), hint="choices are " + ", ".join(opt.choices))

    def condition(self, e):
        return self.value(e)

    def value(self, e):
        lib = self.lib
        if isinstance(e, sympy.Symbol):
            if e == BYTE:
                return e
            d = lib.decls.get(e.name)
            if isinstance(d, InputDecl):
                return lib._input_syms[e.name]
            if isinstance(d, RuleDecl):
                return e
            if isinstance(d, DtypeDecl):
                return d.size * BYTE
            if isinstance(d, OptionDecl):
                return self._option_value(d)
            raise self._unknown(e.name, lib.decls)
        if isinstance(e, sympy.core.relational.Relational):
            a, b = e.args
            opt_a, opt_b = self._option(a), self._option(b)
            if opt_a and opt_b:  # a choice may share its name with an option (attention)
                if isinstance(b, sympy.Symbol) and b.name in opt_a.choices:
                    opt_b = None
                else:
                    opt_a = None
            if opt_a or opt_b:
                opt, other = (opt_a, b) if opt_a else (opt_b, a)
                if not isinstance(e, (sympy.Eq, sympy.Ne)) and not opt.numeric:
                    raise UnitError(f"option '{opt.name}' has no order; compare it with == or != "
                                    f"in {self.what}", self._where(opt.name))
                if opt.numeric and not isinstance(other, sympy.Symbol):
                    code = sympy.Integer(other) if other.is_Integer else other
                else:
                    code = self._code(opt, other)
                sym = lib._option_syms[opt.name]
                args = (sym, code) if opt_a else (code, sym)
                return e.func(*args)
            sides = self.value(a), self.value(b)
            try:
                return e.func(*sides)
            except TypeError:  # sympy cannot order a side that is not real (sqrt(-8 x) > 2, zoo < 1)
                unreal = next((x for x in sides if x.is_extended_real is False), sides[0])
                raise DomainError(f"a comparison in {self.what} has a side that is never a real number: "
                                  f"{shown(sympy.sstr(unreal), 80)}", self.span,
                                  hint="a square root of a negative value, or a division by zero") from None
        if isinstance(e, Match):
            return self._match(e)
        if isinstance(e, At):
            return self._at(e)
        if not e.args:
            return e
        return e.func(*[self.value(a) for a in e.args])

    def _option_value(self, d: OptionDecl):
        sym = self.lib._option_syms[d.name]
        if d.numeric:
            return sym
        dtypes = self.lib.dtypes
        if not any(c in dtypes for c in d.choices):
            raise UnitError(f"option '{d.name}' is not a number; compare it with a choice "
                            f"(e.g. {d.name} == {d.choices[0]}) in {self.what}", self._where(d.name))
        pieces = [(dtypes[c].size * BYTE, sympy.Eq(sym, i)) for i, c in enumerate(d.choices) if c in dtypes]
        if len(pieces) == len(d.choices):  # every choice a dtype: the last is what is left, never NaN
            return sympy.Piecewise(*pieces[:-1], (pieces[-1][0], True))
        return sympy.Piecewise(*pieces, (sympy.nan, True))

    def _match(self, e: Match):
        opt = self._option(e.args[0])
        if opt is None:
            name = e.args[0].name
            raise self._unknown(name, self.lib.options, "option")
        sym = self.lib._option_syms[opt.name]
        arms, default, seen = [], None, set()
        flat = e.args[1:]
        for key, val in zip(flat[::2], flat[1::2]):
            if isinstance(key, sympy.Symbol) and key.name == "_":
                default = self.value(val)
                continue
            code = self._code(opt, key)
            seen.add(int(code))
            arms.append((self.value(val), sympy.Eq(sym, code)))
        missing = [c for c in opt.choices if opt.code(c) not in seen]
        if missing and default is None:
            raise UnknownNameError(f"match on '{opt.name}' in {self.what} does not cover "
                                   + ", ".join(f"'{m}'" for m in missing), self._where(opt.name),
                                   hint="add the missing arms or a default arm '_ => ...'")
        if default is None:
            arms[-1] = (arms[-1][0], True)
        else:
            arms.append((default, True))
        return sympy.Piecewise(*arms)

    def _at(self, e: At):
        target = e.args[0]
        if target.name not in self.lib.rules:
            raise self._unknown(target.name, self.lib.rules, "rule")
        flat = e.args[1:]
        out = [target]
        for key, val in zip(flat[::2], flat[1::2]):
            d = self.lib.decls.get(key.name)
            if isinstance(d, InputDecl):
                out += [self.lib._input_syms[key.name], self.value(val)]
            elif isinstance(d, OptionDecl):
                out += [self.lib._option_syms[key.name], self._code(d, val)]
            else:
                raise self._unknown(key.name, list(self.lib.inputs) + list(self.lib.options),
                                    "input or option")
        return At(*out)


class _Dims:
    """Infers the unit (a power of bytes) of a resolved expression; None means zero."""

    def __init__(self, lib: Library, span: Span, what: str):
        self.lib, self.span, self.what = lib, span, what
        self.inputs = {s: Fraction(UNITS[lib.decls[n].unit][0]) for n, s in lib._input_syms.items()}
        self.options = set(lib._option_syms.values())

    def same(self, a, b):
        if a is not None and b is not None and a != b:
            raise UnitError(f"cannot combine {unit_words(a)} and {unit_words(b)} in {self.what}",
                            self.span, hint="a byte quantity is a count times a dtype size or a byte literal")
        return a if a is not None else b

    def of(self, e):
        if e is BYTE or e == BYTE:
            return Fraction(1)
        if e is sympy.nan:
            return None
        if e.is_Number:
            return None if e == 0 else Fraction(0)
        if isinstance(e, sympy.Symbol):
            if e in self.inputs:
                return self.inputs[e]
            if e in self.options:
                return Fraction(0)
            return self.lib.unit_dim(e.name)
        if isinstance(e, (sympy.logic.boolalg.BooleanAtom,)):
            return Fraction(0)
        if isinstance(e, (sympy.Add, sympy.Max, sympy.Min)):
            dim = None
            for a in e.args:
                dim = self.same(dim, self.of(a))
            return dim
        if isinstance(e, sympy.Mul):
            total = Fraction(0)
            for a in e.args:
                d = self.of(a)
                if d is None:
                    return None
                total += d
            return total
        if isinstance(e, sympy.Pow):
            base, exp = self.of(e.args[0]), self.of(e.args[1])
            if exp not in (None, 0):
                raise UnitError(f"an exponent must be a plain number in {self.what}", self.span)
            if base in (None, 0):
                return base
            if not e.args[1].is_Rational:
                raise UnitError(f"a byte quantity can only be raised to a constant power in {self.what}", self.span)
            return base * Fraction(int(e.args[1].p), int(e.args[1].q))
        if isinstance(e, sympy.Piecewise):
            dim = None
            for val, cond in e.args:
                self.of(cond)
                dim = self.same(dim, self.of(val))
            return dim
        if isinstance(e, sympy.core.relational.Relational):
            self.same(self.of(e.args[0]), self.of(e.args[1]))
            return Fraction(0)
        if isinstance(e, (sympy.And, sympy.Or, sympy.Not)):
            for a in e.args:
                self.of(a)
            return Fraction(0)
        if isinstance(e, (sympy.ceiling, sympy.floor)):
            return self.of(e.args[0])
        if isinstance(e, sympy.log):
            if self.of(e.args[0]) not in (None, 0):
                raise UnitError(f"log2 takes a plain number, not bytes, in {self.what}", self.span)
            return Fraction(0)
        if isinstance(e, At):
            for v in e.args[2::2]:
                self.of(v)
            return self.of(e.args[0])
        raise UnitError(f"cannot work out the unit of '{e}' in {self.what}", self.span)


def build(extra: Iterable[str | Path] = (), folder: str | Path | None = None,
          base: Library | None = None) -> Library:
    """Parse and resolve the rule files of ``folder`` (the shipped ``formulas/``) and a user's
    rule files ``extra``; ``base``: the shipped library resolved, whose declarations stand for
    the shipped files and whose unchanged rules are taken over (:meth:`Library.resolve`).
    :func:`engine.compile.cache.load` keeps the shipped library between processes."""
    lib = Library()
    if base is not None and folder is None:  # the shipped files' declarations, as parsed for base
        lib.decls, lib.checks, lib.presets = dict(base.decls), list(base.checks), dict(base.presets)
        lib.files = list(base.files)
    else:
        lib.load_dir(folder or data_path("formulas"))
    for path in extra:
        lib.add_file(path, user=True)
    return lib.resolve(base)
