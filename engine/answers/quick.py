"""``memform estimate`` without sympy, and answers kept as text.

Importing sympy takes longer than an interactive answer should, so the common path of
``memform estimate`` does not: it validates the values against the compiled form of the
library (:mod:`engine.compile.trees`) and folds its trees exactly
(:func:`engine.compile.exact.evaluate_rules`), as :meth:`engine.compile.model.Scenario.evaluate`
does with sympy.  The formula column is written out from the same trees where every formula
in it is a polynomial (:mod:`engine.compile.columns`: most scenarios); otherwise it is
rendered with sympy the first time a combination of options and sizes is estimated and kept
(:func:`remember`); ``micro_batch`` and ``seq_len`` stay symbolic in it, so other workloads
reuse it.

``show``, ``solve`` and ``plan`` of a preset (:data:`engine.cli.ANSWERED`) and the reference of
``memform docs`` are kept too, as the text they printed, under a key of the sources and the
command's arguments: asked again, they print it without sympy.  ``show`` of a rule that is a
polynomial is written out from the compiled trees even the first time (:func:`show`), ``plan``
of a preset lists its layouts from them (:func:`plan`), and ``solve`` of a preset's micro_batch,
seq_len, dp, tp, pp or ep searches them and writes its closed form out as the full path does
(:func:`solve`).

This path answers only when it can answer exactly as the full path would: on anything else
(an unknown name, a bad value, a rule file of the user's own, a Hugging Face config, an
undefined value, a missing formula) it returns ``None`` and the full path answers, with its
errors.  ``tests/test_fast.py`` checks the two agree.  Text from the command line reaches
Python only through the lark grammar of the rule language; nothing is evaluated.
"""
from __future__ import annotations

import hashlib
import json
import os
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

from ..compile.columns import (Atom, Polynomials, Reads, _sum, linear_root, quotient_form, quotient_form_text,
                               quotient_text, reciprocal_root, reciprocal_sum_root, root_text, text, value_at)
from ..compile.exact import Evaluator, bindings, evaluate_rules, exact_values
from ..compile.outline import (FIT_RULE, OPAQUE_RULES, SHOWN_INPUTS, SIZES, TOP_LEVEL,
                               TOTAL_OPAQUE, check_usable, extra_rules)
from ..compile.trees import _key, _read, _setting, _write
from ..errors import EngineError
from ..lang.constants import Unsupported
from ..lazy import lazy
from ..library.layout import DIVIDES, SERVING_MULTIPLES, admits, broken, refuse
from ..paths import data_path
from . import search
from .report import Report

planning = lazy("engine.answers.plan")  # executed on first use: only plan needs it (and numpy)

#: the model sizes a parallel degree must divide (inputs or rules)
LAYOUT_SIZES = tuple(n for ns in DIVIDES.values() for n in ns)


def _refuse_broken(values: dict, known: dict) -> None:
    """A layout in ``values`` that breaks a divisibility constraint (``known``: the sizes) is
    not answered here: the full path says which constraint it breaks."""
    if broken(values, known.get):
        raise Unsupported("an impossible layout")


class _Impossible(Exception):
    """A layout that breaks a divisibility constraint, found once every value is known: the
    error the full path raises for it (:func:`engine.library.layout.check`) is raised here."""


#: the most combinations of options whose formula column is kept
MAX_FORMULAS = 1000
#: the most columns kept under the values they depend on (a small file: reading it is cheaper
#: than writing the column out again)
MAX_COLUMNS = 32
#: the most plan programs kept (one per model, GPU and settings)
MAX_PLANS = 16


