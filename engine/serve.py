"""``memform serve``: the KV cache a serving engine gets, as the engine logs it at startup.

The rules are in ``formulas/serving.mem`` (vLLM's budget: gpu_memory_utilization x total
memory, minus the weights, the profile run's activation peak, non-torch memory and the CUDA
graph pool); this module evaluates them for a scenario and prints the breakdown, each
figure with its formula.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import UsageError
from .model import Scenario
from .report import OPAQUE_RULES, gb, gib, json_number, scaled, whole_bytes

#: the memory breakdown, in the order vLLM logs it, with the words of its log
BREAKDOWN = (
    ("requested_memory", "budget (gpu_memory_utilization x total)"),
    ("weights", "weights ('Model loading took')"),
    ("activation_peak", "activation peak (profile run)"),
    ("non_torch_memory", "non-torch memory"),
    ("cudagraph_reserve", "CUDA graph pool (in the budget)"),
    ("kv_cache_memory", "KV cache ('Available KV cache memory')"),
)
#: the counts that follow from the KV memory
COUNTS = (
    ("kv_block_bytes", "bytes per block (all layers)"),
    ("num_gpu_blocks", "# GPU blocks"),
    ("kv_cache_tokens", "GPU KV cache size (tokens)"),
    ("max_concurrency", "maximum concurrency at max_model_len"),
)
#: SGLang's budget, in the words of its log ("GB" there is GiB)
SGLANG_BREAKDOWN = (
    ("startup_free_memory", "free at startup ('Load weight begin. avail mem', T0)"),
    ("weights", "weights ('Load weight end ... mem usage')"),
    ("sglang_kv_memory", "KV pool (mem_fraction_static x T0 - weights)"),
)
SGLANG_COUNTS = (
    ("kv_cell_bytes", "bytes per token (all layers)"),
    ("max_total_num_tokens", "max_total_num_tokens ('#tokens')"),
    ("sglang_max_concurrency", "requests of context_len at once"),
)
#: per engine: the breakdown, the counts, the token count and the concurrency
LAYOUT = {"vllm": (BREAKDOWN, COUNTS, "kv_cache_tokens", "max_concurrency"),
          "sglang": (SGLANG_BREAKDOWN, SGLANG_COUNTS, "max_total_num_tokens", "sglang_max_concurrency")}
#: rules that stay as names in the formula column
OPAQUE = OPAQUE_RULES + tuple(n for n, _ in BREAKDOWN + COUNTS + SGLANG_BREAKDOWN + SGLANG_COUNTS) + (
    "total_gpu_memory", "profile_forward_peak", "profile_sampler_peak", "max_num_seqs",
    "max_num_batched_tokens", "mem_fraction_static")
#: engine inputs kept symbolic in the formula column
KEPT = ("gpu_memory_utilization", "block_size", "seq_len", "page_size")


@dataclass
class Serving:
    """The evaluated serving budget of one scenario (exact numbers) and its formulas."""

    scenario: Scenario
    engine: str
    rules: dict
    formulas: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        values = self.scenario.values
        return {"engine": self.engine, "model": self.scenario.model, "gpu": self.scenario.gpu,
                "max_model_len": json_number(values["seq_len"]),
                "rules": {n: json_number(v) for n, v in self.rules.items()},
                "inputs": {n: (v if isinstance(v, str) else json_number(v)) for n, v in sorted(values.items())}}

    def print_table(self, out) -> None:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text
        console = Console(file=out, width=120, highlight=False, markup=False)
        v, r = self.scenario.values, self.rules
        breakdown, counts, tokens, concurrency = LAYOUT[self.engine]
        where = f"{self.scenario.model or 'model'} on {self.scenario.gpu or 'the GPU'}: {self.engine}, tp={v['tp']} pp={v['pp']}"
        if self.engine == "vllm":
            where += (f", max_model_len={v['seq_len']}, gpu_memory_utilization={float(v['gpu_memory_utilization']):g}, "
                      f"max_num_seqs={r['max_num_seqs']}, max_num_batched_tokens={r['max_num_batched_tokens']}, "
                      f"block_size={v['block_size']}")
        else:
            where += (f", context_len={v['seq_len']}, mem_fraction_static={float(r['mem_fraction_static']):g}, "
                      f"page_size={v['page_size']}")
        console.print(Text(where), soft_wrap=True)
        table = Table()
        for col, just in (("per GPU", "left"), ("bytes", "right"), ("GB", "right"), ("GiB", "right"),
                          ("formula", "left")):
            table.add_column(col, justify=just, overflow="fold")
        for name, label in breakdown:
            value = r[name]
            table.add_row(f"{label}", scaled(whole_bytes(value), 1, 0), gb(value), gib(value),
                          f"{name} = {self.formulas.get(name, '')}")
        table.add_section()
        for name, label in counts:
            value = r[name]
            shown = f"{float(value):,.2f}x" if name == concurrency else scaled(value, 1, 0)
            table.add_row(label, shown, "", "", f"{name} = {self.formulas.get(name, '')}")
        console.print(table)
        console.print(f"GPU KV cache size: {scaled(r[tokens], 1, 0)} tokens; maximum concurrency for "
                      f"{scaled(v['seq_len'], 1, 0)} tokens per request: {float(r[concurrency]):.2f}x")
        if r[tokens] < v["seq_len"]:
            console.print(f"does not serve one request of {scaled(v['seq_len'], 1, 0)} tokens"
                          + (": vLLM refuses to start (lower max_model_len, raise gpu_memory_utilization or tp)"
                             if self.engine == "vllm" else " (lower context_len, raise mem_fraction_static or tp)"))

    @property
    def fits(self) -> bool:
        """Whether one request of max_model_len tokens fits the KV cache (vLLM starts)."""
        return self.rules[LAYOUT[self.engine][2]] >= self.scenario.values["seq_len"]


def serving_scenario(scenario: Scenario, engine: str = "vllm", explicit=frozenset()) -> Scenario:
    """``scenario`` as the engine runs it: inference, and unless ``seq_len`` is among the
    ``explicit`` settings, the model's whole context as max_model_len (vLLM's default is the
    config's max_position_embeddings)."""
    if engine not in LAYOUT:
        raise UsageError(f"engine '{engine}' is not modelled yet", hint="memform serve --engine vllm|sglang")
    if scenario.values.get("mode") == "train" and "mode" in explicit:
        raise UsageError("memform serve models inference: mode=train does not apply",
                         hint="drop --set mode=train, or use 'memform estimate' for training")
    values = {"mode": "infer", "serving_engine": engine}
    if "seq_len" not in explicit:
        values["seq_len"] = scenario.evaluate("max_position_embeddings")
    return scenario.with_values(**values)


