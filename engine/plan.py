"""Planning: every parallel layout of a model on N GPUs that fits, ranked.

All candidate layouts (tp, pp, dp, ZeRO stage, recomputation) and micro-batches are
evaluated in one vectorised call of the compiled per-GPU total; the rows that are shown
are then re-evaluated exactly, so a listed layout always fits.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from .errors import InfeasibleError, UsageError
from .model import Scenario, compiled

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
    return [d for d in range(1, n + 1) if n % d == 0]


def plan(scenario: Scenario, gpus: int, max_micro_batch: int = 256, max_tp: int = 8,
         sort: str = "model_parallel", progress=None) -> list[Layout]:
    """Feasible layouts of ``scenario``'s model on ``gpus`` GPUs, best first.

    Examples
    --------
    >>> import engine
    >>> s = Scenario.create(engine.load(), "llama2-7b", "h100-80g")
    >>> plan(s, 8)[0].tp * plan(s, 8)[0].pp
    1
    """
    lib = scenario.library
    if not 1 <= gpus <= 2**20 or not 1 <= max_micro_batch <= 2**16:
        raise UsageError("plan takes 1 to 1,048,576 GPUs and a micro-batch limit of 1 to 65,536")
    if sort not in SORTS:
        raise UsageError(f"unknown order '{sort}'", hint="orders: " + ", ".join(SORTS))
    if "capacity" not in scenario.values:
        raise UsageError("plan needs a GPU", hint="give --gpu GPU or --capacity 80GB")
    heads = int(scenario.evaluate("num_attention_heads"))
    layers = int(scenario.evaluate("num_hidden_layers"))
    recomputes = lib.options["recompute"].choices
    layouts = []
    for tp in _divisors(gpus):
        if tp > max_tp or heads % tp:
            continue
        for pp in _divisors(gpus // tp):
            if layers % pp:
                continue
            for zero, rec in itertools.product(range(4), recomputes):
                layouts.append((tp, pp, gpus // (tp * pp), zero, rec))
    if not layouts:
        raise InfeasibleError(f"no layout of {gpus} GPUs divides the heads ({heads}) and layers ({layers})")
    fn = compiled(scenario, "total", ("tp", "pp", "dp", "zero_stage", "recompute", "micro_batch"))
    arr = np.array([(t, p, d, z, lib.options["recompute"].code(r)) for t, p, d, z, r in layouts], float)
    mbs = np.arange(1, max_micro_batch + 1, dtype=float)
    cap = float(scenario.values["capacity"])
    best = np.zeros(len(arr), int)
    approx = np.zeros(len(arr))
    chunk = max(1, 200_000 // len(mbs))
    for start in range(0, len(arr), chunk):
        part = arr[start:start + chunk]
        grid = [np.repeat(part[:, i][:, None], len(mbs), 1) for i in range(5)]
        totals = np.broadcast_to(fn(*grid, mbs[None, :]), grid[0].shape)
        fits = totals <= cap
        count = fits.sum(1)  # total is non-decreasing in micro_batch: the fitting ones lead
        best[start:start + chunk] = count
        approx[start:start + chunk] = totals[np.arange(len(part)), np.maximum(count - 1, 0)]
        if progress:
            progress(min(len(arr), start + chunk), len(arr))
    rows = []
    for (tp, pp, dp, zero, rec), mb, tot in zip(layouts, best, approx):
        if mb == 0:
            continue
        rows.append(Layout(tp, pp, dp, zero, rec, int(mb), int(tot), int(cap)))
    rows.sort(key=lambda r: SORTS[sort](r))
    return rows


def exact(scenario: Scenario, row: Layout) -> Layout:
    """``row`` re-evaluated exactly; the micro-batch is lowered if the float sweep erred."""
    from .estimate import whole_bytes
    mb = row.micro_batch
    while mb >= 1:
        s = scenario.with_values(tp=row.tp, pp=row.pp, dp=row.dp, zero_stage=row.zero_stage,
                                 recompute=row.recompute, micro_batch=mb)
        total = s.evaluate("total")
        if total <= row.capacity:
            return Layout(row.tp, row.pp, row.dp, row.zero_stage, row.recompute, mb, whole_bytes(total),
                          row.capacity)
        mb -= 1
    return None