def report(args) -> Report | None:
    """The estimate the full path would print for these arguments, or None when this path
    cannot give it (then nothing has been printed and no error raised)."""
    if getattr(args, "rules", None):
        return None
    key = _key()
    if key is None:
        return None
    compiled = _read("compiled", key)
    if compiled is None:
        return None
    try:
        values = _values(compiled, args)
        names = ([n for n in TOP_LEVEL if n in compiled["rules"]]
                 + extra_rules(values, compiled["rules"]) + [n for n in SIZES if n in compiled["rules"]])
        fit = "capacity" in values and FIT_RULE in compiled["rules"]
        check = not getattr(args, "no_divisibility", False)
        sizes = [n for n in LAYOUT_SIZES if n in compiled["rules"]] if check else []
        exact = evaluate_rules(compiled, values, names + list(compiled["components"]) + [FIT_RULE] * fit + sizes)
        if check:
            problems = broken(values, dict(values, **{n: exact[n] for n in sizes}).get)
            if problems:
                raise _Impossible(problems)
        rules = {n: exact[n] for n in names}
        parts = {n: exact[n] for n in compiled["components"]}
        formulas = {}
        if not args.json:
            stored = _read("formulas", key)
            given = {t.split("=", 1)[0].strip() for t in args.sets}
            varied = {n for n in given if n in values and not isinstance(values[n], str)}  # numbers given
            formulas = ((stored and stored["formulas"].get(_formula_key(values)))
                        or _kept_column(key, values) or _column(compiled, values, parts, key, varied, atoms=True))
            if not formulas or any(n not in formulas for n in (*parts, "total")):
                return None
        capacity = exact[FIT_RULE] if fit else values.get("capacity")
        return Report(args.model, args.gpu, values, rules, parts, capacity, formulas)
    except _Impossible as exc:
        refuse(exc.args[0])  # raised outside the handlers below: the command's error
    except Unsupported:
        return None
    except (EngineError, ArithmeticError, ValueError, TypeError, KeyError, IndexError, AttributeError,
            RecursionError):
        return None  # whatever the cause (a figure out of range ...), the full path answers or reports it


def _column(compiled: dict, values: dict, parts, key: str | None = None, varied=frozenset(),
            atoms: bool = False) -> dict | None:
    """The formula column where every formula in it is a polynomial (:mod:`engine.compile.columns`;
    with ``atoms``, one whose names may include a rounding, max or min no value decides, as the
    command line and the page print it), else None: the full path derives it with sympy.  With the cache's ``key`` it is kept under
    the values it was written out from (:func:`_kept_column`), unless it read one of the
    numbers the command line gives (``varied``): the next command most likely gives another,
    and keeping the column takes longer than writing it out again."""
    fixed, pins = bindings(compiled, values)
    try:
        each = Polynomials(compiled, fixed, pins, SHOWN_INPUTS, OPAQUE_RULES, then=TOTAL_OPAQUE, atoms=atoms)
        column = {name: text(each.rule(name)) for name in parts}
        column["total"] = text(each.then().rule("total"))
    except (Unsupported, ArithmeticError, ValueError, RecursionError):
        return None
    if key is not None and not each.read & set(varied):
        _keep_column(key, tuple(sorted(each.read - set(SHOWN_INPUTS))), values, column)
    return column


# A column written out from the compiled trees depends only on the values its expansion read
# (the options that decided its branches, the numbers it substituted, the rules it expanded
# and whether each is pinned): it is kept under those alone, so that an estimate with a value it
# never read (dp without ZeRO, a GPU of another size) prints it without writing it out again.
# ``micro_batch`` and ``seq_len`` stay names in it (their values are never read).

def _depends(names: tuple, values: dict) -> tuple:
    return tuple(str(values.get(n)) for n in names)  # a rule not pinned: 'None'


def _kept_column(key: str, values: dict) -> dict | None:
    """The column kept for the values it depends on, or None."""
    stored = _read("columns", key)
    if stored is None:
        return None
    for names, columns in stored["columns"].items():
        column = columns.get(_depends(names, values))
        if column is not None:
            return column
    return None


