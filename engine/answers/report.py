"""What ``memform estimate`` prints, from exact numbers and formula strings alone.

This module imports no sympy: the same printing serves the full symbolic path
(:mod:`engine.answers.estimate`) and the path without sympy (:mod:`engine.answers.quick`),
whose numbers are :class:`fractions.Fraction` instead of sympy Rationals.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Mapping

from rich.console import Console
from rich.table import Table
from rich.text import Text


from ..compile.outline import ALWAYS_SHOWN_SIZE, PEAK_FIGURES, SIZES, check_usable
from ..errors import DomainError, printable

#: the largest figure an estimate reports (bytes); beyond it the values given are not a real job
MAX_FIGURE = 2**128


def whole_bytes(value) -> int:
    """Bytes rounded up to a whole byte (a fractional byte still occupies one)."""
    return int(math.ceil(value))


def exact_fraction(value) -> Fraction:
    """A sympy Rational, a Fraction or an int as a Fraction (exactly)."""
    if isinstance(value, (Fraction, int)):
        return Fraction(value)
    return Fraction(int(value.p), int(value.q))


def json_number(value):
    """An exact number as JSON: an int when it is whole, else a float (a string in scientific
    notation past 2^256, where neither would be meaningful or even printable)."""
    x = exact_fraction(value)
    if max(x.numerator.bit_length(), x.denominator.bit_length()) > 256:
        return scaled(x, 1, 6)  # far beyond any real size: a string in scientific notation
    return x.numerator if x.denominator == 1 else float(x)


def scaled(value, unit: int = 1, places: int = 2) -> str:
    """``value / unit`` with thousands separators, or in scientific notation when it is
    too large to read that way; exact until the last digit, never ``inf``."""
    x = exact_fraction(value) / unit
    if abs(x) < 10**15:
        return f"{float(x):,.{places}f}"
    sign, x = ("-" if x < 0 else ""), abs(x)
    exp = int((x.numerator.bit_length() - x.denominator.bit_length()) * 0.30103)
    mantissa = x / Fraction(10) ** exp
    while mantissa >= 10:
        mantissa, exp = mantissa / 10, exp + 1
    while mantissa < 1:
        mantissa, exp = mantissa * 10, exp - 1
    return f"{sign}{float(mantissa):.{places}f}e{exp:+d}"


def gb(value) -> str:
    return scaled(value, 10**9)


def gib(value) -> str:
    return scaled(value, 2**30)


def check_figures(rules: Mapping, components: Mapping) -> None:
    """The invariants of an estimate: no byte figure is negative or absurdly large, and the
    total is at least each of its components.  A violation is the values' fault (a pinned
    rule or a rule file of the user's own): a :class:`DomainError` naming the rule."""
    hint = "a pinned rule (--set RULE=...) or a rule of your own makes it so; check those values"
    for name, value in {**components, **rules}.items():
        if value < 0:
            raise DomainError(f"'{name}' comes out negative ({scaled(value, 1, 0)} bytes) with these values",
                              hint=hint)
        if value > MAX_FIGURE:
            raise DomainError(f"'{name}' comes out at {scaled(value, 1)} bytes, beyond any machine "
                              "(more than 2^128)", hint="check the sizes given with --set")
    total = rules.get("total")
    for name, value in components.items():
        if total is not None and value > total:
            raise DomainError(f"component '{name}' ({scaled(value, 1, 0)} bytes) exceeds the total "
                              f"({scaled(total, 1, 0)} bytes)", hint=hint)


def estimate_json(model, gpu, values: Mapping, rules: Mapping, components: Mapping, capacity) -> dict:
    """The JSON form of an estimate (``memform estimate --json``); ``capacity`` is what the
    total must fit in (rule usable_memory), the GPU's own figure is the input ``capacity``."""
    total = rules["total"]
    given = values.get("capacity")
    return {
        "model": model,
        "gpu": gpu,
        "total_bytes": whole_bytes(total),
        "components": {n: whole_bytes(v) for n, v in components.items()},
        "rules": {n: whole_bytes(v) for n, v in rules.items()},
        "inputs": {n: v if isinstance(v, str) else json_number(v) for n, v in sorted(values.items())},
        "capacity_bytes": None if given is None or capacity is None else whole_bytes(given),
        "usable_bytes": None if capacity is None else whole_bytes(capacity),
        "fits": None if capacity is None else bool(total <= capacity),
        "fits_at_peak": None if capacity is None or "peak" not in rules else bool(rules["peak"] <= capacity),
    }


