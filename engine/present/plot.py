"""Plots of the per-GPU memory breakdown against one workload variable.

:func:`breakdown` evaluates every component of ``total`` over a grid of values in one
compiled (vectorised) call per component and asks :func:`engine.answers.solve.solve` for the
largest value that fits; :func:`plot` draws it as a stacked area chart with the GPU
capacity and that value marked.  matplotlib is an optional dependency
(``pip install 'memform[plot]'``); it is used through its object API with the Agg
canvas, so plotting never changes a notebook's or a script's pyplot backend.
"""
from __future__ import annotations

import math
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np
import sympy

from ..answers.solve import solve
from ..compile.model import Scenario, components, fit_capacity
from ..errors import InfeasibleError, UsageError, did_you_mean
from ..lang.rules import InputDecl

GIB = 2**30
#: the largest value --range takes (the grid spans it in 256 points; float64 sizes stay accurate there)
MAX_VALUE = 2**40
#: the title's font size, and the most characters it shows (an error note can be long)
TITLE_SIZE, TITLE_CHARS = 10, 600


@dataclass(frozen=True)
class Breakdown:
    """Bytes of each component of ``total`` over the values ``xs`` of input ``x``."""

    x: str
    xs: np.ndarray
    parts: Mapping[str, np.ndarray]  # float64 bytes, from the compiled path
    capacity: sympy.Rational | None
    best: int | None  # the largest value of x that fits (memform solve max), if any
    note: str | None  # why there is no best value

    @property
    def total(self) -> np.ndarray:
        return np.sum(list(self.parts.values()), axis=0)


def parse_range(text: str) -> tuple[int, int]:
    """``"512:131072"`` -> ``(512, 131072)``; whole numbers in ASCII digits,
    1 <= low < high <= :data:`MAX_VALUE`.

    Examples
    --------
    >>> parse_range("512:131072")
    (512, 131072)
    """
    shown = repr(text if len(text) <= 40 else text[:37] + "...")
    match = re.fullmatch(r"\s*([0-9]+)\s*:\s*([0-9]+)\s*", text)
    if match is None:
        raise UsageError(f"--range takes LOW:HIGH in whole numbers, not {shown}", hint="e.g. --range 512:131072")
    lo, hi = (int(p) if len(p) <= 20 else math.inf for p in match.groups())  # no int() of 5,000 digits
    if not 1 <= lo < hi:
        raise UsageError(f"--range needs 1 <= LOW < HIGH, not {shown}", hint="e.g. --range 512:131072")
    if hi > MAX_VALUE:
        raise UsageError(f"--range goes up to {MAX_VALUE:,} (2^40), not {shown}")
    return lo, hi


def grid(lo: int, hi: int, points: int = 256) -> np.ndarray:
    """Whole values from ``lo`` to ``hi``: all of them when few, else geometrically spaced.

    Examples
    --------
    >>> grid(1, 4).tolist()
    [1, 2, 3, 4]
    >>> g = grid(512, 131072)
    >>> int(g[0]), int(g[-1]), bool(np.all(np.diff(g) > 0))
    (512, 131072, True)
    """
    if hi - lo < points:
        return np.arange(lo, hi + 1, dtype=np.int64)
    return np.unique(np.round(np.geomspace(lo, hi, points)).astype(np.int64))


def breakdown(scenario: Scenario, x: str, lo: int, hi: int, points: int = 256) -> Breakdown:
    """Every component of ``total`` over ``x`` in ``[lo, hi]``, and ``solve max x``.

    Examples
    --------
    >>> import engine
    >>> s = Scenario.create(engine.load(), "llama2-7b", "h100-80g")
    >>> b = breakdown(s, "micro_batch", 1, 8)
    >>> b.xs.tolist()[:3], bool(np.allclose(b.total, s.sweep("total", micro_batch=b.xs)))
    ([1, 2, 3], True)
    """
    lib = scenario.library
    decl = lib.decls.get(x)
    if not isinstance(decl, InputDecl) or not decl.integer:
        known = [n for n, d in lib.inputs.items() if d.integer]
        raise UsageError(f"'{x}' is not a whole-number input to plot against",
                         hint=did_you_mean(x, known) or "e.g. seq_len or micro_batch")
    xs = grid(lo, hi, points)
    parts = {name: np.asarray(scenario.sweep(name, **{x: xs}), dtype=float) for name in components(scenario.library)}
    capacity = fit_capacity(scenario)
    best, note = None, None
    if capacity is None:
        note = "no capacity: give --gpu or --capacity"
    else:
        try:
            best = solve(scenario, "max", x).value
        except InfeasibleError as exc:
            note = exc.message
        except UsageError as exc:  # e.g. the total is not monotone in x
            note = exc.message
    return Breakdown(x, xs, parts, capacity, best, note)


