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

#: parallel degree -> the sizes it may also be a whole multiple of when serving (mode infer): the
#: serving engines replicate the key/value heads where tp exceeds them, each rank keeping one
#: whole head (vLLM's and SGLang's QKVParallelLinear: num_kv_head_replicas = tp / kv heads);
#: training frameworks split them (Megatron-Core's attention divides the query groups by tp)
SERVING_MULTIPLES = {"tp": ("num_key_value_heads",)}

HINT = "frameworks shard heads, layers and experts whole; --no-divisibility drops this check"


#: the settings that replace the even split of the layers over pp stages (Megatron-LM's uneven
#: first and last stages; the embedding and the loss counted as layers in the split): pp then
#: divides what the split shares, not num_hidden_layers
#: (megatron/core/transformer/transformer_block.py get_num_layers_to_build, d98e8a64)
UNEVEN = ("pp_first_stage_layers", "pp_last_stage_layers", "pp_split_embedding", "pp_split_loss")


def _uneven(values) -> tuple[int, int, int, int]:
    """(first, last, embedding, loss): the uneven split's settings, 0 where not given."""
    first, last, embedding, loss = (int(values.get(n, 0) or 0) for n in UNEVEN)
    return first, last, embedding, loss


def broken_split(values, layers) -> list[str]:
    """The constraints an uneven split of ``layers`` layers over ``values``' pp stages breaks."""
    pp = int(values.get("pp", 1) or 1)
    first, last, embedding, loss = _uneven(values)
    if pp == 1 or not any((first, last, embedding, loss)):
        return []
    if (first or last) and (embedding or loss):
        return ["uneven first or last stages cannot be combined with the embedding or the loss counted in "
                "the pipeline split (Megatron-LM refuses it)"]
    if first or last:
        ends = (first > 0) + (last > 0)
        rest = layers - first - last
        given = ", ".join(f"{n}={v}" for n, v in zip(UNEVEN, (first, last)) if v)
        if rest < 0:
            return [f"{given} give more layers than num_hidden_layers ({layers})"]
        if rest and pp == ends:
            return [f"pp={pp} with {given} leaves {rest} layers and no stage between to take them"]
        if pp > ends and rest % (pp - ends):
            return [f"pp={pp} with {given} leaves {rest} layers to {pp - ends} stages, which they do not share evenly"]
        return []
    if (layers + embedding + loss) % pp:
        return [f"pp={pp} does not divide the {layers + embedding + loss} layers the split counts "
                "(num_hidden_layers, the embedding and the loss)"]
    return []


def broken(values, size) -> list[str]:
    """Every constraint that the layout in ``values`` breaks, as a sentence (empty: valid);
    ``size(name)`` is a model size as a number, or None where it is not known."""
    out = []
    uneven = any(_uneven(values))
    for degree, sizes in DIVIDES.items():
        x = values.get(degree)
        if x is None or x == 1:
            continue
        if degree == "pp" and uneven:
            n = size("num_hidden_layers")
            if n is not None and n == int(n):
                out += broken_split(values, int(n))
            continue
        serving = values.get("mode") == "infer"
        for name in sizes:
            n = size(name)
            if n is None or n != int(n):
                continue
            if n == 0:
                out.append(f"{degree}={x} needs {name} > 0 (this model has none)")
            elif not admits(degree, int(x), name, int(n), serving):
                out.append(f"{degree}={x} neither divides nor is a multiple of {name} ({int(n)})"
                           if name in SERVING_MULTIPLES.get(degree, ()) and serving else
                           f"{degree}={x} does not divide {name} ({int(n)})")
    return out


def admits(degree: str, x: int, name: str, n: int, serving: bool) -> bool:
    """Whether ``degree`` = ``x`` may shard the model size ``name`` = ``n``: it divides it, or,
    when serving, is a whole multiple of a size the engines replicate (:data:`SERVING_MULTIPLES`)."""
    return n % x == 0 or (serving and name in SERVING_MULTIPLES.get(degree, ()) and x % n == 0)


def check(scenario) -> None:
    """Raise a :class:`DomainError` naming every constraint ``scenario``'s layout breaks."""

    def size(name: str):
        try:
            return scenario.evaluate(name)
        except EngineError:  # no model given: nothing to check against
            return None

    refuse(broken(scenario.values, size))


def refuse(problems: list[str]) -> None:
    """Raise the :class:`DomainError` that names ``problems`` (the constraints broken), if any."""
    if problems:
        raise DomainError("impossible layout: " + "; ".join(problems), hint=HINT)