def _keep_column(key: str, names: tuple, values: dict, column: dict) -> None:
    stored = _read("columns", key) or {"columns": {}}
    kept = stored["columns"]
    kept.setdefault(names, {})[_depends(names, values)] = column
    while sum(len(c) for c in kept.values()) > MAX_COLUMNS:
        oldest = next(iter(kept))
        del kept[oldest][next(iter(kept[oldest]))]
        if not kept[oldest]:
            del kept[oldest]
    _write("columns", key, {"columns": kept})


def _values(compiled: dict, args) -> dict:
    """The scenario's values, in the order :meth:`engine.compile.model.Scenario.create` sets them."""
    model, gpu, capacity = args.model, args.gpu, args.capacity
    if gpu and capacity:
        raise Unsupported("--gpu and --capacity")
    if (("model", model) not in compiled["presets"] or (gpu is not None and ("gpu", gpu) not in compiled["presets"])
            or Path(model).name != model):
        raise Unsupported("not a preset")  # a config file, or an error the full path reports
    try:
        if os.path.lexists(model):
            raise Unsupported("a file named like the preset")  # the full path says which it reads
    except (OSError, ValueError):
        raise Unsupported("not a path") from None
    sets = dict(_setting(compiled, text) for text in args.sets)
    if set(sets) & set(compiled["derived"]):
        raise Unsupported("a pin of a derived rule")  # the full path refuses it
    if capacity:
        if not any(c.isalpha() for c in capacity):
            raise Unsupported("--capacity without a unit")  # the full path refuses it
        sets["capacity"] = _setting(compiled, f"capacity={capacity}")[1]
    values = dict(compiled["defaults"])
    for kind, name in (("model", model), ("gpu", gpu)):
        if name is not None:
            if (kind, name) not in compiled["presets"]:
                raise Unsupported(f"unknown {kind}")
            values.update(compiled["presets"][(kind, name)])
    values.update(sets)
    return values


def _formula_key(values: dict) -> tuple:
    """The formula column depends on every value but the workload's (kept symbolic)."""
    return tuple(sorted((n, str(v)) for n, v in values.items() if n not in SHOWN_INPUTS))


