"""What an estimate is made of: the top-level rules, the sizes and inputs its formula column
keeps as names, and the extra figures a scenario calls for (no sympy here)."""
from __future__ import annotations

from typing import Mapping

from ..errors import DomainError

#: The top-level rules every estimate reports (DESIGN.md: the public interface).
TOP_LEVEL = ("weights", "master", "grads", "optimizer_states", "model_states", "activations",
             "logits", "kv_cache", "overhead", "total")

#: Inputs that stay symbolic in the formula column: the workload of one step.
SHOWN_INPUTS = ("micro_batch", "seq_len")
#: Sizes that stay as names in the formula column; each printed under the table where it appears.
SIZES = ("n_params", "quantised_params", "tensors")
#: Rules that stay as names in the formula column.
OPAQUE_RULES = SIZES + TOP_LEVEL
#: Rules that stay as names in the total's formula (the rest is inlined).
TOTAL_OPAQUE = ("n_params", "quantised_params")

#: The rule a total must fit in, when a capacity is given (the memory CUDA hands out).
FIT_RULE = "usable_memory"

#: Rules an estimate reports beside the top-level ones, when the scenario calls for them.
EXTRA_RULES = ("peak_allocated", "peak_reserved", "peak", "host_memory", "nvme_storage", "convention_total")

#: The step's peak as the tools print it: rule, and the statistic it stands for.
PEAK_FIGURES = (("peak_allocated", "torch.cuda.max_memory_allocated"),
                ("peak_reserved", "torch.cuda.max_memory_reserved"),
                ("peak", "nvidia-smi (device_used)"))


def extra_rules(values: Mapping[str, object], rule_names) -> list[str]:
    """The EXTRA_RULES an estimate of a scenario with these values reports."""
    out = []
    if "peak" in rule_names:  # the largest phase of the step, beside the plain sum
        out.extend(n for n, _ in PEAK_FIGURES if n in rule_names)
    if "host_memory" in rule_names and values.get("offload", "none") != "none":
        out.append("host_memory")  # CPU bytes, not in the GPU total
        if "nvme_storage" in rule_names and values.get("offload_device", "cpu") == "nvme":
            out.append("nvme_storage")
    if "convention_total" in rule_names and values.get("convention", "memform") != "memform":
        out.append("convention_total")  # what the named tool reports
    return out


def check_usable(usable) -> None:
    """A capacity at or below what the driver reserves leaves nothing to fit in: a located
    complaint, not a negative figure (``--set capacity=...`` keeps a GPU preset's reserve)."""
    if usable <= 0:
        raise DomainError(f"'{FIT_RULE}' comes out at {int(usable):,} bytes: the capacity is not above what the "
                          "driver reserves (driver_reserved)",
                          hint="a capacity given with --set keeps the GPU preset's driver_reserved; give "
                               "--capacity without --gpu, or --set driver_reserved=0")
