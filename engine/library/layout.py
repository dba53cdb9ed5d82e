"""Which parallel layouts a model admits: the divisibility constraints of a layout.

Megatron-LM (and every framework that shards heads, layers and experts whole) requires
that tensor parallelism divides the attention and key/value heads, pipeline parallelism the
layers, and expert parallelism the routed experts.  ``estimate``, ``plan`` and ``solve``
refuse a layout that breaks one unless asked not to (``--no-divisibility``).
"""
from __future__ import annotations

from ..errors import DomainError, EngineError

#: parallel degree -> the model sizes it must divide (each must be a whole multiple of it)
DIVIDES = {"tp": ("num_attention_heads", "num_key_value_heads"), "pp": ("num_hidden_layers",),
           "ep": ("num_experts",)}

HINT = "frameworks shard heads, layers and experts whole; --no-divisibility drops this check"


def broken(values, size) -> list[str]:
    """Every constraint that the layout in ``values`` breaks, as a sentence (empty: valid);
    ``size(name)`` is a model size as a number, or None where it is not known."""
    out = []
    for degree, sizes in DIVIDES.items():
        x = values.get(degree)
        if x is None or x == 1:
            continue
        for name in sizes:
            n = size(name)
            if n is None or n != int(n):
                continue
            if n == 0:
                out.append(f"{degree}={x} needs {name} > 0 (this model has none)")
            elif int(n) % int(x):
                out.append(f"{degree}={x} does not divide {name} ({int(n)})")
    return out


def check(scenario) -> None:
    """Raise a :class:`DomainError` naming every constraint ``scenario``'s layout breaks."""

    def size(name: str):
        try:
            return scenario.evaluate(name)
        except EngineError:  # no model given: nothing to check against
            return None

    problems = broken(scenario.values, size)
    if problems:
        raise DomainError("impossible layout: " + "; ".join(problems), hint=HINT)
