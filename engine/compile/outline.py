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
#: The size printed under the table whether a formula names it or not.
ALWAYS_SHOWN_SIZE = "n_params"
#: Rules that stay as names in the formula column.
OPAQUE_RULES = SIZES + TOP_LEVEL
#: Rules that stay as names in the total's formula (the rest is inlined).
TOTAL_OPAQUE = ("n_params", "quantised_params")

#: The rule a total must fit in, when a capacity is given (the memory CUDA hands out).
FIT_RULE = "usable_memory"

#: The step's peak as the tools print it: rule, and the statistic it stands for.
PEAK_FIGURES = (("peak_allocated", "torch.cuda.max_memory_allocated"),
                ("peak_reserved", "torch.cuda.max_memory_reserved"),
                ("peak", "nvidia-smi (device_used)"))

#: Rules an estimate reports beside the top-level ones, when the scenario calls for them:
#: (rule, the rules the library must have, the options that must hold: (option, its value
#: where unset, "==" or "!=", choice)).  Data, so that the calculator page (``memform web``)
#: decides as :func:`extra_rules` does.
EXTRA = (
    *((name, ("peak", name), ()) for name, _ in PEAK_FIGURES),  # the largest phase of the step
    ("host_memory", ("host_memory",), (("offload", "none", "!=", "none"),)),  # CPU bytes, not in the total
    ("nvme_storage", ("host_memory", "nvme_storage"),
     (("offload", "none", "!=", "none"), ("offload_device", "cpu", "==", "nvme"))),
    ("convention_total", ("convention_total",), (("convention", "memform", "!=", "memform"),)),  # a tool's figure
)
EXTRA_RULES = tuple(name for name, _, _ in EXTRA)


def extra_rules(values: Mapping[str, object], rule_names) -> list[str]:
    """The EXTRA_RULES an estimate of a scenario with these values reports."""
    return [name for name, needs, when in EXTRA
            if all(n in rule_names for n in needs)
            and all((values.get(option, unset) == choice) == (op == "==") for option, unset, op, choice in when)]


def check_usable(usable) -> None:
    """A capacity at or below what the driver reserves leaves nothing to fit in: a located
    complaint, not a negative figure (``--set capacity=...`` keeps a GPU preset's reserve)."""
    if usable <= 0:
        raise DomainError(f"'{FIT_RULE}' comes out at {int(usable):,} bytes: the capacity is not above what the "
                          "driver reserves (driver_reserved)",
                          hint="a capacity given with --set keeps the GPU preset's driver_reserved; give "
                               "--capacity without --gpu, or --set driver_reserved=0")
