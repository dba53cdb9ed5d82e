"""Planning: every parallel layout of a model on N GPUs that fits, ranked.

For every candidate layout (tp, pp, dp, ZeRO stage, recomputation) the largest micro-batch
that fits is found by bisection over the exact per-GPU total (:class:`engine.compile.exact.Evaluator`,
the library's rules specialised to the layout's names: a few microseconds a total).  A rule
file with a square root or a logarithm has no exact total: then every layout and micro-batch
is evaluated in one vectorised call of the compiled total, and the rows shown re-evaluated
exactly, so a listed layout always fits.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from ..compile.exact import Evaluator
from ..errors import DomainError, EngineError, InfeasibleError, UsageError
from ..lazy import lazy
from ..library.layout import DIVIDES, broken
from .report import whole_bytes

# executed on first use: plan of a preset from the compiled library (engine.answers.quick)
# needs neither sympy nor the scenarios
np = lazy("numpy")  # the float sweep only
sympy = lazy("sympy")
lambdas = lazy("engine.compile.lambdas")
model = lazy("engine.compile.model")

SORTS = {
    "model_parallel": lambda r: (r.tp * r.pp, -r.micro_batch, r.total),
    "micro_batch": lambda r: (-r.micro_batch, r.tp * r.pp, r.total),
    "memory": lambda r: (r.total, r.tp * r.pp, -r.micro_batch),
}


@dataclass(frozen=True)
class Layout:
    tp: int
    pp: int
    dp: int
    zero_stage: int
    recompute: str
    micro_batch: int
    total: int  # exact per-GPU bytes, rounded up
    capacity: int

    @property
    def headroom(self) -> int:
        return self.capacity - self.total

    def to_json(self) -> dict:
        return {**self.__dict__, "headroom": self.headroom}


def _divisors(n: int) -> list[int]:
    """The divisors of ``n``, in increasing order (in time sqrt(n))."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


#: the most GPUs plan lays out (solve searches the same range)
MAX_GPUS = 2**24
#: the largest micro-batch plan tries
MAX_MICRO_BATCH = 2**16