def remember(rep: Report) -> None:
    """Keep the formula column of an estimate made by the full path, for the fast path."""
    key = _key()
    if key is None or not rep.formulas:
        return
    stored = _read("formulas", key) or {"formulas": {}}
    formulas = stored["formulas"]
    formulas[_formula_key(rep.values)] = dict(rep.formulas)
    while len(formulas) > MAX_FORMULAS:
        del formulas[next(iter(formulas))]
    _write("formulas", key, {"formulas": formulas})
    # and under the values it depends on (columns.Reads), as a polynomial column is kept: an
    # estimate that changes only a value it never read (dp where nothing is sharded over dp)
    # prints it without sympy
    compiled = _read("compiled", key)
    if compiled is None:
        return
    try:
        values = exact_values(rep.values)
        fixed, pins = bindings(compiled, values)
        walker = Reads(compiled, fixed, pins, SHOWN_INPUTS, OPAQUE_RULES, then=TOTAL_OPAQUE)
        for name in rep.components:
            walker.walk(name)
        walker.then().walk("total")
    except (Unsupported, ArithmeticError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return
    _keep_column(key, tuple(sorted(walker.read - set(SHOWN_INPUTS))), values, dict(rep.formulas))


# ---------------------------------------------------------------- answers kept as text
# ``show``, ``solve`` and ``plan`` (:data:`engine.cli.ANSWERED`) print what their arguments and the
# sources alone decide (for a preset model, without a rule file of the user's): derived with
# sympy the first time, the text is kept and printed when they are asked again.
#: the most answers kept (the oldest go first), and the longest one kept
MAX_ANSWERS = 500
MAX_ANSWER_CHARS = 1 << 20


def _answer_key(args) -> tuple[str, str] | None:
    """The cache key of a command's answer and its arguments as text; None when the answer may
    depend on more than both (a rule file, a config.json or a file named like the preset, a
    Hugging Face id, the cache off)."""
    source = _key()
    if source is None or getattr(args, "rules", None):
        return None
    model = getattr(args, "model", None)
    if model is not None:
        try:
            if Path(model).name != model or model.endswith(".json") or os.path.lexists(model):
                return None
        except (OSError, ValueError):  # a name no file system takes: the full path says so
            return None
    try:
        text = json.dumps(sorted(vars(args).items()), ensure_ascii=True)
    except (TypeError, ValueError):
        return None
    return source + hashlib.sha256(text.encode()).hexdigest()[:32], text


def answer(args) -> tuple[int, str, list[str]] | None:
    """The exit code, output and notes kept for these arguments, or None."""
    found = _answer_key(args)
    if found is None:
        return None
    key, text = found
    stored = _read("answer", key)
    if (stored is None or stored.get("args") != text or stored.get("code") not in (0, 1)
            or not isinstance(stored.get("out"), str) or not isinstance(stored.get("notes"), list)
            or not all(isinstance(n, str) for n in stored["notes"])):
        return None
    return stored["code"], stored["out"], stored["notes"]


def remember_answer(args, code: int, out: str, notes: list[str]) -> None:
    """Keep a command's answer for the next time it is asked with the same arguments."""
    found = _answer_key(args)
    if found is None or code not in (0, 1) or len(out) > MAX_ANSWER_CHARS:
        return
    key, text = found
    _write("answer", key, {"args": text, "code": code, "out": out, "notes": list(notes)}, keep=MAX_ANSWERS)


def show_keep(args) -> tuple[str, ...]:
    """The inputs ``memform show`` keeps symbolic: the workload's unless set, and --keep."""
    explicit = {t.split("=", 1)[0].strip() for t in args.sets}
    return tuple(n for n in SHOWN_INPUTS if n not in explicit) + tuple(args.keep)


def show(args) -> str | None:
    """What ``memform show RULE MODEL`` prints where the rule written out is a polynomial in the
    names kept (:mod:`engine.compile.columns`; the full path expands such a rule and prints it in the
    same order), or None: the full path answers (sympy), with its errors."""
    if getattr(args, "rules", None) or args.latex or args.model is None:
        return None
    key = _key()
    compiled = _read("compiled", key) if key else None
    if compiled is None or args.rule not in compiled["rules"]:
        return None
    keep = show_keep(args)
    if any(n not in compiled["inputs"] for n in keep):
        return None
    try:
        values = _values(compiled, SimpleNamespace(model=args.model, gpu=None, capacity=None, sets=args.sets))
        fixed, pins = bindings(compiled, values)
        return f"{args.rule} = {text(Polynomials(compiled, fixed, pins, keep, ()).rule(args.rule))}\n"
    except (Unsupported, EngineError, ArithmeticError, ValueError, TypeError, KeyError, RecursionError):
        return None


def plan(args) -> tuple[list, list] | None:
    """The layouts ``memform plan`` lists for a preset, from the compiled library: the same
    enumeration and bisection over the exact per-GPU total as :func:`engine.answers.plan.plan`,
    the sizes, ZeRO stages and capacity read from the compiled rules instead of a scenario;
    (every feasible layout, those shown), or None: the full path answers, with its errors."""
    if getattr(args, "rules", None):
        return None
    key = _key()
    compiled = _read("compiled", key) if key else None
    if compiled is None or FIT_RULE not in compiled["rules"]:
        return None
    try:
        planning.validate_plan_args(args.gpus, args.top, args.max_micro_batch)
        if args.sort not in planning.SORTS:
            return None
        values = _values(compiled, args)
        if "capacity" not in values:
            return None
        known = dict(values, **evaluate_rules(compiled, values, [n for n in (*LAYOUT_SIZES, FIT_RULE)
                                                                if n in compiled["rules"]]))
        if not args.no_divisibility:
            _refuse_broken(values, known)
        sizes = {n: known[n] for n in planning.SIZE_RULES}  # inputs or rules, as scenario.evaluate gives them
        layouts = planning.candidates(
            args.gpus, planning.MAX_TP, not args.no_divisibility, sizes,
            lambda z: evaluate_rules(compiled, {**values, "zero_stage": z}, ["shard_level"])["shard_level"],
            compiled["options"]["recompute"][0])
        evaluator = _plan_evaluator(compiled, key, values)
        rows = planning.exact_plan(evaluator, layouts, args.max_micro_batch, known[FIT_RULE], args.sort)
        return rows, rows[:args.top]
    except (planning.NotExact, Unsupported, EngineError, ArithmeticError, ValueError, TypeError, KeyError,
            IndexError, AttributeError, RecursionError):
        return None  # whatever the cause, the full path answers or reports it


def _plan_evaluator(compiled: dict, key: str, values: dict) -> Evaluator:
    """The per-GPU total as an exact function of the layout and the micro-batch, kept under
    the values it was specialised for (the program does not depend on the GPU count: plan
    with another count reads it instead of specialising the library again)."""
    varying = (*planning.LAYOUT, "micro_batch")
    fixed = tuple(sorted((n, str(v)) for n, v in values.items() if n not in varying))
    stored = _read("plans", key) or {"plans": {}}
    kept = stored["plans"].get(fixed)
    if kept is not None:
        return Evaluator.of_kept(compiled, kept)
    evaluator = Evaluator.of_values(compiled, "total", values, varying)
    plans = stored["plans"]
    plans[fixed] = evaluator.kept()
    while len(plans) > MAX_PLANS:
        del plans[next(iter(plans))]
    _write("plans", key, {"plans": plans})
    return evaluator


#: the unknowns :func:`solve` answers: a search over every whole value, or over the degrees
#: that divide a model size (tp, pp, ep: :data:`engine.library.layout.DIVIDES`)
SOLVED = (*SHOWN_INPUTS, "dp", *DIVIDES)
#: the most bits of a value the compiled solve works with (the full path bounds the rest)
SOLVE_BITS = 256


def solve(args) -> search.SolveResult | None:
    """What ``memform solve max|min micro_batch|seq_len|dp|tp|pp|ep`` answers for a preset,
    from the compiled library: the same candidates, monotonicity (the grid, where the program's
    shape does not show it) and bisection as :func:`engine.answers.solve.solve` over the exact
    target, or for a layout's degree every candidate that divides the model's sizes; and its
    closed form where the target is linear in the unknown
    (:func:`engine.compile.columns.linear_root`), has one term over it, the state ZeRO shards
    over dp (:func:`engine.compile.columns.reciprocal_root`), written as sympy writes it, or a
    sum over it, what tp shards (:func:`engine.compile.columns.quotient_form`, both paths' own
    form), or none where a rounding of the unknown stays (a stage's ``ceil(L / pp)`` layers);
    or None: the full path answers, with its errors and the forms sympy finds."""
    unknown, direction, step, k = args.unknown, args.direction, args.step, args.multiple_of
    if (getattr(args, "rules", None) or unknown not in SOLVED or direction not in ("max", "min")
            or step not in ("1", "pow2") or type(k) is not int or not 1 <= k <= search.UPPER):
        return None
    key = _key()
    compiled = _read("compiled", key) if key else None
    if compiled is None or args.target not in compiled["rules"] or FIT_RULE not in compiled["rules"]:
        return None
    try:
        values = _values(compiled, args)
        if "capacity" not in values or any(_bits(v) > SOLVE_BITS for v in values.values()):
            return None
        if not args.no_divisibility:  # as the full path checks a pinned layout
            _refuse_broken(values, dict(values, **evaluate_rules(
                compiled, values, [n for n in LAYOUT_SIZES if n in compiled["rules"]])))
        capacity = evaluate_rules(compiled, values, [FIT_RULE])[FIT_RULE]
        check_usable(capacity)
        f = Evaluator.of_values(compiled, args.target, values, (unknown,))
        _, integer, lower, _, _ = compiled["inputs"][unknown]
        if not integer:
            return None
        cand, i_lo, i_hi = search.candidates(max(1, -(-lower // 1)) if lower is not None else 1, k, step)
        at = {}

        def value(x: int):
            if x not in at:
                at[x] = f(**{unknown: x})
                if _bits(at[x]) > SOLVE_BITS:
                    raise Unsupported("a value too large to be sure of")
            return at[x]
        constraints = search.constraints(unknown, k, step)
        divides = [] if args.no_divisibility else list(DIVIDES.get(unknown, ()))
        if divides:  # finitely many candidates, each evaluated (as the full path does)
            known = dict(values, **evaluate_rules(compiled, values, [r for r in divides if r in compiled["rules"]]))
            sizes = {r: Fraction(known[r]) for r in divides}
            if any(n.denominator != 1 for n in sizes.values()):
                return None  # the full path says no value meets the constraints
            serving = values.get("mode") == "infer"
            multiples = SERVING_MULTIPLES.get(unknown, ()) if serving else ()
            constraints += [f"{unknown} divides {r} ({sizes[r]})" + (" or is a multiple of it" if r in multiples else "")
                            for r in divides]
            limit = min([search.UPPER] + [int(sizes[r]) for r in divides if r not in multiples])
            xs = search.listed(cand, i_lo, i_hi, limit, step, k, lambda x: all(
                admits(unknown, x, r, int(sizes[r]), serving) for r in divides))
            fits = [x for x in xs if value(x) <= capacity]
            if not fits:
                return None  # the full path says what does not fit, or that no value meets the constraints
            answer, nxt = search.chosen(xs, fits, direction)
        else:
            increasing = direction == "max"
            # the grid the full path checks, unless the program's shape shows the direction: then
            # no value on it turns (tests/test_exact.py holds the one to the other)
            shown, junctions = f.direction(unknown)
            lo, hi = cand(i_lo), cand(i_hi)
            if shown not in ((0, 1) if increasing else (0, -1)) or any(
                    value(b) < value(b - 1) if increasing else value(b) > value(b - 1)
                    for b in junctions if lo < b <= hi):
                ys = [value(x) for x in search.grid(lo, hi)]
                if any(b < a if increasing else b > a for a, b in zip(ys, ys[1:])):
                    return None  # the full path says where it turns
            if value(cand(i_lo) if increasing else cand(i_hi)) > capacity:
                return None  # the full path says what does not fit
            answer, nxt = search.bisect(lambda x: value(x) <= capacity, direction, cand, i_lo, i_hi)
        closed_form, closed = _closed_form(compiled, values, unknown, args.target, capacity, direction, k, step,
                                           answer)
        found_by = "search" if divides else search.method(closed_form, unknown, closed, answer)
        return search.SolveResult(unknown, direction, answer, closed_form, value(answer),
                                  None if nxt is None else value(nxt), nxt, found_by, closed, capacity,
                                  args.target, tuple(constraints), None, values["capacity"])
    except (Unsupported, EngineError, ArithmeticError, ValueError, TypeError, KeyError, IndexError,
            AttributeError, RecursionError):
        return None  # whatever the cause, the full path answers or reports it


def _bits(v) -> int:
    return max(abs(v.numerator).bit_length(), v.denominator.bit_length()) if not isinstance(v, str) else 0


def _closed_form(compiled, values, unknown, target, capacity, direction, k, step, answer) -> tuple[str, int | None]:
    """The closed form :func:`engine.answers.solve.solve` prints and the whole value it gives,
    where the target is linear in the unknown or one term over it, on the branches active at
    the answer (as the full path takes them); Unsupported where sympy is needed to say."""
    fixed, pins = bindings(compiled, values)
    if _rough(compiled, fixed, pins, unknown, target, answer):
        return f"none: {target} has ceil/floor/max in {unknown}; exact search over whole values", None
    keep = tuple(dict.fromkeys((unknown, *SHOWN_INPUTS)))
    point = {n: values[n] for n in keep if n in values} | {unknown: answer}
    poly = Polynomials(compiled, fixed, pins, keep, ("n_params",), point=point).rule(target, over=(unknown,))
    known = {FIT_RULE: capacity, "n_params": evaluate_rules(compiled, values, ["n_params"])["n_params"],
             **{n: values[n] for n in SHOWN_INPUTS if n != unknown}}
    over = [mono for mono in poly if any(n == unknown and e < 0 for n, e in mono)]
    if len(over) > 1:  # a sum over tp: the shards of weights, gradients and activations
        num, den = reciprocal_sum_root(poly, unknown, FIT_RULE)
        bottom = value_at(den, known)
        root = value_at(num, known) / bottom if bottom else Fraction(-1)
        shown = quotient_form_text(*quotient_form(num, den))
    elif over:  # c m / dp: ZeRO's shards
        a, m, den = reciprocal_root(poly, unknown, FIT_RULE)
        bottom = value_at(den, known)
        root = a * value_at({m: 1}, known) / bottom if bottom else Fraction(-1)
        shown = quotient_text(a, m, den)
    else:
        ratio, num, m = linear_root(poly, unknown, FIT_RULE)
        root = ratio * value_at(num, known) / value_at({m: 1}, known)
        shown = root_text(ratio, num, m)
    if step != "1" or root <= 0:
        return f"{target}({unknown}) <= usable_memory", None
    whole = (root // k if direction == "max" else -(-root // k)) * k
    return f"{unknown} {'<=' if direction == 'max' else '>='} {shown}", int(whole)


class _Rough(Polynomials):
    """The target with every value but the unknown's (the one kept name) known, a rounding of
    the unknown kept as an atom whatever its powers (``ceiling(80/pp)``: a stage's layers): what
    :func:`engine.answers.solve._smooth_in` looks for on the branch active at the answer."""

    def _round(self, op: str, p):
        if not any(e < 0 for m in p for _, e in m):
            return super()._round(op, p)
        # sympy rounds an argument it can show lies in (0, 2] (ceiling(1/tp) is 1): kept only
        # where it cannot, a sum of positive terms over the unknown above 2 at unknown = 1
        if (not self.whole_positive or any(isinstance(n, Atom) for m in p for n, _ in m)
                or any(c < 0 for m, c in p.items() if m) or value_at(p, dict.fromkeys(self.whole_positive, 1)) <= 2):
            raise Unsupported("a rounding sympy may decide")
        whole = {m: c for m, c in p.items() if c.denominator == 1 and all(e > 0 and self._whole(n) for n, e in m)}
        rest = {m: c for m, c in p.items() if m not in whole}
        return _sum([whole, {((Atom("ceiling" if op == "ceil" else "floor", (rest,)), 1),): Fraction(1)}])


def _rough(compiled, fixed, pins, unknown: str, target: str, answer: int) -> bool:
    """Whether the target, on the branch active at the answer, keeps a rounding, max or min of
    the unknown (the full path then prints no closed form); Unsupported where that is not plain."""
    poly = _Rough(compiled, fixed, pins, (unknown,), (), point={unknown: answer}, atoms=True).rule(
        target, over=(unknown,))
    return any(isinstance(n, Atom) for mono in poly for n, _ in mono)


def _docs_key(fmt: str) -> str | None:
    source = _key()
    if source is None:
        return None
    try:
        examples = (data_path("formulas").parent / "docs" / "examples.toml").read_bytes()
    except OSError:  # the full path reports it
        return None
    return source + hashlib.sha256(fmt.encode() + b"\0" + examples).hexdigest()[:32]


def kept_docs(fmt: str) -> str | None:
    """The reference in ``fmt`` as rendered from these sources and worked examples, or None."""
    key = _docs_key(fmt)
    stored = _read("docs", key) if key else None
    return stored["text"] if stored is not None and isinstance(stored.get("text"), str) else None


def keep_docs(fmt: str, text: str) -> None:
    key = _docs_key(fmt)
    if key is not None:
        _write("docs", key, {"text": text})