@dataclass(frozen=True)
class Report:
    """An estimate ready to print: exact numbers (sympy or Fraction) and formula strings."""

    model: str | None
    gpu: str | None
    values: Mapping[str, object]  # choice names (str) and exact numbers
    rules: Mapping[str, object]  # TOP_LEVEL, SIZES and the EXTRA_RULES that apply
    components: Mapping[str, object]
    capacity: object | None
    formulas: Mapping[str, str]  # component (and "total") -> the formula column

    def __post_init__(self):
        check_figures({n: v for n, v in self.rules.items() if n not in SIZES}, self.components)
        if self.capacity is not None:
            check_usable(self.capacity)

    def __repr__(self) -> str:
        return f"Report({self.model!r}: total {gb(self.rules['total'])} GB)"

    def title(self) -> str:
        """The header line: the model and every setting that changes the answer."""
        v = self.values
        layout = " ".join(f"{k}={v[k]}" for k in ("dp", "tp", "pp", "cp", "ep")
                          if k in v and (k in ("tp", "pp") or k == "dp" and v["mode"] == "train" or v[k] != 1))
        parts = [printable(str(self.model)), v["mode"]]
        if v["mode"] == "train":
            if v.get("stack", "generic") != "generic":
                parts.append(f"stack {v['stack']}")
            parts.append(v["precision"])
            finetune = v.get("finetune", "full")
            if finetune != "full":
                adapters = v.get("lora_dtype", "auto")
                parts.append(f"{finetune} rank {v.get('lora_rank')}"
                             + (f" (adapters {adapters})" if adapters != "auto" else ""))
            parts += [f"optimizer {v['optimizer']}", "fully_shard" if v.get("stack") == "fsdp2" else f"ZeRO-{v['zero_stage']}", f"recompute {v.get('recompute')}"]
            if v.get("offload", "none") != "none":
                parts.append(f"offload {v['offload']} to {v.get('offload_device', 'cpu')}")
        else:
            parts += [f"weights {v.get('weight_dtype')}", f"KV cache {v.get('kv_dtype')}"]
        parts += [f"attention {v.get('attention')}", layout]
        if v.get("pp_stage", "busiest") != "busiest" and v.get("pp", 1) != 1:
            parts.append(f"{v['pp_stage']} pipeline stage")
        return ", ".join(str(p) for p in parts[:1]) + ": " + ", ".join(str(p) for p in parts[1:]) + \
            f", micro_batch={v['micro_batch']} seq_len={v['seq_len']}"

    def to_json(self) -> dict:
        rules = {n: v for n, v in self.rules.items() if n not in SIZES}
        return estimate_json(self.model, self.gpu, self.values, rules, self.components, self.capacity)

    def print_table(self, out) -> None:
        """The breakdown as a rich table, then the notes (peak, offload, fit)."""
        console = Console(file=out, width=max(120, Console().width), highlight=False, markup=False, emoji=False)
        v = self.values
        console.print(Text(self.title()), soft_wrap=True)
        table = Table()
        for col, just in (("component", "left"), ("bytes", "right"), ("GB", "right"), ("GiB", "right"),
                          ("share", "right"), ("formula (per GPU)", "left")):
            table.add_column(col, justify=just, overflow="fold")
        total = self.rules["total"]
        for name, value in self.components.items():
            share = f"{100 * float(value / total):.1f} %" if total else "-"
            table.add_row(name, scaled(whole_bytes(value), 1, 0), gb(value), gib(value), share, self.formulas[name])
        table.add_section()
        table.add_row("total", scaled(whole_bytes(total), 1, 0), gb(total), gib(total), "100.0 %", self.formulas["total"])
        console.print(table)
        for name in SIZES:  # n_params always; the others where a formula names them
            if name in self.rules and (name == ALWAYS_SHOWN_SIZE or any(
                    re.search(rf"\b{name}\b", f) for f in self.formulas.values())):
                console.print(f"{name} = {scaled(whole_bytes(self.rules[name]), 1, 0)}")
        rules = self.rules
        if "peak" in rules:
            console.print("peak of the step ('memform show peak_allocated' for the formula):")
            for n, what in PEAK_FIGURES:
                if n in rules:
                    console.print(f"  {n:<15} {gb(rules[n]):>9} GB {'(' + gib(rules[n]) + ' GiB)':>14}  {what}")
        if "host_memory" in rules:
            host = rules["host_memory"]
            console.print(f"CPU memory for offloading: {gb(host)} GB ({gib(host)} GiB) for this GPU's rank "
                          "(rule host_memory; not in the GPU total)")
        if "nvme_storage" in rules:
            disk = rules["nvme_storage"]
            console.print(f"offloaded to NVMe: {gb(disk)} GB ({gib(disk)} GiB) for this GPU's rank "
                          "(rule nvme_storage; not in the GPU total)")
        if "convention_total" in rules:
            other = rules["convention_total"]
            console.print(f"{v['convention']} reports {gb(other)} GB ({gib(other)} GiB) per GPU "
                          f"(rule convention_total; memform: {gb(total)} GB)")
        if self.capacity is not None:
            cap = self.capacity
            usable = "" if cap == v.get("capacity", cap) else " usable"  # CUDA's total, below nvidia-smi's
            where = f"{self.gpu} ({gib(cap)} GiB{usable})" if self.gpu else f"{gb(cap)} GB{usable}"
            peak = rules.get("peak", total)
            at_peak = ""
            if peak > total:  # the step's peak is the binding figure
                at_peak = (f"; at the step's peak {gb(cap - peak)} GB ({gib(cap - peak)} GiB) to spare"
                           if peak <= cap else f"; but not at the step's peak, which needs "
                           f"{gb(peak - cap)} GB ({gib(peak - cap)} GiB) more")
            if total <= cap:
                console.print(f"fits {where}: {gb(cap - total)} GB ({gib(cap - total)} GiB) to spare{at_peak}")
            else:
                console.print(f"does not fit {where}: needs {gb(total - cap)} GB ({gib(total - cap)} GiB) more")
                if self.gpu is None and cap % 10**9 == 0 and total <= cap // 10**9 * 2**30:
                    console.print(f"note: {cap // 10**9} GB is {cap // 10**9} x 10^9 bytes; a card sold as "
                                  f"'{cap // 10**9} GB' has {cap // 10**9} GiB (--capacity {cap // 10**9}GiB), "
                                  "and the GPU presets give the MiB that nvidia-smi reports")