def validate_plan_args(gpus: int, top: int = 1, max_micro_batch: int = 1) -> None:
    """Refuse ``--gpus``, ``--top`` and ``--max-micro-batch`` values outside what plan can
    lay out and show."""
    for flag, value, most in (("--gpus", gpus, MAX_GPUS), ("--top", top, None),
                              ("--max-micro-batch", max_micro_batch, MAX_MICRO_BATCH)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1 or (most and value > most):
            upto = f" to {most:,}" if most else " or more"
            raise UsageError(f"{flag} takes a whole number from 1{upto}, not {value}")


#: the largest tensor-parallel degree plan tries (one node of eight GPUs)
MAX_TP = 8


def plan(scenario: "model.Scenario", gpus: int, max_micro_batch: int = 256, max_tp: int = MAX_TP,
         sort: str = "model_parallel", progress=None, divisibility: bool = True) -> list[Layout]:
    """Feasible layouts of ``scenario``'s model on ``gpus`` GPUs, best first.

    Examples
    --------
    >>> import engine
    >>> s = engine.Scenario.create(engine.load(), "llama2-7b", "h100-80g")
    >>> plan(s, 8)[0].tp * plan(s, 8)[0].pp
    1
    """
    lib = scenario.library
    validate_plan_args(gpus, max_micro_batch=max_micro_batch)
    if sort not in SORTS:
        raise UsageError(f"unknown order '{sort}'", hint="orders: " + ", ".join(SORTS))
    if "capacity" not in scenario.values:
        raise UsageError("plan needs a GPU", hint="give --gpu GPU or --capacity 80GB")
    sizes = {n: scenario.evaluate(n) for n in SIZE_RULES}
    layouts = candidates(gpus, max_tp, divisibility, sizes,
                         lambda z: scenario.with_values(zero_stage=z).evaluate("shard_level"),
                         lib.options["recompute"].choices)
    evaluator = layout_evaluator(scenario)
    try:
        if evaluator is None:
            raise NotExact
        return exact_plan(evaluator, layouts, max_micro_batch, model.fit_capacity(scenario), sort, progress)
    except NotExact:  # a rule without exact form (sqrt, log2): every layout in one numpy call
        rows = _swept_rows(scenario, layouts, max_micro_batch, progress)
    rows.sort(key=lambda r: SORTS[sort](r))
    return rows


#: the sizes a tensor- or pipeline-parallel degree must divide
SIZE_RULES = tuple(n for d in ("tp", "pp") for n in DIVIDES[d])


def candidates(gpus: int, max_tp: int, divisibility: bool, sizes: dict, shard_level, recomputes) -> list[tuple]:
    """Every layout (tp, pp, dp, ZeRO stage, recomputation) of ``gpus`` GPUs, tp up to
    ``max_tp``, whose degrees divide ``sizes`` (heads, layers ...) unless ``divisibility`` is off;
    ``shard_level(z)`` is the sharding ZeRO stage z gives (rule shard_level)."""
    # the ZeRO stages that shard differently (a stack may fix the sharding: fsdp2 is ZeRO-3's)
    zeros = [z for z in range(4) if shard_level(z) == z] or [0]
    layouts = []
    for tp in _divisors(gpus):
        if tp > max_tp or (divisibility and broken({"tp": tp}, sizes.get)):
            continue
        for pp in _divisors(gpus // tp):
            if divisibility and broken({"pp": pp}, sizes.get):
                continue
            for zero, rec in itertools.product(zeros, recomputes):
                layouts.append((tp, pp, gpus // (tp * pp), zero, rec))
    if not layouts:
        raise InfeasibleError(f"no layout of {gpus} GPUs divides the heads and layers ("
                              + ", ".join(f"{n} {int(v)}" for n, v in sizes.items()) + ")",
                              hint="--no-divisibility accepts uneven layouts")
    return layouts


def exact_plan(evaluator, layouts: list, most: int, capacity, sort: str, progress=None) -> list[Layout]:
    """The layouts that fit, best first, from an exact evaluator of the per-GPU total (raises
    :class:`NotExact` where it has no exact value)."""
    rows = _exact_rows(evaluator, layouts, most, capacity, progress)
    rows.sort(key=lambda r: SORTS[sort](r))
    return rows


class NotExact(Exception):
    """A layout's total that the exact evaluator cannot give (a square root, a logarithm)."""


def _exact_rows(evaluator, layouts: list, most: int, capacity, progress) -> list[Layout]:
    """For each layout, the largest micro-batch up to ``most`` that fits ``capacity``, from
    the exact per-GPU total: where the program shows the total is a line in the micro-batch,
    from its value and slope at 1 (:meth:`engine.compile.exact.Evaluator.line`, one call);
    else by bisection (the total is non-decreasing in the micro-batch: a library check).
    ``layouts`` as :func:`candidates` orders them."""
    line = evaluator.line("micro_batch")
    # the layouts come with recomputation innermost: what the other degrees decide is computed
    # once for them all (Evaluator.staged)
    if line is not None:
        line = line.staged(LAYOUT[:4])
    else:
        evaluator = evaluator.staged(LAYOUT)
    rows = []
    for i, (tp, pp, dp, zero, rec) in enumerate(layouts):
        try:
            if line is not None:
                lo, at = _largest_on_line(*line(tp=tp, pp=pp, dp=dp, zero_stage=zero, recompute=rec,
                                                micro_batch=1).values(), most, capacity)
            else:
                lo, at = _largest(lambda mb: evaluator(tp=tp, pp=pp, dp=dp, zero_stage=zero, recompute=rec,
                                                       micro_batch=mb), most, capacity)
        except EngineError:
            raise NotExact from None
        if lo:
            rows.append(Layout(tp, pp, dp, zero, rec, lo, whole_bytes(at), int(capacity)))
        if progress and ((i + 1) % 64 == 0 or i + 1 == len(layouts)):
            progress(i + 1, len(layouts))
    return rows


def _largest_on_line(t1, slope, most: int, capacity) -> tuple:
    """The largest micro-batch up to ``most`` whose total fits and that total ((0, None):
    none fits), for a total that is a line in the micro-batch, from its value and slope at 1."""
    if t1 > capacity:
        return 0, None
    lo = most if slope <= 0 else min(most, 1 + int((capacity - t1) // slope))
    return lo, t1 + slope * (lo - 1)


def _largest(total, most: int, capacity) -> tuple:
    """The largest micro-batch up to ``most`` whose total fits and that total ((0, None):
    none fits), by bisection."""
    seen: dict = {}

    def total(mb: int, of=total):
        if mb not in seen:
            seen[mb] = of(mb)
        return seen[mb]

    lo, hi = 1, most
    if total(lo) > capacity:
        return 0, None
    if total(hi) <= capacity:
        return hi, total(hi)
    # total(lo) fits, total(hi) does not: the line through them puts the boundary where a
    # total linear in the micro-batch has it (most do): two evaluations there, and bisection
    # only where it is off
    t_lo, t_hi = total(lo), total(hi)
    guess = lo + int((capacity - t_lo) * (hi - lo) // (t_hi - t_lo))
    if lo < guess < hi:
        lo, hi = (guess, hi) if total(guess) <= capacity else (lo, guess)
    if lo < guess + 1 < hi:
        lo, hi = (guess + 1, hi) if total(guess + 1) <= capacity else (lo, guess + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if total(mid) <= capacity else (lo, mid)
    return lo, total(lo)


def _swept_rows(scenario: "model.Scenario", layouts: list, most: int, progress) -> list[Layout]:
    """Every layout and micro-batch in one vectorised call of the compiled per-GPU total
    (float64; the rows shown are re-evaluated by :func:`exact`)."""
    lib = scenario.library
    fn = model.compiled(scenario, "total", ("tp", "pp", "dp", "zero_stage", "recompute", "micro_batch"))
    arr = np.array([(t, p, d, z, lib.options["recompute"].code(r)) for t, p, d, z, r in layouts], float)
    mbs = np.arange(1, most + 1, dtype=float)
    capacity = model.fit_capacity(scenario)  # exact; the float is for the sweep only
    cap = float(capacity) if capacity < np.finfo(float).max else np.finfo(float).max
    best = np.zeros(len(arr), int)
    approx = np.zeros(len(arr))
    chunk = max(1, 200_000 // len(mbs))
    for start in range(0, len(arr), chunk):
        part = arr[start:start + chunk]
        grid = [np.repeat(part[:, i][:, None], len(mbs), 1) for i in range(5)]
        with np.errstate(all="ignore"):  # branches not taken may divide by zero
            totals = lambdas.real_values(fn(*grid, mbs[None, :]), grid[0].shape)
        unreal = np.isnan(totals) | (totals == -np.inf)
        if unreal.any():  # not a number of bytes: the exact value names the rule
            row, mb = np.argwhere(unreal)[0]
            _check_real(scenario, layouts[start + row], int(mbs[mb]))
        fits = np.isfinite(totals) & (totals <= cap)
        count = fits.sum(1)  # total is non-decreasing in micro_batch: the fitting ones lead
        best[start:start + chunk] = count
        approx[start:start + chunk] = totals[np.arange(len(part)), np.maximum(count - 1, 0)]
        if progress:
            progress(min(len(arr), start + chunk), len(arr))
    return [Layout(tp, pp, dp, zero, rec, int(mb), int(tot), int(capacity))
            for (tp, pp, dp, zero, rec), mb, tot in zip(layouts, best, approx) if mb]


def _check_real(scenario: "model.Scenario", layout: tuple, micro_batch: int) -> None:
    """Raise the error of a total that is not a real number in one layout: the exact
    evaluation's own, naming the rule that leaves the reals, where it raises one."""
    tp, pp, dp, zero, rec = layout
    where = f"tp={tp} pp={pp} dp={dp} zero_stage={zero} recompute={rec} micro_batch={micro_batch}"
    try:
        total = scenario.with_values(tp=tp, pp=pp, dp=dp, zero_stage=zero, recompute=rec,
                                     micro_batch=micro_batch).evaluate("total")
    except TypeError:  # sympy cannot order a number that is not real (zoo > 2)
        total = sympy.nan
    except EngineError as exc:
        exc.hint = "; ".join(h for h in (exc.hint, f"in the layout {where}") if h)
        raise
    if total.is_extended_real is not True:
        raise DomainError(f"'total' is not a real number in the layout {where}",
                          hint="a rule takes the square root or logarithm of a negative number, or divides by zero")


#: what a layout sets (beside the micro-batch)
LAYOUT = ("tp", "pp", "dp", "zero_stage", "recompute")


def layout_evaluator(scenario: "model.Scenario"):
    """The per-GPU total of ``scenario`` as an exact function of the layout and the
    micro-batch (:class:`engine.compile.exact.Evaluator`), or None where the library has none."""
    try:
        return Evaluator.of(scenario, "total", (*LAYOUT, "micro_batch"))
    except EngineError:
        return None


def exact(scenario: "model.Scenario", row: Layout, evaluator=None) -> Layout:
    """``row`` re-evaluated exactly; the micro-batch is lowered if the float sweep erred.
    ``evaluator`` (:func:`layout_evaluator`) computes the same exact total as the scenario
    does, thousands of times faster; where it cannot, the scenario answers (or says why not)."""
    mb = row.micro_batch
    while mb >= 1:
        values = dict(tp=row.tp, pp=row.pp, dp=row.dp, zero_stage=row.zero_stage, recompute=row.recompute,
                      micro_batch=mb)
        total = None
        if evaluator is not None:
            try:
                total = evaluator(**values)
            except EngineError:  # the sympy path reports it, naming the rule
                total = None
        if total is None:
            total = scenario.with_values(**values).evaluate("total")
        if total <= row.capacity:
            return Layout(row.tp, row.pp, row.dp, row.zero_stage, row.recompute, mb, whole_bytes(total),
                          row.capacity)
        mb -= 1
    return None