def _matplotlib():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise UsageError("plotting needs matplotlib, which is not installed",
                         hint="install it with: pip install 'memform[plot]'") from None
    return Figure, FigureCanvasAgg


def plot(scenario: Scenario, x: str, lo: int, hi: int, out: str | Path | None = None,
         points: int = 256):
    """Draw the breakdown of ``scenario`` against ``x`` (stacked areas in GiB), the GPU
    capacity as a horizontal line and the largest fitting ``x`` as a vertical one; save
    it to ``out`` (format from the suffix) when given.  Returns ``(figure, breakdown)``.

    Examples
    --------
    >>> import engine, tempfile, os
    >>> s = Scenario.create(engine.load(), "llama2-7b", "h100-80g")
    >>> path = os.path.join(tempfile.mkdtemp(), "b.png")
    >>> fig, b = plot(s, "micro_batch", 1, 16, path)   # doctest: +SKIP
    >>> os.path.getsize(path) > 10_000                   # doctest: +SKIP
    True
    """
    Figure, FigureCanvasAgg = _matplotlib()  # fail before any work when it is missing
    data = breakdown(scenario, x, lo, hi, points)
    fig = Figure(figsize=(10, 6), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    shown = [n for n, v in data.parts.items() if np.any(v != 0)]
    ax.stackplot(data.xs, *[data.parts[n] / GIB for n in shown], labels=shown, alpha=0.85)
    if data.capacity is not None:
        cap = float(data.capacity) / GIB
        ax.axhline(cap, color="black", linestyle="--", linewidth=1.5,
                   label=f"capacity {cap:,.2f} GiB" + (f" ({scenario.gpu})" if scenario.gpu else ""))
        if data.total.max() / GIB > 2 * cap:  # keep the capacity readable; the areas run off the top
            ax.set_ylim(0, 2 * cap)
            ax.text(0.99, 0.98, "clipped at 2 x capacity", transform=ax.transAxes, ha="right", va="top",
                    fontsize=8, color="dimgray")
    if data.best is not None and lo <= data.best <= hi:
        ax.axvline(data.best, color="crimson", linewidth=1.5, label=f"max {x} = {data.best:,}")
    if data.xs[-1] / data.xs[0] > 16:
        ax.set_xscale("log", base=2)
    ax.set_xlim(data.xs[0], data.xs[-1])
    ax.set_xlabel(x)
    ax.set_ylabel("memory per GPU (GiB = 2^30 B)")
    v = scenario.values
    _title(ax, f"{scenario.model or 'model'}: {v.get('mode')}, {v.get('precision')}, "
               f"ZeRO-{v.get('zero_stage')}, dp={v.get('dp')} tp={v.get('tp')} pp={v.get('pp')}"
               + ("" if data.best is not None or data.note is None else f"\n{data.note}"))
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    if out is not None:
        try:
            fig.savefig(out)
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot write plot '{out}': {exc}") from None
    return fig, data


def _title(ax, text: str) -> None:
    """Set ``text`` as the title of ``ax``, literally (no mathtext), shortened to
    :data:`TITLE_CHARS` and wrapped (long words broken too) until it fits the figure's width."""
    if len(text) > TITLE_CHARS:
        text = text[:TITLE_CHARS - 1] + "\u2026"
    title = ax.set_title(text, fontsize=TITLE_SIZE, parse_math=False)
    renderer, room = ax.figure.canvas.get_renderer(), 0.9 * ax.figure.bbox.width  # centred over the axes
    lines = text.splitlines()
    chars = max(map(len, lines), default=0)
    while (width := title.get_window_extent(renderer).width) > room and chars > 8:
        chars = max(8, min(chars - 1, int(chars * room / width)))
        title.set_text("\n".join(textwrap.fill(line, chars) for line in lines))