def serve(scenario: Scenario, engine: str = "vllm", formulas: bool = True, explicit=frozenset()) -> Serving:
    """Evaluate the engine's budget for ``scenario`` exactly (``explicit``: the names the
    user set, which keep their values).

    Examples
    --------
    >>> from engine import load
    >>> s = Scenario.create(load(), "llama3.1-8b", "h100-80g", values={"seq_len": 8192})
    >>> serve(s, formulas=False, explicit={"seq_len"}).rules["block_size"]
    16
    """
    scenario = serving_scenario(scenario, engine, explicit)
    breakdown, counts, _, _ = LAYOUT[engine]
    extra = (["max_num_seqs", "max_num_batched_tokens", "block_size", "total_gpu_memory", "profile_forward_peak",
              "profile_sampler_peak", "kv_layer_token_bytes"] if engine == "vllm" else
             ["mem_fraction_static", "page_size", "total_gpu_memory", "chunked_prefill_size", "cuda_graph_max_bs"])
    rules = {n: scenario.evaluate(n) for n in [n for n, _ in breakdown + counts] + extra}
    shown = {}
    if formulas:
        from .estimate import formula, show_text
        shown = {n: show_text(formula(scenario, n, keep=KEPT, opaque=OPAQUE)) for n, _ in breakdown + counts}
    return Serving(scenario, engine, rules, shown)
