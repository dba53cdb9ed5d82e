"""What ``memform estimate`` prints, from exact numbers and formula strings alone.

This module imports neither sympy nor the rest of the engine: the same printing serves
the full symbolic path (:mod:`engine.estimate`) and the fast path (:mod:`engine.fast`),
whose numbers are :class:`fractions.Fraction` instead of sympy Rationals.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

#: The top-level rules every estimate reports (DESIGN.md: the public interface).
TOP_LEVEL = ("weights", "master", "grads", "optimizer_states", "model_states", "activations",
             "logits", "kv_cache", "overhead", "total")

#: Inputs that stay symbolic in the formula column: the workload of one step.
SHOWN_INPUTS = ("micro_batch", "seq_len")
#: Rules that stay as names in the formula column.
OPAQUE_RULES = ("n_params", "tensors") + TOP_LEVEL

#: Rules an estimate reports beside the top-level ones, when the scenario calls for them.
EXTRA_RULES = ("peak", "host_memory", "nvme_storage", "convention_total")


def whole_bytes(value) -> int:
    """Bytes rounded up to a whole byte (a fractional byte still occupies one)."""
    return int(math.ceil(value))


def json_number(value):
    """An exact number as JSON: an int when it is whole, else a float."""
    whole = int(value)
    return whole if whole == value else float(value)


def gb(value) -> str:
    return f"{float(value) / 1e9:,.2f}"


def gib(value) -> str:
    return f"{float(value) / 2**30:,.2f}"


def estimate_json(model, gpu, values: Mapping, rules: Mapping, components: Mapping, capacity) -> dict:
    """The JSON form of an estimate (``memform estimate --json``)."""
    total = rules["total"]
    return {
        "model": model,
        "gpu": gpu,
        "total_bytes": whole_bytes(total),
        "components": {n: whole_bytes(v) for n, v in components.items()},
        "rules": {n: whole_bytes(v) for n, v in rules.items()},
        "inputs": {n: v if isinstance(v, str) else json_number(v) for n, v in sorted(values.items())},
        "capacity_bytes": None if capacity is None else whole_bytes(capacity),
        "fits": None if capacity is None else bool(total <= capacity),
        "fits_at_peak": None if capacity is None or "peak" not in rules else bool(rules["peak"] <= capacity),
    }


@dataclass(frozen=True)
class Report:
    """An estimate ready to print: exact numbers (sympy or Fraction) and formula strings."""

    model: str | None
    gpu: str | None
    values: Mapping[str, object]  # choice names (str) and exact numbers
    rules: Mapping[str, object]  # TOP_LEVEL, n_params and the EXTRA_RULES that apply
    components: Mapping[str, object]
    capacity: object | None
    formulas: Mapping[str, str]  # component (and "total") -> the formula column

    def to_json(self) -> dict:
        rules = {n: v for n, v in self.rules.items() if n != "n_params"}
        return estimate_json(self.model, self.gpu, self.values, rules, self.components, self.capacity)

    def print_table(self, out) -> None:
        """The breakdown as a rich table, then the notes (peak, offload, fit)."""
        from rich.console import Console
        from rich.table import Table
        console = Console(file=out, width=max(120, Console().width), highlight=False)
        v = self.values
        title = (f"{self.model}: {v['mode']}, {v['precision']}, optimizer {v['optimizer']}, "
                 f"ZeRO-{v['zero_stage']}, dp={v['dp']} tp={v['tp']} pp={v['pp']}, "
                 f"micro_batch={v['micro_batch']} seq_len={v['seq_len']}")
        table = Table(title=title, title_justify="left")
        for col, just in (("component", "left"), ("bytes", "right"), ("GB", "right"), ("GiB", "right"),
                          ("share", "right"), ("formula (per GPU)", "left")):
            table.add_column(col, justify=just, overflow="fold")
        total = self.rules["total"]
        for name, value in self.components.items():
            share = f"{100 * float(value / total):.1f} %" if total else "-"
            table.add_row(name, f"{whole_bytes(value):,}", gb(value), gib(value), share, self.formulas[name])
        table.add_section()
        table.add_row("total", f"{whole_bytes(total):,}", gb(total), gib(total), "100.0 %", self.formulas["total"])
        console.print(table)
        console.print(f"n_params = {int(self.rules['n_params']):,}")
        rules = self.rules
        if "peak" in rules and rules["peak"] != total:
            console.print(f"peak of the step: {gb(rules['peak'])} GB ({gib(rules['peak'])} GiB) "
                          "(rule peak: its largest phase; 'memform show peak' for the formula)")
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
            where = f"{self.gpu} ({gib(cap)} GiB)" if self.gpu else f"{gb(cap)} GB"
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


def extra_rules(values: Mapping[str, object], rule_names) -> list[str]:
    """The EXTRA_RULES an estimate of a scenario with these values reports."""
    out = []
    if "peak" in rule_names:  # the largest phase of the step, beside the plain sum
        out.append("peak")
    if "host_memory" in rule_names and values.get("offload", "none") != "none":
        out.append("host_memory")  # CPU bytes, not in the GPU total
        if "nvme_storage" in rule_names and values.get("offload_device", "cpu") == "nvme":
            out.append("nvme_storage")
    if "convention_total" in rule_names and values.get("convention", "memform") != "memform":
        out.append("convention_total")  # what the named tool reports
    return out
