"""The search behind ``memform solve``, over any exact function of the unknown.

The full path (:func:`engine.answers.solve.solve`: sympy values) and the compiled one
(:func:`engine.answers.quick.solve`: Fractions from :class:`engine.compile.exact.Evaluator`)
share the candidates for the unknown, the points where it is checked to be monotone and the
bisection, so the two answer alike.  Neither sympy nor numpy is imported here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .report import whole_bytes

#: the largest value of the unknown that is searched
UPPER = 2**24


@dataclass(frozen=True)
class SolveResult:
    """The answer of :func:`engine.answers.solve.solve` (bytes are sympy Rationals there,
    Fractions on the compiled path)."""

    unknown: str
    direction: str
    value: int
    closed_form: str
    bytes_at_value: object
    bytes_at_next: object | None
    next_value: int | None
    method: str
    closed_value: int | None  # the closed form's bound evaluated, where one was found
    capacity: object  # what the target must fit in: rule usable_memory
    target: str
    constraints: tuple[str, ...] = field(default_factory=tuple)
    bound: object | None = None  # the closed form as a sympy relation, when it is the method (full path)
    gpu_capacity: object | None = None  # the GPU's memory as nvidia-smi gives it (input capacity)

    def _repr_latex_(self) -> str:
        """The answer and its closed form as LaTeX (Jupyter)."""
        from ..present.docs import solve_latex
        return solve_latex(self)

    def to_json(self) -> dict:
        return {"unknown": self.unknown, "value": self.value, "closed_form": self.closed_form,
                "bytes_at_value": whole_bytes(self.bytes_at_value),
                "bytes_at_next": None if self.bytes_at_next is None else whole_bytes(self.bytes_at_next),
                "next_value": self.next_value, "method": self.method, "direction": self.direction,
                "target": self.target,
                "capacity_bytes": whole_bytes(self.capacity if self.gpu_capacity is None else self.gpu_capacity),
                "usable_bytes": whole_bytes(self.capacity),
                "constraints": list(self.constraints)}


def candidates(lo: int, multiple_of: int, step: str, upper: int = UPPER):
    """The values tried, ``cand(i)`` for ``i_lo <= i <= i_hi``: 1, 2, 3 ... or the powers of
    two, times ``multiple_of``, from the first at least ``lo``."""
    k = multiple_of
    cand = (lambda i: k * 2**i) if step == "pow2" else (lambda i: k * i)
    i_lo = 0 if step == "pow2" else 1
    while cand(i_lo) < lo:
        i_lo += 1
    i_hi = max(i_lo, upper // k if step == "1" else (upper // k).bit_length() - 1)
    return cand, i_lo, i_hi


def listed(cand, i_lo: int, i_hi: int, limit: int, step: str, k: int, valid) -> list[int]:
    """The candidates up to ``limit`` that ``valid`` admits, in order: a layout's degree, which
    must divide a model size (the ones past the limit are never looked at: 2**24 of them would
    take seconds)."""
    last = min(i_hi, limit // k) if step == "1" else i_lo
    while step != "1" and last < i_hi and cand(last + 1) <= limit:
        last += 1
    return [cand(i) for i in range(i_lo, last + 1) if cand(i) <= limit and valid(cand(i))]


def chosen(xs: list[int], fits: list[int], direction: str) -> tuple[int, int | None]:
    """Of the candidates ``xs`` (in order), the best that fits (``fits``) and the next one
    past it, which does not (None where there is none)."""
    value = max(fits) if direction == "max" else min(fits)
    pos = xs.index(value)
    others = xs[pos + 1:] if direction == "max" else xs[:pos][::-1]
    return value, others[0] if others else None


def constraints(unknown: str, multiple_of: int, step: str) -> list[str]:
    """The constraints on the values tried, as the answer states them."""
    out = [f"{unknown} is a multiple of {multiple_of}"] if multiple_of > 1 else []
    return out + ([f"{unknown} is a power of two"] if step == "pow2" else [])


def method(closed_form: str, unknown: str, closed: int | None, value: int) -> str:
    """How the answer is reported found: by its closed form only when there is one and its
    bound is the answer the search found."""
    return "closed-form" if closed_form.startswith(f"{unknown} ") and closed == value else "search"


def grid(lo: int, hi: int) -> list[int]:
    """The whole values where the target is checked to be monotone, in order: every one of
    the first 65 from ``lo`` and 400 spaced about evenly on a log scale from ``lo`` to ``hi``."""
    a, b = max(lo, 1), max(hi, 1)
    spaced = {a, b} | {min(b, max(a, math.floor(a * (b / a) ** (i / 399)))) for i in range(1, 399)}
    return sorted(spaced | set(range(lo, min(hi, lo + 64) + 1)))


def bisect(fits, direction: str, cand, i_lo: int, i_hi: int) -> tuple[int, int | None]:
    """The largest (``max``) or smallest (``min``) candidate for which ``fits`` holds, and the
    candidate beyond it (None at the end of the range); ``fits`` is monotone and holds at
    ``cand(i_lo)`` (max) or ``cand(i_hi)`` (min)."""
    a, b = i_lo, i_hi
    if direction == "max":  # invariant: cand(a) fits
        while a < b:
            mid = (a + b + 1) // 2
            a, b = (mid, b) if fits(cand(mid)) else (a, mid - 1)
        return cand(a), (cand(a + 1) if a < i_hi else None)
    while a < b:  # invariant: cand(b) fits
        mid = (a + b) // 2
        a, b = (a, mid) if fits(cand(mid)) else (mid + 1, b)
    return cand(b), (cand(b - 1) if b > i_lo else None)
